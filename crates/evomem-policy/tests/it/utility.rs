//! MemRL, MemRL-4, MemRL+UCB and RoMeRL on scripted episodes: the utility
//! update, the per-task cap and its least-updated replacement, RoMeRL's
//! fixed four coordinates with warm-started replacement, the consolidated /
//! adaptive assignment and its ablations, the shared rules for nulled
//! memories (`actionless`, `replace_rule`), and determinism.

use evomem_core::{
    Catalog, DecisionKind, DecisionQuery, Episode, EpisodeStep, Feedback, LogicalTime, MemoryState,
    Outcome, Policy, PolicyCtx, TaskRequest, UserId,
};
use evomem_kit::testing::TestEmbedder;
use evomem_llm::LlmHub;
use evomem_policy::registry::{build, PolicyDeps, PolicySpec};
use evomem_policy::utility::{fields, TrajectoryRecord};
use std::sync::Arc;

struct Harness {
    policy: Box<dyn Policy>,
    user: u32,
    memory: MemoryState,
    catalog: Catalog,
    t: u64,
}

fn task(id: &str, text: &str) -> TaskRequest {
    TaskRequest {
        id: id.into(),
        text: text.into(),
        attributes: Default::default(),
    }
}

impl Harness {
    fn new(spec: &str) -> Self {
        let deps = PolicyDeps {
            embedder: Arc::new(TestEmbedder::new(64)),
            llm: Arc::new(LlmHub::offline()),
            seed: 7,
        };
        let policy = build(&PolicySpec::parse(spec).unwrap(), &deps).unwrap();
        Self {
            policy,
            user: 0,
            memory: MemoryState::new(),
            catalog: Catalog::default(),
            t: 0,
        }
    }
}

fn ctx<'a>(memory: &'a MemoryState, catalog: &'a Catalog, t: u64) -> PolicyCtx<'a> {
    PolicyCtx {
        memory,
        catalog,
        users: &[],
        now: LogicalTime(t),
    }
}

impl Harness {
    /// One decision on `t` answered with `answer`, judged `success`.
    /// Returns the ids retrieved.
    fn step(&mut self, t: &TaskRequest, answer: &str, success: bool) -> Vec<String> {
        self.step_with(t, Some(answer), success)
    }

    /// [`Harness::step`] where `answer` may be `None`: an episode that
    /// reused a null action (no statement, no steps), as the arena's agent
    /// produces after retrieving a nulled memory.
    fn step_with(&mut self, t: &TaskRequest, answer: Option<&str>, success: bool) -> Vec<String> {
        self.t += 1;
        let q = DecisionQuery {
            decision_id: self.t,
            user: UserId(self.user),
            at: LogicalTime(self.t),
            instruction: Some(t.text.clone()),
            kind: DecisionKind::Act { task: t.clone() },
        };
        let recall = self
            .policy
            .recall(&ctx(&self.memory, &self.catalog, self.t), &q)
            .unwrap();
        let used: Vec<String> = recall.trace.used.iter().map(|u| u.id.0.clone()).collect();
        let steps: Vec<EpisodeStep> = answer
            .map(|a| EpisodeStep {
                action: a.into(),
                observation: if success {
                    "[(1,)]".into()
                } else {
                    "ERROR: no such column".into()
                },
                ok: success,
            })
            .into_iter()
            .collect();
        let fb = Feedback {
            decision_id: self.t,
            user: Some(UserId(self.user)),
            decided_at: q.at,
            observed_at: LogicalTime(self.t),
            outcome: Outcome {
                reward: if success { 1.0 } else { 0.0 },
                success: Some(success),
                episode: Some(Episode {
                    task: t.clone(),
                    steps,
                    answer: answer.map(str::to_string),
                }),
                ..Outcome::default()
            },
            trace: recall.trace,
        };
        let ops = self
            .policy
            .feedback(&ctx(&self.memory, &self.catalog, self.t), &fb)
            .unwrap();
        for op in ops {
            self.memory.apply(&op.op, LogicalTime(self.t)).unwrap();
        }
        used
    }

    fn records(&self) -> Vec<TrajectoryRecord> {
        self.memory
            .iter_all()
            .filter_map(TrajectoryRecord::read)
            .collect()
    }

    fn of_task(&self, id: &str) -> Vec<TrajectoryRecord> {
        self.records()
            .into_iter()
            .filter(|r| r.task_id == id)
            .collect()
    }
}

#[test]
fn memrl_pool_grows_and_retrieved_memories_follow_the_q_rule() {
    let mut h = Harness::new("memrl[delta=-1,epsilon=0]");
    let a = task("a", "insert a payment for member 102");
    h.step(&a, "INSERT 1", true);
    assert_eq!(h.of_task("a").len(), 1);
    assert_eq!(h.of_task("a")[0].q, 0.5);
    let used = h.step(&a, "INSERT 2", true);
    assert_eq!(used.len(), 1);
    let first = h.records().into_iter().find(|r| r.id.0 == used[0]).unwrap();
    // 0.7 * 0.5 + 0.3 * 1
    assert!((first.q - 0.65).abs() < 1e-12, "{}", first.q);
    assert_eq!(first.updates, 1);
    h.step(&a, "INSERT 3", false);
    assert_eq!(h.of_task("a").len(), 3, "the pool grows with every episode");
    let again = h.records().into_iter().find(|r| r.id.0 == used[0]).unwrap();
    assert!((again.q - 0.455).abs() < 1e-12, "{}", again.q);
}

#[test]
fn memrl_cap_replaces_the_least_updated_memory() {
    let mut h = Harness::new("memrl[cap=2,delta=-1,epsilon=0,k_ret=1]");
    let a = task("a", "delete the cancelled orders");
    h.step(&a, "D1", true); // traj:a:1
    h.step(&a, "D2", true); // retrieves traj:a:1 (updated), adds traj:a:2
    assert_eq!(h.of_task("a").len(), 2);
    // traj:a:1 has 1 update, traj:a:2 has 0: the next write (after this
    // step's update of the retrieved memory) evicts the least-updated.
    let used = h.step(&a, "D3", true);
    let ids: Vec<String> = h.of_task("a").iter().map(|r| r.id.0.clone()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"traj:user:0:a:3".to_string()));
    // The retrieved one was just updated, so the other one went.
    assert!(ids.contains(&used[0]), "{ids:?} {used:?}");
}

/// MemRL+UCB's bonus `c·sqrt(ln(n+1)/(updates+1))` favours memories that
/// were updated less: over the same scripted episodes, the memories UCB
/// retrieves have fewer updates at the moment they are retrieved, and UCB
/// spreads its retrievals over more distinct memories, than plain MemRL.
#[test]
fn memrl_ucb_retrieves_less_updated_memories() {
    let tasks: Vec<TaskRequest> = (0..3)
        .map(|i| {
            task(
                &format!("t{i}"),
                &format!("select rows from table {i} where x > {i}"),
            )
        })
        .collect();
    // (mean updates of a retrieved memory when retrieved, distinct memories
    // retrieved, the trace)
    let run = |spec: &str| {
        let mut h = Harness::new(spec);
        let (mut updates, mut retrieved) = (Vec::new(), std::collections::BTreeSet::new());
        let mut trace = Vec::new();
        for round in 0..8 {
            for (i, t) in tasks.iter().enumerate() {
                let before: std::collections::BTreeMap<String, u64> = h
                    .records()
                    .into_iter()
                    .map(|r| (r.id.0.clone(), r.updates))
                    .collect();
                let used = h.step(t, &format!("S{i}{round}"), (i + round) % 3 != 0);
                for id in &used {
                    updates.push(before.get(id).copied().unwrap_or(0) as f64);
                    retrieved.insert(id.clone());
                }
                trace.push(used);
            }
        }
        let mean = updates.iter().sum::<f64>() / updates.len().max(1) as f64;
        (mean, retrieved.len(), trace)
    };
    let plain = run("memrl[delta=-1,epsilon=0,k_ret=1]");
    assert_eq!(
        plain.2,
        run("memrl[delta=-1,epsilon=0,k_ret=1]").2,
        "deterministic"
    );
    // An unsaturated bonus (b_max above any bonus this run reaches).
    let ucb = run("memrl[delta=-1,epsilon=0,k_ret=1,ucb=true,c_ucb=1,b_max=100]");
    assert!(
        ucb.0 < plain.0,
        "UCB retrieved memories with {:.2} updates on average, plain MemRL {:.2}",
        ucb.0,
        plain.0
    );
    assert!(
        ucb.1 > plain.1,
        "UCB retrieved {} distinct memories, plain MemRL {}",
        ucb.1,
        plain.1
    );
}

#[test]
fn romerl_keeps_at_most_four_coordinates_per_task_with_warm_started_q() {
    let mut h = Harness::new("romerl");
    let a = task("a", "update salary for engineers");
    let b = task("b", "count orders per region");
    for i in 0..12 {
        h.step(&a, &format!("A{}", i % 5), i % 3 != 0);
        h.step(&b, &format!("B{}", i % 4), i % 2 == 0);
        assert!(h.of_task("a").len() <= 4 && h.of_task("b").len() <= 4);
    }
    let coords: Vec<String> = h
        .of_task("a")
        .iter()
        .filter_map(|r| r.coordinate.clone())
        .collect();
    assert_eq!(coords.len(), 4, "{coords:?}");
    // Replacement keeps Q (warm start) and resets n_post.
    h.step(&task("z", "unrelated text about bananas"), "Z", true);
    let pac = h
        .of_task("a")
        .into_iter()
        .find(|r| r.coordinate.as_deref() == Some("PAC"))
        .unwrap();
    let used = h.step(&a, "A-new-success", true);
    // Nine coordinates exist, k_ret = 10: every one was retrieved.
    assert!(used.contains(&pac.id.0), "{used:?}");
    let pac2 = h
        .of_task("a")
        .into_iter()
        .find(|r| r.coordinate.as_deref() == Some("PAC"))
        .unwrap();
    assert_eq!(pac2.signature, "a-new-success");
    assert_eq!(pac2.n_post, 0);
    assert_eq!(pac2.updates, pac.updates + 1, "counts carry over");
    // The coordinate's Q after this step's update, never Q_init again.
    assert!(
        (pac2.q - (0.7 * pac.q + 0.3)).abs() < 1e-12,
        "{} vs {}",
        pac2.q,
        pac.q
    );
}

#[test]
fn romerl_consolidated_success_is_the_best_evidenced_answer() {
    let mut h = Harness::new("romerl");
    let a = task("a", "list the top products");
    h.step(&a, "S1", true); // PCC = S1 (1)
    h.step(&a, "S2", true); // PAC = S2 (1)
    h.step(&a, "S2", true); // PAC evidence 2 > PCC 1 -> swap
    let by = |c: &str| {
        h.of_task("a")
            .into_iter()
            .find(|r| r.coordinate.as_deref() == Some(c))
            .unwrap()
    };
    assert_eq!(by("PCC").signature, "s2");
    assert_eq!(by("PCC").evidence, 2);
    assert_eq!(by("PAC").signature, "s1");
    // consolidate=first never swaps.
    let mut f = Harness::new("romerl[consolidate=first]");
    f.step(&a, "S1", true);
    f.step(&a, "S2", true);
    f.step(&a, "S2", true);
    let pcc = f
        .of_task("a")
        .into_iter()
        .find(|r| r.coordinate.as_deref() == Some("PCC"))
        .unwrap();
    assert_eq!(pcc.signature, "s1");
}

#[test]
fn romerl_ablations_drop_their_coordinate() {
    let a = task("a", "remove the expired rows");
    for (spec, missing) in [("romerl[ncc=false]", "NCC"), ("romerl[pac=false]", "PAC")] {
        let mut h = Harness::new(spec);
        for i in 0..6 {
            h.step(&a, &format!("X{i}"), i % 2 == 0);
        }
        let coords: Vec<String> = h
            .of_task("a")
            .iter()
            .filter_map(|r| r.coordinate.clone())
            .collect();
        assert!(!coords.contains(&missing.to_string()), "{spec}: {coords:?}");
        assert_eq!(coords.len(), 3, "{spec}: {coords:?}");
    }
}

#[test]
fn trajectory_policies_refuse_ranking_decisions() {
    for spec in ["memrl", "romerl"] {
        let mut h = Harness::new(spec);
        let q = DecisionQuery::rank(1, UserId(0), LogicalTime(1), vec![]);
        let err = h
            .policy
            .recall(&ctx(&h.memory, &h.catalog, 0), &q)
            .unwrap_err();
        assert!(err.to_string().contains("rank"), "{err}");
    }
    assert!(fields::NOISY == "noisy");
}

#[test]
fn an_agent_never_retrieves_another_agents_trajectories() {
    for spec in [
        "memrl[delta=-1]",
        "memrl[cap=4,ucb=true,delta=-1]",
        "romerl",
    ] {
        let mut h = Harness::new(spec);
        let a = task("a", "insert a payment for member 102");
        h.user = 1;
        h.step(&a, "A1", true);
        h.step(&a, "A2", false);
        h.user = 2;
        // The same task text: the most similar memories possible.
        let used = h.step(&a, "B1", true);
        assert!(used.is_empty(), "{spec}: user 2 saw {used:?}");
        let used = h.step(&a, "B2", true);
        let own: Vec<String> = h
            .memory
            .iter_all()
            .filter(|r| r.namespace.as_str().ends_with(":2"))
            .map(|r| r.id.0.clone())
            .collect();
        assert!(!used.is_empty(), "{spec}");
        assert!(
            used.iter().all(|u| own.contains(u)),
            "{spec}: {used:?} not in {own:?}"
        );
    }
}

/// The arena's noise injection on `id`: action and trajectory nulled.
fn null_action(h: &mut Harness, id: &evomem_core::MemoryId) {
    use evomem_core::MemoryOp;
    let fields = [
        (fields::ANSWER.to_string(), serde_json::Value::Null),
        (fields::STEPS.to_string(), serde_json::json!([])),
        (fields::SIGNATURE.to_string(), serde_json::json!("")),
    ]
    .into_iter()
    .collect();
    h.memory
        .apply(
            &MemoryOp::UpdateFields {
                id: id.clone(),
                fields,
                text: None,
                embedding: None,
            },
            LogicalTime(h.t),
        )
        .unwrap();
}

#[test]
fn romerl_replaces_a_nulled_representative_with_the_next_trajectory() {
    use evomem_core::MemoryId;
    let mut h = Harness::new("romerl[actionless=replace]");
    let a = task("a", "count the orders per region");
    h.step(&a, "S1", true); // PCC = S1
    let pcc = |h: &Harness| {
        h.of_task("a")
            .into_iter()
            .find(|r| r.coordinate.as_deref() == Some("PCC"))
            .unwrap()
    };
    let id: MemoryId = pcc(&h).id;
    null_action(&mut h, &id);
    assert!(!pcc(&h).has_action);
    let q_before = pcc(&h).q;
    h.step(&a, "S1", true);
    let after = pcc(&h);
    assert!(after.has_action, "the nulled PCC was replaced");
    assert_eq!(after.signature, "s1");
    assert_eq!(after.id, id, "same coordinate");
    // It was retrieved and updated with reward 1, then replaced: the
    // coordinate's Q carries over.
    assert!((after.q - (0.7 * q_before + 0.3)).abs() < 1e-12);
    assert_eq!(
        h.of_task("a").len(),
        1,
        "no PAC: the replacement filled the PCC"
    );
}

/// `actionless=keep` (the default for every design): a nulled
/// representative is a representative like any other, so a new success
/// with another answer goes to the adaptive coordinate and the nulled PCC
/// stays until the 2×2 dynamics (evidence) move it.
#[test]
fn romerl_keeps_a_nulled_representative_by_default() {
    let mut h = Harness::new("romerl");
    let a = task("a", "count the orders per region");
    h.step(&a, "S1", true);
    let pcc = h.of_task("a")[0].id.clone();
    null_action(&mut h, &pcc);
    h.step(&a, "S1", true);
    let recs = h.of_task("a");
    let find = |c: &str| recs.iter().find(|r| r.coordinate.as_deref() == Some(c));
    assert!(!find("PCC").unwrap().has_action, "the nulled PCC stays");
    assert_eq!(find("PAC").unwrap().signature, "s1");
}

/// The same key on MemRL: `actionless=replace` writes the task's next
/// trajectory over its nulled memory (same id, Q kept), where the default
/// adds a memory beside it.
#[test]
fn memrl_replaces_a_nulled_memory_only_with_actionless_replace() {
    for (spec, replaced) in [
        ("memrl[delta=-1,epsilon=0]", false),
        ("memrl[delta=-1,epsilon=0,actionless=replace]", true),
    ] {
        let mut h = Harness::new(spec);
        let a = task("a", "count the orders per region");
        h.step(&a, "S1", true);
        let first = h.of_task("a")[0].clone();
        null_action(&mut h, &first.id);
        h.step(&a, "S2", true);
        let recs = h.of_task("a");
        let nulled_left = recs.iter().any(|r| !r.has_action);
        assert_eq!(recs.len(), if replaced { 1 } else { 2 }, "{spec}");
        assert_eq!(nulled_left, !replaced, "{spec}");
        if replaced {
            assert_eq!(recs[0].id, first.id, "{spec}: replaced in place");
            assert_eq!(recs[0].signature, "s2");
            // Retrieved (the only memory), updated with reward 1, replaced.
            assert!((recs[0].q - (0.7 * first.q + 0.3)).abs() < 1e-12, "{spec}");
            assert_eq!(recs[0].updates, first.updates + 1, "{spec}");
        }
    }
}

/// RoMeRL retrieves through the same gate and exploration as MemRL: with a
/// gate no other task passes, only the task's own coordinates come back;
/// with `delta=-1` the other task's do too; `epsilon=1` explores on every
/// decision, for both designs alike.
#[test]
fn romerl_and_memrl_share_the_gate_and_exploration() {
    let a = task("a", "count the orders per region");
    let b = task("b", "delete every cancelled payment of member 7");
    for family in ["romerl", "memrl"] {
        let other_task_retrieved = |delta: &str| {
            let mut h = Harness::new(&format!("{family}[delta={delta},epsilon=0]"));
            h.step(&a, "A1", true);
            h.step(&b, "B1", true);
            let used = h.step(&a, "A2", true);
            let b_ids: Vec<String> = h.of_task("b").iter().map(|r| r.id.0.clone()).collect();
            used.iter().any(|u| b_ids.contains(u))
        };
        assert!(
            !other_task_retrieved("0.99"),
            "{family}: the gate let task b through"
        );
        assert!(
            other_task_retrieved("-1"),
            "{family}: no gate, task b must be a candidate"
        );
        let mut h = Harness::new(&format!("{family}[delta=-1,epsilon=1]"));
        for i in 0..3 {
            h.step(&a, &format!("A{i}"), i % 2 == 0);
        }
        assert_eq!(h.policy.stats()["explored"], 3, "{family}");
    }
}

/// The replacement rule is one rule (issue 56): a MemRL and a RoMeRL memory
/// that hold the same nulled entry (a success-derived one, then a
/// failure-derived one) go through the same scripted episodes (an episode
/// that reused the null action, a failure, a success, each with its own
/// answer) and must agree after every episode on how many of the task's
/// entries are nulled, by outcome polarity, under `actionless=replace`
/// with each `replace_rule` (and its default). Under `keep` neither cleans
/// the nulled entry (the pool and the slots then differ in how many null
/// trajectories they add, which is their write rule, not a cleaning).
#[test]
fn both_designs_clean_a_nulled_entry_alike_under_each_replace_rule() {
    let a = task("a", "count the orders per region");
    // (answer, success): `None` reused the null action and failed.
    let script: [(Option<&str>, bool); 5] = [
        (None, false),
        (Some("F2"), false),
        (Some("S2"), true),
        (None, false),
        (Some("S3"), true),
    ];
    // (nulled success-derived entries, nulled failure-derived entries)
    // of task `a` after each scripted episode.
    let trace = |family: &str, keys: &str, nulled_success: bool| -> Vec<(usize, usize)> {
        let mut h = Harness::new(&format!("{family}[delta=-1,epsilon=0{keys}]"));
        let first = if nulled_success { "S1" } else { "F1" };
        h.step(&a, first, nulled_success);
        let held = h.of_task("a");
        assert_eq!(held.len(), 1, "{family}: one entry before the noise");
        null_action(&mut h, &held[0].id);
        let mut out = Vec::new();
        for (answer, success) in script {
            h.step_with(&a, answer, success);
            let nulled: Vec<TrajectoryRecord> = h
                .of_task("a")
                .into_iter()
                .filter(|r| !r.has_action)
                .collect();
            out.push((
                nulled.iter().filter(|r| r.success).count(),
                nulled.iter().filter(|r| !r.success).count(),
            ));
        }
        out
    };
    for keys in [
        ",actionless=replace",
        ",actionless=replace,replace_rule=same_polarity",
        ",actionless=replace,replace_rule=any",
    ] {
        for nulled_success in [true, false] {
            let memrl = trace("memrl", keys, nulled_success);
            let romerl = trace("romerl", keys, nulled_success);
            assert_eq!(
                memrl,
                romerl,
                "[{keys}] nulled {}: MemRL cleans {memrl:?}, RoMeRL {romerl:?}",
                if nulled_success { "success" } else { "failure" }
            );
        }
    }
    for family in ["memrl", "romerl"] {
        for nulled_success in [true, false] {
            let kept = trace(family, "", nulled_success);
            assert!(
                kept.iter()
                    .all(|&(s, f)| if nulled_success { s >= 1 } else { f >= 1 }),
                "{family} under keep cleaned the nulled entry: {kept:?}"
            );
        }
    }
    // The rules differ, so the comparison above means something: after the
    // first episode (a failure that reused the null action) a nulled
    // success is cleaned under `any` and waits under `same_polarity`.
    let rule = |r: &str| {
        trace(
            "memrl",
            &format!(",actionless=replace,replace_rule={r}"),
            true,
        )
    };
    assert_eq!(rule("any")[0], (0, 1));
    assert_eq!(rule("same_polarity")[0], (1, 1));
    assert_eq!(trace("memrl", "", true)[0], (1, 1), "keep cleans nothing");
}

/// `replace_rule` has the same values and default in both families'
/// tables, and a bad value is refused by both.
#[test]
fn replace_rule_is_one_key_for_both_designs() {
    use evomem_policy::registry::family;
    let key = |f: &str| {
        family(f)
            .unwrap()
            .keys
            .iter()
            .find(|k| k.name == "replace_rule")
            .map(|k| (format!("{:?}", k.ty), k.default))
            .unwrap()
    };
    assert_eq!(key("memrl"), key("romerl"));
    assert_eq!(key("memrl").1, "same_polarity");
    let deps = PolicyDeps {
        embedder: Arc::new(TestEmbedder::new(64)),
        llm: Arc::new(LlmHub::offline()),
        seed: 7,
    };
    for f in ["memrl", "romerl"] {
        let spec = PolicySpec::parse(&format!("{f}[replace_rule=sometimes]")).unwrap();
        assert!(build(&spec, &deps).is_err(), "{f}");
    }
}
