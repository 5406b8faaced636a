//! MARS hyperparameters, parsed from a [`PolicySpec`] such as
//! `mars[tiers=ep,kcat=4,sched=agentic,b=5]` or `mars[mode=single-pass]`.
//!
//! Defaults follow the paper where it states a value (L_max = 15, δ₊ = 0.1,
//! δ₋ = 0.2 from the Appendix F case study, γ = 5, six categories, ranker
//! tiers = profile + event from §4.4). Everything the paper leaves open is a
//! documented, configurable choice here.

use super::polarity::Polarity;
use crate::registry::PolicySpec;
use evomem_core::PolicyError;
use std::fmt;

/// Which memory tiers the ranker consumes (the §4.4 2³ factorial).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiers {
    /// Event memory (recent raw signals).
    pub event: bool,
    /// Preference memory (chunks) fed directly to the ranker.
    pub preference: bool,
    /// Profile memory (synthesized narrative and the facets it summarises).
    pub profile: bool,
}

impl Tiers {
    /// Parse `none` or a subset of the letters `e`, `f` (preference chunks,
    /// "f" as in "fine-grained"), `p`, in any order. `c` is accepted as an
    /// alias of `f`.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let mut t = Tiers {
            event: false,
            preference: false,
            profile: false,
        };
        if s == "none" {
            return Ok(t);
        }
        if s.is_empty() {
            return Err(PolicyError::Config(
                "mars: `tiers` is empty (use `none` or letters from e, f, p)".into(),
            ));
        }
        for ch in s.chars() {
            match ch {
                'e' => t.event = true,
                'f' | 'c' => t.preference = true,
                'p' => t.profile = true,
                other => {
                    return Err(PolicyError::Config(format!(
                        "mars: bad letter `{other}` in tiers `{s}` (use `none` or letters from e, f, p)"
                    )))
                }
            }
        }
        Ok(t)
    }

    /// True when no tier is consumed.
    pub fn is_none(&self) -> bool {
        !self.event && !self.preference && !self.profile
    }
}

impl fmt::Display for Tiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            return f.write_str("none");
        }
        if self.event {
            f.write_str("e")?;
        }
        if self.preference {
            f.write_str("f")?;
        }
        if self.profile {
            f.write_str("p")?;
        }
        Ok(())
    }
}

/// When the lifecycle runs (§4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// Every `b` pending signals.
    Fixed,
    /// The `mars_plan` role decides after each signal: run ops or wait.
    Agentic,
}

/// How observed history becomes preference and profile memory (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every signal goes through `observe` and the scheduler: lifecycle
    /// rounds every B signals (fixed) or when the planner says so (agentic),
    /// as in the paper's evolving mode. The default.
    Incremental,
    /// The paper's retrospective mode: `observe` only records the signals;
    /// each user's whole pending history is compressed by one extraction and
    /// one synthesis when decisions are due (see [`super::single_pass`]).
    SinglePass,
}

impl Mode {
    /// The key's value: `incremental` or `single-pass`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Incremental => "incremental",
            Mode::SinglePass => "single-pass",
        }
    }

    /// Parse the value of the `mode` key; the error names the key.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        match s {
            "incremental" => Ok(Mode::Incremental),
            "single-pass" => Ok(Mode::SinglePass),
            other => Err(PolicyError::Config(format!(
                "mars: bad value `{other}` for `mode` (incremental or single-pass)"
            ))),
        }
    }
}

/// How much LLM work a user may cost (issue 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// No budget: the schedule `mode` and `sched` give. The default.
    Full,
    /// MARS's published per-user budget (§4.5: 3 calls, 3,870 tokens per
    /// user), with room to spare: the single pass over the last
    /// [`PAPER_WINDOW`] signals (unless `sp_window` is given), the brief
    /// prompts (`prompts/mars_*_brief.md`), a profile of at most
    /// [`PAPER_PROFILE_WORDS`] words (unless `profile_words` is given),
    /// titles only in the ranker's event entries, and the metadata-derived
    /// categories (unless `lm_categories=true`).
    Paper,
}

impl Budget {
    /// Parse the value of the `budget` key; the error names the key.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        match s {
            "full" => Ok(Budget::Full),
            "paper" => Ok(Budget::Paper),
            other => Err(PolicyError::Config(format!(
                "mars: bad value `{other}` for `budget` (full or paper)"
            ))),
        }
    }
}

/// `budget=paper`: the extraction's window when `sp_window` is not given.
/// Chosen on ml-100k's validation targets, all 943 users, among 10, 20, 30,
/// 50 and all (HR@1 0.5695, 0.5652, 0.5536, 0.5620, 0.5695; 10 is the only
/// one that fits the token goal).
pub const PAPER_WINDOW: usize = 10;
/// `budget=paper`: the profile's word limit when `profile_words` is not
/// given. On ml-100k's validation targets (window 20) 300 words gave HR@1
/// 0.5684 and 80 words 0.5652 for 288 fewer estimated tokens per user (the
/// profile is written once and read once by the ranker).
pub const PAPER_PROFILE_WORDS: usize = 80;

/// All MARS settings. See [`MarsConfig::defaults`] for the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MarsConfig {
    /// Tiers the ranker consumes. Default `ep` (§4.4: profile + event is best).
    pub tiers: Tiers,
    /// Max chunks per category, K_cat. Default 4 (paper: flat over 2..16).
    pub kcat: usize,
    /// Scheduler. Default `fixed`.
    pub sched: Scheduler,
    /// Incremental rounds or the paper's retrospective single pass. Default
    /// `incremental` (see [`Mode`]).
    pub mode: Mode,
    /// Single pass: the extraction reads the most recent `sp_window` pending
    /// signals of a user, 0 = all of them. Default 0 (§4.1: "the extraction
    /// step ingests all interactions"); a cap bounds a model's prompt.
    pub sp_window: usize,
    /// LLM budget. Default `full`; `paper` implies `mode=single-pass` (see
    /// [`Budget`]).
    pub budget: Budget,
    /// Word limit of the synthesized profile. Default 300 (§3.3: 150–300
    /// words); `budget=paper` lowers its default to [`PAPER_PROFILE_WORDS`].
    pub profile_words: usize,
    /// Event FIFO capacity L_max. Default 15 (§4.1).
    pub lmax: usize,
    /// Fixed scheduler batch B (pending signals per lifecycle round). Default 5
    /// (paper silent; equal to γ so a round of one-op-per-signal can trigger
    /// a synthesis).
    pub b: usize,
    /// Boost step δ₊. Default 0.1 (Appendix F).
    pub delta_plus: f64,
    /// Demote step δ₋ (must exceed δ₊). Default 0.2 (Appendix F).
    pub delta_minus: f64,
    /// Forced synthesis every γ mutations. Default 5 (Appendix F).
    pub gamma: u32,
    /// Forget a chunk whose strength is below this. Default 0.35, so that the
    /// case study's 0.7 → 0.5 → 0.3 chunk is forgotten after two demotes.
    pub forget_below: f64,
    /// ... and whose evidence is at least this. Default 2.
    pub forget_min_evidence: u32,
    /// Merge two chunks of one category whose embedding cosine is at least
    /// this. Default 0.92.
    pub merge_threshold: f32,
    /// Minimum positive support in a batch for the offline extractor to
    /// propose a new chunk. Default 2.
    pub min_support: u32,
    /// Offline extractor: a chunk is contradicted (demoted) when a batch has
    /// at least this many positive signals carrying its category and none
    /// carry its value. Default 3.
    pub shift_min: u32,
    /// Ratings at or above this are positive signals. Default 4 (ml-100k 1–5).
    pub pos_min: f32,
    /// Ratings at or below this are negative signals. Default 2; 3 is neutral.
    pub neg_max: f32,
    /// Number of preference categories per domain. Default 6 (Appendix, Table 6).
    pub n_categories: usize,
    /// Derive the domain's categories with the model (`mars_categories`).
    /// Default true; `budget=paper` turns it off (the budget is extraction,
    /// synthesis and rank per user), and the metadata-derived categories
    /// are used, counted as a scheduled offline run of the role.
    pub lm_categories: bool,
    /// Items sampled to derive categories. Default 200 (the LLM sees the first 10).
    pub category_sample: usize,
    /// Ranker weight of embedding similarity relative to facet matching. Default 0.5.
    pub emb_weight: f64,
    /// Recency decay per event position in the ranker (newest = 1). Default 0.9.
    pub recency_decay: f64,
    /// Ranker weight of item familiarity, the offline stand-in for the frozen
    /// LLM's knowledge of which items are well known (`knowledge`). Default 0.25.
    pub prior: f64,
    /// Ranker weight of co-consumption relatedness between the event tier's
    /// items and a candidate (`knowledge`). Default 2.0; needs the event tier.
    pub collab: f64,
    /// Ranker weight of the tiers' content match (facets and embeddings,
    /// `ranker`). Default 0.35.
    ///
    /// The three ranker weights were chosen on ml-100k's validation
    /// interactions (`evomem eval --target valid`, all 943 users, seed 42,
    /// default tiers profile + event) in two successive grids, content
    /// {.25, .5, 1} × collab {.5, 1, 1.5} × prior {.5, 1}, then around the best,
    /// content {.15, .25, .35} × collab {1.5, 2, 3} × prior {.25, .5, .75};
    /// never on test targets. Only their ratios matter (every term is
    /// standardised). `fit=auto` fits them on the data at hand instead
    /// ([`super::fit`]).
    pub content: f64,
    /// Ranker weight of the two-step walk along forward co-consumption from
    /// the event tier's items (`knowledge`, issue 55). Default 0: the
    /// rankings before it; `fit=auto` fits it with the other three.
    pub walk: f64,
    /// `fit` and its keys: with `fit=auto`, fit the four ranker weights
    /// (`content`, `collab`, `prior`, `walk`) on held-out validation decisions
    /// ([`super::fit`]), used only when they beat the weights above there
    /// (the default since issue 55, as seqmem's); `fit=none`: the weights
    /// above.
    pub fit: super::fit::FitSettings,
}

impl MarsConfig {
    /// Every key at its row's default.
    pub fn defaults() -> Result<Self, PolicyError> {
        Self::from_spec(&PolicySpec::named("mars"))
    }

    /// Parse a spec; bad values are errors naming the key. Unknown keys are
    /// the registry's to reject: it checks every key against
    /// [`super::FAMILY`]'s before calling the builder.
    pub fn from_spec(spec: &PolicySpec) -> Result<Self, PolicyError> {
        let tiers = Tiers::parse(&spec.value::<String>("tiers")?)?;
        let sched = match spec.value::<String>("sched")?.as_str() {
            "fixed" => Scheduler::Fixed,
            "agentic" => Scheduler::Agentic,
            other => {
                return Err(PolicyError::Config(format!(
                    "mars: bad value `{other}` for `sched` (fixed or agentic)"
                )))
            }
        };
        let budget = Budget::parse(&spec.value::<String>("budget")?)?;
        let mode = match (budget, spec.explicit::<String>("mode")?) {
            (Budget::Paper, Some(s)) if s != Mode::SinglePass.as_str() => {
                return Err(PolicyError::Config(format!(
                    "mars: `budget=paper` runs the single pass; `mode={s}` contradicts it"
                )))
            }
            (Budget::Paper, _) => Mode::SinglePass,
            (Budget::Full, _) => Mode::parse(&spec.value::<String>("mode")?)?,
        };
        // `budget=paper` presets three keys; a value written in the spec wins.
        let preset = |key: &str, paper: usize| -> Result<usize, PolicyError> {
            match (budget, spec.explicit(key)?) {
                (_, Some(v)) => Ok(v),
                (Budget::Paper, None) => Ok(paper),
                (Budget::Full, None) => spec.value(key),
            }
        };
        let lm_categories = match (budget, spec.explicit("lm_categories")?) {
            (_, Some(v)) => v,
            (Budget::Paper, None) => false,
            (Budget::Full, None) => spec.value("lm_categories")?,
        };
        let (content, collab, prior, walk): (f64, f64, f64, f64) = (
            spec.value("content")?,
            spec.value("collab")?,
            spec.value("prior")?,
            spec.value("walk")?,
        );
        let c = Self {
            tiers,
            kcat: spec.value("kcat")?,
            sched,
            mode,
            sp_window: preset("sp_window", PAPER_WINDOW)?,
            budget,
            profile_words: preset("profile_words", PAPER_PROFILE_WORDS)?,
            lmax: spec.value("lmax")?,
            b: spec.value("b")?,
            delta_plus: spec.value("delta_plus")?,
            delta_minus: spec.value("delta_minus")?,
            gamma: spec.value("gamma")?,
            forget_below: spec.value("forget_below")?,
            forget_min_evidence: spec.value("forget_min_evidence")?,
            merge_threshold: spec.value("merge_threshold")?,
            min_support: spec.value("min_support")?,
            shift_min: spec.value("shift_min")?,
            pos_min: spec.value("pos_min")?,
            neg_max: spec.value("neg_max")?,
            n_categories: spec.value("n_categories")?,
            lm_categories,
            category_sample: spec.value("category_sample")?,
            emb_weight: spec.value("emb_weight")?,
            recency_decay: spec.value("recency_decay")?,
            prior,
            collab,
            content,
            walk,
            fit: super::fit::FitSettings::from_spec(
                spec,
                super::fit::FEATURES,
                [content, collab, prior, walk],
            )?,
        };
        c.validate()?;
        Ok(c)
    }

    /// Check ranges; the error names the offending key.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let bad = |k: &str, why: &str| Err(PolicyError::Config(format!("mars: `{k}` {why}")));
        if self.kcat == 0 {
            return bad("kcat", "must be at least 1");
        }
        if self.lmax == 0 {
            return bad("lmax", "must be at least 1");
        }
        if self.mode == Mode::SinglePass && self.sched == Scheduler::Agentic {
            return bad(
                "mode",
                "single-pass runs no scheduler: use it with sched=fixed (the default)",
            );
        }
        if self.profile_words == 0 {
            return bad("profile_words", "must be at least 1");
        }
        if self.b == 0 {
            return bad("b", "must be at least 1");
        }
        if self.gamma == 0 {
            return bad("gamma", "must be at least 1");
        }
        if !(self.delta_plus > 0.0 && self.delta_plus <= 1.0) {
            return bad("delta_plus", "must be in (0, 1]");
        }
        if !(self.delta_minus > 0.0 && self.delta_minus <= 2.0) {
            return bad("delta_minus", "must be in (0, 2]");
        }
        if self.delta_minus <= self.delta_plus {
            return bad(
                "delta_minus",
                "must exceed delta_plus (pessimistic update rule, §3.3)",
            );
        }
        if !(-1.0..=1.0).contains(&self.forget_below) {
            return bad("forget_below", "must be in [-1, 1]");
        }
        if !(0.0..=1.0).contains(&self.merge_threshold) {
            return bad("merge_threshold", "must be in [0, 1]");
        }
        if self.neg_max >= self.pos_min {
            return bad("neg_max", "must be below pos_min");
        }
        if self.n_categories == 0 {
            return bad("n_categories", "must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.recency_decay) {
            return bad("recency_decay", "must be in [0, 1]");
        }
        for (k, v) in [
            ("emb_weight", self.emb_weight),
            ("prior", self.prior),
            ("collab", self.collab),
            ("content", self.content),
            ("walk", self.walk),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(k, "must be finite and non-negative");
            }
        }
        Ok(())
    }

    /// Signal polarity of a rating: at or above `pos_min` positive, at or
    /// below `neg_max` negative, neutral between. No rating (implicit
    /// feedback such as the CDs purchases) is positive.
    pub fn polarity(&self, rating: Option<f32>) -> Polarity {
        match rating {
            None => Polarity::Positive,
            Some(r) if r >= self.pos_min => Polarity::Positive,
            Some(r) if r <= self.neg_max => Polarity::Negative,
            Some(_) => Polarity::Neutral,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::KeyType;

    fn spec_of(params: impl IntoIterator<Item = (String, String)>) -> PolicySpec {
        PolicySpec {
            name: "mars".into(),
            params: params.into_iter().collect(),
        }
    }

    #[test]
    fn family_key_defaults_are_the_config_defaults() {
        let spec = spec_of(
            crate::mars::FAMILY
                .keys
                .iter()
                .map(|k| (k.name.to_string(), k.default.to_string())),
        );
        crate::mars::FAMILY.check(&spec).unwrap();
        let mut written = MarsConfig::from_spec(&spec).unwrap();
        // Weights written in the spec are pinned for `fit=auto`; nothing
        // else differs.
        assert_eq!(
            written.fit.pinned,
            [Some(0.35), Some(2.0), Some(0.25), Some(0.0)]
        );
        written.fit.pinned = [None; 4];
        assert_eq!(written, MarsConfig::defaults().unwrap());
    }

    #[test]
    fn every_family_key_is_read() {
        for k in crate::mars::FAMILY.keys {
            let value = match k.ty {
                KeyType::Count => (k.default.parse::<u64>().unwrap() + 1).to_string(),
                KeyType::Number => (k.default.parse::<f64>().unwrap() + 0.01).to_string(),
                KeyType::Choice(options) => options
                    .iter()
                    .find(|o| **o != k.default)
                    .unwrap()
                    .to_string(),
                KeyType::Text => "efp".to_string(),
                KeyType::Bool => (!k.default.parse::<bool>().unwrap()).to_string(),
            };
            let spec = spec_of([(k.name.to_string(), value.clone())]);
            let c = MarsConfig::from_spec(&spec).unwrap();
            assert_ne!(
                c,
                MarsConfig::defaults().unwrap(),
                "`{}={value}` changed nothing",
                k.name
            );
        }
    }
}
