//! The offline DB agent on LifelongAgentBench's 500 tasks, judged for real:
//! its success rate with no memory (a floor), that a memory of the same task
//! keeps every win and steers a failure to a different answer, and that
//! adapting other solved tasks' trajectories solves tasks the parser alone
//! fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use evomem_arena::lifelong::agent::{run_episode, EpisodeResult};
use evomem_arena::lifelong::judge::judge;
use evomem_arena::lifelong::nl2sql::hypotheses;
use evomem_arena::lifelong::task::load_tasks;
use evomem_arena::lifelong::{DbTask, MemoryView};
use evomem_kit::RoleCaller;
use evomem_llm::LlmHub;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

/// Measured: 263 of 500 (0.526) with no memory; the floor sits a little under.
const NO_MEMORY_FLOOR: f64 = 0.50;

/// Measured: adaptation of the top-3 same-skill solved tasks solves 4 of the
/// 98 parser failures it can try on first sight (the agent trusts its own
/// parse first, so adaptation only runs when every hypothesis came back
/// empty or failed); the floor sits a little under.
const TRANSFER_FLOOR: usize = 3;
/// Measured: 8 of the same 98 once the task has failed once (adapted
/// answers then go before the remaining hypotheses); the floor sits under.
const RETRY_FLOOR: usize = 6;

struct Outcome {
    success: bool,
    memory: MemoryView,
}

fn tasks() -> Option<&'static Vec<DbTask>> {
    static TASKS: OnceLock<Option<Vec<DbTask>>> = OnceLock::new();
    TASKS
        .get_or_init(|| {
            let dir = evomem_kit::testing::shared_dataset("lifelong-agent-bench")?;
            Some(load_tasks(&dir.join("db_bench_data.json")).expect("task file loads"))
        })
        .as_ref()
}

fn caller() -> RoleCaller {
    RoleCaller::new(Arc::new(LlmHub::offline()))
}

fn run(caller: &mut RoleCaller, task: &DbTask, memories: &[MemoryView]) -> Outcome {
    let res: EpisodeResult = run_episode(caller, task, memories).expect("episode runs");
    let verdict = judge(
        task,
        &res.env,
        res.committed.as_ref(),
        res.committed_sql.as_deref(),
    );
    Outcome {
        success: verdict.success,
        memory: MemoryView {
            task: task.instruction.clone(),
            table: task.table.name.clone(),
            columns: task.table.columns.iter().map(|c| c.name.clone()).collect(),
            answer: res.episode.answer.clone(),
            steps: res.episode.steps.clone(),
            success: verdict.success,
            score: 1.0,
        },
    }
}

/// The no-memory pass, run once for all tests.
fn first_pass() -> Option<&'static Vec<Outcome>> {
    static PASS: OnceLock<Option<Vec<Outcome>>> = OnceLock::new();
    PASS.get_or_init(|| {
        let tasks = tasks()?;
        let mut c = caller();
        Some(tasks.iter().map(|t| run(&mut c, t, &[])).collect())
    })
    .as_ref()
}

fn kind(task: &DbTask) -> &'static str {
    let has = |s: &str| task.skills.iter().any(|k| k == s);
    if has("insert") {
        "insert"
    } else if has("update") {
        "update"
    } else if has("delete") {
        "delete"
    } else {
        "select"
    }
}

fn normalise(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(';')
        .trim()
        .to_lowercase()
}

#[test]
fn no_memory_success_rate_by_kind_and_skill() {
    let (Some(tasks), Some(pass)) = (tasks(), first_pass()) else {
        return;
    };
    let mut by_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut by_skill: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (t, o) in tasks.iter().zip(pass) {
        let e = by_kind.entry(kind(t)).or_default();
        e.0 += usize::from(o.success);
        e.1 += 1;
        for s in &t.skills {
            let e = by_skill.entry(s.as_str()).or_default();
            e.0 += usize::from(o.success);
            e.1 += 1;
        }
    }
    let solved = pass.iter().filter(|o| o.success).count();
    let rate = solved as f64 / tasks.len() as f64;
    println!("no memory: {solved}/{} = {rate:.3}", tasks.len());
    for (k, (s, n)) in &by_kind {
        println!("  kind {k:<8} {s:>3}/{n:<3} = {:.3}", *s as f64 / *n as f64);
    }
    for (k, (s, n)) in &by_skill {
        println!(
            "  skill {k:<48} {s:>3}/{n:<3} = {:.3}",
            *s as f64 / *n as f64
        );
    }
    assert!(
        rate >= NO_MEMORY_FLOOR,
        "success rate {rate:.3} under the floor {NO_MEMORY_FLOOR}"
    );
}

#[test]
fn same_task_memory_keeps_wins_and_changes_failures() {
    let (Some(tasks), Some(pass)) = (tasks(), first_pass()) else {
        return;
    };
    let mut c = caller();
    let (mut kept, mut changed, mut recovered, mut failures_with_alternative) = (0, 0, 0, 0);
    for (t, first) in tasks.iter().zip(pass) {
        let second = run(&mut c, t, std::slice::from_ref(&first.memory));
        if first.success {
            assert!(
                second.success,
                "task {} solved without memory, lost with its own memory",
                t.index
            );
            kept += 1;
            continue;
        }
        // What the failed memory bans: its committed SQL and the statements
        // that errored or returned nothing.
        let mut banned: BTreeSet<String> =
            first.memory.answer.iter().map(|a| normalise(a)).collect();
        for s in &first.memory.steps {
            if !s.ok || s.observation.starts_with("[]") {
                banned.insert(normalise(&s.action));
            }
        }
        let alternative = hypotheses(&t.instruction, &t.table)
            .iter()
            .any(|h| !banned.contains(&normalise(h)));
        if alternative {
            failures_with_alternative += 1;
            assert_ne!(
                second.memory.answer.as_deref().map(normalise),
                first.memory.answer.as_deref().map(normalise),
                "task {}: a failed memory of the same task must change the committed SQL",
                t.index
            );
            changed += 1;
        }
        recovered += usize::from(second.success);
    }
    println!(
        "same-task memory: kept {kept} wins; {failures_with_alternative} failures had an untried hypothesis, {changed} changed answer, {recovered} recovered"
    );
}

#[test]
fn adapting_other_solved_tasks_solves_some_parser_failures() {
    let (Some(tasks), Some(pass)) = (tasks(), first_pass()) else {
        return;
    };
    let words = |s: &str| -> BTreeSet<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_lowercase)
            .collect()
    };
    let skillset = |t: &DbTask| {
        let mut s = t.skills.clone();
        s.sort();
        s
    };
    let mut c = caller();
    let (mut attempted, mut solved, mut solved_after_failure) = (0, 0, 0);
    for (i, t) in tasks.iter().enumerate() {
        if pass[i].success {
            continue;
        }
        let mine = words(&t.instruction);
        let skills = skillset(t);
        let mut pool: Vec<(usize, usize)> = tasks
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && pass[*j].success && skillset(o) == skills)
            .map(|(j, o)| (words(&o.instruction).intersection(&mine).count(), j))
            .collect();
        if pool.is_empty() {
            continue;
        }
        pool.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let memories: Vec<MemoryView> = pool
            .iter()
            .take(3)
            .map(|(_, j)| pass[*j].memory.clone())
            .collect();
        attempted += 1;
        solved += usize::from(run(&mut c, t, &memories).success);
        // After a failure of its own, the agent tries the neighbours'
        // adapted answers before its other hypotheses.
        let mut with_own = vec![pass[i].memory.clone()];
        with_own.extend(memories);
        solved_after_failure += usize::from(run(&mut c, t, &with_own).success);
    }
    println!("transfer: {solved} of {attempted} parser failures (with solved same-skill tasks to adapt) solved by adaptation on first sight, {solved_after_failure} after one failure of their own");
    assert!(
        solved_after_failure >= RETRY_FLOOR,
        "adaptation after a failure solved {solved_after_failure} of {attempted}, under the floor {RETRY_FLOOR}"
    );
    assert!(
        solved >= TRANSFER_FLOOR,
        "adaptation solved {solved} of {attempted} parser failures, under the floor {TRANSFER_FLOOR}"
    );
}
