//! The `mars` policy: observe → event FIFO + scheduler → lifecycle rounds;
//! recall → profile, events (and chunks) with the offline ranker's scores.
//!
//! Derived state kept by the policy (rebuildable from the catalog and what it
//! has seen): the domain's facet index and categories, embedding caches and
//! statistics. All memory itself lives in `MemoryState` records (see
//! [`super::tiers`]) and changes only through the returned ops.
//!
//! With `mode=single-pass` (see [`super::single_pass`]) the policy also keeps
//! what the paper's retrospective protocol hands its extraction directly: the
//! observed signals that left the event FIFO before any extraction read them
//! (`backlog`), and ops planned while serving a decision, which `recall`
//! cannot return and the next `observe`, `feedback` or `maintain` returns
//! first (`deferred`). Both stay empty in the default incremental mode.

use super::categories::{sample_items, CategoryDef, FacetIndex};
use super::config::{MarsConfig, Mode, Scheduler};
use super::embeddings::{ItemEmbeddings, TextEmbeddings};
use super::knowledge::Knowledge;
use super::lifecycle::Lifecycle;
use super::ranker::{prior_terms, Ranker};
use super::roles::{CategoriesInput, CategoriesRole, ChunkIn, FacetIn, SampleItem, SignalIn};
use super::scheduler::Actions;
use super::tiers::{event_id, meta_id, profile_id, Chunk, EventView, UserView};
use evomem_core::{
    Catalog, DecisionContext, DecisionQuery, Embedder, Feedback, Interaction, ItemId, LogicalTime,
    MaintainTrigger, MemoryOp, MemoryRecord, Namespace, PlannedOp, Policy, PolicyCtx, PolicyError,
    Recall, RecordKind, Role, UsageTrace, UserId,
};
use evomem_kit::pairwise::FitReport;
use evomem_kit::RoleCaller;
use evomem_llm::LlmHub;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The domain model derived once from the catalog.
#[derive(Debug, Clone)]
pub struct Domain {
    /// Facets of every item.
    pub facets: FacetIndex,
    /// The preference categories.
    pub categories: Vec<CategoryDef>,
    /// Axis index → category name, for axis-backed categories.
    pub axis_category: BTreeMap<usize, String>,
}

/// Counters reported by `stats()`.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Ops planned by label.
    pub ops: BTreeMap<String, u64>,
    /// Lifecycle rounds.
    pub rounds: u64,
    /// Rounds forced by FIFO eviction or `maintain`.
    pub forced_rounds: u64,
    /// Planner answers that ran actions.
    pub plan_run: u64,
    /// Planner answers that waited.
    pub plan_wait: u64,
    /// Decisions served.
    pub recalls: u64,
    /// Chunks not extracted because the category was full of stronger ones.
    pub capacity_skips: u64,
    /// Planner answers that named targets for at least one action.
    pub plan_targeted: u64,
    /// Chunks a planner-named target made boost, demote, merge or forget
    /// act on, by action.
    pub plan_targets: BTreeMap<String, u64>,
    /// Single-pass rounds (one extraction and one synthesis each).
    pub single_pass_rounds: u64,
    /// Signals the single-pass extractions read.
    pub single_pass_signals: u64,
    /// Single-pass rounds run while serving a decision (evolving protocol).
    pub single_pass_at_decision: u64,
}

/// The MARS policy.
pub struct Mars {
    pub(super) name: String,
    pub(super) cfg: MarsConfig,
    pub(super) embedder: Arc<dyn Embedder>,
    pub(super) caller: RoleCaller,
    pub(super) seed: u64,
    pub(super) domain: Option<Arc<Domain>>,
    pub(super) item_emb: ItemEmbeddings,
    pub(super) text_emb: TextEmbeddings,
    pub(super) stats: Stats,
    pub(super) knowledge: Knowledge,
    /// The spec's ranker weights `[content, collab, prior, walk]` (each fit
    /// starts from them; `cfg` holds the weights in force).
    spec_weights: [f64; 4],
    /// Single pass: per user, signals evicted from the FIFO while pending,
    /// oldest first.
    pub(super) backlog: BTreeMap<String, Vec<EventView>>,
    /// Single pass: per user, ops planned in `recall` and not yet returned.
    pub(super) deferred: BTreeMap<String, Vec<PlannedOp>>,
    /// `fit=auto`: observed interactions at the last fit (0: none yet).
    fitted_at: u64,
    /// `fit=auto`: the last fit's report.
    fit_report: Option<FitReport>,
}

impl Mars {
    /// A MARS policy with `cfg`; `name` is the spec string.
    pub fn new(
        name: impl Into<String>,
        cfg: MarsConfig,
        embedder: Arc<dyn Embedder>,
        llm: Arc<LlmHub>,
        seed: u64,
    ) -> Self {
        let dim = embedder.dim();
        let spec_weights = [cfg.content, cfg.collab, cfg.prior, cfg.walk];
        Self {
            spec_weights,
            name: name.into(),
            cfg,
            embedder,
            caller: RoleCaller::new(llm),
            seed,
            domain: None,
            item_emb: ItemEmbeddings::new(dim),
            text_emb: TextEmbeddings::new(dim),
            stats: Stats::default(),
            knowledge: Knowledge::new(),
            backlog: BTreeMap::new(),
            deferred: BTreeMap::new(),
            fitted_at: 0,
            fit_report: None,
        }
    }

    /// `fit=auto` ([`super::fit`]): fit the ranker's weights before the
    /// first decision, and again once the observed interactions have
    /// doubled since the last fit (the evolving protocol's memory grows
    /// between decisions). Each fit starts from the spec's weights.
    fn fit_if_due(&mut self, ctx: &PolicyCtx<'_>) -> Result<(), PolicyError> {
        let settings = self.cfg.fit.clone();
        if !settings.auto {
            return Ok(());
        }
        let n = self.knowledge.events();
        let due = self.fit_report.is_none() || n >= 2 * self.fitted_at.max(1);
        if !due || n == 0 {
            return Ok(());
        }
        self.fitted_at = n;
        let given = self.spec_weights;
        self.set_weights(given);
        let (w, report) = super::fit::run(self, ctx, &settings, given, self.seed)?;
        self.set_weights(w);
        self.fit_report = Some(report);
        Ok(())
    }

    /// Put the ranker weights `[content, collab, prior, walk]` in force.
    fn set_weights(&mut self, w: [f64; 4]) {
        [self.cfg.content, self.cfg.collab, self.cfg.prior, self.cfg.walk] = w;
    }

    /// The configuration.
    pub fn config(&self) -> &MarsConfig {
        &self.cfg
    }

    /// The derived categories (after the first call that saw the catalog).
    pub fn categories(&self) -> Option<&[CategoryDef]> {
        self.domain.as_ref().map(|d| d.categories.as_slice())
    }

    /// Run a role through the hub ([`RoleCaller`]). The hub repairs and
    /// falls back on transient errors and malformed answers; any error that
    /// reaches here (a permanent error, a replay-cache miss, a backend that
    /// keeps failing) fails the run as [`PolicyError::Role`], never turning a
    /// model or replay run into an offline one.
    pub(super) fn call<R: Role>(
        &mut self,
        role: &R,
        input: &R::Input,
        user: &str,
    ) -> Result<R::Output, PolicyError> {
        self.caller.call(role, input, Some(user))
    }

    pub(super) fn domain(&mut self, catalog: &Catalog) -> Result<Arc<Domain>, PolicyError> {
        if let Some(d) = &self.domain {
            return Ok(d.clone());
        }
        let facets = FacetIndex::build(catalog);
        let derived =
            facets.derive_categories(self.cfg.n_categories, self.cfg.category_sample, self.seed);
        let samples: Vec<SampleItem> =
            sample_items(catalog.len(), self.cfg.category_sample.min(10), self.seed)
                .into_iter()
                .filter_map(|i| catalog.items.get(i))
                .map(|it| SampleItem {
                    title: it.title.clone(),
                    categories: it.categories.clone(),
                    attributes: it.attributes.clone(),
                    text: it
                        .text
                        .values()
                        .next()
                        .map(|t| t.chars().take(200).collect())
                        .unwrap_or_default(),
                })
                .collect();
        let input = CategoriesInput {
            domain: format!("a catalog of {} items", catalog.len()),
            n: self.cfg.n_categories,
            samples,
            derived,
        };
        let out = if self.cfg.lm_categories {
            self.call(&CategoriesRole, &input, "_domain")?
        } else {
            self.caller.offline(&CategoriesRole, &input)?
        };
        let mut axis_category = BTreeMap::new();
        for c in &out.categories {
            if let Some(a) = c.axis.as_ref().and_then(|a| facets.axis_index(a)) {
                axis_category.insert(a, c.name.clone());
            }
        }
        let d = Arc::new(Domain {
            facets,
            categories: out.categories,
            axis_category,
        });
        self.domain = Some(d.clone());
        Ok(d)
    }

    /// Embed the items not yet cached, in one batch.
    pub(super) fn warm_items(
        &mut self,
        catalog: &Catalog,
        items: &[u32],
    ) -> Result<(), PolicyError> {
        Ok(self.item_emb.warm(self.embedder.as_ref(), catalog, items)?)
    }

    /// The embedding of an item.
    pub(super) fn item_embedding(
        &mut self,
        catalog: &Catalog,
        item: u32,
    ) -> Result<Vec<f32>, PolicyError> {
        Ok(self.item_emb.embed(self.embedder.as_ref(), catalog, item)?)
    }

    /// The embedding of a free text (chunk or profile).
    pub(super) fn text_embedding(&mut self, text: &str) -> Result<Vec<f32>, PolicyError> {
        Ok(self.text_emb.embed(self.embedder.as_ref(), text)?)
    }

    /// A signal as the roles see it.
    pub(super) fn signal_in(domain: &Domain, catalog: &Catalog, e: &EventView) -> SignalIn {
        let item = catalog
            .get(ItemId(e.item))
            .map(|i| i.summary())
            .unwrap_or_else(|| format!("item #{}", e.item));
        let facets = domain
            .facets
            .facets(ItemId(e.item))
            .iter()
            .filter_map(|(a, v)| {
                domain.axis_category.get(a).map(|c| FacetIn {
                    category: c.clone(),
                    axis: *a,
                    value: v.clone(),
                    idf: domain.facets.idf(*a, v),
                })
            })
            .collect();
        SignalIn {
            time: e.time.0,
            item,
            polarity: e.polarity,
            facets,
        }
    }

    /// A chunk as the roles see it.
    pub(super) fn chunk_in(c: &Chunk) -> ChunkIn {
        ChunkIn {
            id: c.id.0.clone(),
            category: c.category.clone(),
            text: c.text.clone(),
            axis: c.key.as_ref().map(|k| k.0),
            value: c.key.as_ref().map(|k| k.1.clone()),
            strength: c.strength,
            evidence: c.evidence,
        }
    }

    fn user_token(ctx: &PolicyCtx<'_>, user: UserId) -> String {
        ctx.user_token(user)
    }

    /// Load `user`'s view, taking over the ops deferred for that user.
    pub(super) fn load_view<'c>(
        &mut self,
        ctx: &PolicyCtx<'c>,
        user: &str,
    ) -> Result<UserView<'c>, PolicyError> {
        let mut view = UserView::load(ctx.memory, user)?;
        if let Some(ops) = self.deferred.remove(user) {
            view.adopt(ops, ctx.now)?;
        }
        Ok(view)
    }

    /// Every deferred op, users in token order (namespaces are disjoint, so
    /// only the order within a user matters).
    pub(super) fn flush_deferred(&mut self) -> Vec<PlannedOp> {
        std::mem::take(&mut self.deferred)
            .into_values()
            .flatten()
            .collect()
    }

    pub(super) fn finish(&mut self, view: UserView<'_>) -> Vec<PlannedOp> {
        let (ops, counts) = view.into_ops();
        for (k, v) in counts {
            *self.stats.ops.entry(k).or_insert(0) += v;
        }
        ops
    }
}

impl Policy for Mars {
    fn name(&self) -> &str {
        &self.name
    }

    fn observe(
        &mut self,
        ctx: &PolicyCtx<'_>,
        event: &Interaction,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let domain = self.domain(ctx.catalog)?;
        self.knowledge.record(event);
        let user = Self::user_token(ctx, event.user);
        let at = event.time;
        let mut view = self.load_view(ctx, &user)?;
        view.ensure_meta(at)?;
        // 1. Push the raw signal e = (u, i, a, m_i, t) into event memory.
        let polarity = self.cfg.polarity(event.rating);
        let item = ctx.catalog.get(event.item);
        let summary = item
            .map(|i| i.summary())
            .unwrap_or_else(|| format!("item #{}", event.item.0));
        let action = match event.rating {
            Some(r) => format!("rated {r}"),
            None => "consumed".to_string(),
        };
        let rec = MemoryRecord::new(
            event_id(&user, at),
            view.ns.clone(),
            RecordKind::Event,
            format!("{action}: {summary}"),
            at,
        )
        .with_field("item", json!(item.map(|i| i.token.clone())))
        .with_field("item_index", json!(event.item.0))
        .with_field("action", json!(action))
        .with_field("rating", json!(event.rating))
        .with_field("polarity", json!(polarity.sign()))
        .with_field("timestamp", json!(event.timestamp))
        .with_strength(f64::from(polarity.sign()));
        view.emit(
            MemoryOp::Create { record: rec },
            "event",
            "new signal (pending)",
            vec![at],
            at,
        )?;
        // 2. FIFO: evict beyond L_max, processing a pending victim first
        //    (single pass: keeping it for the one extraction instead).
        let mut events = view.events();
        while events.len() > self.cfg.lmax {
            let oldest = events[0].clone();
            if view.pending().iter().any(|e| e.id == oldest.id) {
                match self.cfg.mode {
                    Mode::Incremental => {
                        self.stats.forced_rounds += 1;
                        self.run_round(ctx, &domain, &mut view, &Actions::all(), at, true)?;
                    }
                    Mode::SinglePass => self
                        .backlog
                        .entry(user.clone())
                        .or_default()
                        .push(oldest.clone()),
                }
            }
            view.emit(
                MemoryOp::Forget {
                    id: oldest.id.clone(),
                },
                "event",
                format!("FIFO eviction (L_max = {})", self.cfg.lmax),
                vec![oldest.time],
                at,
            )?;
            events = view.events();
        }
        // 3. Scheduler (none in single pass).
        match (self.cfg.mode, self.cfg.sched) {
            (Mode::SinglePass, _) => {}
            (Mode::Incremental, Scheduler::Fixed) => {
                if view.pending().len() >= self.cfg.b {
                    self.run_round(ctx, &domain, &mut view, &Actions::all(), at, false)?;
                }
            }
            (Mode::Incremental, Scheduler::Agentic) => {
                let actions = self.plan(ctx, &domain, &view)?;
                if actions.is_empty() {
                    self.stats.plan_wait += 1;
                } else {
                    self.stats.plan_run += 1;
                    self.run_round(ctx, &domain, &mut view, &actions, at, false)?;
                }
            }
        }
        let mine = self.finish(view);
        let mut ops = self.flush_deferred();
        ops.extend(mine);
        Ok(ops)
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        self.stats.recalls += 1;
        self.fit_if_due(ctx)?;
        let domain = self.domain(ctx.catalog)?;
        let user = Self::user_token(ctx, query.user);
        let ns = Namespace::user(&user);
        let mut trace = UsageTrace::for_query(query);
        let candidates: Vec<u32> = query.candidates().iter().map(|c| c.0).collect();
        // The "LLM alone" term: familiarity (see `knowledge`).
        let prior = prior_terms(&self.knowledge, &candidates);
        if self.cfg.tiers.is_none() {
            let scores = prior.iter().map(|p| self.cfg.prior * p).collect();
            return Ok(Recall {
                context: DecisionContext {
                    scores: Some(scores),
                    ..DecisionContext::default()
                },
                trace,
            });
        }
        let mut context = DecisionContext::default();
        let tiers = match self.cfg.mode {
            Mode::Incremental => self.read_tiers(
                ctx,
                ctx.memory,
                (&user, &ns),
                &candidates,
                (&mut context, &mut trace),
            )?,
            Mode::SinglePass => {
                // A decision for a user with unprocessed signals (evolving
                // protocol): run the single pass now, rank on its result and
                // return its ops from the next call that can.
                let mut view = self.load_view(ctx, &user)?;
                if self.single_pass(ctx, &domain, &mut view, ctx.now)? {
                    self.stats.single_pass_at_decision += 1;
                }
                let tiers = self.read_tiers(
                    ctx,
                    view.state(),
                    (&user, &ns),
                    &candidates,
                    (&mut context, &mut trace),
                )?;
                let ops = self.finish(view);
                if !ops.is_empty() {
                    self.deferred.insert(user.clone(), ops);
                }
                tiers
            }
        };
        let ranker = Ranker {
            cfg: &self.cfg,
            facets: &domain.facets,
            items: &self.item_emb,
            knowledge: &self.knowledge,
        };
        context.scores = Some(ranker.score(&candidates, &tiers, &prior));
        Ok(Recall { context, trace })
    }

    /// MARS learns nothing from outcomes; this only returns the ops a
    /// single-pass `recall` planned (none in incremental mode).
    fn feedback(
        &mut self,
        _ctx: &PolicyCtx<'_>,
        _feedback: &Feedback,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        Ok(self.flush_deferred())
    }

    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        match trigger {
            MaintainTrigger::Tick => Ok(self.flush_deferred()),
            MaintainTrigger::BeforeDecisions | MaintainTrigger::EndOfStream => {
                let domain = self.domain(ctx.catalog)?;
                let users: Vec<String> = ctx
                    .memory
                    .namespaces()
                    .filter_map(|n| n.as_str().strip_prefix("user:"))
                    .filter(|u| ctx.memory.get(&meta_id(u)).is_some())
                    .map(str::to_string)
                    .collect();
                let at = ctx.now;
                let mut ops = Vec::new();
                // The profiles the decisions will read, embedded together
                // below rather than one long text per decision.
                let mut profiles = Vec::new();
                for u in users {
                    let mut view = self.load_view(ctx, &u)?;
                    if self.cfg.mode == Mode::SinglePass
                        && self.single_pass(ctx, &domain, &mut view, at)?
                    {
                        profiles.extend(view.get(&profile_id(&u)).map(|r| r.text.clone()));
                        ops.extend(self.finish(view));
                        continue;
                    }
                    if !view.pending().is_empty() {
                        self.stats.forced_rounds += 1;
                        self.run_round(ctx, &domain, &mut view, &Actions::all(), at, true)?;
                    }
                    let has_profile = view.get(&profile_id(&u)).is_some();
                    if (view.mutations() > 0 || !has_profile) && !view.chunks().is_empty() {
                        self.synthesize(
                            ctx,
                            &domain,
                            &mut view,
                            at,
                            "final synthesis before decisions",
                        )?;
                    }
                    profiles.extend(view.get(&profile_id(&u)).map(|r| r.text.clone()));
                    ops.extend(self.finish(view));
                }
                if trigger == MaintainTrigger::BeforeDecisions && self.cfg.tiers.profile {
                    self.text_emb.warm(self.embedder.as_ref(), &profiles)?;
                }
                ops.extend(self.flush_deferred());
                Ok(ops)
            }
        }
    }

    fn stats(&self) -> serde_json::Value {
        let s = &self.stats;
        let total: u64 = Lifecycle::NAMES
            .iter()
            .map(|k| s.ops.get(*k).copied().unwrap_or(0))
            .sum();
        let dist: BTreeMap<&str, f64> = Lifecycle::NAMES
            .iter()
            .map(|k| {
                let n = s.ops.get(*k).copied().unwrap_or(0);
                (
                    *k,
                    if total == 0 {
                        0.0
                    } else {
                        n as f64 / total as f64
                    },
                )
            })
            .collect();
        let mut v = json!({
            "ops": s.ops,
            "lifecycle_distribution": dist,
            "rounds": s.rounds,
            "forced_rounds": s.forced_rounds,
            "plan": {"run": s.plan_run, "wait": s.plan_wait,
                     "targeted": s.plan_targeted, "targets": s.plan_targets},
            "single_pass": {"rounds": s.single_pass_rounds, "signals": s.single_pass_signals,
                            "at_decision": s.single_pass_at_decision},
            "role_calls": self.caller.calls(),
            "scheduled_offline": self.caller.scheduled_offline(),
            "recalls": s.recalls,
            "capacity_skips": s.capacity_skips,
            "categories": self.domain.as_ref().map(|d| d.categories.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
            "config": {
                "tiers": self.cfg.tiers.to_string(),
                "kcat": self.cfg.kcat,
                "sched": match self.cfg.sched { Scheduler::Fixed => "fixed", Scheduler::Agentic => "agentic" },
                "mode": self.cfg.mode.as_str(), "sp_window": self.cfg.sp_window,
                "lmax": self.cfg.lmax, "b": self.cfg.b,
                "delta_plus": self.cfg.delta_plus, "delta_minus": self.cfg.delta_minus,
                "gamma": self.cfg.gamma, "forget_below": self.cfg.forget_below,
                "forget_min_evidence": self.cfg.forget_min_evidence,
                "merge_threshold": self.cfg.merge_threshold,
                "pos_min": self.cfg.pos_min, "neg_max": self.cfg.neg_max,
            },
        });
        // `fit=none` adds nothing: its metrics are the unfitted policy's,
        // byte for byte.
        if self.cfg.fit.auto {
            v["fit"] = match &self.fit_report {
                None => json!({ "mode": "auto (not run)" }),
                Some(r) => serde_json::to_value(r).unwrap_or_default(),
            };
        }
        v
    }
}

/// Used by `lifecycle`: the time of an op batch's source signals.
pub(super) fn times(v: &[u64]) -> Vec<LogicalTime> {
    v.iter().copied().map(LogicalTime).collect()
}
