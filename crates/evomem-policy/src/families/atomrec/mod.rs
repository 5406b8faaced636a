//! AtomRec: evolving atomic collaborative memory (Hu et al., arXiv 2609.04882).
//!
//! - [`note`]: atomic notes m = {c, t, K, G, X, e, L} (§2.3) and their view;
//! - [`relation`]: the typed link relations (§2.4);
//! - [`roles`]: the `atomrec_link`, `atomrec_evolve` and `atomrec_synthesize`
//!   roles with prompts and offline algorithms (§2.4–§2.6);
//! - [`observe`]: writing a note, linking it, evolving its neighbours;
//! - [`graph`]: the working view of atoms and links, changed only by applying
//!   the ops the policy emits;
//! - [`index`]: the vector index behind neighbour search (exact below
//!   [`index::HNSW_MIN_POOL`] atoms per namespace, HNSW above);
//! - [`retrieve`]: query, top-k_ret, h-hop link expansion, evidence paths;
//! - [`ranker`]: the documented offline ranker that fills `DecisionContext::scores`;
//! - [`config`]: hyperparameters and ablation flags.
//!
//! The preference-drift analysis of §4.4 is `evomem_kit::drift`.
//!
//! ## Constants the paper leaves open
//! Four choices the paper does not fix are keys of the family row, with
//! defaults that reproduce the runs made before they were keys:
//!
//! - **Relation factors** (`rel_intent` 1, `rel_shared` 0.9, `rel_transition`
//!   0.8, `rel_complementary` 0.6, `rel_cross` 0.4, `rel_similar` 0.7): a
//!   link's weight in the h-hop expansion is its cosine times its relation's
//!   factor. The order follows how directly a hop carries the user's current
//!   preference: a step of the same intent carries it fully, the same item
//!   or topic nearly so, a change of taste still says where the user is
//!   heading, a partial overlap less, a hop across domains least. Untyped
//!   `similar` links (`typed=false`) sit in the middle, so the ablation
//!   changes which links exist, not how much an average hop weighs.
//! - **Link cap** (`link_frac` 0.5): a new note links to at most
//!   max(1, ⌊k_link · link_frac⌋) of its k_link neighbours. Half keeps the
//!   choice selective (the link role must leave out the weakest half) while
//!   the cap still grows with k_link, so the k_link sweep of Figure 3 varies
//!   both the candidates and the links.
//! - **Item-atom evolution schedule** (`item_evo_base` 2): an item atom
//!   evolves when its audience (user atoms about the item) reaches 1, 2, 4,
//!   8, ... Popular items would otherwise be rewritten at every interaction;
//!   a geometric schedule bounds the evolve calls per item to a logarithm of
//!   its audience while still refreshing it as each new order of magnitude of
//!   users arrives.
//! - **Links gained by evolution** (`evo_links` 2): the paper's evolution
//!   updates a neighbour's links L_j* and its prompt receives M_near, but says
//!   not how many links may change. An evolved neighbour may gain up to two
//!   links to other members of M_near (offline: the closest ones above τ_evo
//!   that it is not linked with yet); `evo_links=0` leaves links alone. Links
//!   are only ever added, never removed: an old link is still evidence of what
//!   the user did then.
//!
//! ## Paper behaviours that are keys
//! - **Seed retrieval over memory** (`seed_scope=memory`): M_0 is the top
//!   k_ret over everything the user may see (own atoms, item atoms, other
//!   users' atoms with `collab`), as the paper's TopK over M; `own` keeps the
//!   user's own atoms only. Over other users' atoms the search sees the
//!   `seed_window` most recent (default 131072, above ml-100k's 99k user
//!   atoms, so the whole memory there; `0` = always all): a search over all of
//!   memory per decision makes a run's cost grow with the square of the data
//!   (issue 16), and older collaborative evidence stays reachable through
//!   links and co-consumption walks.
//! - **Item memory for the ranker** (`item_mem=true`): each candidate's item
//!   atom (keywords, tags, context, audience and its three heaviest links) is
//!   handed to the decider as `DecisionContext::item_memory`, the M_i^t of the
//!   paper's r_{u,i}; the rank prompt prints it under the candidate.
//!
//! ## Memory layout and isolation
//! User atoms live in `user:<token>`, item atoms in `item:<token>`; both are
//! changed only through the returned ops (labels `note`, `link`, `evolve`,
//! `summary`). Evolution only rewrites the owner's own atoms and item atoms,
//! never another user's atom. The one collaborative exception: with
//! `collab=true` (default) a new atom may link to other users' atoms on the
//! *same item* (and later atoms of other users may link to it), and a user's
//! recall may follow those links and (`seed_scope=memory`) start from
//! other users' atoms. Atoms reached either way are handed to the decider
//! only as anonymised evidence: their text is the item evidence
//! ("another user: Rated 4/5: Heat …"), their `memory` id is withheld (a
//! one-way `anon:` hash stands in for it, also in evidence paths) and they
//! are left out of the usage trace. With `collab=false` no cross-user link is
//! created, seeds come from the user's own and item atoms only, and
//! expansion never enters another user's namespace.
//!
pub mod budget;
pub mod config;
pub mod fit;
pub mod graph;
pub mod index;
pub mod note;
pub mod observe;
pub mod ranker;
pub mod relation;
pub mod retrieve;
pub mod roles;

use crate::fit::{with_fit_keys, FIT_KEYS};
use crate::registry::{Family, Grid, Key, KeyType, PolicyDeps, PolicySpec};
use config::AtomRecConfig;
use evomem_core::{
    DecisionQuery, Embedder, Interaction, MemoryId, Policy, PolicyCtx, PolicyError,
    Recall, UserId,
};
use evomem_kit::RoleCaller;
use evomem_llm::LlmHub;
use graph::AtomGraph;
use note::FieldEncoder;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

pub use relation::Relation;

/// Weight of E(c) in e.
pub const W_CONTENT: f32 = 1.0;
/// Weight of E(K) in e.
pub const W_KEYWORDS: f32 = 0.5;
/// Weight of E(G) in e.
pub const W_TAGS: f32 = 0.5;
/// Default weight of E(X) in e (`w_context`): the context carries the session,
/// which is what places a note next to its predecessors among its k_link
/// neighbours.
pub const W_CONTEXT: f32 = 1.0;

/// Build an `atomrec` policy from its spec (keys already checked against
/// [`FAMILY`] by the registry). `timing` is a run option, not part of the
/// config.
pub fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    let timing = spec.value("timing")?;
    let cfg = AtomRecConfig::from_spec(spec)?;
    let mut p = AtomRec::new(cfg, deps.embedder.clone(), deps.llm.clone());
    p.fit_seed = deps.seed;
    p.name = spec.to_string();
    p.timing = timing;
    Ok(Box::new(p))
}

/// The `atomrec` family row.
pub const FAMILY: Family = Family {
    name: "atomrec",
    kind: crate::registry::FamilyKind::Memory,
    summary: "AtomRec: atomic notes, collaborative links, field-level evolution, multi-hop evidence paths",
    keys: &KEYS,
    build,
    grids: &[
        Grid {
            name: "ablations",
            doc: "component ablations (Table 2)",
            specs: &[
                "atomrec",
                "atomrec[atomic=false]",
                "atomrec[kt=false]",
                "atomrec[context=false]",
                "atomrec[collab=false]",
                "atomrec[typed=false]",
                "atomrec[evolve=false]",
                "atomrec[linkret=false]",
            ],
        },
        Grid {
            name: "k_link",
            doc: "link neighbours k_link (Figure 3)",
            specs: &[
                "atomrec[k_link=5]",
                "atomrec[k_link=10]",
                "atomrec[k_link=20]",
                "atomrec[k_link=30]",
                "atomrec[k_link=40]",
            ],
        },
        Grid {
            name: "tau",
            doc: "evolution threshold τ_evo (Figure 3)",
            specs: &[
                "atomrec[tau=0.5]",
                "atomrec[tau=0.6]",
                "atomrec[tau=0.7]",
                "atomrec[tau=0.8]",
                "atomrec[tau=0.9]",
            ],
        },
        Grid {
            name: "h",
            doc: "retrieval hops h (Figure 3)",
            specs: &["atomrec[h=0]", "atomrec[h=1]", "atomrec[h=2]", "atomrec[h=3]"],
        },
        Grid {
            name: "k_ret",
            doc: "seed atoms k_ret (Figure 3)",
            specs: &[
                "atomrec[k_ret=5]",
                "atomrec[k_ret=10]",
                "atomrec[k_ret=15]",
                "atomrec[k_ret=20]",
                "atomrec[k_ret=30]",
            ],
        },
        Grid {
            name: "sweeps",
            doc: "all four sweeps of Figure 3",
            specs: &[
                "atomrec[k_link=5]",
                "atomrec[k_link=10]",
                "atomrec[k_link=20]",
                "atomrec[k_link=30]",
                "atomrec[k_link=40]",
                "atomrec[tau=0.5]",
                "atomrec[tau=0.6]",
                "atomrec[tau=0.7]",
                "atomrec[tau=0.8]",
                "atomrec[tau=0.9]",
                "atomrec[h=0]",
                "atomrec[h=1]",
                "atomrec[h=2]",
                "atomrec[h=3]",
                "atomrec[k_ret=5]",
                "atomrec[k_ret=10]",
                "atomrec[k_ret=15]",
                "atomrec[k_ret=20]",
                "atomrec[k_ret=30]",
            ],
        },
    ],
    caps: evomem_core::family::ATOMREC,
};

/// The row's keys: its own, with the fit keys ([`crate::fit::FIT_KEYS`])
/// between those before and those after.
const KEYS: [Key; KEYS_BEFORE_FIT.len() + FIT_KEYS.len() + KEYS_AFTER_FIT.len()] =
    with_fit_keys(KEYS_BEFORE_FIT, KEYS_AFTER_FIT, "none");

const KEYS_BEFORE_FIT: &[Key] = &[
    Key {
        name: "atomic",
        ty: KeyType::Bool,
        default: "true",
        doc: "atomic notes; false = one coarse summary per user (Table 2)",
    },
    Key {
        name: "kt",
        ty: KeyType::Bool,
        default: "true",
        doc: "keywords K and tags G in notes and embeddings",
    },
    Key {
        name: "context",
        ty: KeyType::Bool,
        default: "true",
        doc: "context field X",
    },
    Key {
        name: "collab",
        ty: KeyType::Bool,
        default: "true",
        doc: "collaborative links to other users' atoms on the same item",
    },
    Key {
        name: "typed",
        ty: KeyType::Bool,
        default: "true",
        doc: "typed relations from the link role; false = embedding-only links",
    },
    Key {
        name: "evolve",
        ty: KeyType::Bool,
        default: "true",
        doc: "field-level evolution of neighbours; false = append-only",
    },
    Key {
        name: "linkret",
        ty: KeyType::Bool,
        default: "true",
        doc: "link-aware retrieval; false = top-k_ret only",
    },
    Key {
        name: "k_link",
        ty: KeyType::Count,
        default: "20",
        doc: "neighbours considered for linking (paper default)",
    },
    Key {
        name: "tau",
        ty: KeyType::Number,
        default: "0.7",
        doc: "evolution threshold τ_evo on cosine (paper default)",
    },
    Key {
        name: "h",
        ty: KeyType::Count,
        default: "2",
        doc: "link hops expanded at retrieval (paper default)",
    },
    Key {
        name: "k_ret",
        ty: KeyType::Count,
        default: "15",
        doc: "seed atoms retrieved by cosine (paper default)",
    },
    Key {
        name: "item_mem",
        ty: KeyType::Bool,
        default: "true",
        doc: "the decider sees each candidate's item memory M_i (item atom fields and links)",
    },
    Key {
        name: "seed_scope",
        ty: KeyType::Choice(&["memory", "own"]),
        default: "memory",
        doc: "seed retrieval M_0 over the visible memory (paper: TopK over M) or own atoms only",
    },
    Key {
        name: "seed_window",
        ty: KeyType::Count,
        default: "131072",
        doc: "most recent user atoms a seed search over memory sees besides own and item atoms (0 = all)",
    },
    Key {
        name: "seed_index",
        ty: KeyType::Choice(&["auto", "exact", "hnsw"]),
        default: "auto",
        doc: "seed search over memory: exact scan, HNSW tier, or auto (HNSW from 4096 users)",
    },
    Key {
        name: "seed_ef",
        ty: KeyType::Count,
        default: "1024",
        doc: "candidate list size ef of a seed search through the HNSW tier",
    },
    Key {
        name: "seed_audit",
        ty: KeyType::Count,
        default: "64",
        doc: "with the HNSW tier, every n-th decision's seeds also searched exactly; recall in stats (0 = never)",
    },
];

const KEYS_AFTER_FIT: &[Key] = &[
    Key {
        name: "collab_pool",
        ty: KeyType::Count,
        default: "10",
        doc: "other users' most recent atoms on the item in the linking pool",
    },
    Key {
        name: "evo_max",
        ty: KeyType::Count,
        default: "3",
        doc: "most neighbours evolved per new note",
    },
    Key {
        name: "evo_links",
        ty: KeyType::Count,
        default: "2",
        doc: "links an evolved neighbour gains to other M_near notes (L_j*); 0 = links not evolved",
    },
    Key {
        name: "decay",
        ty: KeyType::Number,
        default: "0.6",
        doc: "per-hop decay of path scores",
    },
    Key {
        name: "w_context",
        ty: KeyType::Number,
        default: "1",
        doc: "weight of E(X) in a note's embedding",
    },
    Key {
        name: "w_path",
        ty: KeyType::Number,
        default: "0.25",
        doc: "ranker: evidence-path weight (chosen on validation)",
    },
    Key {
        name: "w_co",
        ty: KeyType::Number,
        default: "1",
        doc: "ranker: co-consumption walk weight (chosen on validation)",
    },
    Key {
        name: "w_sem",
        ty: KeyType::Number,
        default: "0.3",
        doc: "ranker: semantic similarity weight (chosen on validation)",
    },
    Key {
        name: "w_pop",
        ty: KeyType::Number,
        default: "0.15",
        doc: "ranker: popularity weight (chosen on validation)",
    },
    Key {
        name: "w_walk",
        ty: KeyType::Number,
        default: "8",
        doc: "ranker: weight of the two-step co-consumption walk from the user's latest atoms (chosen on validation of ml-100k, beauty, sports and toys; 0 = the ranker before issue 55)",
    },
    Key {
        name: "co_pop",
        ty: KeyType::Number,
        default: "0.5",
        doc: "popularity discount exponent of the co-consumption walk mass",
    },
    Key {
        name: "rel_intent",
        ty: KeyType::Number,
        default: "1",
        doc: "expansion factor of `intent progression` links",
    },
    Key {
        name: "rel_shared",
        ty: KeyType::Number,
        default: "0.9",
        doc: "expansion factor of `shared topic` links",
    },
    Key {
        name: "rel_transition",
        ty: KeyType::Number,
        default: "0.8",
        doc: "expansion factor of `preference transition` links",
    },
    Key {
        name: "rel_complementary",
        ty: KeyType::Number,
        default: "0.6",
        doc: "expansion factor of `complementary preference` links",
    },
    Key {
        name: "rel_cross",
        ty: KeyType::Number,
        default: "0.4",
        doc: "expansion factor of `cross-domain transfer` links",
    },
    Key {
        name: "rel_similar",
        ty: KeyType::Number,
        default: "0.7",
        doc: "expansion factor of `similar` (embedding-only, typed=false) links",
    },
    Key {
        name: "link_frac",
        ty: KeyType::Number,
        default: "0.5",
        doc: "link cap as a fraction of k_link: at most max(1, ⌊k_link·link_frac⌋) links per note",
    },
    Key {
        name: "item_evo_base",
        ty: KeyType::Count,
        default: "2",
        doc: "item atoms evolve at audience 1, b, b², ... (1 = always, 0 = never)",
    },
    Key {
        name: "budget",
        ty: KeyType::Choice(&["full", "lean"]),
        default: "full",
        doc: "LLM budget: full (a link call per note, an evolve call per neighbour), or lean = the model links and evolves only the user's last lm_window notes, only towards neighbours above tau, in one batched link call and one batched evolve call per flush (older notes and notes without such neighbours by the offline algorithms, counted as scheduled offline); the synthesis offline (lm_synth), 3 seeds and 3 paths and no item memory for the ranker; 3 model calls per user (at most 1,935 tokens per user)",
    },
    Key {
        name: "lm_window",
        ty: KeyType::Count,
        default: "4",
        doc: "budget=lean: how many of a user's most recent notes the model links and evolves",
    },
    Key {
        name: "lm_neighbours",
        ty: KeyType::Count,
        default: "3",
        doc: "budget=lean: most neighbours above tau shown per note in the batched link call",
    },
    Key {
        name: "lm_evolve",
        ty: KeyType::Count,
        default: "3",
        doc: "budget=lean: most older notes in one batched evolve call (the most similar first)",
    },
    Key {
        name: "lm_synth",
        ty: KeyType::Bool,
        default: "false",
        doc: "budget=lean: the evidence synthesis goes to the model too (default: its offline algorithm, counted as scheduled offline)",
    },
    Key {
        name: "timing",
        ty: KeyType::Bool,
        default: "false",
        doc: "record per-user wall time of observe (for growth plots; not reproducible)",
    },
];

/// Per-user bookkeeping for `stats()`.
#[derive(Debug, Clone, Default)]
struct UserStat {
    interactions: u32,
    links: u32,
    evolutions: u32,
    nanos: u128,
}

/// The AtomRec policy.
pub struct AtomRec {
    name: String,
    cfg: AtomRecConfig,
    embedder: Arc<dyn Embedder>,
    caller: RoleCaller,
    enc: FieldEncoder,
    graph: AtomGraph,
    /// Coarse-summary ablation: per user, the summary id, the running
    /// item-embedding sum (policy state: the op carries only its normalised
    /// form) and the interaction count.
    summaries: HashMap<UserId, (MemoryId, Vec<f32>, u32)>,
    user_stats: BTreeMap<UserId, UserStat>,
    n_evolutions: usize,
    n_decisions: usize,
    timing: bool,
    /// Histogram of s(n, j) over every new note's top-k_link neighbours
    /// ([`COS_BINS`] bins on [-1, 1]): the population the evolution trigger
    /// s > τ_evo is applied to, reported as quantiles (τ calibration).
    near_cos: Vec<u64>,
    /// `budget=lean`: per user, the notes waiting in the model's window.
    pending: BTreeMap<UserId, VecDeque<budget::Pending>>,
    /// `budget=lean`: what the budget did.
    budget_stats: budget::BudgetStats,
    /// Seed searches scored ahead by [`Policy::prepare_recalls`], per
    /// decision id ([`retrieve::prepare`]); emptied whenever memory changes.
    seed_prefetch: HashMap<u64, retrieve::Prefetched>,
    /// Every atom's links in expansion order, made by
    /// [`Policy::prepare_recalls`] ([`retrieve::walk_orders`]); dropped
    /// whenever memory changes.
    walk_orders: Option<Vec<Vec<graph::Edge>>>,
    /// What the seed audit found (`seed_audit`).
    seed_audit: retrieve::SeedAudit,
    /// `fit=auto`: the run seed (negatives' draws).
    fit_seed: u64,
    /// `fit=auto`: the spec's ranker weights (each fit starts from them).
    spec_rank: ranker::RankWeights,
    /// `fit=auto`: user atoms at the last fit (0: none yet).
    fitted_at: usize,
    /// `fit=auto`: the last fit's report.
    fit_report: Option<fit::FitReport>,
}

/// Bins of the neighbour-cosine histogram.
pub const COS_BINS: usize = 400;

/// Stable anonymous label of another user's atom: FNV-1a of its id. Defined
/// in `evomem-core` so that readers of decisions (the inspector) resolve
/// labels without linking the policies; re-exported here for its callers.
pub use evomem_core::anon_label;

impl AtomRec {
    /// A policy with explicit config and services.
    pub fn new(cfg: AtomRecConfig, embedder: Arc<dyn Embedder>, llm: Arc<LlmHub>) -> Self {
        let dim = embedder.dim();
        // Only a seed search over memory reads the seed pool; other seed
        // scopes would copy and slide every user atom into it for nothing.
        let window = match cfg.scans_memory_for_seeds() {
            true => cfg.seed_window,
            false => 0,
        };
        let graph = AtomGraph::new(embedder.model_id(), dim)
            .with_factors(cfg.factors)
            .with_seed_window(window);
        Self {
            name: "atomrec".into(),
            spec_rank: cfg.rank,
            cfg,
            embedder,
            caller: RoleCaller::new(llm),
            enc: FieldEncoder::new(dim),
            graph,
            summaries: HashMap::new(),
            user_stats: BTreeMap::new(),
            n_evolutions: 0,
            n_decisions: 0,
            timing: false,
            near_cos: vec![0; COS_BINS],
            pending: BTreeMap::new(),
            budget_stats: budget::BudgetStats::default(),
            seed_prefetch: HashMap::new(),
            walk_orders: None,
            seed_audit: retrieve::SeedAudit::default(),
            fit_seed: 0,
            fitted_at: 0,
            fit_report: None,
        }
    }

    /// `fit=auto` ([`fit`]): fit the ranker's weights before the first
    /// decision, and again once the user atoms have doubled since the last
    /// fit (the evolving protocol's memory grows between decisions).
    /// The coarse ablation (`atomic=false`) keeps its weights.
    pub(crate) fn fit_if_due(&mut self, ctx: &PolicyCtx<'_>) -> Result<(), PolicyError> {
        let settings = self.cfg.fit.clone();
        if !settings.auto {
            return Ok(());
        }
        let n = self.graph.user_atom_count();
        let due = self.fit_report.is_none() || n >= 2 * self.fitted_at.max(1);
        if !self.cfg.atomic || !due || n == 0 {
            return Ok(());
        }
        self.fitted_at = n;
        self.cfg.rank = self.spec_rank;
        let (w, report) = fit::run(self, ctx, &settings, self.fit_seed)?;
        self.cfg.rank = w;
        self.fit_report = Some(report);
        Ok(())
    }

    /// Count links and evolutions made for `user` outside `observe`'s
    /// own return (a flush of the lean budget's window).
    fn add_user_stat(&mut self, user: UserId, links: u32, evolutions: u32) {
        self.n_evolutions += evolutions as usize;
        let st = self.user_stats.entry(user).or_default();
        st.links += links;
        st.evolutions += evolutions;
    }

    /// Count the neighbour cosines of one new note into the histogram.
    pub(crate) fn record_near(&mut self, near: &[(graph::AtomIx, f32)]) {
        for &(_, s) in near {
            let b = (((s.clamp(-1.0, 1.0) + 1.0) / 2.0) * COS_BINS as f32) as usize;
            if let Some(c) = self.near_cos.get_mut(b.min(COS_BINS - 1)) {
                *c += 1;
            }
        }
    }

    /// Quantiles of the neighbour cosines and the share above τ_evo.
    fn near_cos_summary(&self) -> serde_json::Value {
        let total: u64 = self.near_cos.iter().sum();
        if total == 0 {
            return serde_json::Value::Null;
        }
        let upper = |b: usize| -1.0 + 2.0 * (b + 1) as f64 / COS_BINS as f64;
        let quantile = |q: f64| {
            let want = (q * total as f64).ceil() as u64;
            let mut acc = 0u64;
            for (b, &c) in self.near_cos.iter().enumerate() {
                acc += c;
                if acc >= want.max(1) {
                    return upper(b);
                }
            }
            1.0
        };
        let above: u64 = self
            .near_cos
            .iter()
            .enumerate()
            .filter(|(b, _)| -1.0 + 2.0 * *b as f64 / COS_BINS as f64 >= f64::from(self.cfg.tau))
            .map(|(_, &c)| c)
            .sum();
        serde_json::json!({
            "pairs": total,
            "p10": quantile(0.1), "p25": quantile(0.25), "p50": quantile(0.5),
            "p75": quantile(0.75), "p90": quantile(0.9), "p95": quantile(0.95),
            "share_above_tau": above as f64 / total as f64,
        })
    }

    /// The config in use.
    pub fn config(&self) -> &AtomRecConfig {
        &self.cfg
    }

    /// The working view of the atoms (read-only; for tests and analysis).
    pub fn graph(&self) -> &AtomGraph {
        &self.graph
    }

    /// Role calls made so far, per role.
    pub fn role_calls(&self) -> &BTreeMap<String, u64> {
        self.caller.calls()
    }

    fn user_token(ctx: &PolicyCtx<'_>, user: UserId) -> String {
        ctx.user_token(user)
    }
}

impl AtomRec {
    /// Drop what `prepare_recalls` made: memory is about to change.
    fn forget_prepared(&mut self) {
        self.seed_prefetch.clear();
        self.walk_orders = None;
    }
}

impl Policy for AtomRec {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        ev: &Interaction,
    ) -> Result<Vec<evomem_core::PlannedOp>, PolicyError> {
        let started = Instant::now();
        self.forget_prepared();
        let (ops, links, evolutions) = self.observe_event(ctx, ev)?;
        self.n_evolutions += evolutions as usize;
        let st = self.user_stats.entry(ev.user).or_default();
        st.interactions += 1;
        st.links += links;
        st.evolutions += evolutions;
        st.nanos += started.elapsed().as_nanos();
        Ok(ops)
    }

    /// `budget=lean`: every trigger hands the users' windows to the model
    /// (see [`budget`]); the full schedule has no scheduled work.
    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        _trigger: evomem_core::MaintainTrigger,
    ) -> Result<Vec<evomem_core::PlannedOp>, PolicyError> {
        self.forget_prepared();
        self.flush_windows(ctx)
    }

    /// Score every decision's seed query against the whole memory in one
    /// pass ([`retrieve::prepare`]); `recall` uses the result when its own
    /// query is the same, and scans otherwise.
    fn prepare_recalls(
        &mut self,
        ctx: &PolicyCtx<'_>,
        queries: &[DecisionQuery],
    ) -> Result<(), PolicyError> {
        retrieve::prepare(self, ctx, queries)
    }

    fn feedback(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _feedback: &evomem_core::Feedback,
    ) -> Result<Vec<evomem_core::PlannedOp>, PolicyError> {
        self.forget_prepared();
        Ok(Vec::new())
    }

    fn recall(&mut self, ctx: &PolicyCtx<'_>, q: &DecisionQuery) -> Result<Recall, PolicyError> {
        self.n_decisions += 1;
        let started = Instant::now();
        let r = retrieve::recall(self, ctx, q)?;
        if let Some(st) = self.user_stats.get_mut(&q.user) {
            st.nanos += started.elapsed().as_nanos();
        }
        Ok(r)
    }

    fn stats(&self) -> serde_json::Value {
        let user_atoms: usize = self
            .graph
            .atoms()
            .iter()
            .filter(|a| a.owner.is_some())
            .count();
        let item_atoms = self.graph.atoms().len() - user_atoms;
        // Growth with history length, bucketed.
        let buckets: [(u32, u32); 6] = [
            (1, 20),
            (21, 50),
            (51, 100),
            (101, 200),
            (201, 400),
            (401, u32::MAX),
        ];
        let mut growth = Vec::new();
        for (lo, hi) in buckets {
            let sel: Vec<&UserStat> = self
                .user_stats
                .values()
                .filter(|s| s.interactions >= lo && s.interactions <= hi)
                .collect();
            if sel.is_empty() {
                continue;
            }
            let n = sel.len() as f64;
            let mut row = serde_json::json!({
                "history": if hi == u32::MAX { format!("{lo}+") } else { format!("{lo}-{hi}") },
                "users": sel.len(),
                "mean_atoms": sel.iter().map(|s| f64::from(s.interactions)).sum::<f64>() / n,
                "mean_links": sel.iter().map(|s| f64::from(s.links)).sum::<f64>() / n,
                "mean_evolutions": sel.iter().map(|s| f64::from(s.evolutions)).sum::<f64>() / n,
            });
            if self.timing {
                row["mean_ms"] =
                    serde_json::json!(sel.iter().map(|s| s.nanos as f64 / 1e6).sum::<f64>() / n);
            }
            growth.push(row);
        }
        let mut v = serde_json::json!({
            "config": self.cfg,
            "atoms": self.graph.atoms().len() + self.summaries.len(),
            "user_atoms": user_atoms,
            "item_atoms": item_atoms,
            "summaries": self.summaries.len(),
            "links": self.graph.n_links(),
            "evolutions": self.n_evolutions,
            "decisions": self.n_decisions,
            "users": self.user_stats.len(),
            "growth_by_history": growth,
            "neighbour_cosine": self.near_cos_summary(),
            "seed_search": {
                "index": if self.graph.seed_graph_active() { "hnsw" } else { "exact" },
                "pool_atoms": self.graph.seed_pool_len(),
                "searches": self.graph.seed_searches(),
                "audited_decisions": self.seed_audit.decisions,
                "exact_seeds": self.seed_audit.total,
                "recall": (self.seed_audit.total > 0)
                    .then(|| self.seed_audit.found as f64 / self.seed_audit.total as f64),
                "recall_by_score": (self.seed_audit.total > 0)
                    .then(|| self.seed_audit.found_by_score as f64 / self.seed_audit.total as f64),
            },
        });
        v["fit"] = match (self.cfg.fit.auto, &self.fit_report) {
            (false, _) => serde_json::json!({ "mode": "none" }),
            (true, None) => serde_json::json!({ "mode": "auto (not run)" }),
            (true, Some(r)) => serde_json::to_value(r).unwrap_or_default(),
        };
        if self.cfg.budget == config::Budget::Lean {
            v["budget"] = self.budget_json();
        }
        if self.timing {
            let total: u128 = self.user_stats.values().map(|s| s.nanos).sum();
            v["time_ms_total"] = serde_json::json!(total as f64 / 1e6);
            v["time_ms_per_user"] =
                serde_json::json!(total as f64 / 1e6 / self.user_stats.len().max(1) as f64);
        }
        v
    }
}
