//! Integration tests for mars: tiers, lifecycle arithmetic, preference shift,
//! capacity, forced synthesis, determinism, isolation, config errors, ranking,
//! LLM failures that must fail the run, and a sanity run on real ml-100k users.

use evomem_core::{
    Catalog, ChatRequest, ChatResponse, DecisionQuery, Interaction, Item, ItemId, LanguageModel,
    LlmError, LogicalTime, MaintainTrigger, MemoryOp, MemoryState, Namespace, PlannedOp, Policy,
    PolicyCtx, PolicyError, RecordKind, User, UserId,
};
use evomem_kit::testing::TestEmbedder;
use evomem_llm::hub::DEFAULT_MAX_CONSECUTIVE_FAILURES;
use evomem_llm::{Backend, CacheSettings, LlmHub};
use evomem_policy::mars::{Lifecycle, Mars, MarsConfig, Mode, Scheduler};
use evomem_policy::{registry, PolicyDeps, PolicySpec};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn deps() -> PolicyDeps {
    deps_with(LlmHub::offline())
}

fn deps_with(hub: LlmHub) -> PolicyDeps {
    PolicyDeps {
        embedder: Arc::new(TestEmbedder::default()),
        llm: Arc::new(hub),
        seed: 42,
    }
}

fn build(spec: &str) -> Box<dyn Policy> {
    registry::build(&PolicySpec::parse(spec).unwrap(), &deps()).unwrap()
}

/// Items 0..40 are "Noir" (with a crime subgenre), 40..80 "Western", 80..120
/// one of twelve other genres each.
fn catalog() -> Catalog {
    let others = [
        "Comedy",
        "Horror",
        "Musical",
        "War",
        "Documentary",
        "Romance",
        "Fantasy",
        "Animation",
        "Mystery",
        "Sci-Fi",
        "Thriller",
        "Adventure",
    ];
    let items = (0..120u32)
        .map(|i| {
            let cats: Vec<String> = if i < 40 {
                vec!["Noir".into(), "Crime".into()]
            } else if i < 80 {
                vec!["Western".into(), "Frontier".into()]
            } else {
                vec![others[(i as usize) % others.len()].into(), "Misc".into()]
            };
            Item {
                id: ItemId(i),
                token: format!("i{i}"),
                title: format!("Picture {i}"),
                text: BTreeMap::new(),
                categories: cats,
                attributes: BTreeMap::from([(
                    "release_year".to_string(),
                    (1950 + (i % 5) * 10).to_string(),
                )]),
            }
        })
        .collect();
    Catalog { items }
}

fn users(n: u32) -> Vec<User> {
    (0..n)
        .map(|u| User {
            id: UserId(u),
            token: format!("u{u}"),
            attributes: BTreeMap::new(),
        })
        .collect()
}

/// Applies a policy's ops to a `MemoryState` like the engine would.
struct Sim {
    mem: MemoryState,
    catalog: Catalog,
    users: Vec<User>,
    policy: Box<dyn Policy>,
    log: Vec<(UserId, PlannedOp)>,
    /// Logical time at which each op of `log` was applied.
    times: Vec<LogicalTime>,
    t: u64,
}

impl Sim {
    fn new(spec: &str) -> Self {
        Self::with_deps(spec, deps())
    }

    fn with_deps(spec: &str, d: PolicyDeps) -> Self {
        Self {
            mem: MemoryState::new(),
            catalog: catalog(),
            users: users(4),
            policy: registry::build(&PolicySpec::parse(spec).unwrap(), &d).unwrap(),
            log: Vec::new(),
            times: Vec::new(),
            t: 0,
        }
    }

    fn observe(&mut self, user: u32, item: u32, rating: Option<f32>) -> Vec<PlannedOp> {
        self.try_observe(user, item, rating).unwrap()
    }

    fn try_observe(
        &mut self,
        user: u32,
        item: u32,
        rating: Option<f32>,
    ) -> Result<Vec<PlannedOp>, PolicyError> {
        let at = LogicalTime(self.t);
        let ev = Interaction {
            user: UserId(user),
            item: ItemId(item),
            rating,
            timestamp: self.t as i64,
            time: at,
        };
        let ctx = PolicyCtx {
            memory: &self.mem,
            catalog: &self.catalog,
            users: &self.users,
            now: at,
        };
        let ops = self.policy.observe(&ctx, &ev)?;
        for op in &ops {
            self.mem.apply(&op.op, at).unwrap();
            self.log.push((UserId(user), op.clone()));
            self.times.push(at);
        }
        self.t += 1;
        Ok(ops)
    }

    fn maintain(&mut self) {
        let at = LogicalTime(self.t);
        let ctx = PolicyCtx {
            memory: &self.mem,
            catalog: &self.catalog,
            users: &self.users,
            now: at,
        };
        let ops = self
            .policy
            .maintain(&ctx, MaintainTrigger::BeforeDecisions)
            .unwrap();
        for op in &ops {
            self.mem.apply(&op.op, at).unwrap();
            self.log.push((UserId(u32::MAX), op.clone()));
            self.times.push(at);
        }
        self.t += 1;
    }

    fn scores(&mut self, user: u32, cands: &[u32]) -> Option<Vec<f64>> {
        let q = DecisionQuery {
            decision_id: 1,
            user: UserId(user),
            at: LogicalTime(self.t),
            instruction: None,
            kind: evomem_core::DecisionKind::Rank {
                candidates: cands.iter().map(|c| ItemId(*c)).collect(),
            },
        };
        let ctx = PolicyCtx {
            memory: &self.mem,
            catalog: &self.catalog,
            users: &self.users,
            now: q.at,
        };
        self.policy.recall(&ctx, &q).unwrap().context.scores
    }

    fn kind_count(&self, user: &str, kind: &RecordKind) -> usize {
        self.mem.scan_kind(&[Namespace::user(user)], kind).count()
    }

    fn labels(&self) -> Vec<&str> {
        self.log.iter().map(|(_, o)| o.label.as_str()).collect()
    }
}

#[test]
fn event_fifo_is_capped_at_lmax() {
    let mut s = Sim::new("mars");
    for k in 0..40 {
        s.observe(0, k % 120, Some(4.0));
        assert!(s.kind_count("u0", &RecordKind::Event) <= 15);
    }
    assert_eq!(s.kind_count("u0", &RecordKind::Event), 15);
    let mut s = Sim::new("mars[lmax=6]");
    for k in 0..20 {
        s.observe(0, k, None);
    }
    assert_eq!(s.kind_count("u0", &RecordKind::Event), 6);
}

#[test]
fn boost_and_demote_use_delta_plus_and_delta_minus() {
    let mut s = Sim::new("mars");
    for k in 0..10 {
        s.observe(0, k, Some(5.0));
    }
    for k in 40..65 {
        s.observe(0, k, Some(5.0));
    }
    let mut replay = MemoryState::new();
    let (mut boosts, mut demotes) = (0, 0);
    for ((_, op), at) in s.log.iter().zip(&s.times) {
        let at = *at;
        if let MemoryOp::AdjustStrength { id, delta, .. } = &op.op {
            let before = replay.get(id).unwrap().strength;
            replay.apply(&op.op, at).unwrap();
            let after = replay.get(id).unwrap().strength;
            match op.label.as_str() {
                "boost" => {
                    boosts += 1;
                    assert!((delta - 0.1).abs() < 1e-12);
                    assert!((after - (before + 0.1).min(1.0)).abs() < 1e-9);
                }
                "demote" => {
                    demotes += 1;
                    assert!((delta + 0.2).abs() < 1e-12);
                    assert!((after - (before - 0.2).max(-1.0)).abs() < 1e-9);
                }
                other => panic!("adjust_strength with label {other}"),
            }
        } else {
            replay.apply(&op.op, at).unwrap();
        }
    }
    assert!(
        boosts > 0 && demotes > 0,
        "boosts {boosts} demotes {demotes}"
    );
    assert_eq!(replay, s.mem, "replaying the ops gives the live state");
}

#[test]
fn preference_shift_demotes_then_forgets_the_old_taste() {
    let mut s = Sim::new("mars");
    for k in 0..15 {
        s.observe(1, k, Some(5.0));
    }
    let noir = |m: &MemoryState| {
        m.scan_kind(&[Namespace::user("u1")], &RecordKind::PreferenceChunk)
            .find(|r| r.text == "Noir")
            .map(|r| r.id.clone())
    };
    let id = noir(&s.mem).expect("a Noir chunk after 15 Noir items");
    for k in 40..75 {
        s.observe(1, k, Some(5.0));
    }
    assert!(
        noir(&s.mem).is_none(),
        "Noir should be forgotten after the shift"
    );
    let seq: Vec<&str> = s
        .log
        .iter()
        .filter(|(_, o)| o.op.target() == &id)
        .map(|(_, o)| o.label.as_str())
        .collect();
    let first_demote = seq.iter().position(|l| *l == "demote").unwrap();
    let forget = seq.iter().position(|l| *l == "forget").unwrap();
    assert!(first_demote < forget, "{seq:?}");
    assert!(
        seq.iter().filter(|l| **l == "demote").count() >= 2,
        "{seq:?}"
    );
    assert!(s
        .mem
        .scan_kind(&[Namespace::user("u1")], &RecordKind::PreferenceChunk)
        .any(|r| r.text == "Western"));
}

#[test]
fn negative_ratings_demote_a_liked_genre() {
    let mut s = Sim::new("mars");
    for k in 0..10 {
        s.observe(0, k, Some(5.0));
    }
    for k in 10..20 {
        s.observe(0, k, Some(1.0));
    }
    assert!(s
        .log
        .iter()
        .any(|(_, o)| o.label == "demote" && o.reason.contains("negative")));
}

#[test]
fn kcat_caps_chunks_per_category() {
    for kcat in [1usize, 2] {
        let mut s = Sim::new(&format!("mars[kcat={kcat},min_support=1]"));
        for k in 80..120 {
            s.observe(2, k, None);
        }
        let mut per_cat: BTreeMap<String, usize> = BTreeMap::new();
        for r in s
            .mem
            .scan_kind(&[Namespace::user("u2")], &RecordKind::PreferenceChunk)
        {
            *per_cat
                .entry(r.field_str("category").unwrap().to_string())
                .or_default() += 1;
        }
        assert!(!per_cat.is_empty());
        assert!(
            per_cat.values().all(|n| *n <= kcat),
            "kcat {kcat}: {per_cat:?}"
        );
    }
}

/// γ (§3.3, Appendix F): the round in which the mutation counter reaches γ
/// ends with a synthesis, and no other round does, except the first profile
/// and (agentic) a synthesis the planner asked for. Checked op by op against a
/// counter kept from the op log alone, which must also equal the counter
/// the policy writes at each round's end.
#[test]
fn synthesis_happens_in_the_round_that_reaches_gamma() {
    // Rounds that exactly reach γ, and rounds that end with 0 < mutations < γ
    // (the counter carries over), over all specs: both must occur.
    let (mut exact, mut carried) = (0, 0);
    // The default rounds (B = 5) overshoot γ = 5; smaller batches make
    // rounds of a few mutations that accumulate.
    for spec in [
        "mars",
        "mars[b=2]",
        "mars[b=1,min_support=1,gamma=3]",
        "mars[gamma=12]",
        "mars[gamma=1]",
        "mars[sched=agentic]",
    ] {
        let mut s = Sim::new(spec);
        let cfg = MarsConfig::from_spec(&PolicySpec::parse(spec).unwrap()).unwrap();
        let (gamma, agentic) = (cfg.gamma, cfg.sched == Scheduler::Agentic);
        for k in 0..60u32 {
            s.observe(0, (k * 7) % 120, Some(if k % 4 == 0 { 2.0 } else { 5.0 }));
            s.observe(1, (k * 3) % 120, None);
        }
        for user in ["u0", "u1"] {
            let prefix = format!("user:{user}:");
            // Mutations since the last synthesis, counted from the log.
            let mut since = 0u32;
            // Set at the end of a round that reached γ: the next op must be
            // the synthesis.
            let mut due: Option<u32> = None;
            let (mut syntheses, mut forced) = (0u64, 0);
            for (_, op) in s
                .log
                .iter()
                .filter(|(_, o)| o.op.target().as_str().starts_with(&prefix))
            {
                if let Some(n) = due.take() {
                    assert_eq!(
                        op.label, "synthesize",
                        "{spec} {user}: a round ended at {n} ≥ γ = {gamma} mutations without a synthesis"
                    );
                    assert_eq!(op.reason, format!("forced: {n} mutations ≥ γ = {gamma}"));
                }
                match op.label.parse::<Lifecycle>() {
                    Ok(
                        Lifecycle::Extract
                        | Lifecycle::Boost
                        | Lifecycle::Demote
                        | Lifecycle::Merge
                        | Lifecycle::Forget,
                    ) => since += 1,
                    Ok(Lifecycle::Synthesize) => {
                        syntheses += 1;
                        if !op.reason.starts_with("forced:") {
                            // Not forced, so below γ, and for a reason.
                            assert!(since < gamma, "{spec} {user}: {since} ≥ γ, {op:?}");
                            let first = syntheses == 1 && op.reason == "first profile";
                            let planned = agentic && op.reason == "planner requested";
                            assert!(
                                first || planned,
                                "{spec} {user}: synthesis after {since} < γ = {gamma} mutations: {}",
                                op.reason
                            );
                        }
                        since = 0;
                    }
                    // `event` and `pending` bookkeeping ops. The meta update
                    // that ends a round carries the policy's counter (the
                    // one after a synthesis also carries `syntheses`).
                    Err(_) => {
                        if let MemoryOp::UpdateFields { fields, .. } = &op.op {
                            if let (Some(n), false) = (
                                fields.get("mutations_since_synthesis"),
                                fields.contains_key("syntheses"),
                            ) {
                                assert_eq!(n.as_u64(), Some(u64::from(since)), "{spec} {user}");
                                if since >= gamma {
                                    due = Some(since);
                                    forced += 1;
                                    exact += usize::from(since == gamma);
                                } else {
                                    carried += usize::from(since > 0);
                                }
                            }
                        }
                    }
                }
            }
            assert_eq!(
                due, None,
                "{spec} {user}: the log ends before the synthesis"
            );
            assert!(forced >= 2, "{spec} {user}: {forced} forced syntheses");
            let meta = s
                .mem
                .get(&evomem_core::MemoryId::new(format!("user:{user}:meta")))
                .unwrap();
            let pending = meta.fields["mutations_since_synthesis"].as_u64().unwrap();
            assert_eq!(pending, u64::from(since), "{spec} {user}");
            assert!(
                pending < u64::from(gamma),
                "{spec} {user}: counter {pending} ≥ γ {gamma}"
            );
            assert_eq!(
                meta.fields["syntheses"].as_u64(),
                Some(syntheses),
                "{spec} {user}"
            );
            let p = s
                .mem
                .get(&evomem_core::MemoryId::new(format!("user:{user}:profile")))
                .unwrap();
            let words = p.text.split_whitespace().count();
            assert!((20..=300).contains(&words), "{words} words");
        }
    }
    assert!(exact > 0 && carried > 0, "exact {exact} carried {carried}");
}

#[test]
fn same_seed_gives_identical_ops() {
    let run = || {
        let mut s = Sim::new("mars[sched=agentic]");
        for k in 0..50u32 {
            s.observe(k % 3, (k * 11) % 120, Some((k % 5 + 1) as f32));
        }
        s.maintain();
        serde_json::to_string(&s.log.iter().map(|(_, o)| o).collect::<Vec<_>>()).unwrap()
    };
    assert_eq!(run(), run());
}

#[test]
fn ops_only_touch_the_observed_users_namespace() {
    let mut s = Sim::new("mars[sched=agentic]");
    for k in 0..80u32 {
        let u = k % 4;
        let ops = s.observe(u, (k * 13) % 120, Some(((k % 5) + 1) as f32));
        let prefix = format!("user:u{u}:");
        for o in &ops {
            assert!(o.op.target().as_str().starts_with(&prefix), "{:?}", o.op);
            if let MemoryOp::Create { record } = &o.op {
                assert_eq!(record.namespace, Namespace::user(&format!("u{u}")));
            }
            if let MemoryOp::Merge { sources, .. } = &o.op {
                assert!(sources.iter().all(|x| x.as_str().starts_with(&prefix)));
            }
        }
    }
}

#[test]
fn ranker_prefers_the_liked_genre_and_none_uses_the_prior_only() {
    let mut s = Sim::new("mars");
    for k in 0..14 {
        s.observe(0, k, Some(5.0));
    }
    s.maintain();
    let sc = s.scores(0, &[50, 20, 90]).unwrap();
    assert_eq!(sc.len(), 3);
    assert!(sc[1] > sc[0] && sc[1] > sc[2], "{sc:?}");
    for tiers in ["e", "f", "p", "efp"] {
        let mut s = Sim::new(&format!("mars[tiers={tiers}]"));
        for k in 0..14 {
            s.observe(0, k, Some(5.0));
        }
        s.maintain();
        let sc = s.scores(0, &[50, 20]).unwrap();
        assert!(sc[1] > sc[0], "tiers {tiers}: {sc:?}");
    }
    // tiers=none: the "LLM alone" row, familiarity only. Item 3 was seen
    // (three times), 20 and 50 never: the seen item leads, the two unseen tie.
    let mut s = Sim::new("mars[tiers=none]");
    for k in 0..10 {
        s.observe(0, k, Some(5.0));
    }
    s.observe(1, 3, Some(1.0));
    s.observe(2, 3, Some(1.0));
    let sc = s.scores(0, &[50, 3, 20]).unwrap();
    assert!(sc[1] > sc[0] && sc[0] == sc[2], "{sc:?}");
}

#[test]
fn bad_config_names_the_key() {
    let err = |spec: &str| match registry::build(&PolicySpec::parse(spec).unwrap(), &deps()) {
        Ok(_) => panic!("{spec} should fail"),
        Err(e) => e.to_string(),
    };
    assert!(err("mars[delta_minus=0.05]").contains("delta_minus"));
    assert!(err("mars[kcat=0]").contains("kcat"));
    assert!(err("mars[tiers=xq]").contains("tiers"));
    assert!(err("mars[sched=sometimes]").contains("sched"));
    assert!(err("mars[bogus=1]").contains("bogus"));
    assert!(err("mars[kcat=two]").contains("kcat"));
}

#[test]
fn grids_have_the_papers_sizes() {
    assert_eq!(registry::grid("mars", "tiers").unwrap().len(), 8);
    assert_eq!(registry::grid("mars", "kcat").unwrap().len(), 4);
    assert_eq!(registry::grid("mars", "sched").unwrap().len(), 2);
    assert!(registry::grid("mars", "nope").is_err());
    for spec in registry::grid("mars", "tiers").unwrap() {
        registry::build(&spec, &deps()).unwrap();
    }
}

#[test]
fn stats_count_lifecycle_ops() {
    let mut s = Sim::new("mars");
    for k in 0..30 {
        s.observe(0, k, Some(5.0));
    }
    let st = s.policy.stats();
    assert!(st["ops"]["extract"].as_u64().unwrap() > 0);
    assert!(st["ops"]["synthesize"].as_u64().unwrap() > 0);
    for l in Lifecycle::ALL {
        assert!(st["lifecycle_distribution"][l.as_str()].is_f64(), "{l}");
    }
    assert_eq!(st["role_calls"]["mars_categories"], 1);
    assert!(st["role_calls"]["mars_extract"].as_u64().unwrap() > 0);
    assert!(st.get("llm_errors_fell_back").is_none());
    assert!(s.labels().contains(&"event"));
}

#[test]
fn mars_new_with_the_default_config_is_the_registrys_mars() {
    let direct = Mars::new(
        "mars",
        MarsConfig::defaults().unwrap(),
        Arc::new(TestEmbedder::default()),
        Arc::new(LlmHub::offline()),
        42,
    );
    assert_eq!(direct.name(), "mars");
    let mut a = Sim::new("mars");
    let mut b = Sim::new("mars");
    b.policy = Box::new(direct);
    for s in [&mut a, &mut b] {
        for k in 0..30u32 {
            s.observe(k % 2, (k * 7) % 120, Some((k % 5 + 1) as f32));
        }
        s.maintain();
    }
    assert!(a.log.len() > 30);
    let json = |s: &Sim| serde_json::to_string(&s.log).unwrap();
    assert_eq!(json(&a), json(&b));
    assert_eq!(a.mem, b.mem);
}

/// A model that always answers with broken JSON.
struct Garbage;

impl evomem_core::LanguageModel for Garbage {
    fn id(&self) -> String {
        "garbage".into()
    }
    fn complete(
        &self,
        _req: &evomem_core::ChatRequest,
    ) -> Result<evomem_core::ChatResponse, evomem_core::LlmError> {
        Ok(evomem_core::ChatResponse {
            text: "{\"new_chunks\": [{\"category\": 17".into(),
            usage: evomem_core::Usage::default(),
        })
    }
}

/// Malformed answers are repaired once, then fall back to the offline
/// algorithm, run by run: the memory and the op log equal those of an
/// offline run, and the hub counts one repair and one fallback per run.
#[test]
fn malformed_llm_answers_fall_back_to_exactly_the_offline_memory() {
    for (spec, roles) in [
        (
            "mars",
            &["mars_categories", "mars_extract", "mars_synthesize"][..],
        ),
        (
            "mars[sched=agentic]",
            &[
                "mars_categories",
                "mars_extract",
                "mars_plan",
                "mars_synthesize",
            ][..],
        ),
    ] {
        let d = deps_with(LlmHub::with_model(Arc::new(Garbage), CacheSettings::off()).unwrap());
        let mut garbage = Sim::with_deps(spec, d.clone());
        let mut offline = Sim::new(spec);
        for s in [&mut garbage, &mut offline] {
            for k in 0..30 {
                s.observe(0, k % 20, Some(5.0));
            }
            s.maintain();
        }
        assert!(garbage.kind_count("u0", &RecordKind::PreferenceChunk) > 0);
        assert_eq!(garbage.kind_count("u0", &RecordKind::Profile), 1, "{spec}");
        assert_eq!(garbage.mem, offline.mem, "{spec}: memory differs offline");
        let json = |s: &Sim| serde_json::to_string(&s.log).unwrap();
        assert_eq!(json(&garbage), json(&offline), "{spec}: op log differs");
        // Replaying the log at its times rebuilds the state record for record.
        let mut replay = MemoryState::new();
        for ((_, op), at) in garbage.log.iter().zip(&garbage.times) {
            replay.apply(&op.op, *at).unwrap();
        }
        assert_eq!(replay, garbage.mem, "{spec}");
        // Every run: the answer, one repair turn, a fallback.
        let calls = garbage.policy.stats()["role_calls"].clone();
        let acct = d.llm.accounting();
        let reasons = d.llm.accounting_json()["fallback_reasons"].clone();
        let mut runs = 0;
        for role in roles {
            let n = calls[role].as_u64().unwrap_or(0);
            assert!(n > 0, "{spec}: no {role} call");
            let c = acct.role(role);
            assert_eq!(
                (c.runs, c.offline_runs, c.calls, c.repairs, c.fallbacks),
                (n, 0, 2 * n, n, n),
                "{spec} {role}: (runs, offline runs, calls, repairs, fallbacks)"
            );
            assert_eq!(reasons[role]["malformed_answer"], n, "{spec} {reasons}");
            runs += n;
        }
        let t = acct.totals();
        assert_eq!((t.runs, t.fallbacks), (runs, runs), "{spec}: {calls}");
    }
}

/// A model behind a wrong API key: every call is a permanent error.
struct WrongKey;

impl LanguageModel for WrongKey {
    fn id(&self) -> String {
        "wrong-key".into()
    }
    fn complete(&self, _req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Permanent("401 unauthorized".into()))
    }
}

/// A model behind a dead connection: every call is a transient error
/// (after the client's own retries). Counts the calls.
#[derive(Default)]
struct Dead {
    calls: AtomicU32,
}

impl LanguageModel for Dead {
    fn id(&self) -> String {
        "dead".into()
    }
    fn complete(&self, _req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Err(LlmError::Transient {
            message: "connection refused".into(),
            retry_after_ms: None,
        })
    }
}

/// A model a replay-only run must never reach.
struct Unreachable;

impl LanguageModel for Unreachable {
    fn id(&self) -> String {
        "unreachable".into()
    }
    fn complete(&self, _req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        panic!("a replay-only run called the backend");
    }
}

/// Observe up to `n` signals of user 0 (liked Noir items); the first error.
fn first_error(s: &mut Sim, n: u32) -> Option<(u32, PolicyError)> {
    (0..n).find_map(|k| s.try_observe(0, k % 40, Some(5.0)).err().map(|e| (k, e)))
}

#[test]
fn wrong_api_key_fails_the_mars_run_instead_of_going_offline() {
    // Categories offline, so that the first model call is the first
    // extraction (after B = 5 signals).
    let hub = LlmHub::with_model(Arc::new(WrongKey), CacheSettings::off())
        .unwrap()
        .with_role("mars_categories", Backend::Offline);
    let mut s = Sim::with_deps("mars", deps_with(hub));
    let (k, err) = first_error(&mut s, 30).expect("a wrong key must fail the run");
    assert_eq!(k, 4, "the fifth signal triggers the first extraction");
    match &err {
        PolicyError::Role { role, source } => {
            assert_eq!(role, "mars_extract");
            assert!(
                matches!(source, LlmError::Permanent(m) if m.contains("401")),
                "{source}"
            );
        }
        other => panic!("expected a role error, got {other}"),
    }
    assert!(err.to_string().contains("mars_extract"), "{err}");
    assert_eq!(s.kind_count("u0", &RecordKind::PreferenceChunk), 0);
    // Every role on the model: the category derivation fails first.
    let hub = LlmHub::with_model(Arc::new(WrongKey), CacheSettings::off()).unwrap();
    let mut s = Sim::with_deps("mars[sched=agentic]", deps_with(hub));
    let (k, err) = first_error(&mut s, 30).expect("a wrong key must fail the run");
    assert_eq!(k, 0);
    assert!(
        matches!(&err, PolicyError::Role { role, .. } if role == "mars_categories"),
        "{err}"
    );
}

#[test]
fn replay_cache_miss_fails_the_mars_run() {
    let path = std::env::temp_dir().join(format!(
        "evomem-mars-replay-miss-{}.sqlite",
        std::process::id()
    ));
    std::fs::File::create(&path).unwrap();
    let hub = LlmHub::with_model(Arc::new(Unreachable), CacheSettings::replay_only(&path)).unwrap();
    let mut s = Sim::with_deps("mars", deps_with(hub));
    let result = first_error(&mut s, 30);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let (k, err) = result.expect("a replay-cache miss must fail the run");
    assert_eq!(k, 0);
    match &err {
        PolicyError::Role { role, source } => {
            assert_eq!(role, "mars_categories");
            assert!(matches!(source, LlmError::CacheMiss { .. }), "{source}");
        }
        other => panic!("expected a role error, got {other}"),
    }
}

#[test]
fn backend_failing_every_call_fails_the_mars_run_after_the_consecutive_limit() {
    let dead = Arc::new(Dead::default());
    let hub = LlmHub::with_model(dead.clone(), CacheSettings::off()).unwrap();
    let d = deps_with(hub);
    let mut s = Sim::with_deps("mars", d.clone());
    let (k, err) = first_error(&mut s, 200).expect("a dead backend must fail the run");
    assert!(k > 0, "failed at signal {k}");
    assert_eq!(
        dead.calls.load(Ordering::Relaxed),
        DEFAULT_MAX_CONSECUTIVE_FAILURES
    );
    match &err {
        PolicyError::Role { role, source } => {
            assert!(role.starts_with("mars_"), "{role}");
            assert!(
                matches!(source, LlmError::Permanent(m) if m.contains("in a row")),
                "{source}"
            );
        }
        other => panic!("expected a role error, got {other}"),
    }
    // The calls before the limit fell back to the offline algorithms.
    assert_eq!(
        d.llm.accounting().totals().fallbacks,
        u64::from(DEFAULT_MAX_CONSECUTIVE_FAILURES - 1)
    );
}

// ------------------------------------------------------------ single pass

/// Runs (offline or model) of `role` for `user` in the hub's accounting.
fn runs_of(d: &PolicyDeps, user: &str, role: &str) -> u64 {
    d.llm.accounting_json()["per_user"][user][role]["runs"]
        .as_u64()
        .unwrap_or(0)
}

/// §4.1: the retrospective single pass compresses each user's whole history
/// in one extraction and one synthesis, while event memory keeps L_max.
#[test]
fn single_pass_makes_one_extract_and_one_synthesis_per_user() {
    let d = deps();
    let mut s = Sim::with_deps("mars[mode=single-pass]", d.clone());
    for k in 0..40u32 {
        s.observe(0, k % 40, Some(5.0)); // Noir fan
        s.observe(1, 40 + k % 40, Some(5.0)); // Western fan
        s.observe(2, 80 + k % 40, Some(if k % 3 == 0 { 1.0 } else { 4.0 }));
    }
    // Observing only records the signals.
    assert_eq!(d.llm.accounting().role("mars_extract").runs, 0);
    assert_eq!(d.llm.accounting().role("mars_synthesize").runs, 0);
    for u in ["u0", "u1", "u2"] {
        assert_eq!(s.kind_count(u, &RecordKind::Event), 15, "{u}");
        assert_eq!(s.kind_count(u, &RecordKind::PreferenceChunk), 0, "{u}");
    }
    s.maintain();
    for u in ["u0", "u1", "u2"] {
        assert_eq!(runs_of(&d, u, "mars_extract"), 1, "{u}");
        assert_eq!(runs_of(&d, u, "mars_synthesize"), 1, "{u}");
        assert_eq!(s.kind_count(u, &RecordKind::Event), 15, "{u}");
        assert_eq!(s.kind_count(u, &RecordKind::Profile), 1, "{u}");
    }
    let st = s.policy.stats();
    assert_eq!(st["role_calls"]["mars_extract"], 3, "{st}");
    assert_eq!(st["role_calls"]["mars_synthesize"], 3, "{st}");
    assert_eq!(st["single_pass"]["rounds"], 3);
    // The one extraction read all 40 signals of each user, not only the FIFO.
    assert_eq!(st["single_pass"]["signals"], 120);
    assert!(s.kind_count("u0", &RecordKind::PreferenceChunk) > 0);
    // The memory ranks: the Noir fan prefers Noir, the Western fan Westerns.
    let sc0 = s.scores(0, &[50, 20]).unwrap();
    let sc1 = s.scores(1, &[50, 20]).unwrap();
    assert!(sc0[1] > sc0[0] && sc1[0] > sc1[1], "{sc0:?} {sc1:?}");
    // A second maintain finds nothing to do.
    s.maintain();
    assert_eq!(d.llm.accounting().role("mars_extract").runs, 3);
    assert_eq!(d.llm.accounting().role("mars_synthesize").runs, 3);
    // Replaying the op log rebuilds the state.
    let mut replay = MemoryState::new();
    for ((_, op), at) in s.log.iter().zip(&s.times) {
        replay.apply(&op.op, *at).unwrap();
    }
    assert_eq!(replay, s.mem);
}

/// `sp_window` bounds what the one extraction reads.
#[test]
fn single_pass_window_caps_the_extracted_history() {
    let mut s = Sim::new("mars[mode=single-pass,sp_window=20]");
    for k in 0..50 {
        s.observe(0, k % 40, Some(5.0));
    }
    s.maintain();
    assert_eq!(s.policy.stats()["single_pass"]["signals"], 20);
}

/// Evolving protocol: a decision for a user with unprocessed signals runs
/// the pass inside `recall`, ranks on it, and the next call returns its ops.
#[test]
fn single_pass_decision_with_unprocessed_signals_runs_the_pass_first() {
    let d = deps();
    let mut s = Sim::with_deps("mars[mode=single-pass]", d.clone());
    for k in 0..30u32 {
        s.observe(0, k, Some(5.0));
    }
    let sc = s.scores(0, &[50, 20]).unwrap();
    assert!(sc[1] > sc[0], "{sc:?}");
    assert_eq!(runs_of(&d, "u0", "mars_extract"), 1);
    assert_eq!(runs_of(&d, "u0", "mars_synthesize"), 1);
    assert_eq!(s.policy.stats()["single_pass"]["at_decision"], 1);
    // Not applied yet: recall returns no ops.
    assert_eq!(s.kind_count("u0", &RecordKind::Profile), 0);
    // The next observe (another user) returns them first.
    let ops = s.observe(1, 60, Some(5.0));
    assert!(ops.iter().any(|o| o.label == "synthesize"), "{ops:?}");
    assert_eq!(s.kind_count("u0", &RecordKind::Profile), 1);
    // The same decision again needs no new pass.
    let again = s.scores(0, &[50, 20]).unwrap();
    assert_eq!(again, sc);
    assert_eq!(runs_of(&d, "u0", "mars_extract"), 1);
    // The target arrives after the decision; end of stream compresses it.
    s.observe(0, 31, Some(5.0));
    s.maintain();
    assert_eq!(runs_of(&d, "u0", "mars_extract"), 2);
    assert_eq!(runs_of(&d, "u1", "mars_extract"), 1);
    let mut replay = MemoryState::new();
    for ((_, op), at) in s.log.iter().zip(&s.times) {
        replay.apply(&op.op, *at).unwrap();
    }
    assert_eq!(replay, s.mem);
}

#[test]
fn mode_errors_name_the_key() {
    let err = |spec: &str| match registry::build(&PolicySpec::parse(spec).unwrap(), &deps()) {
        Ok(_) => panic!("{spec} should fail"),
        Err(e) => e.to_string(),
    };
    assert!(err("mars[mode=sometimes]").contains("mode"));
    assert!(err("mars[mode=single-pass,sched=agentic]").contains("mode"));
    assert!(err("mars[sp_window=-1]").contains("sp_window"));
    let cfg = |spec: &str| MarsConfig::from_spec(&PolicySpec::parse(spec).unwrap()).unwrap();
    assert_eq!(
        cfg("mars[mode=incremental]"),
        MarsConfig::defaults().unwrap()
    );
    assert_eq!(cfg("mars[mode=single-pass]").mode, Mode::SinglePass);
}

/// `mode=incremental` spelled out is the default, op for op.
#[test]
fn incremental_mode_is_the_default_behaviour() {
    let mut a = Sim::new("mars");
    let mut b = Sim::new("mars[mode=incremental]");
    for s in [&mut a, &mut b] {
        for k in 0..60u32 {
            s.observe(k % 3, (k * 7) % 120, Some((k % 5 + 1) as f32));
        }
        s.maintain();
    }
    let json = |s: &Sim| serde_json::to_string(&s.log).unwrap();
    assert_eq!(json(&a), json(&b));
    assert_eq!(a.mem, b.mem);
}

// ------------------------------------------------------------ planner targets

/// A planner model: waits, except when the prompt shows a chunk quoted as
/// `"Noir"`; then it answers `answer`, with `{noir}` replaced by the id of
/// the first such chunk.
struct Planner {
    answer: &'static str,
}

impl LanguageModel for Planner {
    fn id(&self) -> String {
        "scripted-planner".into()
    }
    fn complete(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let prompt: String = req.messages.iter().map(|m| m.content.as_str()).collect();
        let noir = prompt
            .lines()
            .find(|l| l.starts_with("- ") && l.contains("\"Noir\""))
            .and_then(|l| l.split_whitespace().nth(1));
        let text = match noir {
            Some(id) => self.answer.replace("{noir}", id),
            None => r#"{"actions": ["wait"], "reason": "nothing yet"}"#.to_string(),
        };
        Ok(ChatResponse {
            text,
            usage: evomem_core::Usage::default(),
        })
    }
}

/// Chunk id → (text, strength).
type Chunks = BTreeMap<String, (String, f64)>;

/// Build Noir beliefs with the fixed scheduler, then hand the memory to an
/// agentic MARS whose planner answers `answer`, and observe one more liked
/// Noir signal. Returns the chunks before and after, the ops of that signal
/// and the hub's deps.
fn planner_round(answer: &'static str) -> (Chunks, Chunks, Vec<PlannedOp>, PolicyDeps) {
    let mut s = Sim::new("mars");
    for k in 0..10 {
        s.observe(0, k, Some(5.0));
    }
    let chunks = |s: &Sim| -> Chunks {
        s.mem
            .scan_kind(&[Namespace::user("u0")], &RecordKind::PreferenceChunk)
            .map(|r| (r.id.0.clone(), (r.text.clone(), r.strength)))
            .collect()
    };
    let before = chunks(&s);
    let hub = LlmHub::offline().with_role(
        "mars_plan",
        Backend::Model {
            lm: Arc::new(Planner { answer }),
            model: "scripted-planner".into(),
        },
    );
    let d = deps_with(hub);
    s.policy = registry::build(&PolicySpec::parse("mars[sched=agentic]").unwrap(), &d).unwrap();
    let ops = s.observe(0, 10, Some(5.0));
    (before, chunks(&s), ops, d)
}

/// Appendix F: the planner says "demote 'Noir'" and only that chunk moves,
/// although the signal confirms it (the extractor would boost it), and no
/// extraction is needed for a targeted demote.
#[test]
fn planner_named_target_demotes_only_that_chunk() {
    let (before, after, ops, d) = planner_round(
        r#"{"actions": [{"op": "demote", "targets": ["{noir}"]}], "reason": "taste moved on"}"#,
    );
    assert!(before.len() >= 2, "{before:?}");
    assert_eq!(after.len(), before.len());
    let changed: Vec<&String> = before
        .keys()
        .filter(|id| after[*id] != before[*id])
        .collect();
    assert_eq!(changed.len(), 1, "{before:?} -> {after:?}");
    let id = changed[0];
    assert_eq!(before[id].0, "Noir");
    assert!((after[id].1 - (before[id].1 - 0.2)).abs() < 1e-9);
    let adjusts: Vec<&PlannedOp> = ops
        .iter()
        .filter(|o| matches!(o.op, MemoryOp::AdjustStrength { .. }))
        .collect();
    assert_eq!(adjusts.len(), 1);
    assert_eq!(adjusts[0].label, "demote");
    assert_eq!(d.llm.accounting().role("mars_extract").runs, 0);
    assert_eq!(d.llm.accounting().role("mars_plan").fallbacks, 0);
}

/// An answer in the old shape (bare action names) still parses and applies
/// the default rule: the extractor's assessment boosts the confirmed chunks.
#[test]
fn planner_answer_with_bare_action_names_still_runs() {
    let (before, after, ops, d) =
        planner_round(r#"{"actions": ["extract", "boost", "demote"], "reason": "old shape"}"#);
    assert_eq!(d.llm.accounting().role("mars_plan").fallbacks, 0);
    assert_eq!(d.llm.accounting().role("mars_extract").runs, 1);
    assert!(ops.iter().any(|o| o.label == "boost"), "{ops:?}");
    assert!(!ops.iter().any(|o| o.label == "demote"), "{ops:?}");
    assert!(before.keys().all(|id| after[id].1 >= before[id].1));
}

// ------------------------------------------------------------ real data

/// Retrospective leave-one-out on the first 60 users with 9 seeded negatives
/// and the harness's tie rule ([`crate::ml100k::leave_one_out`]): MARS must
/// beat chance clearly (HR@1 chance = 0.1, HR@5 = 0.5) and run every
/// lifecycle op.
#[test]
fn ml100k_sanity_run_beats_chance() {
    let Some(data) = crate::ml100k::load() else {
        return;
    };
    let mut policy = build("mars");
    let chosen: Vec<u32> = data.hist.keys().copied().take(60).collect();
    let loo = crate::ml100k::leave_one_out(policy.as_mut(), &data, &chosen, 42, |r| {
        assert!(r.context.profile.is_some());
    });
    let st = policy.stats();
    eprintln!(
        "ml-100k 60 users: HR@1 {:.3} HR@5 {:.3}; ops {}",
        loo.hr1, loo.hr5, st["ops"]
    );
    for l in ["extract", "boost", "demote", "forget", "synthesize"] {
        assert!(st["ops"][l].as_u64().unwrap_or(0) > 0, "no {l} op");
    }
    assert!(loo.hr1 > 0.2, "HR@1 {}", loo.hr1);
    assert!(loo.hr5 > 0.65, "HR@5 {}", loo.hr5);
}

/// `budget=paper` asks the model only for each user's extraction,
/// synthesis and rank: the domain's categories are the metadata-derived
/// ones, reported as a scheduled offline run, never a model call;
/// `lm_categories=true` sends them to the model again.
#[test]
fn budget_paper_schedules_the_categories_offline() {
    for (spec, model_calls) in [
        ("mars[budget=paper]", 0),
        ("mars[budget=paper,lm_categories=true]", 1),
    ] {
        let d = deps_with(LlmHub::with_model(Arc::new(Garbage), CacheSettings::off()).unwrap());
        let mut s = Sim::with_deps(spec, d.clone());
        for k in 0..20 {
            s.observe(0, k, Some(5.0));
        }
        s.maintain();
        let st = s.policy.stats();
        let c = d.llm.accounting().role("mars_categories");
        assert_eq!(c.runs, model_calls, "{spec}: {st}");
        let scheduled = st["scheduled_offline"]["mars_categories"]
            .as_u64()
            .unwrap_or(0);
        assert_eq!(scheduled, 1 - model_calls, "{spec}: {st}");
        assert_eq!(
            d.llm.accounting().role("mars_extract_brief").runs,
            1,
            "{spec}"
        );
    }
}

/// Records the texts of every `embed` call, in order.
#[derive(Default)]
struct RecordingEmbedder {
    inner: TestEmbedder,
    calls: std::sync::Mutex<Vec<Vec<String>>>,
}

impl evomem_core::Embedder for RecordingEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
        if let Ok(mut c) = self.calls.lock() {
            c.push(texts.iter().map(|t| t.to_string()).collect());
        }
        self.inner.embed(texts)
    }
}

#[test]
fn profiles_are_embedded_in_one_call_before_decisions() {
    // Each profile is a long text; the decisions read them one user at a
    // time. `maintain(BeforeDecisions)` embeds them all in one call instead,
    // and the decisions then find them cached.
    let embedder = Arc::new(RecordingEmbedder::default());
    let d = PolicyDeps {
        embedder: embedder.clone(),
        llm: Arc::new(LlmHub::offline()),
        seed: 42,
    };
    let mut s = Sim::with_deps("mars", d);
    for user in 0..3 {
        for k in 0..12 {
            s.observe(user, (user * 40 + k * 3) % 120, Some(4.0));
        }
    }
    s.maintain();
    let profiles: Vec<String> = (0..3)
        .filter_map(|u| {
            s.mem
                .scan_kind(&[Namespace::user(&format!("u{u}"))], &RecordKind::Profile)
                .next()
                .map(|r| r.text.clone())
        })
        .collect();
    assert_eq!(profiles.len(), 3, "every user has a profile");
    let before = embedder.calls.lock().unwrap().len();
    let last = embedder
        .calls
        .lock()
        .unwrap()
        .last()
        .cloned()
        .unwrap_or_default();
    for p in &profiles {
        assert!(
            last.contains(p),
            "profile not in maintain's last embed call"
        );
    }
    for u in 0..3 {
        assert!(s.scores(u, &[0, 40, 80]).is_some());
    }
    let calls = embedder.calls.lock().unwrap();
    for call in &calls[before..] {
        for p in &profiles {
            assert!(!call.contains(p), "a decision embedded a profile again");
        }
    }
}
