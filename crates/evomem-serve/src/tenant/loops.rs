//! The loop endpoints' machinery and two of them, `events` and
//! `feedback` (`recommend` has a file of its own): a copy of what the
//! request reads, the plan made from it without the core lock, and a
//! commit that starts over when what it read went stale (module docs of
//! `tenant`, steps 1-3); the registration of items and users in the
//! directory; the user-scoped policies the loop runs.
//!
//! Locks: `loop_state` for the whole run (one loop request of a tenant at
//! a time); per attempt, the write gate briefly to catch up
//! ([`Tenant::catch_up`]) and the core read lock to copy; no lock while
//! planning; then the write gate with the store's writer lock and the
//! core write lock to commit ([`Tenant::write_synced`]).

use super::{
    is_kind, kind, lock, now_ms, Directory, LoopState, Shared, Tenant, CATALOG_NS, DECISION_KIND,
    ITEM_KIND, MEMORY_KIND, USER_KIND,
};
use crate::error::ApiError;
use crate::types::*;
use evomem_core::{
    Embedder, Feedback, Interaction, Item, ItemId, LogicalTime, MemoryId, MemoryOp, MemoryRecord,
    MemoryState, Namespace, Outcome, Policy, PolicyCtx, UsageTrace, User, UserId,
};
use evomem_policy::registry::{self, PolicyDeps, PolicySpec};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How often a loop request starts over when what it read went stale.
const LOOP_ATTEMPTS: usize = 3;

/// A copy of what a loop request reads, taken under a short lock.
pub(super) struct LoopView {
    /// The user's own records but the API's memories.
    pub(super) state: MemoryState,
    pub(super) dir: Arc<Directory>,
    pub(super) gen: u64,
    /// Provisional logical time; the commit shifts it to the commit's.
    pub(super) now: LogicalTime,
}

/// Why a loop commit did not happen.
enum CommitError {
    /// Something the request read changed meanwhile: start over.
    Stale,
    /// Refused or failed: answer this.
    Api(ApiError),
}

impl From<ApiError> for CommitError {
    fn from(e: ApiError) -> Self {
        CommitError::Api(e)
    }
}

impl From<evomem_store::StoreError> for CommitError {
    fn from(e: evomem_store::StoreError) -> Self {
        CommitError::Api(ApiError::Store(e))
    }
}

/// What one attempt of a loop request plans: its batches (committed
/// together), whether it registered items or users, and its answer.
pub(super) struct LoopPlan<R> {
    pub(super) batches: Vec<evomem_store::Batch>,
    pub(super) dir_changed: bool,
    pub(super) answer: R,
}

impl Tenant {
    /// Copy what a loop request for `user` reads (module docs, step 1).
    fn loop_view(&self, user: &str) -> Result<LoopView, ApiError> {
        self.catch_up()?;
        let core = self.read();
        let state = core
            .engine
            .state()
            .copy_of_namespace(&Namespace::user(user), |r| !is_kind(r, MEMORY_KIND));
        Ok(LoopView {
            state,
            dir: core.dir.clone(),
            gen: core.gen,
            now: LogicalTime((core.clock + 1).max(now_ms())),
        })
    }

    /// Commit a loop request's batches in one transaction (module docs,
    /// step 3), unless what it read went stale. Batch times are provisional
    /// (from `view.now` on); they are shifted together to follow the
    /// tenant's clock. Returns the shift.
    fn loop_commit(
        &self,
        gen: u64,
        first: LogicalTime,
        dir: Option<Arc<Directory>>,
        mut batches: Vec<evomem_store::Batch>,
    ) -> Result<u64, CommitError> {
        let mut core = self.write_synced()?;
        if core.gen != gen {
            return Err(CommitError::Stale);
        }
        let base = core.tick();
        let shift = base.0.saturating_sub(first.0);
        let mut last = base.0;
        for b in &mut batches {
            b.at = LogicalTime(b.at.0 + shift);
            last = last.max(b.at.0);
        }
        let (mut core, stored) = self.store_and_install(core, batches);
        if let Err(e) = stored {
            if e.is_conflict() {
                // Another instance wrote first: catch up, then start over.
                core.sync()?;
                return Err(CommitError::Stale);
            }
            return Err(e.into());
        }
        core.clock = core.clock.max(last);
        if let Some(d) = dir {
            core.dir = d;
        }
        Ok(shift)
    }

    /// Run a loop request: `plan` works on a fresh copy each attempt and
    /// returns what to commit and the answer; the commit is retried when
    /// the copy went stale. The policies are dropped (rebuilt from the
    /// store on next use) after any failure, since a failed request may
    /// have advanced them past what was committed.
    pub(super) fn run_loop<R>(
        &self,
        user: &str,
        mut plan: impl FnMut(&mut LoopState, &mut LoopView) -> Result<LoopPlan<R>, ApiError>,
    ) -> Result<(R, u64), ApiError> {
        let mut ls = lock(&self.loop_state);
        for _ in 0..LOOP_ATTEMPTS {
            let mut view = self.loop_view(user)?;
            if ls.gen != view.gen {
                ls.policies.clear();
                ls.item_vecs.clear();
                ls.gen = view.gen;
            }
            let planned = match plan(&mut ls, &mut view) {
                Ok(p) => p,
                Err(e) => {
                    ls.policies.clear();
                    return Err(e);
                }
            };
            let dir = planned.dir_changed.then(|| view.dir.clone());
            match self.loop_commit(view.gen, view.now, dir, planned.batches) {
                Ok(shift) => return Ok((planned.answer, shift)),
                Err(CommitError::Stale) => {
                    ls.policies.clear();
                    ls.item_vecs.clear();
                }
                Err(CommitError::Api(e)) => {
                    ls.policies.clear();
                    return Err(e);
                }
            }
        }
        Err(ApiError::Overloaded {
            queue: "loop commits (what the request read kept changing)",
            retry_after_s: 1,
        })
    }

    /// Show interactions to a policy; all of the request's ops (item and
    /// user registrations, the policy's ops per event) commit together.
    pub fn events(&self, req: EventsRequest) -> Result<EventsResponse, ApiError> {
        let spec = self.shared.config.policy_spec(req.policy.as_deref())?;
        let (total, _) = self.run_loop(&req.user_id, |ls, view| {
            view.dir.check_items(
                req.events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (format!("events[{i}].item"), &e.item)),
            )?;
            let policy = policy_for(&mut ls.policies, &spec, &self.shared, self.embedder())?;
            let name = policy.name().to_string();
            let mut batches = Vec::new();
            let mut total = 0usize;
            let mut dir_changed = false;
            for (i, ev) in req.events.iter().enumerate() {
                let t = LogicalTime(view.now.0 + i as u64);
                let mut ops = Vec::new();
                let dir = Arc::make_mut(&mut view.dir);
                let user = dir.ensure_user(&req.user_id, t, &mut ops);
                let item = dir.ensure_item(&format!("events[{i}].item"), &ev.item, t, &mut ops)?;
                dir_changed |= !ops.is_empty();
                let ts = ev.timestamp.unwrap_or((t.0 / 1000) as i64);
                let inter = Interaction {
                    user,
                    item,
                    rating: ev.rating,
                    timestamp: ts,
                    time: t,
                };
                apply_local(&mut view.state, &ops, t);
                let ctx = PolicyCtx {
                    memory: &view.state,
                    catalog: &view.dir.catalog,
                    users: &view.dir.users,
                    now: t,
                };
                let pops = policy.observe(&ctx, &inter).map_err(policy_err(&spec))?;
                total += pops.len();
                apply_local(&mut view.state, &pops, t);
                if !ops.is_empty() {
                    batches.push(evomem_store::Batch {
                        policy: "api".into(),
                        ops,
                        at: t,
                    });
                }
                if !pops.is_empty() {
                    batches.push(evomem_store::Batch {
                        policy: name.clone(),
                        ops: pops,
                        at: t,
                    });
                }
            }
            Ok(LoopPlan {
                batches,
                dir_changed,
                answer: total,
            })
        })?;
        Ok(EventsResponse {
            policy: policy_key(&spec),
            observed: req.events.len(),
            ops: total,
        })
    }

    /// An outcome for an earlier decision (also after a restart). The
    /// policy's ops and the decision's feedback count commit together.
    pub fn feedback(&self, req: FeedbackRequest) -> Result<FeedbackResponse, ApiError> {
        let did = decision_record_id(req.decision_id);
        let not_found = || ApiError::NotFound {
            what: "decision",
            id: req.decision_id.to_string(),
        };
        let rec = {
            self.catch_up()?;
            self.read()
                .engine
                .state()
                .get(&did)
                .filter(|r| is_kind(r, DECISION_KIND))
                .cloned()
                .ok_or_else(not_found)?
        };
        let StoredDecision {
            user_token,
            spec,
            user,
            decided_at,
            trace,
        } = StoredDecision::of(&rec, req.decision_id);
        let ((n, count), _) = self.run_loop(&user_token, |ls, view| {
            // The decision as it stands now (the copy is fresh each attempt).
            let current = view
                .state
                .get(&did)
                .filter(|r| is_kind(r, DECISION_KIND))
                .ok_or_else(not_found)?;
            let count = current
                .fields
                .get("feedback_count")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                + 1;
            let item =
                match &req.item_id {
                    Some(t) => Some(view.dir.item_ids.get(t).copied().ok_or_else(|| {
                        ApiError::field("item_id", format!("unknown item `{t}`"))
                    })?),
                    None => None,
                };
            let policy = policy_for(&mut ls.policies, &spec, &self.shared, self.embedder())?;
            let name = policy.name().to_string();
            let t = view.now;
            let fb = Feedback {
                decision_id: req.decision_id,
                user: Some(user),
                decided_at,
                observed_at: t,
                outcome: Outcome {
                    reward: req.reward,
                    success: req.success,
                    objectives: req.objectives.clone(),
                    item,
                    ..Outcome::default()
                },
                trace: trace.clone(),
            };
            let ctx = PolicyCtx {
                memory: &view.state,
                catalog: &view.dir.catalog,
                users: &view.dir.users,
                now: t,
            };
            let mut ops = policy.feedback(&ctx, &fb).map_err(policy_err(&spec))?;
            let n = ops.len();
            let mut fields = BTreeMap::new();
            fields.insert("feedback_count".to_string(), json!(count));
            // The latest outcome, for the inspector's decision view.
            fields.insert("reward".to_string(), json!(req.reward));
            if let Some(t) = &req.item_id {
                fields.insert("target".to_string(), json!(t));
            }
            if let Some(ok) = req.success {
                fields.insert("success".to_string(), json!(ok));
            }
            ops.push(evomem_core::PlannedOp::new(
                MemoryOp::UpdateFields {
                    id: did.clone(),
                    fields,
                    text: None,
                    embedding: None,
                },
                "feedback",
                "POST /v1/feedback",
            ));
            Ok(LoopPlan {
                batches: vec![evomem_store::Batch {
                    policy: name,
                    ops,
                    at: t,
                }],
                dir_changed: false,
                answer: (n, count),
            })
        })?;
        Ok(FeedbackResponse {
            decision_id: req.decision_id,
            ops: n,
            feedback_count: count,
        })
    }
}

impl Directory {
    pub(super) fn ensure_user(
        &mut self,
        user: &str,
        at: LogicalTime,
        ops: &mut Vec<evomem_core::PlannedOp>,
    ) -> UserId {
        if let Some(u) = self.user_ids.get(user) {
            return *u;
        }
        let id = UserId(self.users.len() as u32);
        self.users.push(User {
            id,
            token: user.to_string(),
            attributes: BTreeMap::new(),
        });
        self.user_ids.insert(user.to_string(), id);
        let rec = MemoryRecord::new(
            MemoryId::new(format!("user:{user}")),
            Namespace::user(user),
            kind(USER_KIND),
            user,
            at,
        )
        .with_field("index", json!(id.0));
        ops.push(evomem_core::PlannedOp::new(
            MemoryOp::Create { record: rec },
            "register_user",
            "first loop call for this user",
        ));
        id
    }

    /// Check item references before anything is registered, so that a bad
    /// reference rejects the request without touching the catalog.
    pub(super) fn check_items<'a>(
        &self,
        items: impl Iterator<Item = (String, &'a ItemRef)>,
    ) -> Result<(), ApiError> {
        let mut new: BTreeSet<&str> = BTreeSet::new();
        for (field, item) in items {
            let token = match item {
                ItemRef::Id(t) => t.as_str(),
                ItemRef::Item(i) => i.id.as_str(),
            };
            if token.is_empty() || token.len() > 256 {
                return Err(ApiError::field(field, "item id must be 1-256 characters"));
            }
            match item {
                ItemRef::Item(_) => {
                    new.insert(token);
                }
                ItemRef::Id(_) if self.item_ids.contains_key(token) || new.contains(token) => {}
                ItemRef::Id(_) => {
                    return Err(ApiError::field(
                        field,
                        format!("unknown item `{token}`: send it once as an object with its title"),
                    ))
                }
            }
        }
        Ok(())
    }

    pub(super) fn ensure_item(
        &mut self,
        field: &str,
        item: &ItemRef,
        at: LogicalTime,
        ops: &mut Vec<evomem_core::PlannedOp>,
    ) -> Result<ItemId, ApiError> {
        let (token, full) = match item {
            ItemRef::Id(t) => (t.as_str(), None),
            ItemRef::Item(i) => (i.id.as_str(), Some(i)),
        };
        if token.is_empty() || token.len() > 256 {
            return Err(ApiError::field(field, "item id must be 1-256 characters"));
        }
        if let Some(id) = self.item_ids.get(token) {
            return Ok(*id);
        }
        let Some(full) = full else {
            return Err(ApiError::field(
                field,
                format!("unknown item `{token}`: send it once as an object with its title"),
            ));
        };
        let id = ItemId(self.catalog.items.len() as u32);
        let mut text = BTreeMap::new();
        if !full.text.is_empty() {
            text.insert("description".to_string(), full.text.clone());
        }
        self.catalog.items.push(Item {
            id,
            token: token.to_string(),
            title: full.title.clone(),
            text,
            categories: full.categories.clone(),
            attributes: BTreeMap::new(),
        });
        self.item_ids.insert(token.to_string(), id);
        let rec = MemoryRecord::new(
            MemoryId::new(format!("item:{token}")),
            Namespace::new(CATALOG_NS),
            kind(ITEM_KIND),
            full.title.clone(),
            at,
        )
        .with_field("index", json!(id.0))
        .with_field("categories", json!(full.categories))
        .with_field("text", json!(full.text));
        ops.push(evomem_core::PlannedOp::new(
            MemoryOp::Create { record: rec },
            "register_item",
            "first time the loop saw this item",
        ));
        Ok(id)
    }
}

/// Families the loop endpoints run: they rank, and everything they know
/// about a user is that user's own memory records (namespace `user:<id>`),
/// the family table's `user_scoped` capability
/// ([`registry::user_scoped_rankers`]: today `no-memory` and `mars`). So
/// their state survives a restart (it is in the store), and deleting a user
/// deletes everything derived from them. AtomRec and seqmem write
/// cross-user notes; the other baselines keep model state outside memory.
/// Build (or reuse) a user-scoped ranking policy.
pub(super) fn policy_for<'a>(
    policies: &'a mut BTreeMap<String, Box<dyn Policy>>,
    spec_text: &str,
    shared: &Shared,
    embedder: Arc<dyn Embedder>,
) -> Result<&'a mut Box<dyn Policy>, ApiError> {
    let spec = PolicySpec::parse(spec_text).map_err(|e| ApiError::Policy {
        policy: spec_text.to_string(),
        message: e.to_string(),
    })?;
    let key = spec.to_string();
    if !policies.contains_key(&key) {
        let fam = registry::family(&spec.name).map_err(|e| ApiError::Policy {
            policy: key.clone(),
            message: e.to_string(),
        })?;
        if !fam.caps.user_scoped || !fam.serves(evomem_core::DecisionTag::Rank) {
            return Err(ApiError::Policy {
                policy: key.clone(),
                message: format!(
                    "the service runs the policies whose whole state is each user's own memory ({}); `{}` keeps cross-user notes or model state outside memory",
                    registry::user_scoped_rankers().join(", "),
                    fam.name
                ),
            });
        }
        let deps = PolicyDeps {
            embedder: embedder.clone(),
            llm: shared.hub.clone(),
            seed: shared.seed,
        };
        let p = registry::build(&spec, &deps).map_err(|e| ApiError::Policy {
            policy: key.clone(),
            message: e.to_string(),
        })?;
        policies.insert(key.clone(), p);
    }
    policies
        .get_mut(&key)
        .ok_or_else(|| ApiError::Internal("policy vanished".into()))
}

pub(super) fn policy_err(policy: &str) -> impl Fn(evomem_core::PolicyError) -> ApiError + '_ {
    use evomem_core::PolicyError as P;
    move |e| match e {
        // An LLM's or the embedder's words stay in the log ([`ApiError::Llm`]).
        P::Llm(e) => ApiError::Llm {
            policy: policy.to_string(),
            role: "policy".to_string(),
            message: e.to_string(),
        },
        P::Role { role, source } => ApiError::Llm {
            policy: policy.to_string(),
            role,
            message: source.to_string(),
        },
        P::Embed(e) => ApiError::Embed(e.to_string()),
        e @ (P::Op(_) | P::Config(_) | P::Unsupported { .. } | P::Other(_)) => ApiError::Policy {
            policy: policy.to_string(),
            message: e.to_string(),
        },
    }
}

/// What a stored decision record says about the decision, for feedback.
struct StoredDecision {
    /// The user's namespace token.
    user_token: String,
    /// The policy that decided.
    spec: String,
    /// The user's index in the tenant's directory.
    user: UserId,
    /// When the decision was made.
    decided_at: LogicalTime,
    /// The memories the decision used.
    trace: UsageTrace,
}

impl StoredDecision {
    fn of(rec: &MemoryRecord, decision_id: u64) -> Self {
        let field = |k: &str| rec.fields.get(k);
        Self {
            user_token: rec
                .namespace
                .as_str()
                .strip_prefix("user:")
                .unwrap_or("")
                .to_string(),
            spec: field("policy")
                .and_then(Value::as_str)
                .unwrap_or("mars")
                .to_string(),
            user: UserId(field("user_index").and_then(Value::as_u64).unwrap_or(0) as u32),
            decided_at: LogicalTime(
                field("decided_at")
                    .and_then(Value::as_u64)
                    .unwrap_or(decision_id),
            ),
            trace: field("trace")
                .cloned()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
        }
    }
}

/// Apply planned ops to the loop's copy, so that the next event of the
/// request sees them. An op the copy cannot take (one about a record
/// outside the user's copied records) is skipped here; the commit applies
/// every op to the whole store and refuses the request if one does not fit.
pub(super) fn apply_local(
    state: &mut MemoryState,
    ops: &[evomem_core::PlannedOp],
    at: LogicalTime,
) {
    for p in ops {
        if let Err(e) = state.apply(&p.op, at) {
            tracing::debug!("loop copy skipped an op ({e}); the commit checks it");
        }
    }
}

pub(super) fn decision_record_id(id: u64) -> MemoryId {
    MemoryId::new(format!("decision:{id}"))
}

pub(super) fn policy_key(spec: &str) -> String {
    PolicySpec::parse(spec)
        .map(|s| s.to_string())
        .unwrap_or_else(|_| spec.to_string())
}
