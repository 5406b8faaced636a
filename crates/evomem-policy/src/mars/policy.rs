//! The `mars` policy: observe → event FIFO + scheduler → lifecycle rounds;
//! recall → profile, events (and chunks) with the offline ranker's scores.
//!
//! Derived state kept by the policy (rebuildable from the catalog and what it
//! has seen): the domain's facet index and categories, embedding caches and
//! statistics. All memory itself lives in `MemoryState` records (see
//! [`super::tiers`]) and changes only through the returned ops.

use super::categories::{sample_items, CategoryDef, FacetIndex};
use super::config::{MarsConfig, Scheduler};
use super::knowledge::{standardise, Knowledge};
use super::ranker::{belief_score, event_score, Belief, Candidate, Signal};
use super::roles::{
    CategoriesInput, CategoriesRole, ChunkIn, FacetIn, SampleItem, SignalIn, ACTIONS,
};
use super::scheduler::Actions;
use super::tiers::{
    chunks_in, event_id, events_in, meta_id, profile_id, Chunk, EventView, UserView,
};
use evomem_core::{
    Catalog, ContextEntry, DecisionContext, DecisionQuery, Embedder, Interaction, ItemId,
    LogicalTime, MaintainTrigger, MemoryOp, MemoryRecord, Namespace, PlannedOp, Policy, PolicyCtx,
    PolicyError, Recall, RecordKind, Role, UsageTrace, UsedMemory, UserId,
};
use evomem_llm::LlmHub;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
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
    /// Role calls by role.
    pub role_calls: BTreeMap<String, u64>,
    /// LLM errors that fell back to the offline algorithm here.
    pub llm_errors: u64,
    /// Decisions served.
    pub recalls: u64,
    /// Chunks not extracted because the category was full of stronger ones.
    pub capacity_skips: u64,
}

/// The MARS policy.
pub struct Mars {
    pub(super) name: String,
    pub(super) cfg: MarsConfig,
    pub(super) embedder: Arc<dyn Embedder>,
    pub(super) llm: Arc<LlmHub>,
    pub(super) seed: u64,
    pub(super) domain: Option<Arc<Domain>>,
    pub(super) item_emb: HashMap<u32, Vec<f32>>,
    pub(super) text_emb: HashMap<String, Vec<f32>>,
    pub(super) stats: Stats,
    pub(super) knowledge: Knowledge,
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
        Self {
            name: name.into(),
            cfg,
            embedder,
            llm,
            seed,
            domain: None,
            item_emb: HashMap::new(),
            text_emb: HashMap::new(),
            stats: Stats::default(),
            knowledge: Knowledge::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MarsConfig {
        &self.cfg
    }

    /// The derived categories (after the first call that saw the catalog).
    pub fn categories(&self) -> Option<&[CategoryDef]> {
        self.domain.as_ref().map(|d| d.categories.as_slice())
    }

    /// Run a role through the hub; on error fall back to its offline
    /// algorithm here too, and count it.
    pub(super) fn call<R: Role>(
        &mut self,
        role: &R,
        input: &R::Input,
        user: &str,
    ) -> Result<R::Output, PolicyError> {
        *self
            .stats
            .role_calls
            .entry(role.name().to_string())
            .or_insert(0) += 1;
        match self.llm.run(role, input, Some(user)) {
            Ok(o) => Ok(o),
            Err(_) => {
                self.stats.llm_errors += 1;
                Ok(role.offline(input)?)
            }
        }
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
        let out = self.call(&CategoriesRole, &input, "_domain")?;
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

    pub(super) fn item_embedding(
        &mut self,
        catalog: &Catalog,
        item: u32,
    ) -> Result<Vec<f32>, PolicyError> {
        if let Some(e) = self.item_emb.get(&item) {
            return Ok(e.clone());
        }
        let text = catalog
            .get(ItemId(item))
            .map(|i| i.full_text().chars().take(1000).collect::<String>())
            .unwrap_or_default();
        let e = self.embedder.embed_one(&text)?;
        self.item_emb.insert(item, e.clone());
        Ok(e)
    }

    /// Embed the items not yet cached, in one batch.
    pub(super) fn warm_items(
        &mut self,
        catalog: &Catalog,
        items: &[u32],
    ) -> Result<(), PolicyError> {
        let mut missing: Vec<u32> = items
            .iter()
            .copied()
            .filter(|i| !self.item_emb.contains_key(i))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let texts: Vec<String> = missing
            .iter()
            .map(|i| {
                catalog
                    .get(ItemId(*i))
                    .map(|it| it.full_text().chars().take(1000).collect())
                    .unwrap_or_default()
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let embs = self.embedder.embed(&refs)?;
        for (i, e) in missing.into_iter().zip(embs) {
            self.item_emb.insert(i, e);
        }
        Ok(())
    }

    pub(super) fn text_embedding(&mut self, text: &str) -> Result<Vec<f32>, PolicyError> {
        if let Some(e) = self.text_emb.get(text) {
            return Ok(e.clone());
        }
        let e = self.embedder.embed_one(text)?;
        if self.text_emb.len() > 200_000 {
            self.text_emb.clear();
        }
        self.text_emb.insert(text.to_string(), e.clone());
        Ok(e)
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
        ctx.users
            .get(user.index())
            .map(|u| u.token.clone())
            .unwrap_or_else(|| user.0.to_string())
    }

    fn finish(&mut self, view: UserView) -> Vec<PlannedOp> {
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
        let mut view = UserView::load(ctx.memory, &user)?;
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
        .with_field("polarity", json!(polarity))
        .with_field("timestamp", json!(event.timestamp))
        .with_strength(f64::from(polarity));
        view.emit(
            MemoryOp::Create { record: rec },
            "event",
            "new signal (pending)",
            vec![at],
            at,
        )?;
        // 2. FIFO: evict beyond L_max, processing a pending victim first.
        let mut events = view.events();
        while events.len() > self.cfg.lmax {
            let oldest = events[0].clone();
            if view.pending().iter().any(|e| e.id == oldest.id) {
                self.stats.forced_rounds += 1;
                self.run_round(ctx, &domain, &mut view, &Actions::all(), at, true)?;
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
        // 3. Scheduler.
        match self.cfg.sched {
            Scheduler::Fixed => {
                if view.pending().len() >= self.cfg.b {
                    self.run_round(ctx, &domain, &mut view, &Actions::all(), at, false)?;
                }
            }
            Scheduler::Agentic => {
                let actions = self.plan(ctx, &domain, &view)?;
                if actions.is_empty() {
                    self.stats.plan_wait += 1;
                } else {
                    self.stats.plan_run += 1;
                    self.run_round(ctx, &domain, &mut view, &actions, at, false)?;
                }
            }
        }
        Ok(self.finish(view))
    }

    fn recall(
        &mut self,
        ctx: &PolicyCtx<'_>,
        query: &DecisionQuery,
    ) -> Result<Recall, PolicyError> {
        self.stats.recalls += 1;
        let domain = self.domain(ctx.catalog)?;
        let user = Self::user_token(ctx, query.user);
        let ns = [Namespace::user(&user)];
        let tiers = self.cfg.tiers;
        let mut trace = UsageTrace::for_query(query);
        let cand_items: Vec<u32> = query.candidates.iter().map(|c| c.0).collect();
        // The "LLM alone" term: familiarity (see `knowledge`).
        let mut prior: Vec<f64> = cand_items
            .iter()
            .map(|&c| self.knowledge.familiarity(c))
            .collect();
        standardise(&mut prior);
        if tiers.is_none() {
            let scores = prior.iter().map(|p| self.cfg.prior * p).collect();
            return Ok(Recall {
                context: DecisionContext {
                    scores: Some(scores),
                    ..DecisionContext::default()
                },
                trace,
            });
        }
        let events = if tiers.event {
            events_in(ctx.memory, &ns[0])
        } else {
            Vec::new()
        };
        let mut all_items = cand_items.clone();
        all_items.extend(events.iter().map(|e| e.item));
        self.warm_items(ctx.catalog, &all_items)?;
        let mut context = DecisionContext::default();
        // Event tier: newest first with recency-decayed, signed weights.
        let mut ev_weights = Vec::new();
        for (rank, e) in events.iter().rev().enumerate() {
            let pol = match e.polarity {
                1 => 1.0,
                -1 => -1.0,
                _ => 0.3,
            };
            let w = pol * self.cfg.recency_decay.powi(rank as i32);
            ev_weights.push((e.clone(), w));
            let emb = self.item_embedding(ctx.catalog, e.item)?;
            context.entries.push(ContextEntry {
                memory: Some(e.id.clone()),
                item: Some(ItemId(e.item)),
                text: e.text.clone(),
                weight: w as f32,
                embedding: Some(emb),
            });
            trace.used.push(UsedMemory {
                id: e.id.clone(),
                weight: w as f32,
            });
        }
        // Preference tier.
        let mut chunk_beliefs = Vec::new();
        if tiers.preference {
            for c in chunks_in(ctx.memory, &ns[0]) {
                let emb = self.text_embedding(&format!("{}: {}", c.category, c.text))?;
                context.entries.push(ContextEntry {
                    memory: Some(c.id.clone()),
                    item: None,
                    text: format!("[{}] {} (strength {:.2})", c.category, c.text, c.strength),
                    weight: c.strength as f32,
                    embedding: Some(emb.clone()),
                });
                trace.used.push(UsedMemory {
                    id: c.id.clone(),
                    weight: c.strength as f32,
                });
                chunk_beliefs.push(Belief {
                    key: c.key.clone(),
                    strength: c.strength,
                    embedding: Some(emb),
                });
            }
        }
        // Profile tier: narrative + the facets it summarised.
        let mut profile_beliefs = Vec::new();
        let mut profile_emb = None;
        if tiers.profile {
            if let Some(p) = ctx.memory.get_in(&profile_id(&user), &ns) {
                context.profile = Some(p.text.clone());
                trace.used.push(UsedMemory {
                    id: p.id.clone(),
                    weight: 1.0,
                });
                profile_emb = Some(self.text_embedding(&p.text)?);
                if let Some(fs) = p.fields.get("facets").and_then(|v| v.as_array()) {
                    for f in fs {
                        let strength = f.get("strength").and_then(|v| v.as_f64()).unwrap_or(0.0);
                        let key = match (
                            f.get("axis").and_then(|v| v.as_u64()),
                            f.get("value").and_then(|v| v.as_str()),
                        ) {
                            (Some(a), Some(v)) => Some((a as usize, v.to_string())),
                            _ => None,
                        };
                        let embedding = if key.is_none() {
                            let t = format!(
                                "{}: {}",
                                f.get("category").and_then(|v| v.as_str()).unwrap_or(""),
                                f.get("text").and_then(|v| v.as_str()).unwrap_or("")
                            );
                            Some(self.text_embedding(&t)?)
                        } else {
                            None
                        };
                        profile_beliefs.push(Belief {
                            key,
                            strength,
                            embedding,
                        });
                    }
                }
            }
        }
        // Offline ranker (see `ranker`).
        let fi = &domain.facets;
        let idf = |a: usize, v: &str| fi.idf(a, v);
        let w = self.cfg.emb_weight;
        let ev_embs: Vec<Vec<f32>> = ev_weights
            .iter()
            .map(|(e, _)| self.item_emb.get(&e.item).cloned().unwrap_or_default())
            .collect();
        let signals: Vec<Signal<'_>> = ev_weights
            .iter()
            .zip(&ev_embs)
            .map(|((e, wt), emb)| Signal {
                facets: fi.facets(ItemId(e.item)),
                embedding: emb,
                weight: *wt,
            })
            .collect();
        let mut scores = Vec::with_capacity(cand_items.len());
        for c in &cand_items {
            let emb = self.item_emb.get(c).map(Vec::as_slice).unwrap_or(&[]);
            let cand = Candidate {
                facets: fi.facets(ItemId(*c)),
                embedding: emb,
            };
            let mut s = 0.0;
            if tiers.event {
                s += event_score(&signals, &cand, &idf, w);
            }
            if tiers.preference {
                s += belief_score(&chunk_beliefs, &cand, &idf, w);
            }
            if tiers.profile {
                s += belief_score(&profile_beliefs, &cand, &idf, w);
                if let Some(pe) = &profile_emb {
                    if pe.len() == emb.len() {
                        s += w * f64::from(evomem_core::dot(pe, emb));
                    }
                }
            }
            scores.push(if s.is_finite() { s } else { 0.0 });
        }
        // Relatedness of the event tier's items to each candidate, weighted by
        // recency only: co-consumption counts every interaction, whatever its
        // rating, so it is matched against every remembered event.
        let mut related = vec![0.0; cand_items.len()];
        if tiers.event && !ev_weights.is_empty() {
            let norm: f64 = (0..ev_weights.len())
                .map(|r| self.cfg.recency_decay.powi(r as i32))
                .sum();
            for (slot, &c) in related.iter_mut().zip(&cand_items) {
                let mut r = 0.0;
                for (rank, (e, _)) in ev_weights.iter().enumerate() {
                    r += self.cfg.recency_decay.powi(rank as i32)
                        * self.knowledge.relatedness(e.item, c);
                }
                *slot = if norm > 0.0 { r / norm } else { 0.0 };
            }
        }
        standardise(&mut scores);
        standardise(&mut related);
        let scores = scores
            .iter()
            .zip(&related)
            .zip(&prior)
            .map(|((s, r), p)| self.cfg.content * s + self.cfg.collab * r + self.cfg.prior * p)
            .collect();
        context.scores = Some(scores);
        Ok(Recall { context, trace })
    }

    fn maintain(
        &mut self,
        ctx: &PolicyCtx<'_>,
        trigger: MaintainTrigger,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        match trigger {
            MaintainTrigger::Tick => Ok(Vec::new()),
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
                for u in users {
                    let mut view = UserView::load(ctx.memory, &u)?;
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
                    ops.extend(self.finish(view));
                }
                Ok(ops)
            }
        }
    }

    fn stats(&self) -> serde_json::Value {
        let s = &self.stats;
        let total: u64 = ACTIONS
            .iter()
            .map(|k| s.ops.get(*k).copied().unwrap_or(0))
            .sum();
        let dist: BTreeMap<&str, f64> = ACTIONS
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
        json!({
            "ops": s.ops,
            "lifecycle_distribution": dist,
            "rounds": s.rounds,
            "forced_rounds": s.forced_rounds,
            "plan": {"run": s.plan_run, "wait": s.plan_wait},
            "role_calls": s.role_calls,
            "llm_errors_fell_back": s.llm_errors,
            "recalls": s.recalls,
            "capacity_skips": s.capacity_skips,
            "categories": self.domain.as_ref().map(|d| d.categories.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
            "config": {
                "tiers": self.cfg.tiers.to_string(),
                "kcat": self.cfg.kcat,
                "sched": match self.cfg.sched { Scheduler::Fixed => "fixed", Scheduler::Agentic => "agentic" },
                "lmax": self.cfg.lmax, "b": self.cfg.b,
                "delta_plus": self.cfg.delta_plus, "delta_minus": self.cfg.delta_minus,
                "gamma": self.cfg.gamma, "forget_below": self.cfg.forget_below,
                "forget_min_evidence": self.cfg.forget_min_evidence,
                "merge_threshold": self.cfg.merge_threshold,
                "pos_min": self.cfg.pos_min, "neg_max": self.cfg.neg_max,
            },
        })
    }
}

/// Used by `lifecycle`: the time of an op batch's source signals.
pub(super) fn times(v: &[u64]) -> Vec<LogicalTime> {
    v.iter().copied().map(LogicalTime).collect()
}
