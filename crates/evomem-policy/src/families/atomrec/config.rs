//! AtomRec configuration: the paper's hyperparameters (§3, "Implementation
//! Details": k_link = 20, τ_evo = 0.7, h = 2, k_ret = 15) plus one flag per
//! ablation of Table 2, parsed from a [`PolicySpec`] such as
//! `atomrec[collab=false,h=1]`. The keys, their types, defaults and docs are
//! the rows of [`super::FAMILY`], read through [`PolicySpec::value`]
//! ([`AtomRecConfig::defaults`] is every key at its row's default); a test
//! checks that the ranker's and graph's standalone defaults equal the row's.

use super::ranker::RankWeights;
use super::relation::RelationFactors;
use crate::registry::PolicySpec;
use evomem_core::PolicyError;
use serde::Serialize;

/// Default `seed_window`: 2^17 user atoms. ml-100k holds about 99k, so
/// there every seed search spans all of memory, as the paper's does.
pub const SEED_WINDOW: usize = 131_072;

/// Where seed retrieval M_0 searches (`seed_scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedScope {
    /// The memory the user may see (the paper's TopK over M): own atoms,
    /// item atoms, and with `collab` other users' atoms.
    #[default]
    Memory,
    /// The user's own atoms only (evomem's behaviour before this key).
    Own,
}

impl std::str::FromStr for SeedScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "memory" => Ok(Self::Memory),
            "own" => Ok(Self::Own),
            other => Err(format!("`{other}` (expected memory or own)")),
        }
    }
}

/// How a seed search over memory is answered (`seed_index`, issue 42).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedIndex {
    /// `hnsw` when the data hold at least [`SEED_GRAPH_MIN_USERS`] users
    /// (about as many ranking decisions), else `exact`. The default.
    #[default]
    Auto,
    /// An exact scan of the seed pool per decision (batched over the
    /// retrospective decisions): cost proportional to the atoms.
    Exact,
    /// An HNSW tier over the seed pool ([`evomem_index::TieredIndex`]):
    /// a graph build once, then a search per decision whose cost is
    /// sublinear in the atoms.
    Hnsw,
}

impl std::str::FromStr for SeedIndex {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "exact" => Ok(Self::Exact),
            "hnsw" => Ok(Self::Hnsw),
            other => Err(format!("`{other}` (expected auto, exact or hnsw)")),
        }
    }
}

/// `seed_index=auto` builds the seed graph when the data hold at least this
/// many users. Why users: a retrospective run ranks one decision per user,
/// and the graph pays off once decisions outnumber the exact scans its build
/// costs. A sequential graph insert (M = 16, efConstruction = 64) cost about
/// as much as 5,000 exact vector scores in the batched scan on the
/// development machine, so a pool of P atoms costs about 5,000·P to build
/// and each exact decision P: the graph wins from roughly 5,000 decisions.
/// On ml-100k (943 users) the exact scan stays (its results unchanged); on
/// the sparse 300k set (32,404 users) the graph is built.
pub const SEED_GRAPH_MIN_USERS: usize = 4096;

/// How much LLM work a user may cost (`budget`, issue 18).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// A link call per new note and an evolve call per evolved neighbour
    /// (the paper's schedule). The default.
    #[default]
    Full,
    /// The model sees only each user's last `lm_window` notes, only their
    /// neighbours above τ_evo, in batched calls; see [`super::budget`].
    Lean,
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "full" => Ok(Self::Full),
            "lean" => Ok(Self::Lean),
            other => Err(format!("`{other}` (expected full or lean)")),
        }
    }
}

/// Resolved AtomRec settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtomRecConfig {
    /// Atomic notes (`true`) or one coarse summary per user (`atomic=false`). Default `true`.
    pub atomic: bool,
    /// Keywords K and tags G in notes and embeddings (`kt`). Default `true`.
    pub keywords_tags: bool,
    /// Context field X (`context`). Default `true`.
    pub context: bool,
    /// Collaborative links to other users' atoms on the same item (`collab`). Default `true`.
    pub collab: bool,
    /// Typed relations chosen by the link role (`typed`); `false` = embedding-only links. Default `true`.
    pub typed: bool,
    /// Field-level evolution of neighbours (`evolve`); `false` = append-only. Default `true`.
    pub evolve: bool,
    /// Link-aware retrieval (`linkret`); `false` = top-k_ret only. Default `true`.
    pub link_retrieval: bool,
    /// Neighbours considered for linking, k_link (paper default 20).
    pub k_link: usize,
    /// Evolution trigger threshold τ_evo on cosine (paper default 0.7).
    pub tau: f32,
    /// Link hops expanded at retrieval, h (paper default 2).
    pub hops: usize,
    /// Seed atoms retrieved by cosine, k_ret (paper default 15).
    pub k_ret: usize,
    /// Hand each candidate's item memory M_i (item atom fields, audience,
    /// heaviest links) to the decider (`item_mem`, paper: yes). Default `true`.
    pub item_memory: bool,
    /// Where the seeds are searched (`seed_scope`): the visible memory (paper
    /// default) or the user's own atoms.
    pub seed_scope: SeedScope,
    /// Most recent user atoms a seed search over memory sees besides the
    /// user's own and the item atoms (`seed_window`; 0 = all, the paper's
    /// TopK over M). Default [`SEED_WINDOW`]: above ml-100k's atom count, so
    /// every search there spans all of memory; it bounds a decision's cost
    /// on larger data (see [`super::graph::AtomGraph::with_seed_window`]).
    pub seed_window: usize,
    /// How seed searches over memory are answered (`seed_index`): exactly,
    /// through an HNSW tier, or chosen by the data's size (`auto`, the
    /// default; see [`SeedIndex`]).
    pub seed_index: SeedIndex,
    /// Candidate list size `ef` of a seed search through the HNSW tier
    /// (`seed_ef`). Default 1024: on ml-100k (MiniLM) the seeds' recall
    /// against the exact scan was 0.918 at 128 and 0.988 at 512.
    pub seed_ef: usize,
    /// With the HNSW tier, every `seed_audit`-th decision's seeds are also
    /// searched exactly and the recall of the graph's seeds is reported
    /// (`stats.seed_search`); 0 = never. Default 64.
    pub seed_audit: usize,
    /// How many of other users' most recent atoms on the same item enter the
    /// linking pool (bounds the collaborative candidate set). Default 10.
    pub collab_pool: usize,
    /// Most neighbours evolved per new note (bounds op volume). Default 3.
    pub evo_max: usize,
    /// Most links an evolved neighbour gains to other members of M_near
    /// (§2.5 L_j*; `evo_links`). Default 2; 0 = evolution leaves links alone.
    pub evo_links: usize,
    /// Per-hop decay of path scores. Default 0.6.
    pub decay: f32,
    /// Weight of E(X) in a note's embedding e. Default 1.0 (the context field
    /// weighs as much as the others; `context=false` drops it entirely).
    pub w_context: f32,
    /// Weights of the offline ranker (`w_path`, `w_co`, `w_sem`, `w_pop`, `w_walk`; see
    /// [`super::ranker`]).
    pub rank: RankWeights,
    /// Popularity discount α of the co-consumption walk mass: an item's mass
    /// is divided by (1 + n_i)^α, n_i its audience (user atoms about it), so
    /// that walks reward items that co-occur more than their popularity alone
    /// explains (the lift idea of item-to-item CF). Default 0.5.
    pub co_pop: f64,
    /// Expansion factor of each link relation (`rel_intent`, `rel_shared`,
    /// `rel_transition`, `rel_complementary`, `rel_cross`, `rel_similar`);
    /// defaults 1.0, 0.9, 0.8, 0.6, 0.4, 0.7 (see [`RelationFactors`]).
    pub factors: RelationFactors,
    /// Link cap as a fraction of k_link (`link_frac`): a new note links to at
    /// most max(1, ⌊k_link · link_frac⌋) neighbours. Default 0.5.
    pub link_frac: f64,
    /// Schedule of item-atom evolution (`item_evo_base`, b): an item atom
    /// evolves when its audience n is a power of b (n = 1, b, b², ...);
    /// b = 1 evolves it at every interaction, b = 0 never. Default 2.
    pub item_evo_base: usize,
    /// LLM budget (`budget`). Default `full`.
    pub budget: Budget,
    /// `budget=lean`: the user's most recent notes the model links and
    /// evolves (`lm_window`). Default 4.
    pub lm_window: usize,
    /// `budget=lean`: most neighbours above τ_evo per note in the batched
    /// link call (`lm_neighbours`). Default 3.
    pub lm_neighbours: usize,
    /// `budget=lean`: most older notes per batched evolve call
    /// (`lm_evolve`). Default 3.
    pub lm_evolve: usize,
    /// `budget=lean`: the synthesis goes to the model too (`lm_synth`);
    /// default `false` (its offline algorithm writes it).
    pub lm_synth: bool,
    /// `fit` and its keys: with `fit=auto`, fit the ranker's weights on
    /// held-out validation decisions ([`super::fit`]); `fit=none` (the
    /// default): the spec's weights.
    pub fit: super::fit::FitSettings,
}

impl AtomRecConfig {
    /// Whether seeds come from a search over every atom in memory (the
    /// paper's default: atomic notes, `seed_scope=memory` with `collab`),
    /// the one search that reads the seed pool.
    pub fn scans_memory_for_seeds(&self) -> bool {
        self.atomic && self.seed_scope == SeedScope::Memory && self.collab
    }

    /// Every key at its row's default.
    pub fn defaults() -> Result<Self, PolicyError> {
        Self::from_spec(&PolicySpec::named("atomrec"))
    }

    /// Parse from a spec whose keys the registry has checked against
    /// [`super::FAMILY`] (keys that are not config, such as `timing`, are
    /// ignored here); bad values are errors naming the key.
    pub fn from_spec(spec: &PolicySpec) -> Result<Self, PolicyError> {
        let rank = RankWeights {
            path: spec.value("w_path")?,
            co: spec.value("w_co")?,
            semantic: spec.value("w_sem")?,
            popularity: spec.value("w_pop")?,
            walk: spec.value("w_walk")?,
        };
        let cfg = Self {
            atomic: spec.value("atomic")?,
            keywords_tags: spec.value("kt")?,
            context: spec.value("context")?,
            collab: spec.value("collab")?,
            typed: spec.value("typed")?,
            evolve: spec.value("evolve")?,
            link_retrieval: spec.value("linkret")?,
            k_link: spec.value("k_link")?,
            tau: spec.value("tau")?,
            hops: spec.value("h")?,
            k_ret: spec.value("k_ret")?,
            item_memory: spec.value("item_mem")?,
            seed_scope: spec.value("seed_scope")?,
            seed_window: spec.value("seed_window")?,
            seed_index: spec.value("seed_index")?,
            seed_ef: spec.value("seed_ef")?,
            seed_audit: spec.value("seed_audit")?,
            collab_pool: spec.value("collab_pool")?,
            evo_max: spec.value("evo_max")?,
            evo_links: spec.value("evo_links")?,
            decay: spec.value("decay")?,
            w_context: spec.value("w_context")?,
            rank,
            co_pop: spec.value("co_pop")?,
            factors: RelationFactors {
                intent_progression: spec.value("rel_intent")?,
                shared_topic: spec.value("rel_shared")?,
                preference_transition: spec.value("rel_transition")?,
                complementary_preference: spec.value("rel_complementary")?,
                cross_domain_transfer: spec.value("rel_cross")?,
                similar: spec.value("rel_similar")?,
            },
            link_frac: spec.value("link_frac")?,
            item_evo_base: spec.value("item_evo_base")?,
            budget: spec.value("budget")?,
            lm_window: spec.value("lm_window")?,
            lm_neighbours: spec.value("lm_neighbours")?,
            lm_evolve: spec.value("lm_evolve")?,
            lm_synth: spec.value("lm_synth")?,
            fit: super::fit::FitSettings::from_spec(
                spec,
                super::fit::FEATURES,
                [rank.path, rank.co, rank.semantic, rank.popularity, rank.walk],
            )?,
        };
        if !(cfg.tau.is_finite() && (-1.0..=1.0).contains(&cfg.tau)) {
            return Err(PolicyError::Config(format!(
                "atomrec: `tau` must be in [-1, 1], got {}",
                cfg.tau
            )));
        }
        if !(cfg.decay.is_finite() && cfg.decay > 0.0 && cfg.decay <= 1.0) {
            return Err(PolicyError::Config(format!(
                "atomrec: `decay` must be in (0, 1], got {}",
                cfg.decay
            )));
        }
        if !(cfg.w_context.is_finite() && cfg.w_context >= 0.0) {
            return Err(PolicyError::Config(format!(
                "atomrec: `w_context` must be finite and non-negative, got {}",
                cfg.w_context
            )));
        }
        for (key, v) in [
            ("w_path", cfg.rank.path),
            ("w_co", cfg.rank.co),
            ("w_sem", cfg.rank.semantic),
            ("w_pop", cfg.rank.popularity),
            ("w_walk", cfg.rank.walk),
            ("co_pop", cfg.co_pop),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PolicyError::Config(format!(
                    "atomrec: `{key}` must be finite and non-negative, got {v}"
                )));
            }
        }
        let f = cfg.factors;
        for (key, v) in [
            ("rel_intent", f.intent_progression),
            ("rel_shared", f.shared_topic),
            ("rel_transition", f.preference_transition),
            ("rel_complementary", f.complementary_preference),
            ("rel_cross", f.cross_domain_transfer),
            ("rel_similar", f.similar),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PolicyError::Config(format!(
                    "atomrec: `{key}` must be finite and non-negative, got {v}"
                )));
            }
        }
        if !(cfg.link_frac.is_finite() && (0.0..=1.0).contains(&cfg.link_frac)) {
            return Err(PolicyError::Config(format!(
                "atomrec: `link_frac` must be in [0, 1], got {}",
                cfg.link_frac
            )));
        }
        if cfg.k_ret == 0 {
            return Err(PolicyError::Config(
                "atomrec: `k_ret` must be at least 1".into(),
            ));
        }
        Ok(cfg)
    }

    /// Most links of a new note: max(1, ⌊k_link · link_frac⌋) (k_link / 2
    /// with the default `link_frac = 0.5`).
    pub fn max_links(&self) -> usize {
        ((self.k_link as f64 * self.link_frac).floor() as usize).max(1)
    }

    /// Whether an item atom whose item now has `audience` user atoms evolves
    /// (`item_evo_base`: audience 1, b, b², ...; every time for b = 1, never
    /// for b = 0).
    pub fn item_evolves(&self, audience: usize) -> bool {
        match self.item_evo_base {
            0 => false,
            1 => audience >= 1,
            b => {
                let mut p = 1usize;
                while p < audience {
                    match p.checked_mul(b) {
                        Some(next) => p = next,
                        None => return false,
                    }
                }
                p == audience
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranker's and the graph's own defaults (kept for use outside a
    /// spec: `AtomGraph::new`, `AtomGraph::from_state`) equal the row's, and
    /// every config key is a family key.
    #[test]
    fn standalone_defaults_match_the_row() {
        let d = AtomRecConfig::defaults().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.rank, RankWeights::default());
        assert_eq!(d.factors, RelationFactors::default());
        let cfg = serde_json::to_value(&d).unwrap_or_default();
        // Nested structs (`rank`, `factors`) hold one key per field.
        let n_cfg_keys: usize = cfg.as_object().map_or(0, |o| {
            o.values()
                .map(|v| v.as_object().map_or(1, |inner| inner.len()))
                .sum()
        });
        // Family keys = config keys + `timing`.
        assert_eq!(super::super::FAMILY.keys.len(), n_cfg_keys + 1);
    }

    /// A spec's non-default keys reach the config.
    #[test]
    fn new_keys_parse() {
        let spec = PolicySpec::parse("atomrec[rel_cross=0.1,link_frac=0.25,item_evo_base=3]")
            .unwrap_or_else(|e| panic!("{e}"));
        let cfg = AtomRecConfig::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.factors.cross_domain_transfer, 0.1);
        assert_eq!(cfg.max_links(), 5);
        assert!(PolicySpec::parse("atomrec[link_frac=2]")
            .map_err(|e| e.to_string())
            .and_then(|s| AtomRecConfig::from_spec(&s).map_err(|e| e.to_string()))
            .is_err());
    }

    /// The defaults keep today's behaviour: a link cap of k_link / 2 and item
    /// atoms evolving at audiences that are powers of two.
    #[test]
    fn default_link_cap_and_schedule_match_the_old_constants() {
        let mut cfg = AtomRecConfig::defaults().unwrap_or_else(|e| panic!("{e}"));
        for k in 0..100 {
            cfg.k_link = k;
            assert_eq!(cfg.max_links(), (k / 2).max(1), "k_link = {k}");
        }
        for n in 0..5000usize {
            assert_eq!(cfg.item_evolves(n), n.is_power_of_two(), "audience {n}");
        }
        cfg.item_evo_base = 3;
        let hits: Vec<usize> = (0..100).filter(|&n| cfg.item_evolves(n)).collect();
        assert_eq!(hits, vec![1, 3, 9, 27, 81]);
        cfg.item_evo_base = 1;
        assert!(!cfg.item_evolves(0) && cfg.item_evolves(7));
        cfg.item_evo_base = 0;
        assert!(!cfg.item_evolves(1));
    }
}
