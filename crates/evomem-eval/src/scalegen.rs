//! A seeded generator of interaction data shaped like MovieLens-100K, at any
//! size: the data behind `evomem bench synth` and the cost curves of
//! `evomem bench scale`.
//!
//! Cost curves need data sets of 100k to 1M interactions that look like the
//! one the policies were built for, so that growth measured on them is the
//! growth a real catalog would cause. ml-100k is the template; a
//! [`Profile`] holds its statistics, either the documented defaults of
//! [`Profile::ml100k`] (fitted once from ml-100k and embedded here) or
//! [`Profile::fit`] of any loaded data set (`--like DIR`).
//!
//! **Scaling.** For `N` interactions (ml-100k: `N0` = 100,000):
//! - items grow sub-linearly, `items = 1682 * (N / N0)^0.343`; the exponent
//!   is MovieLens-1M's (3,706 items at 1M ratings, against ml-100k's 1,682);
//! - the most active user's share of the catalog stays ml-100k's (737 of
//!   1,682 items, 0.438), so the activity cap grows with the catalog;
//! - users are `N` over the mean activity the activity law gives under that
//!   cap: 943 at 100k (ml-100k: 943), 6,734 at 1M (ml-1m: 6,040; mean
//!   activity 148.5 against ml-1m's 165.6).
//! - With [`Profile::activity_cap_grows`] off (`--activity-cap fixed`) the
//!   cap stays 737 and users grow linearly (9,430 at 1M): a diagnostic that
//!   separates costs driven by more users from costs driven by longer
//!   histories.
//!
//! **What is drawn** (ChaCha8, one stream from the seed; the same seed and
//! profile give byte-identical files):
//! - *item popularity*: the item at popularity rank `r` (ranks shuffled over
//!   item ids) has weight `(r + q)^-s`, a Zipf–Mandelbrot law with
//!   `q = 0.1 * items`. ml-100k's rank-frequency curve is not one straight
//!   line in log-log (slope -0.25 over the top 100 items, -1.40 over all);
//!   against `ln(r + q)` it is closer to one, with `s` = 2.51 (least
//!   squares). The realized curve is flatter than the weights (distinct
//!   items per user cap the head, the taste tilt lifts the tail): at 100k
//!   the fitted `s` is 2.16, the top item has 545 interactions (ml-100k:
//!   583) and the top 10% of items take 48.5% (ml-100k: 42.9%);
//! - *user activity*: a power law `p(a) ∝ a^-γ` truncated to
//!   `[20, cap + 1)` and floored (ml-100k keeps users with at least 20
//!   ratings). γ = 1.628 matches ml-100k's mean activity (106.0); maximum
//!   likelihood would give 1.50 and a mean of 121. The law puts more users
//!   near the floor than ml-100k has (median 50 against 65; p90 264
//!   against 245). Users are then redrawn, a redraw kept when it brings the
//!   total closer to `N`, and the last few interactions added or removed
//!   one at a time, so the total is exactly `N`;
//! - *catalog*: genres per item, genres (by catalog frequency), title
//!   length and title words (by frequency), release years, and users' age,
//!   gender and occupation, all from the template's vocabulary (the
//!   embedded profile keeps ml-100k's 300 most frequent title words);
//! - *tastes that drift*: a user holds two taste genres, drawn by their
//!   share of the popularity mass. Each choice draws an item by popularity
//!   and keeps it if it has a taste genre, otherwise with probability
//!   `1 / (1 + taste_boost)` (boost 4); items are distinct per user. Before
//!   each choice, with probability `drift` (0.015), one taste genre is
//!   replaced by a fresh draw, so a user's first and second half differ in
//!   genre more than a shuffled history does: total variation of the genre
//!   shares 0.291 against 0.267 shuffled at 100k (ml-100k: 0.274 against
//!   0.225); with `drift` 0 the two are equal;
//! - *ratings*: ml-100k's rating shares; a taste item is raised one star
//!   with probability 0.1, another item lowered one with probability 0.4;
//! - *timestamps*: each user starts at a uniform point of ml-100k's
//!   seven months; gaps are 0 s (a tie) with probability 0.1, otherwise up
//!   to two minutes, with one gap in ten an exponential of mean three days.
//!
//! **Sparse preset** ([`Profile::sparse`], `--like sparse`): many light
//! users in a large catalog without metadata (issue 42): the catalog is a
//! fixed share of the interactions, γ is solved per size for a mean
//! activity of 9.26, and half the choices follow planted first-order
//! transitions ([`Profile::follow`]). Titles, genres and user attributes
//! are still drawn (the taste model needs genres) but not written.
//!
//! [`write_recbole`] writes `synth.inter`, `synth.item` and `synth.user`
//! (RecBole atomic files, ml-100k's columns) and `scalegen.json` (profile,
//! size, seed), so `evomem eval --data DIR` reads it like ml-100k.
//! [`DataStats`] measures the same statistics on any data set, for the
//! tests and the bench report.

use crate::error::EvalError;
use evomem_core::{Dataset, ItemId, UserId};
use rand::distributions::{Distribution, WeightedIndex};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Interactions of the template (ml-100k).
pub const BASE_INTERACTIONS: usize = 100_000;
/// Items of the template at [`BASE_INTERACTIONS`].
pub const BASE_ITEMS: usize = 1682;
/// Catalog growth exponent: log10(3706 / 1682), MovieLens-1M over ml-100k.
pub const ITEM_GROWTH: f64 = 0.343_114;
/// Popularity offset `q` as a share of the catalog.
pub const POPULARITY_OFFSET: f64 = 0.1;
/// Smallest `--interactions` accepted.
pub const MIN_INTERACTIONS: usize = 1000;

/// The statistics the generator reproduces. Shares are unnormalised
/// weights (counts in the template).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Where the figures come from (`ml-100k (embedded)` or the fitted set's name).
    pub source: String,
    /// Popularity exponent `s` of `(rank + q)^-s`.
    pub popularity_exponent: f64,
    /// Activity exponent γ of `a^-γ` on `[activity_min, cap]`.
    pub activity_exponent: f64,
    /// Fewest interactions of a user.
    pub activity_min: usize,
    /// The most active user's interactions over the number of items.
    pub activity_max_share: f64,
    /// Whether the activity cap grows with the catalog (`true`, the
    /// default: histories lengthen with size, as from ml-100k to ml-1m) or
    /// stays the template's (`false`: only the number of users grows, so
    /// per-user costs stay flat; a diagnostic).
    pub activity_cap_grows: bool,
    /// How much likelier an item of the user's taste is than its popularity
    /// alone says: a draw outside the taste is kept with probability
    /// `1 / (1 + taste_boost)`.
    pub taste_boost: f64,
    /// Taste genres a user holds at a time.
    pub taste_genres: usize,
    /// Probability, before each choice, that one taste genre is replaced.
    pub drift: f64,
    /// Catalog size per interaction: 0 (the default) grows the catalog by
    /// the MovieLens law of the module docs; above 0 the catalog is
    /// `interactions × items_per_interaction` items.
    #[serde(default)]
    pub items_per_interaction: f64,
    /// Mean activity to hit: 0 (the default) uses `activity_exponent`;
    /// above 0, γ is solved at each size (given its activity cap) so that
    /// the mean activity is this.
    #[serde(default)]
    pub mean_activity: f64,
    /// Probability that a choice (after a user's first) is one of the
    /// previous item's [`SUCCESSORS`] fixed successors (drawn once per item
    /// by popularity) when the user has not taken it yet: planted
    /// first-order transitions. 0 (the default) draws no successors.
    #[serde(default)]
    pub follow: f64,
    /// Whether titles, genres and years (`.item`) and user attributes
    /// (`.user`) are written; without, `.item` lists the item ids only.
    #[serde(default = "metadata_default")]
    pub metadata: bool,
    /// Genres with their catalog counts.
    pub genres: Vec<(String, u32)>,
    /// Items with 1, 2, ... genres.
    pub genres_per_item: Vec<u32>,
    /// Title words with their counts.
    pub title_words: Vec<(String, u32)>,
    /// Titles of 1, 2, ... words.
    pub title_lengths: Vec<u32>,
    /// Release years with their counts.
    pub years: Vec<(String, u32)>,
    /// Ratings 1..=5, counts.
    pub ratings: [u32; 5],
    /// Occupations with their counts.
    pub occupations: Vec<(String, u32)>,
    /// Ages with their counts.
    pub ages: Vec<(String, u32)>,
    /// Genders with their counts.
    pub genders: Vec<(String, u32)>,
    /// First timestamp (Unix s).
    pub start: i64,
    /// Span of the users' start times (s).
    pub span: i64,
}

/// Successors per item under [`Profile::follow`].
pub const SUCCESSORS: usize = 3;

fn metadata_default() -> bool {
    true
}

/// How large a generated set is for a number of interactions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scale {
    /// Interactions, exactly.
    pub interactions: usize,
    /// Users.
    pub users: usize,
    /// Items in the catalog.
    pub items: usize,
    /// Most interactions of one user.
    pub activity_cap: usize,
}

fn owned(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

impl Profile {
    /// ml-100k's figures, fitted once by [`Profile::fit`] on the RecBole
    /// files and embedded (title words: the 300 most frequent).
    pub fn ml100k() -> Profile {
        Profile {
            source: "ml-100k (embedded)".into(),
            popularity_exponent: ML_POPULARITY_EXPONENT,
            activity_exponent: ML_ACTIVITY_EXPONENT,
            activity_min: 20,
            activity_max_share: 737.0 / 1682.0,
            activity_cap_grows: true,
            taste_boost: 4.0,
            taste_genres: 2,
            drift: 0.015,
            items_per_interaction: 0.0,
            mean_activity: 0.0,
            follow: 0.0,
            metadata: true,
            genres: owned(GENRES),
            genres_per_item: GENRES_PER_ITEM.to_vec(),
            title_words: owned(TITLE_WORDS),
            title_lengths: TITLE_LENGTHS.to_vec(),
            years: owned(YEARS),
            ratings: RATINGS,
            occupations: owned(OCCUPATIONS),
            ages: owned(AGES),
            genders: owned(GENDERS),
            start: 874_724_710,
            span: 893_286_638 - 874_724_710,
        }
    }

    /// `--like sparse`: the shape of a data set of many light users in a
    /// large catalog without metadata (issue 42's hidden set: about 31k
    /// users, 24k items and 287k interactions, 9.26 per user). Activity
    /// floor 5 (leave-one-out keeps a validation and a training item), the
    /// most active user at 1% of the catalog, mean activity 9.26 at every
    /// size, 24/287 items per interaction, half the choices following the
    /// previous item ([`Profile::follow`] 0.5: an assumption, the hidden
    /// set's sequential structure is unknown), no metadata written.
    /// Popularity, tastes and timestamps are ml-100k's.
    pub fn sparse() -> Profile {
        Profile {
            source: "sparse (preset)".into(),
            activity_min: 5,
            activity_max_share: 0.01,
            activity_cap_grows: true,
            items_per_interaction: 24_000.0 / 287_000.0,
            mean_activity: 287_000.0 / 31_000.0,
            follow: 0.5,
            metadata: false,
            ..Profile::ml100k()
        }
    }

    /// γ of the activity law under activity cap `cap` (see
    /// [`Profile::mean_activity`]).
    pub fn exponent_at(&self, cap: usize) -> f64 {
        if self.mean_activity > 0.0 {
            gamma_for_mean(
                self.mean_activity + 0.5,
                self.activity_min as f64,
                (cap + 1) as f64,
            )
        } else {
            self.activity_exponent
        }
    }

    /// The statistics of a loaded data set; the behavioural knobs
    /// (`taste_boost`, `taste_genres`, `drift`) keep [`Profile::ml100k`]'s
    /// values, since they are not observed directly.
    pub fn fit(data: &Dataset) -> Result<Profile, EvalError> {
        let bad = |message: String| EvalError::Dataset {
            dataset: data.name.clone(),
            message,
        };
        if data.interactions.is_empty() || data.catalog.items.is_empty() {
            return Err(bad("no interactions or no items to fit".into()));
        }
        let stats = DataStats::of(data);
        let count = |it: &mut dyn Iterator<Item = String>| {
            let mut m: BTreeMap<String, u32> = BTreeMap::new();
            for k in it {
                *m.entry(k).or_insert(0) += 1;
            }
            let mut v: Vec<(String, u32)> = m.into_iter().collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v
        };
        let items = &data.catalog.items;
        let genres = count(&mut items.iter().flat_map(|i| i.categories.clone()));
        let mut genres_per_item = Vec::new();
        let mut title_lengths = Vec::new();
        for i in items {
            bump(&mut genres_per_item, i.categories.len());
            bump(&mut title_lengths, title_words(&i.title).len());
        }
        let title_words = count(&mut items.iter().flat_map(|i| title_words(&i.title)));
        let attr = |key: &str, of: &mut dyn Iterator<Item = &BTreeMap<String, String>>| {
            count(&mut of.filter_map(|a| a.get(key).cloned()))
        };
        let years = attr("release_year", &mut items.iter().map(|i| &i.attributes));
        let users = &data.users;
        let occupations = attr("occupation", &mut users.iter().map(|u| &u.attributes));
        let ages = attr("age", &mut users.iter().map(|u| &u.attributes));
        let genders = attr("gender", &mut users.iter().map(|u| &u.attributes));
        let mut ratings = [0u32; 5];
        for r in data.interactions.iter().filter_map(|i| i.rating) {
            let k = (r.round() as i64).clamp(1, 5) as usize - 1;
            ratings[k] += 1;
        }
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for i in &data.interactions {
            lo = lo.min(i.timestamp);
            hi = hi.max(i.timestamp);
        }
        let d = Profile::ml100k();
        Ok(Profile {
            source: data.name.clone(),
            popularity_exponent: stats.popularity_exponent,
            activity_exponent: stats.activity_exponent,
            activity_min: stats.activity_min.max(1),
            activity_max_share: stats.activity_max as f64 / items.len() as f64,
            genres,
            genres_per_item: trim_zero_prefix(genres_per_item),
            title_words,
            title_lengths: trim_zero_prefix(title_lengths),
            years,
            ratings: if ratings.iter().all(|r| *r == 0) {
                d.ratings
            } else {
                ratings
            },
            occupations,
            ages,
            genders,
            start: lo,
            span: (hi - lo).max(1),
            ..d
        })
    }

    /// Users, items and the activity cap for `interactions` (see the module
    /// header). Errors name the flag (`--interactions`) when the size is too
    /// small.
    pub fn scale(&self, interactions: usize) -> Result<Scale, EvalError> {
        if interactions < MIN_INTERACTIONS {
            return Err(EvalError::Config {
                field: "--interactions".into(),
                message: format!("{interactions} is below the smallest size, {MIN_INTERACTIONS}"),
            });
        }
        let ratio = interactions as f64 / BASE_INTERACTIONS as f64;
        let items = if self.items_per_interaction > 0.0 {
            (interactions as f64 * self.items_per_interaction).round() as usize
        } else {
            ((BASE_ITEMS as f64) * ratio.powf(ITEM_GROWTH)).round() as usize
        };
        let min = self.activity_min;
        let items = items.max(4 * min);
        let cap_base = if self.activity_cap_grows {
            items
        } else {
            BASE_ITEMS.min(items)
        };
        let cap =
            ((self.activity_max_share * cap_base as f64).round() as usize).clamp(min + 1, items);
        let mean = truncated_mean(self.exponent_at(cap), min as f64, (cap + 1) as f64) - 0.5;
        let users = ((interactions as f64 / mean).round() as usize).max(1);
        if users * min > interactions || users * cap < interactions {
            return Err(EvalError::Config {
                field: "--interactions".into(),
                message: format!("{interactions} cannot be split over {users} users of {min}..={cap} interactions"),
            });
        }
        Ok(Scale {
            interactions,
            users,
            items,
            activity_cap: cap,
        })
    }

    fn check(&self) -> Result<(), EvalError> {
        let bad = |field: &str, message: &str| {
            Err(EvalError::Config {
                field: field.into(),
                message: message.into(),
            })
        };
        if !(self.popularity_exponent.is_finite() && self.popularity_exponent > 0.0) {
            return bad("popularity_exponent", "must be positive");
        }
        if !(self.activity_exponent.is_finite() && self.activity_exponent > 0.0) {
            return bad("activity_exponent", "must be positive");
        }
        if !(self.taste_boost.is_finite() && self.taste_boost >= 0.0) {
            return bad("taste_boost", "must be at least 0");
        }
        if !(0.0..=1.0).contains(&self.drift) {
            return bad("drift", "must lie in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.follow) {
            return bad("follow", "must lie in [0, 1]");
        }
        for (k, v) in [
            ("items_per_interaction", self.items_per_interaction),
            ("mean_activity", self.mean_activity),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(k, "must be a finite number >= 0");
            }
        }
        if self.genres.is_empty() || self.title_words.is_empty() {
            return bad("genres/title_words", "the vocabulary is empty");
        }
        Ok(())
    }
}

fn bump(v: &mut Vec<u32>, k: usize) {
    if v.len() <= k {
        v.resize(k + 1, 0);
    }
    v[k] += 1;
}

/// Counts indexed by `k` become counts of `1, 2, ...` (index 0 dropped).
fn trim_zero_prefix(v: Vec<u32>) -> Vec<u32> {
    v.into_iter().skip(1).collect()
}

/// The words of a title, as the vocabulary counts them: whitespace-split,
/// punctuation stripped, at least one letter.
fn title_words(title: &str) -> Vec<String> {
    title
        .split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '\'' || *c == '-')
                .collect::<String>()
        })
        .filter(|w| w.chars().any(|c| c.is_ascii_alphabetic()))
        .collect()
}

/// Mean of the continuous power law `x^-g` on `[a, b)`.
fn truncated_mean(g: f64, a: f64, b: f64) -> f64 {
    let m = |p: f64| {
        if (p).abs() < 1e-9 {
            (b / a).ln()
        } else {
            (b.powf(p) - a.powf(p)) / p
        }
    };
    m(2.0 - g) / m(1.0 - g)
}

/// Inverse CDF of the power law `x^-g` on `[a, b)` at `u` in `[0, 1)`.
fn truncated_draw(g: f64, a: f64, b: f64, u: f64) -> f64 {
    let p = 1.0 - g;
    if p.abs() < 1e-9 {
        return a * (b / a).powf(u);
    }
    (a.powf(p) + u * (b.powf(p) - a.powf(p))).powf(1.0 / p)
}

/// The γ of `x^-γ` on `[a, b)` whose mean is `mean` (bisection over
/// `[0.05, 8]`; the mean falls as γ grows). Matching the mean, rather than
/// maximum likelihood (1.50 on ml-100k, mean 121), keeps the template's
/// number of users at its size.
fn gamma_for_mean(mean: f64, a: f64, b: f64) -> f64 {
    let (mut lo, mut hi) = (0.05, 8.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if truncated_mean(mid, a, b) > mean {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

fn weighted<T>(pairs: &[(T, u32)], what: &str) -> Result<WeightedIndex<u32>, EvalError> {
    WeightedIndex::new(pairs.iter().map(|(_, w)| *w)).map_err(|e| EvalError::Config {
        field: what.into(),
        message: e.to_string(),
    })
}

fn weighted_counts(counts: &[u32], what: &str) -> Result<WeightedIndex<u32>, EvalError> {
    WeightedIndex::new(counts.iter().copied()).map_err(|e| EvalError::Config {
        field: what.into(),
        message: e.to_string(),
    })
}

/// One generated item.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthItem {
    /// Title.
    pub title: String,
    /// Release year.
    pub year: String,
    /// Genres (distinct).
    pub genres: Vec<String>,
    /// Popularity rank (1 = most popular).
    pub rank: usize,
}

/// One generated user.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthUser {
    /// Age.
    pub age: String,
    /// Gender.
    pub gender: String,
    /// Occupation.
    pub occupation: String,
    /// Zip code.
    pub zip: String,
}

/// A generated data set; ids are indices (written 1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct Synth {
    /// Its size.
    pub scale: Scale,
    /// The seed.
    pub seed: u64,
    /// The profile it follows.
    pub profile: Profile,
    /// Items.
    pub items: Vec<SynthItem>,
    /// Users.
    pub users: Vec<SynthUser>,
    /// `(timestamp, user, item, rating)`, sorted by timestamp then user and
    /// the user's order.
    pub interactions: Vec<(i64, u32, u32, u8)>,
}

/// Generate `interactions` interactions following `profile` from `seed`.
pub fn generate(profile: &Profile, interactions: usize, seed: u64) -> Result<Synth, EvalError> {
    profile.check()?;
    let scale = profile.scale(interactions)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // One stream, drawn in this order: catalog, successors, users,
    // activity, histories.
    let items = draw_catalog(profile, &scale, &mut rng)?;
    let pop = Popularity::of(profile, &items, &scale)?;
    let successors = draw_successors(profile, &scale, &pop, &mut rng);
    let users = draw_users(profile, &scale, &mut rng);
    let activity = draw_activity(profile, &scale, interactions, &mut rng);
    let mut out = draw_histories(
        profile,
        &scale,
        &items,
        &pop,
        &successors,
        &activity,
        &mut rng,
    )?;
    out.sort_unstable_by_key(|&(ts, u, k, _, _)| (ts, u, k));
    Ok(Synth {
        scale,
        seed,
        profile: profile.clone(),
        items,
        users,
        interactions: out
            .into_iter()
            .map(|(t, u, _, i, r)| (t, u, i, r))
            .collect(),
    })
}

/// The catalog: per item its genres, a title from the profile's words, a
/// year, and a popularity rank (a random permutation).
fn draw_catalog(
    profile: &Profile,
    scale: &Scale,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<SynthItem>, EvalError> {
    let rng = &mut *rng;
    let genre_pick = weighted(&profile.genres, "genres")?;
    let gpi_pick = weighted_counts(&profile.genres_per_item, "genres_per_item")?;
    let word_pick = weighted(&profile.title_words, "title_words")?;
    let len_pick = weighted_counts(&profile.title_lengths, "title_lengths")?;
    let year_pick = weighted(&profile.years, "years")?;
    let mut ranks: Vec<usize> = (1..=scale.items).collect();
    ranks.shuffle(rng);
    let mut items = Vec::with_capacity(scale.items);
    for rank in ranks {
        let n_genres = (gpi_pick.sample(rng) + 1).min(profile.genres.len());
        let mut genres: Vec<String> = Vec::with_capacity(n_genres);
        let mut guard = 0;
        while genres.len() < n_genres && guard < 100 {
            guard += 1;
            let g = &profile.genres[genre_pick.sample(rng)].0;
            if !genres.contains(g) {
                genres.push(g.clone());
            }
        }
        let n_words = len_pick.sample(rng) + 1;
        let title = (0..n_words)
            .map(|_| profile.title_words[word_pick.sample(rng)].0.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let year = profile.years[year_pick.sample(rng)].0.clone();
        items.push(SynthItem {
            title,
            year,
            genres,
            rank,
        });
    }

    Ok(items)
}

/// Popularity (rank + q)^-s, globally and per genre, and each genre's share
/// of the interactions (the popularity mass of its items).
struct Popularity<'p> {
    all_pick: WeightedIndex<f64>,
    genre_index: BTreeMap<&'p str, usize>,
    taste_pick: WeightedIndex<f64>,
}

impl<'p> Popularity<'p> {
    fn of(profile: &'p Profile, items: &[SynthItem], scale: &Scale) -> Result<Self, EvalError> {
        let q = POPULARITY_OFFSET * scale.items as f64;
        let weight: Vec<f64> = items
            .iter()
            .map(|i| (i.rank as f64 + q).powf(-profile.popularity_exponent))
            .collect();
        let all_pick = WeightedIndex::new(&weight).map_err(|e| EvalError::Config {
            field: "popularity_exponent".into(),
            message: e.to_string(),
        })?;
        let mut by_genre: Vec<Vec<usize>> = vec![Vec::new(); profile.genres.len()];
        let genre_index: BTreeMap<&str, usize> = profile
            .genres
            .iter()
            .enumerate()
            .map(|(k, (g, _))| (g.as_str(), k))
            .collect();
        for (i, it) in items.iter().enumerate() {
            for g in &it.genres {
                if let Some(&k) = genre_index.get(g.as_str()) {
                    by_genre[k].push(i);
                }
            }
        }
        // A genre's share of the interactions: the popularity mass of its items.
        let mut mass: Vec<f64> = vec![0.0; by_genre.len()];
        for (k, list) in by_genre.iter().enumerate() {
            mass[k] = list
                .iter()
                .map(|&i| weight[i] / items[i].genres.len() as f64)
                .sum();
        }
        let taste_pick = WeightedIndex::new(&mass).map_err(|e| EvalError::Config {
            field: "genres".into(),
            message: e.to_string(),
        })?;
        Ok(Self {
            all_pick,
            genre_index,
            taste_pick,
        })
    }
}

/// Planted transitions: each item's successors, by popularity (drawn only
/// when `follow` is on, so other profiles' streams are unchanged).
fn draw_successors(
    profile: &Profile,
    scale: &Scale,
    pop: &Popularity<'_>,
    rng: &mut ChaCha8Rng,
) -> Vec<[usize; SUCCESSORS]> {
    let all_pick = &pop.all_pick;
    if profile.follow > 0.0 {
        (0..scale.items)
            .map(|i| {
                std::array::from_fn(|_| {
                    let mut c = all_pick.sample(rng);
                    if c == i {
                        c = (c + 1) % scale.items;
                    }
                    c
                })
            })
            .collect()
    } else {
        Vec::new()
    }
}

/// Users' attributes, drawn from the profile's marginals.
fn draw_users(profile: &Profile, scale: &Scale, rng: &mut ChaCha8Rng) -> Vec<SynthUser> {
    let occ = weighted(&profile.occupations, "occupations").ok();
    let age = weighted(&profile.ages, "ages").ok();
    let gen = weighted(&profile.genders, "genders").ok();
    let pick_of = |p: &Option<WeightedIndex<u32>>, v: &[(String, u32)], rng: &mut ChaCha8Rng| {
        p.as_ref()
            .and_then(|w| v.get(w.sample(rng)))
            .map_or_else(String::new, |(k, _)| k.clone())
    };
    let mut users = Vec::with_capacity(scale.users);
    for _ in 0..scale.users {
        users.push(SynthUser {
            age: pick_of(&age, &profile.ages, rng),
            gender: pick_of(&gen, &profile.genders, rng),
            occupation: pick_of(&occ, &profile.occupations, rng),
            zip: format!("{:05}", rng.gen_range(0..100_000u32)),
        });
    }
    users
}

/// Interactions per user: a truncated power law, then redraws until the
/// total is `interactions` exactly.
fn draw_activity(
    profile: &Profile,
    scale: &Scale,
    interactions: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<usize> {
    let (min, cap) = (profile.activity_min, scale.activity_cap);
    let gamma = profile.exponent_at(cap);
    let mut activity: Vec<usize> = (0..scale.users)
        .map(|_| {
            let x = truncated_draw(gamma, min as f64, (cap + 1) as f64, rng.gen::<f64>());
            (x.floor() as usize).clamp(min, cap)
        })
        .collect();
    // Hit the total by redrawing users (a redraw is kept when it brings
    // the total closer), which keeps the law's shape; the last few
    // interactions are then added or removed one at a time.
    let mut total: usize = activity.iter().sum();
    for _ in 0..100 * scale.users {
        if total.abs_diff(interactions) <= 2 * min {
            break;
        }
        let u = rng.gen_range(0..scale.users);
        let x = truncated_draw(gamma, min as f64, (cap + 1) as f64, rng.gen::<f64>());
        let v = (x.floor() as usize).clamp(min, cap);
        let next = total - activity[u] + v;
        if next.abs_diff(interactions) < total.abs_diff(interactions) {
            activity[u] = v;
            total = next;
        }
    }
    while total != interactions {
        let u = rng.gen_range(0..scale.users);
        if total < interactions && activity[u] < cap {
            activity[u] += 1;
            total += 1;
        } else if total > interactions && activity[u] > min {
            activity[u] -= 1;
            total -= 1;
        }
    }

    activity
}

/// `(timestamp, user, position in the history, item, rating)`.
type HistoryRow = (i64, u32, u32, u32, u8);

/// Every user's history: tastes that drift, popularity tilted towards the
/// taste, planted successors, ratings and timestamps. Rows are
/// `(timestamp, user, position, item, rating)`.
fn draw_histories(
    profile: &Profile,
    scale: &Scale,
    items: &[SynthItem],
    pop: &Popularity<'_>,
    successors: &[[usize; SUCCESSORS]],
    activity: &[usize],
    rng: &mut ChaCha8Rng,
) -> Result<Vec<HistoryRow>, EvalError> {
    let (genre_index, all_pick, taste_pick) = (&pop.genre_index, &pop.all_pick, &pop.taste_pick);
    let n_genres = profile.genres.len();
    let item_genres: Vec<Vec<usize>> = items
        .iter()
        .map(|i| {
            i.genres
                .iter()
                .filter_map(|g| genre_index.get(g.as_str()).copied())
                .collect()
        })
        .collect();
    let in_taste = |i: usize, taste: &[usize]| item_genres[i].iter().any(|g| taste.contains(g));
    let ratings = weighted_counts(&profile.ratings, "ratings")?;
    let mut out: Vec<HistoryRow> = Vec::with_capacity(activity.iter().sum());
    let mut taken = vec![false; scale.items];
    let taste_n = profile.taste_genres.clamp(1, n_genres);
    for (u, &n) in activity.iter().enumerate() {
        taken.iter_mut().for_each(|t| *t = false);
        let mut taste: Vec<usize> = Vec::with_capacity(taste_n);
        while taste.len() < taste_n {
            let g = taste_pick.sample(rng);
            if !taste.contains(&g) || taste.len() >= n_genres {
                taste.push(g);
            }
        }
        let mut ts = profile.start + rng.gen_range(0..profile.span.max(1));
        let mut prev: Option<usize> = None;
        for k in 0..n {
            if rng.gen_bool(profile.drift) {
                let slot = rng.gen_range(0..taste.len());
                for _ in 0..16 {
                    let g = taste_pick.sample(rng);
                    if !taste.contains(&g) {
                        taste[slot] = g;
                        break;
                    }
                }
            }
            // Popularity, tilted towards the taste: a draw outside the
            // taste is kept with probability 1 / (1 + boost).
            let keep_other = 1.0 / (1.0 + profile.taste_boost);
            let mut item = None;
            if profile.follow > 0.0 && k > 0 && rng.gen_bool(profile.follow) {
                let next = prev
                    .and_then(|p: usize| successors.get(p))
                    .map(|s| s[rng.gen_range(0..SUCCESSORS)]);
                item = next.filter(|&c| !taken[c]);
            }
            for attempt in 0..256 {
                if item.is_some() {
                    break;
                }
                let cand = all_pick.sample(rng);
                if taken[cand] {
                    continue;
                }
                if attempt >= 128 || in_taste(cand, &taste) || rng.gen_bool(keep_other) {
                    item = Some(cand);
                    break;
                }
            }
            let item = match item {
                Some(i) => i,
                // The user has taken the likely items: any free one.
                None => {
                    let start = rng.gen_range(0..scale.items);
                    (0..scale.items)
                        .map(|d| (start + d) % scale.items)
                        .find(|&i| !taken[i])
                        .unwrap_or(start)
                }
            };
            taken[item] = true;
            prev = Some(item);
            let liked = in_taste(item, &taste);
            let mut r = ratings.sample(rng) as i32 + 1;
            if liked && rng.gen_bool(0.1) {
                r += 1;
            } else if !liked && rng.gen_bool(0.4) {
                r -= 1;
            }
            out.push((ts, u as u32, k as u32, item as u32, r.clamp(1, 5) as u8));
            ts += if rng.gen_bool(0.1) {
                0
            } else if rng.gen_bool(0.9) {
                rng.gen_range(1..=120)
            } else {
                let e: f64 = rng.gen::<f64>();
                (-(1.0 - e).ln() * 3.0 * 86_400.0) as i64
            };
        }
    }
    Ok(out)
}

/// The files [`write_recbole`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// `synth.inter`, `synth.item`, `synth.user`, `scalegen.json`.
    pub files: Vec<PathBuf>,
}

/// Write `synth` into `dir` as RecBole atomic files with ml-100k's columns,
/// plus `scalegen.json` (size, seed, profile). Creates `dir`.
pub fn write_recbole(synth: &Synth, dir: &Path) -> Result<Written, EvalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EvalError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    // Every `let _ = writeln!(…)` below writes into a `String`, whose
    // `fmt::Write` cannot fail.
    let mut inter = String::with_capacity(synth.interactions.len() * 24);
    inter.push_str("user_id:token\titem_id:token\trating:float\ttimestamp:float\n");
    for &(ts, u, i, r) in &synth.interactions {
        let _ = writeln!(inter, "{}\t{}\t{r}\t{ts}", u + 1, i + 1);
    }
    let meta = synth.profile.metadata;
    let mut item = if meta {
        String::from("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n")
    } else {
        String::from("item_id:token\n")
    };
    for (k, it) in synth.items.iter().enumerate() {
        let _ = if meta {
            writeln!(
                item,
                "{}\t{}\t{}\t{}",
                k + 1,
                it.title,
                it.year,
                it.genres.join(" ")
            )
        } else {
            writeln!(item, "{}", k + 1)
        };
    }
    let mut user =
        String::from("user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n");
    for (k, u) in synth.users.iter().enumerate() {
        let _ = writeln!(
            user,
            "{}\t{}\t{}\t{}\t{}",
            k + 1,
            u.age,
            u.gender,
            u.occupation,
            u.zip
        );
    }
    let meta_json = serde_json::json!({
        "generator": "evomem-eval scalegen",
        "seed": synth.seed,
        "scale": synth.scale,
        "profile": synth.profile,
    });
    let meta_json = serde_json::to_string_pretty(&meta_json).map_err(|e| EvalError::Json {
        path: dir.join("scalegen.json"),
        line: 0,
        message: e.to_string(),
    })?;
    let mut files = Vec::new();
    for (name, text) in [
        ("synth.inter", inter),
        ("synth.item", item),
        ("synth.user", user),
        ("scalegen.json", meta_json + "\n"),
    ] {
        if name == "synth.user" && !meta {
            continue;
        }
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(io(&p))?;
        files.push(p);
    }
    Ok(Written { files })
}

/// The statistics the generator targets, measured on a data set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataStats {
    /// Users with at least one interaction.
    pub users: usize,
    /// Items with at least one interaction.
    pub items: usize,
    /// Items in the catalog.
    pub catalog: usize,
    /// Interactions.
    pub interactions: usize,
    /// Fewest interactions of a user.
    pub activity_min: usize,
    /// Median interactions of a user.
    pub activity_median: usize,
    /// Mean interactions of a user.
    pub activity_mean: f64,
    /// 90th percentile.
    pub activity_p90: usize,
    /// Most interactions of a user.
    pub activity_max: usize,
    /// γ of a power law on `[min, max + 1)` with this mean (+ 0.5, for
    /// flooring).
    pub activity_exponent: f64,
    /// Interactions of the most popular item.
    pub top_item: usize,
    /// Share of interactions on the top 10% of the catalog.
    pub top10_share: f64,
    /// Fitted `s` of `count ∝ (rank + 0.1 * catalog)^-s`.
    pub popularity_exponent: f64,
    /// Plain log-log slope of count against rank, over all ranks.
    pub popularity_slope: f64,
    /// Rating shares, 1..=5.
    pub ratings: [f64; 5],
    /// Mean total variation between the genre shares of each user's first
    /// and second half (users with at least 10 interactions).
    pub drift_tv: f64,
    /// The same with each history shuffled (seeded): the level from
    /// sampling noise alone.
    pub drift_tv_shuffled: f64,
    /// Mean number of the same user's earlier interactions at an interaction,
    /// `Σ_u a_u(a_u − 1)/2 / N`. A policy that scans a user's own history
    /// at every decision does `N ×` this much work, so its time grows with
    /// this product, not with `N`, when heavier users appear at scale.
    #[serde(default)]
    pub own_history_mean: f64,
    /// Mean number of the item's earlier interactions (by anyone) at an
    /// interaction, `Σ_i p_i(p_i − 1)/2 / N`: the same for a policy that
    /// scans an item's whole audience.
    #[serde(default)]
    pub audience_mean: f64,
}

impl DataStats {
    /// Measure `data`.
    pub fn of(data: &Dataset) -> DataStats {
        let n_items = data.catalog.items.len();
        let histories = histories(data);
        let mut act: Vec<usize> = histories.iter().map(Vec::len).filter(|&n| n > 0).collect();
        act.sort_unstable();
        let q = |p: f64| -> usize {
            if act.is_empty() {
                0
            } else {
                act[((p * act.len() as f64) as usize).min(act.len() - 1)]
            }
        };
        let (amin, amax) = (
            act.first().copied().unwrap_or(0),
            act.last().copied().unwrap_or(0),
        );
        let mean = act.iter().sum::<usize>() as f64 / act.len().max(1) as f64;
        let activity_exponent = if amin > 0 && amax > amin {
            gamma_for_mean(mean + 0.5, amin as f64, (amax + 1) as f64)
        } else {
            0.0
        };
        let mut pop = vec![0usize; n_items];
        for i in &data.interactions {
            if let Some(c) = pop.get_mut(i.item.0 as usize) {
                *c += 1;
            }
        }
        pop.sort_unstable_by(|a, b| b.cmp(a));
        let seen: Vec<usize> = pop.iter().copied().filter(|&c| c > 0).collect();
        let total = data.interactions.len().max(1);
        let top10 = pop.iter().take(n_items.div_ceil(10)).sum::<usize>() as f64 / total as f64;
        let ys: Vec<f64> = seen.iter().map(|&c| (c as f64).ln()).collect();
        let offset = POPULARITY_OFFSET * n_items as f64;
        let x_off: Vec<f64> = (1..=seen.len()).map(|r| (r as f64 + offset).ln()).collect();
        let x_plain: Vec<f64> = (1..=seen.len()).map(|r| (r as f64).ln()).collect();
        let mut ratings = [0f64; 5];
        let mut rated = 0usize;
        for r in data.interactions.iter().filter_map(|i| i.rating) {
            ratings[(r.round() as i64).clamp(1, 5) as usize - 1] += 1.0;
            rated += 1;
        }
        ratings.iter_mut().for_each(|r| *r /= rated.max(1) as f64);
        let (drift_tv, drift_tv_shuffled) = drift(data, &histories);
        let pairs = |counts: &mut dyn Iterator<Item = usize>| -> f64 {
            counts
                .map(|a| a as f64 * (a as f64 - 1.0).max(0.0) / 2.0)
                .sum::<f64>()
                / total as f64
        };
        let own_history_mean = pairs(&mut act.iter().copied());
        let audience_mean = pairs(&mut seen.iter().copied());
        DataStats {
            users: act.len(),
            items: seen.len(),
            catalog: n_items,
            interactions: data.interactions.len(),
            activity_min: amin,
            activity_median: q(0.5),
            activity_mean: mean,
            activity_p90: q(0.9),
            activity_max: amax,
            activity_exponent,
            top_item: pop.first().copied().unwrap_or(0),
            top10_share: top10,
            popularity_exponent: -slope(&x_off, &ys),
            popularity_slope: slope(&x_plain, &ys),
            ratings,
            drift_tv,
            drift_tv_shuffled,
            own_history_mean,
            audience_mean,
        }
    }
}

/// Each user's items in replay order, indexed by user.
fn histories(data: &Dataset) -> Vec<Vec<ItemId>> {
    let mut h: Vec<Vec<ItemId>> = vec![Vec::new(); data.users.len()];
    for i in &data.interactions {
        let UserId(u) = i.user;
        if let Some(v) = h.get_mut(u as usize) {
            v.push(i.item);
        }
    }
    h
}

/// Least-squares slope of `ys` against `xs` (0 when undefined).
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return 0.0;
    }
    let mx = xs[..n].iter().sum::<f64>() / n as f64;
    let my = ys[..n].iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for k in 0..n {
        sxy += (xs[k] - mx) * (ys[k] - my);
        sxx += (xs[k] - mx) * (xs[k] - mx);
    }
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// Mean total variation of genre shares between halves, as recorded and
/// with each history shuffled.
fn drift(data: &Dataset, histories: &[Vec<ItemId>]) -> (f64, f64) {
    let items = &data.catalog.items;
    let shares = |part: &[ItemId]| {
        let mut m: BTreeMap<&str, f64> = BTreeMap::new();
        for &ItemId(i) in part {
            if let Some(it) = items.get(i as usize) {
                let w = 1.0 / it.categories.len().max(1) as f64;
                for g in &it.categories {
                    *m.entry(g.as_str()).or_insert(0.0) += w;
                }
            }
        }
        let s: f64 = m.values().sum();
        if s > 0.0 {
            m.values_mut().for_each(|v| *v /= s);
        }
        m
    };
    let tv = |h: &[ItemId]| {
        let (a, b) = h.split_at(h.len() / 2);
        let (a, b) = (shares(a), shares(b));
        let mut keys: Vec<&str> = a.keys().chain(b.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        0.5 * keys
            .iter()
            .map(|k| (a.get(k).unwrap_or(&0.0) - b.get(k).unwrap_or(&0.0)).abs())
            .sum::<f64>()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(0x5ca1e);
    let (mut real, mut shuffled, mut n) = (0.0, 0.0, 0usize);
    for h in histories.iter().filter(|h| h.len() >= 10) {
        real += tv(h);
        let mut s = h.clone();
        s.shuffle(&mut rng);
        shuffled += tv(&s);
        n += 1;
    }
    let n = n.max(1) as f64;
    (real / n, shuffled / n)
}

// ---------------------------------------------------------- ml-100k --

/// Fitted by [`Profile::fit`] on ml-100k (see `fit_on_ml100k_gives_the_embedded_profile`).
const ML_POPULARITY_EXPONENT: f64 = 2.512;
/// Fitted by [`Profile::fit`] on ml-100k.
const ML_ACTIVITY_EXPONENT: f64 = 1.628;
/// ml-100k's ratings 1..=5.
const RATINGS: [u32; 5] = [6110, 11370, 27145, 34174, 21201];
/// ml-100k: GENRES.
const GENRES: &[(&str, u32)] = &[
    ("Drama", 725),
    ("Comedy", 505),
    ("Action", 251),
    ("Thriller", 251),
    ("Romance", 247),
    ("Adventure", 135),
    ("Children's", 122),
    ("Crime", 109),
    ("Sci-Fi", 101),
    ("Horror", 92),
    ("War", 71),
    ("Mystery", 61),
    ("Musical", 56),
    ("Documentary", 50),
    ("Animation", 42),
    ("Western", 27),
    ("Film-Noir", 24),
    ("Fantasy", 22),
    ("unknown", 2),
];
/// ml-100k: TITLE_WORDS.
const TITLE_WORDS: &[(&str, u32)] = &[
    ("The", 358),
    ("the", 145),
    ("of", 137),
    ("and", 66),
    ("in", 63),
    ("A", 52),
    ("a", 31),
    ("to", 31),
    ("Man", 30),
    ("Love", 29),
    ("My", 23),
    ("Life", 20),
    ("on", 17),
    ("Dead", 15),
    ("de", 15),
    ("Star", 14),
    ("Day", 14),
    ("I", 14),
    ("Time", 14),
    ("Night", 13),
    ("La", 13),
    ("Big", 12),
    ("In", 12),
    ("It", 12),
    ("for", 11),
    ("II", 11),
    ("Last", 11),
    ("Little", 11),
    ("Paris", 11),
    ("To", 10),
    ("King", 10),
    ("City", 10),
    ("For", 10),
    ("Boys", 9),
    ("Home", 9),
    ("About", 9),
    ("with", 9),
    ("Men", 9),
    ("Death", 9),
    ("Story", 8),
    ("Three", 8),
    ("Blue", 8),
    ("You", 8),
    ("Movie", 8),
    ("World", 8),
    ("Lost", 8),
    ("Is", 8),
    ("Two", 8),
    ("Trek", 8),
    ("Up", 8),
    ("One", 8),
    ("American", 8),
    ("New", 8),
    ("or", 8),
    ("Me", 8),
    ("That", 8),
    ("Red", 7),
    ("All", 7),
    ("Le", 7),
    ("Sea", 7),
    ("Hard", 7),
    ("Kiss", 7),
    ("When", 7),
    ("Fear", 7),
    ("Wild", 7),
    ("Mrs", 7),
    ("Murder", 7),
    ("Amityville", 7),
    ("by", 7),
    ("Girl", 7),
    ("Great", 7),
    ("Down", 7),
    ("Les", 7),
    ("With", 7),
    ("III", 6),
    ("Mr", 6),
    ("White", 6),
    ("Line", 6),
    ("Angels", 6),
    ("Bad", 6),
    ("Under", 6),
    ("Die", 6),
    ("Bride", 6),
    ("Good", 6),
    ("First", 6),
    ("America", 6),
    ("Away", 6),
    ("Hood", 6),
    ("Girls", 6),
    ("House", 6),
    ("Family", 6),
    ("from", 6),
    ("Old", 6),
    ("An", 6),
    ("Secret", 6),
    ("Fire", 6),
    ("Island", 5),
    ("Days", 5),
    ("Woman", 5),
    ("Before", 5),
    ("Best", 5),
    ("at", 5),
    ("Princess", 5),
    ("Out", 5),
    ("Do", 5),
    ("Robin", 5),
    ("Wedding", 5),
    ("Garden", 5),
    ("High", 5),
    ("Mountain", 5),
    ("Land", 5),
    ("Be", 5),
    ("Dog", 5),
    ("Adventures", 5),
    ("Kid", 5),
    ("Body", 5),
    ("Like", 5),
    ("Cat", 5),
    ("Escape", 5),
    ("Money", 5),
    ("Wife", 5),
    ("Summer", 5),
    ("Sun", 5),
    ("Seven", 4),
    ("Mighty", 4),
    ("Il", 4),
    ("From", 4),
    ("Brothers", 4),
    ("Batman", 4),
    ("Willy", 4),
    ("Colors", 4),
    ("Were", 4),
    ("Kill", 4),
    ("Nothing", 4),
    ("So", 4),
    ("True", 4),
    ("Ghost", 4),
    ("Chocolate", 4),
    ("Fish", 4),
    ("Blues", 4),
    ("Young", 4),
    ("Room", 4),
    ("Dracula", 4),
    ("Street", 4),
    ("Country", 4),
    ("Power", 4),
    ("We", 4),
    ("Dance", 4),
    ("Black", 4),
    ("Air", 4),
    ("Once", 4),
    ("Tin", 4),
    ("Lies", 4),
    ("Gold", 4),
    ("Her", 4),
    ("Game", 4),
    ("Who", 4),
    ("Beauty", 4),
    ("Blood", 4),
    ("Some", 4),
    ("Lady", 4),
    ("His", 4),
    ("Wonderful", 4),
    ("Manhattan", 4),
    ("Things", 4),
    ("Angel", 4),
    ("York", 4),
    ("There", 4),
    ("Boy", 4),
    ("Shadow", 4),
    ("Thing", 4),
    ("Was", 4),
    ("Double", 4),
    ("Killer", 4),
    ("War", 4),
    ("Not", 4),
    ("Other", 4),
    ("Four", 3),
    ("Get", 3),
    ("Walking", 3),
    ("Free", 3),
    ("Adventure", 3),
    ("Mad", 3),
    ("Show", 3),
    ("Way", 3),
    ("Hot", 3),
    ("Part", 3),
    ("Park", 3),
    ("Blade", 3),
    ("an", 3),
    ("Nightmare", 3),
    ("Dogs", 3),
    ("Hall", 3),
    ("Mystery", 3),
    ("Drop", 3),
    ("Truth", 3),
    ("Cats", 3),
    ("Cold", 3),
    ("Bound", 3),
    ("Space", 3),
    ("Washington", 3),
    ("Journey", 3),
    ("Monty", 3),
    ("Return", 3),
    ("Pink", 3),
    ("Private", 3),
    ("Back", 3),
    ("Now", 3),
    ("Alien", 3),
    ("Army", 3),
    ("Full", 3),
    ("Evil", 3),
    ("Frankenstein", 3),
    ("Jones", 3),
    ("Being", 3),
    ("Faces", 3),
    ("Guns", 3),
    ("Jaws", 3),
    ("Sense", 3),
    ("Book", 3),
    ("Jungle", 3),
    ("Company", 3),
    ("Upon", 3),
    ("Scream", 3),
    ("Brown", 3),
    ("Wings", 3),
    ("Noon", 3),
    ("Father", 3),
    ("Paradise", 3),
    ("Hills", 3),
    ("Cop", 3),
    ("Measures", 3),
    ("How", 3),
    ("Rain", 3),
    ("Rising", 3),
    ("Over", 3),
    ("Dangerous", 3),
    ("Mary", 3),
    ("Tales", 3),
    ("Queen", 3),
    ("Naked", 3),
    ("Beverly", 3),
    ("Face", 3),
    ("Jack", 3),
    ("Year", 3),
    ("Thieves", 3),
    ("Children", 3),
    ("Earth", 3),
    ("It's", 3),
    ("Picture", 3),
    ("Tale", 3),
    ("Club", 3),
    ("Fair", 3),
    ("Thin", 3),
    ("Candidate", 3),
    ("M", 3),
    ("Sleep", 3),
    ("Man's", 3),
    ("Speed", 3),
    ("Son", 3),
    ("Meet", 3),
    ("Der", 3),
    ("Dear", 3),
    ("Heart", 3),
    ("Green", 3),
    ("Beach", 3),
    ("Nosferatu", 3),
    ("Perfect", 3),
    ("Moon", 3),
    ("Off", 3),
    ("Made", 3),
    ("Michael", 3),
    ("Beyond", 3),
    ("Farewell", 3),
    ("Sweet", 3),
    ("Darn", 3),
    ("Affair", 3),
    ("Eye", 3),
    ("Don't", 3),
    ("Above", 3),
    ("Tie", 3),
    ("L'", 3),
    ("Party", 3),
    ("No", 3),
    ("Doors", 3),
    ("Tom", 3),
    ("Human", 3),
    ("Letter", 3),
    ("Next", 3),
    ("Butterfly", 3),
    ("Dream", 3),
    ("Town", 3),
    ("Rooms", 2),
    ("yao", 2),
    ("Richard", 2),
    ("French", 2),
    ("Twist", 2),
    ("Treasure", 2),
    ("Bronx", 2),
    ("Generation", 2),
];
/// ml-100k: GENRES_PER_ITEM.
const GENRES_PER_ITEM: &[u32] = &[833, 569, 215, 51, 11, 3];
/// ml-100k: TITLE_LENGTHS.
const TITLE_LENGTHS: &[u32] = &[329, 524, 378, 202, 107, 77, 22, 21, 7, 5, 2, 2, 1, 1, 1];
/// ml-100k: YEARS.
const YEARS: &[(&str, u32)] = &[
    ("1922", 1),
    ("1926", 1),
    ("1930", 1),
    ("1931", 1),
    ("1932", 1),
    ("1933", 2),
    ("1934", 4),
    ("1935", 4),
    ("1936", 2),
    ("1937", 4),
    ("1938", 3),
    ("1939", 7),
    ("1940", 8),
    ("1941", 5),
    ("1942", 2),
    ("1943", 4),
    ("1944", 5),
    ("1945", 4),
    ("1946", 5),
    ("1947", 5),
    ("1948", 3),
    ("1949", 4),
    ("1950", 7),
    ("1951", 5),
    ("1952", 3),
    ("1953", 2),
    ("1954", 7),
    ("1955", 6),
    ("1956", 5),
    ("1957", 8),
    ("1958", 9),
    ("1959", 5),
    ("1960", 5),
    ("1961", 3),
    ("1962", 5),
    ("1963", 7),
    ("1964", 3),
    ("1965", 6),
    ("1966", 2),
    ("1967", 5),
    ("1968", 6),
    ("1969", 4),
    ("1970", 4),
    ("1971", 7),
    ("1972", 3),
    ("1973", 4),
    ("1974", 8),
    ("1975", 6),
    ("1976", 6),
    ("1977", 4),
    ("1978", 4),
    ("1979", 9),
    ("1980", 8),
    ("1981", 13),
    ("1982", 13),
    ("1983", 6),
    ("1984", 8),
    ("1985", 7),
    ("1986", 15),
    ("1987", 14),
    ("1988", 11),
    ("1989", 15),
    ("1990", 24),
    ("1991", 24),
    ("1992", 40),
    ("1993", 130),
    ("1994", 237),
    ("1995", 295),
    ("1996", 298),
    ("1997", 235),
    ("1998", 53),
    ("V", 1),
    ("unkonwn", 1),
];
/// ml-100k: OCCUPATIONS.
const OCCUPATIONS: &[(&str, u32)] = &[
    ("student", 196),
    ("other", 105),
    ("educator", 95),
    ("administrator", 79),
    ("engineer", 67),
    ("programmer", 66),
    ("librarian", 51),
    ("writer", 45),
    ("executive", 32),
    ("scientist", 31),
    ("artist", 28),
    ("technician", 27),
    ("marketing", 26),
    ("entertainment", 18),
    ("healthcare", 16),
    ("retired", 14),
    ("lawyer", 12),
    ("salesman", 12),
    ("none", 9),
    ("homemaker", 7),
    ("doctor", 7),
];
/// ml-100k: AGES.
const AGES: &[(&str, u32)] = &[
    ("10", 1),
    ("11", 1),
    ("13", 5),
    ("14", 3),
    ("15", 6),
    ("16", 5),
    ("17", 14),
    ("18", 18),
    ("19", 23),
    ("20", 32),
    ("21", 27),
    ("22", 37),
    ("23", 28),
    ("24", 33),
    ("25", 38),
    ("26", 34),
    ("27", 35),
    ("28", 36),
    ("29", 32),
    ("30", 39),
    ("31", 25),
    ("32", 28),
    ("33", 26),
    ("34", 17),
    ("35", 27),
    ("36", 21),
    ("37", 19),
    ("38", 17),
    ("39", 22),
    ("40", 21),
    ("41", 10),
    ("42", 21),
    ("43", 13),
    ("44", 23),
    ("45", 15),
    ("46", 12),
    ("47", 14),
    ("48", 20),
    ("49", 19),
    ("50", 20),
    ("51", 20),
    ("52", 6),
    ("53", 12),
    ("54", 4),
    ("55", 11),
    ("56", 6),
    ("57", 9),
    ("58", 3),
    ("59", 3),
    ("60", 9),
    ("61", 3),
    ("62", 2),
    ("63", 3),
    ("64", 2),
    ("65", 3),
    ("66", 1),
    ("68", 2),
    ("69", 2),
    ("7", 1),
    ("70", 3),
    ("73", 1),
];
/// ml-100k: GENDERS.
const GENDERS: &[(&str, u32)] = &[("F", 273), ("M", 670)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{load, Format};

    fn load_dir(dir: &Path) -> Dataset {
        load(dir, Format::RecBole).unwrap().dataset
    }

    #[test]
    fn scalegen_same_seed_gives_byte_identical_files() {
        let p = Profile::ml100k();
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        write_recbole(&generate(&p, 20_000, 7).unwrap(), a.path()).unwrap();
        write_recbole(&generate(&p, 20_000, 7).unwrap(), b.path()).unwrap();
        write_recbole(&generate(&p, 20_000, 8).unwrap(), c.path()).unwrap();
        for f in ["synth.inter", "synth.item", "synth.user", "scalegen.json"] {
            let x = std::fs::read(a.path().join(f)).unwrap();
            assert_eq!(x, std::fs::read(b.path().join(f)).unwrap(), "{f} differs");
            if f != "scalegen.json" {
                assert_ne!(
                    x,
                    std::fs::read(c.path().join(f)).unwrap(),
                    "{f}: seed ignored"
                );
            }
        }
    }

    #[test]
    fn scalegen_statistics_at_100k_match_the_documented_ones() {
        let p = Profile::ml100k();
        let dir = tempfile::tempdir().unwrap();
        write_recbole(&generate(&p, 100_000, 42).unwrap(), dir.path()).unwrap();
        let data = load_dir(dir.path());
        let s = DataStats::of(&data);
        eprintln!("{s:#?}");
        assert_eq!(s.interactions, 100_000);
        assert_eq!(s.catalog, 1682);
        assert!((900..=990).contains(&s.users), "users {}", s.users);
        assert_eq!(s.activity_min, 20);
        assert!(s.activity_max <= 737, "max {}", s.activity_max);
        assert!(
            (50..=85).contains(&s.activity_median),
            "median {}",
            s.activity_median
        );
        assert!(
            (s.activity_exponent - p.activity_exponent).abs() < 0.1,
            "activity γ {} vs {}",
            s.activity_exponent,
            p.activity_exponent
        );
        // ml-100k: 42.9% of interactions on the top 10% of items, top item 583.
        assert!(
            (s.top10_share - 0.429).abs() < 0.07,
            "top 10% share {}",
            s.top10_share
        );
        assert!((440..=730).contains(&s.top_item), "top item {}", s.top_item);
        assert!(
            (s.popularity_exponent - p.popularity_exponent).abs() < 0.45,
            "popularity s {} vs {}",
            s.popularity_exponent,
            p.popularity_exponent
        );
        // ml-100k: 0.274 against 0.222 shuffled.
        let excess = s.drift_tv - s.drift_tv_shuffled;
        assert!(excess > 0.02, "drift excess {excess}");
        for (k, r) in s.ratings.iter().enumerate() {
            let real = p.ratings[k] as f64 / 100_000.0;
            assert!(
                (r - real).abs() < 0.05,
                "rating {} share {r} vs {real}",
                k + 1
            );
        }
    }

    #[test]
    fn scalegen_drift_exists_only_when_drift_is_on() {
        let on = Profile::ml100k();
        let off = Profile {
            drift: 0.0,
            ..Profile::ml100k()
        };
        let excess = |p: &Profile| {
            let dir = tempfile::tempdir().unwrap();
            write_recbole(&generate(p, 30_000, 3).unwrap(), dir.path()).unwrap();
            let s = DataStats::of(&load_dir(dir.path()));
            s.drift_tv - s.drift_tv_shuffled
        };
        let (e_on, e_off) = (excess(&on), excess(&off));
        assert!(e_off.abs() < 0.015, "no drift, yet excess {e_off}");
        assert!(e_on > e_off + 0.02, "drift {e_on} vs none {e_off}");
    }

    #[test]
    fn scalegen_scale_grows_items_sublinearly_and_users_by_mean_activity() {
        let p = Profile::ml100k();
        let s1 = p.scale(100_000).unwrap();
        assert_eq!(s1.items, 1682);
        assert!((900..=990).contains(&s1.users), "{s1:?}");
        let s10 = p.scale(1_000_000).unwrap();
        assert_eq!(s10.items, 3706);
        assert!((5500..=7000).contains(&s10.users), "{s10:?}");
        assert_eq!(s10.activity_cap, 1624);
        let fixed = Profile {
            activity_cap_grows: false,
            ..Profile::ml100k()
        };
        let f10 = fixed.scale(1_000_000).unwrap();
        assert_eq!((f10.items, f10.activity_cap), (3706, 737));
        assert!((9300..=9600).contains(&f10.users), "{f10:?}");
    }

    /// `--like sparse`: at the hidden set's size about 31k users of 9.3
    /// interactions in a 24k-item catalog; a small generated set keeps the
    /// mean activity, writes no metadata and has planted transitions.
    #[test]
    fn scalegen_sparse_preset_has_the_hidden_shape() {
        let p = Profile::sparse();
        let s = p.scale(287_000).unwrap();
        assert!((23_500..24_500).contains(&s.items), "{s:?}");
        assert!((29_000..33_000).contains(&s.users), "{s:?}");
        let dir = tempfile::tempdir().unwrap();
        let g = generate(&p, 20_000, 3).unwrap();
        write_recbole(&g, dir.path()).unwrap();
        assert!(!dir.path().join("synth.user").exists());
        let item = std::fs::read_to_string(dir.path().join("synth.item")).unwrap();
        assert!(item.starts_with("item_id:token\n1\n"), "{}", &item[..40]);
        let d = load_dir(dir.path());
        let st = DataStats::of(&d);
        let mean = st.interactions as f64 / st.users as f64;
        assert!((8.5..10.0).contains(&mean), "{mean}");
        assert!(d.catalog.items.iter().all(|i| i.title.is_empty()));
        // Planted transitions: a user's next item is one of the previous
        // item's three successors far more often than chance.
        let mut follows = 0usize;
        let mut pairs = 0usize;
        let mut by_user: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &(_, u, i, _) in &g.interactions {
            by_user.entry(u).or_default().push(i);
        }
        let mut succ: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for v in by_user.values() {
            for w in v.windows(2) {
                *succ.entry((w[0], w[1])).or_insert(0) += 1;
                pairs += 1;
            }
        }
        for (_, n) in succ {
            if n >= 2 {
                follows += n;
            }
        }
        assert!(
            follows * 4 > pairs,
            "{follows} of {pairs} transitions repeat"
        );
        // ml-100k's profile draws no successors: its stream is unchanged.
        assert_eq!(Profile::ml100k().follow, 0.0);
    }

    #[test]
    fn scalegen_bad_size_names_the_flag() {
        let e = generate(&Profile::ml100k(), 10, 1).unwrap_err().to_string();
        assert!(e.contains("--interactions"), "{e}");
    }

    #[test]
    fn scalegen_fit_on_ml100k_gives_the_embedded_profile() {
        let Some(dir) = evomem_kit::testing::shared_dataset("ml-100k") else {
            return;
        };
        let fitted = Profile::fit(&load_dir(&dir)).unwrap();
        let d = Profile::ml100k();
        eprintln!(
            "fitted s {} γ {}",
            fitted.popularity_exponent, fitted.activity_exponent
        );
        eprintln!("{:#?}", DataStats::of(&load_dir(&dir)));
        assert!((fitted.popularity_exponent - d.popularity_exponent).abs() < 0.01);
        assert!((fitted.activity_exponent - d.activity_exponent).abs() < 0.01);
        assert_eq!(fitted.activity_min, d.activity_min);
        assert!((fitted.activity_max_share - d.activity_max_share).abs() < 1e-9);
        assert_eq!(fitted.genres, d.genres);
        assert_eq!(fitted.genres_per_item, d.genres_per_item);
        assert_eq!(fitted.title_lengths, d.title_lengths);
        for w in &d.title_words {
            assert!(fitted.title_words.contains(w), "{w:?}");
        }
        assert_eq!(fitted.years, {
            let mut y = d.years.clone();
            y.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            y
        });
        assert_eq!(fitted.ratings, d.ratings);
        assert_eq!((fitted.start, fitted.span), (d.start, d.span));
    }
}
