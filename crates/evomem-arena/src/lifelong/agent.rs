//! The frozen decider of the DB arena: the `act` role and the episode loop.
//!
//! The memory policies under test differ only in which trajectories they
//! retrieve; the decider that reads them is fixed. [`ActRole`] is one step
//! of it: given the task, the table, the retrieved memories and the steps so
//! far, execute one more SQL statement or commit. With a model configured it
//! asks the model (prompt `prompts/act.md`); offline it runs
//! [`offline_act`], a deterministic algorithm over two sources of candidate
//! statements: case-based adaptation of successful memories
//! ([`super::adapt`]) and the rule-based parser ([`super::nl2sql`]).
//! [`run_episode`] drives the role against a fresh [`SqlEnv`] for at most
//! [`MAX_STEPS`] statements and returns what was committed, for the judge.
//!
//! The agent sees only a [`DbTask`]'s public fields; the leak canary test at
//! the end of this file checks that the role input never carries the
//! ground truth.

use super::adapt::adapt;
use super::nl2sql;
use super::sqlenv::{SqlEnv, StepOutcome, MAX_STEPS};
use super::types::{Cell, Column, DbTask, MemoryView, Table};
use crate::error::ArenaError;
use evomem_core::{Episode, EpisodeStep, LlmError, Role, TaskRequest};
use evomem_kit::RoleCaller;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// Rows of the table shown in the prompt (the model can query the rest).
pub const PROMPT_ROWS: usize = 5;

/// Characters of an observation shown in the prompt.
const OBSERVATION_CHARS: usize = 600;

/// The table as the agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableView {
    /// Table name.
    pub name: String,
    /// Columns with their declared types.
    pub columns: Vec<Column>,
    /// The table's rows as the episode starts. The prompt shows the first
    /// [`PROMPT_ROWS`]; the offline parser reads them all to ground unquoted
    /// values, as an agent would after one `SELECT *` (the task file gives
    /// the rows to the agent side anyway).
    pub rows: Vec<Vec<Cell>>,
}

/// The agent's view of a table.
pub fn table_view(table: &Table) -> TableView {
    TableView {
        name: table.name.clone(),
        columns: table.columns.clone(),
        rows: table.rows.clone(),
    }
}

impl TableView {
    fn as_table(&self) -> Table {
        Table {
            name: self.name.clone(),
            columns: self.columns.clone(),
            rows: self.rows.clone(),
        }
    }
}

/// Input of the `act` role.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActInput {
    /// The task's instruction.
    pub instruction: String,
    /// The table.
    pub table: TableView,
    /// Retrieved memories, in retrieval order.
    pub memories: Vec<MemoryView>,
    /// The steps taken so far in this episode.
    pub history: Vec<EpisodeStep>,
    /// Whether the offline algorithm reuses a retrieved null action in
    /// this episode ([`offline_act`]; the arena draws it per episode from
    /// its `reuse_null` probability). Not shown to a model, which decides
    /// for itself what a memory without an answer is worth.
    #[serde(skip)]
    pub reuse_null: bool,
}

/// Output of the `act` role: JSON `{"action":"execute","sql":"..."}` or
/// `{"action":"commit"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum ActOutput {
    /// Execute one SQL statement.
    Execute {
        /// The statement.
        sql: String,
    },
    /// Submit the last statement's result (a query) or the table (a change).
    Commit,
}

/// The `act` role (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct ActRole;

impl Role for ActRole {
    type Input = ActInput;
    type Output = ActOutput;

    fn name(&self) -> &'static str {
        "act"
    }
    fn template(&self) -> &'static str {
        include_str!("../../prompts/act.md")
    }
    fn variables(&self, input: &ActInput) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("instruction".into(), input.instruction.clone()),
            ("table".into(), render_table(&input.table)),
            ("memories".into(), render_memories(&input.memories)),
            ("history".into(), render_history(&input.history)),
            ("max_steps".into(), MAX_STEPS.to_string()),
            (
                "steps_left".into(),
                MAX_STEPS.saturating_sub(input.history.len()).to_string(),
            ),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        // `action` is checked by `parse`, which also accepts a bare `sql`.
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["execute", "commit"]},
                "sql": {"type": "string"}
            }
        })
    }
    fn parse(&self, _input: &ActInput, answer: serde_json::Value) -> Result<ActOutput, String> {
        let o = answer
            .as_object()
            .ok_or_else(|| "expected a JSON object".to_string())?;
        let text = ["sql", "query", "statement", "answer", "content", "text"]
            .iter()
            .find_map(|k| o.get(*k).and_then(serde_json::Value::as_str));
        let action = o
            .get("action")
            .and_then(serde_json::Value::as_str)
            .map(|a| a.trim().to_lowercase());
        match action.as_deref() {
            Some("commit" | "submit" | "finish" | "done") => Ok(ActOutput::Commit),
            Some("execute" | "execute_sql" | "run" | "sql" | "query") | None => {
                let text = text.ok_or_else(|| "`sql` missing".to_string())?;
                let sql = extract_sql(text)
                    .ok_or_else(|| format!("no SQL statement found in `{text}`"))?;
                Ok(ActOutput::Execute { sql })
            }
            Some(other) => Err(format!(
                "unknown action `{other}` (expected `execute` or `commit`)"
            )),
        }
    }
    fn offline(&self, input: &ActInput) -> Result<ActOutput, LlmError> {
        Ok(offline_act(input))
    }
    /// A model that answers with a bare statement (or a fenced one) instead
    /// of the JSON object still gets its SQL run; a bare "commit" commits.
    fn parse_text(&self, _input: &ActInput, text: &str) -> Option<ActOutput> {
        let t = text.trim();
        if t.trim_matches(|c: char| !c.is_alphanumeric())
            .eq_ignore_ascii_case("commit")
        {
            return Some(ActOutput::Commit);
        }
        extract_sql(t).map(|sql| ActOutput::Execute { sql })
    }
}

/// The SQL statement in a model's text: the body of the first code fence
/// (```` ```sql ````), else the rest of a `SQL:` line, else the text from the
/// first statement keyword (`SELECT`, `INSERT`, `UPDATE`, `DELETE`, `WITH`)
/// up to and including the first `;`. `None` when there is none.
pub fn extract_sql(text: &str) -> Option<String> {
    let clean = |s: &str| {
        let s = s.trim().trim_end_matches("```").trim();
        (!s.is_empty()).then(|| s.to_string())
    };
    if let Some(start) = text.find("```") {
        let after = &text[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        let body = &after[body_start..];
        let end = body.find("```").unwrap_or(body.len());
        return clean(&body[..end]);
    }
    for line in text.lines() {
        let l = line.trim_start();
        if l.len() >= 4 && l[..4].eq_ignore_ascii_case("sql:") {
            return clean(&l[4..]);
        }
    }
    let keywords = ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "REPLACE"];
    let trimmed = text.trim();
    let upper = trimmed.to_uppercase();
    if keywords.iter().any(|k| upper.starts_with(k)) {
        return clean(trimmed);
    }
    let start = keywords
        .iter()
        .filter_map(|k| {
            trimmed.match_indices(k).map(|(i, _)| i).find(|&i| {
                let before_ok = i == 0
                    || !trimmed[..i]
                        .chars()
                        .next_back()
                        .is_some_and(char::is_alphanumeric);
                let after_ok = !trimmed[i + k.len()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric);
                before_ok && after_ok
            })
        })
        .min()?;
    let rest = &trimmed[start..];
    let end = rest.find(';').map_or(rest.len(), |i| i + 1);
    clean(&rest[..end])
}

fn render_table(t: &TableView) -> String {
    let cols: Vec<String> = t
        .columns
        .iter()
        .map(|c| format!("{} {}", c.name, c.ty))
        .collect();
    let mut out = format!("{}({})", t.name, cols.join(", "));
    out.push_str(&format!(
        "\n{} rows; the first {}:",
        t.rows.len(),
        PROMPT_ROWS.min(t.rows.len())
    ));
    for r in t.rows.iter().take(PROMPT_ROWS) {
        let cells: Vec<String> = r.iter().map(cell_text).collect();
        out.push_str(&format!("\n({})", cells.join(", ")));
    }
    out
}

fn cell_text(c: &Cell) -> String {
    match c {
        Cell::Null => "NULL".into(),
        Cell::Int(i) => i.to_string(),
        Cell::Real(x) => x.to_string(),
        Cell::Text(s) => nl2sql::quote(s),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let cut: String = s.chars().take(n).collect();
    format!("{cut} ...")
}

fn render_memories(ms: &[MemoryView]) -> String {
    if ms.is_empty() {
        return "(none)".into();
    }
    let mut out = Vec::new();
    for (i, m) in ms.iter().enumerate() {
        let last = m.steps.last().map_or("(no steps)".to_string(), |s| {
            truncate(&s.observation, OBSERVATION_CHARS / 3)
        });
        out.push(format!(
            "[{}] task: {}\n    table: {}({})\n    outcome: {}\n    committed SQL: {}\n    last observation: {}",
            i + 1,
            m.task,
            m.table,
            m.columns.join(", "),
            if m.success { "success" } else { "failure" },
            m.answer.as_deref().unwrap_or("(none)"),
            last
        ));
    }
    out.join("\n")
}

fn render_history(h: &[EpisodeStep]) -> String {
    if h.is_empty() {
        return "(none yet)".into();
    }
    h.iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{}. SQL: {}\n   -> {}",
                i + 1,
                s.action,
                truncate(&s.observation, OBSERVATION_CHARS)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whitespace-, case- and trailing-`;`-insensitive form of a statement.
fn normalise(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(';')
        .trim()
        .to_lowercase()
}

/// Whether a statement changes data.
fn is_change(sql: &str) -> bool {
    let first = sql
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    matches!(first.as_str(), "INSERT" | "UPDATE" | "DELETE" | "REPLACE")
}

/// Rows returned by a step, read from its observation (`[]` is none).
fn returned_rows(step: &EpisodeStep) -> bool {
    step.ok && step.observation.starts_with('[') && !step.observation.starts_with("[]")
}

/// Rows changed by a step (`OK, 3 rows affected`).
fn changed_rows(step: &EpisodeStep) -> usize {
    step.observation
        .strip_prefix("OK, ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The offline `act` algorithm. Deterministic:
///
/// 1. **Candidates**, in order: the committed SQL of every *successful*
///    memory of the same instruction (recall of a solved task); then, when
///    a memory says this instruction *failed* before, the adaptations
///    ([`adapt`]) of the other tasks' successful memories in retrieval
///    order followed by the parser's hypotheses ([`nl2sql::hypotheses`]);
///    otherwise the parser's hypotheses first and the adaptations after.
///    The agent trusts its own parse of a new task over a neighbour's
///    adapted answer until memory shows that parse to be wrong.
/// 2. **Steering away from failures**: a memory that *failed* on the same
///    instruction bans its committed SQL, and every statement of its
///    trajectory that errored or returned no rows, so the agent tries
///    something different from the mistake it remembers. Statements already
///    run in this episode are dropped too.
/// 3. **Decision**: if the last step ran and returned rows (a query) or
///    changed rows (a change), commit. Never run a second data-changing
///    statement after one changed rows (commit instead). Otherwise execute
///    the next remaining candidate. With none left: if the last step failed
///    but an earlier query returned rows, run that query again so that it is
///    what gets committed; else commit if any step ran; else execute the
///    first hypothesis (even if banned: it is the best guess there is).
pub fn offline_act(input: &ActInput) -> ActOutput {
    let table = input.table.as_table();
    let hyps = nl2sql::hypotheses(&input.instruction, &table);
    let same_task = |m: &MemoryView| m.task.trim() == input.instruction.trim();
    // Reuse of a solved task follows the best-ranked successful memory of
    // the same task. When that memory's action was nulled (the arena's noise
    // injection), the agent reuses the null operation: it commits without a
    // statement, and its trajectory carries the same null action into
    // memory (noise propagation, `romerl-reduced-order-utility-memory` §5:
    // "exposure to a retrieved null entry leads to one additional memory
    // containing the same null operation"). Every policy meets this rule.
    // When `reuse_null` is false (the arena's seeded draw said no), the
    // nulled memory is passed over: the agent follows the next successful
    // memory of the task that has an answer, or solves the task afresh.
    // Only a *successful* memory's action is ever reused (a failure's is
    // what the agent steers away from), so a null failure is never reused.
    if input.reuse_null
        && input.history.is_empty()
        && input
            .memories
            .iter()
            .find(|m| m.success && same_task(m))
            .is_some_and(|m| m.answer.is_none())
    {
        return ActOutput::Commit;
    }
    let mut candidates: Vec<String> = input
        .memories
        .iter()
        .filter(|m| m.success && same_task(m))
        .filter_map(|m| m.answer.clone())
        .collect();
    let adapted: Vec<String> = input
        .memories
        .iter()
        .filter(|m| m.success && !same_task(m))
        .filter_map(|m| adapt(m, &input.instruction, &table))
        .collect();
    let failed_before = input.memories.iter().any(|m| !m.success && same_task(m));
    if failed_before {
        candidates.extend(adapted);
        candidates.extend(hyps.iter().cloned());
    } else {
        candidates.extend(hyps.iter().cloned());
        candidates.extend(adapted);
    }
    let mut banned: Vec<String> = Vec::new();
    for m in input.memories.iter().filter(|m| !m.success && same_task(m)) {
        if let Some(a) = &m.answer {
            banned.push(normalise(a));
        }
        for s in &m.steps {
            if !s.ok || (!is_change(&s.action) && !returned_rows(s)) {
                banned.push(normalise(&s.action));
            }
        }
    }
    let tried: Vec<String> = input.history.iter().map(|s| normalise(&s.action)).collect();
    let mut remaining: Vec<String> = Vec::new();
    for c in candidates {
        let n = normalise(&c);
        if banned.contains(&n) || tried.contains(&n) || remaining.iter().any(|r| normalise(r) == n)
        {
            continue;
        }
        remaining.push(c);
    }
    if let Some(last) = input.history.last() {
        if last.ok && (returned_rows(last) || (is_change(&last.action) && changed_rows(last) > 0)) {
            return ActOutput::Commit;
        }
    }
    let changed_already = input
        .history
        .iter()
        .any(|s| s.ok && is_change(&s.action) && changed_rows(s) > 0);
    if changed_already {
        return ActOutput::Commit;
    }
    if let Some(next) = remaining.into_iter().next() {
        return ActOutput::Execute { sql: next };
    }
    if let Some(last) = input.history.last() {
        if !last.ok {
            if let Some(good) = input
                .history
                .iter()
                .find(|s| returned_rows(s) && !is_change(&s.action))
            {
                return ActOutput::Execute {
                    sql: good.action.clone(),
                };
            }
        }
        return ActOutput::Commit;
    }
    match hyps.into_iter().next() {
        Some(sql) => ActOutput::Execute { sql },
        None => ActOutput::Execute {
            sql: format!("SELECT * FROM {};", input.table.name),
        },
    }
}

/// What one episode produced.
#[derive(Debug)]
pub struct EpisodeResult {
    /// The trajectory, with the committed SQL as its answer.
    pub episode: Episode,
    /// The outcome of the committed (last executed) statement, if any ran.
    pub committed: Option<StepOutcome>,
    /// The committed statement.
    pub committed_sql: Option<String>,
    /// The database after the episode (the judge reads the table from it).
    pub env: SqlEnv,
}

/// The task as a memory request: id, instruction, and the table's name and
/// columns as attributes.
pub fn task_request(task: &DbTask) -> TaskRequest {
    let cols: Vec<&str> = task.table.columns.iter().map(|c| c.name.as_str()).collect();
    TaskRequest {
        id: task.id(),
        text: task.instruction.clone(),
        attributes: BTreeMap::from([
            ("table".to_string(), task.table.name.clone()),
            ("columns".to_string(), cols.join(", ")),
        ]),
    }
}

/// The role input for `task` at a point of the episode (reusing a
/// retrieved null action: `reuse_null` true, the arena's default).
pub fn act_input(task: &DbTask, memories: &[MemoryView], history: &[EpisodeStep]) -> ActInput {
    ActInput {
        instruction: task.instruction.clone(),
        table: table_view(&task.table),
        memories: memories.to_vec(),
        history: history.to_vec(),
        reuse_null: true,
    }
}

/// Run one episode: ask the `act` role for an action, execute it, until it
/// commits or [`MAX_STEPS`] statements ran. The last executed statement is
/// the committed one. A role failure is a [`ArenaError::Policy`]; an
/// environment that cannot be built is an [`ArenaError::Environment`].
pub fn run_episode(
    caller: &mut RoleCaller,
    task: &DbTask,
    memories: &[MemoryView],
) -> Result<EpisodeResult, ArenaError> {
    run_episode_with(caller, task, memories, true)
}

/// [`run_episode`] with the offline algorithm's `reuse_null` for this
/// episode ([`ActInput::reuse_null`]).
pub fn run_episode_with(
    caller: &mut RoleCaller,
    task: &DbTask,
    memories: &[MemoryView],
    reuse_null: bool,
) -> Result<EpisodeResult, ArenaError> {
    let mut env = SqlEnv::new(task)?;
    let mut steps: Vec<EpisodeStep> = Vec::new();
    let mut last: Option<(String, StepOutcome)> = None;
    while steps.len() < MAX_STEPS {
        let mut input = act_input(task, memories, &steps);
        input.reuse_null = reuse_null;
        match caller.call(&ActRole, &input, None)? {
            ActOutput::Commit => break,
            ActOutput::Execute { sql } => {
                let out = env.execute(&sql);
                steps.push(EpisodeStep {
                    action: sql.clone(),
                    observation: out.observation.clone(),
                    ok: out.ok,
                });
                last = Some((sql, out));
            }
        }
    }
    let (committed_sql, committed) = match last {
        Some((s, o)) => (Some(s), Some(o)),
        None => (None, None),
    };
    Ok(EpisodeResult {
        episode: Episode {
            task: task_request(task),
            steps,
            answer: committed_sql.clone(),
        },
        committed,
        committed_sql,
        env,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifelong::types::{Expected, Literal, Truth};

    fn task() -> DbTask {
        DbTask {
            index: 7,
            instruction: "What are the names of members with an amount greater than 60? Return the name and amount.".into(),
            table: Table {
                name: "members".into(),
                columns: vec![
                    Column { name: "member_id".into(), ty: "INT".into() },
                    Column { name: "name".into(), ty: "TEXT".into() },
                    Column { name: "amount".into(), ty: "INT".into() },
                ],
                rows: vec![
                    vec![Cell::Int(1), Cell::Text("Ann".into()), Cell::Int(50)],
                    vec![Cell::Int(2), Cell::Text("Bob".into()), Cell::Int(70)],
                ],
            },
            skills: vec!["select".into(), "where_single_condition".into()],
            truth: Truth {
                expected: Expected::Rows(vec![vec![
                    Literal { cell: Cell::Text("Bob".into()), text: "'Bob'".into() },
                    Literal { cell: Cell::Int(70), text: "70".into() },
                ]]),
                sql: "SELECT name, amount FROM members WHERE amount > 60 /* truth */;".into(),
            },
        }
    }

    fn step(action: &str, observation: &str, ok: bool) -> EpisodeStep {
        EpisodeStep {
            action: action.into(),
            observation: observation.into(),
            ok,
        }
    }

    #[test]
    fn leak_canary_input_never_carries_the_truth() {
        let t = task();
        let memories = vec![MemoryView {
            task: "other".into(),
            table: "members".into(),
            columns: vec!["name".into()],
            answer: Some("SELECT name FROM members".into()),
            steps: vec![],
            success: true,
            score: 0.5,
        }];
        let input = act_input(&t, &memories, &[step("SELECT 1", "[(1,)]", true)]);
        let json = serde_json::to_string(&input).unwrap_or_default();
        assert!(!json.is_empty());
        assert!(!json.contains(&t.truth.sql), "ground-truth SQL leaked");
        assert!(!json.contains("/* truth */"));
        let rendered = ActRole
            .variables(&input)
            .into_values()
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!rendered.contains(&t.truth.sql));
    }

    /// Noise propagation: the best-ranked successful memory of the same task
    /// carries a nulled action, so the agent reuses the null operation (it
    /// commits without a statement); a nulled memory of another task, or
    /// one ranked below a usable success of the task, is not followed.
    #[test]
    fn offline_reuses_a_retrieved_null_action_of_the_same_task() {
        let t = task();
        let mem = |task: &str, answer: Option<&str>| MemoryView {
            task: task.into(),
            table: t.table.name.clone(),
            columns: vec![],
            answer: answer.map(str::to_string),
            steps: vec![],
            success: true,
            score: 1.0,
        };
        let nulled = mem(&t.instruction, None);
        let good = mem(
            &t.instruction,
            Some("SELECT name, amount FROM members WHERE amount > 60"),
        );
        let out = offline_act(&act_input(&t, &[nulled.clone(), good.clone()], &[]));
        assert_eq!(out, ActOutput::Commit, "the null action is reused");
        let out = offline_act(&act_input(&t, &[good.clone(), nulled.clone()], &[]));
        assert!(matches!(out, ActOutput::Execute { .. }), "{out:?}");
        let other = mem("a different task", None);
        let out = offline_act(&act_input(&t, &[other], &[]));
        assert!(matches!(out, ActOutput::Execute { .. }), "{out:?}");
        let episode = run_episode(
            &mut RoleCaller::new(std::sync::Arc::new(evomem_llm::LlmHub::offline())),
            &t,
            std::slice::from_ref(&nulled),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(episode.episode.steps.is_empty() && episode.episode.answer.is_none());
        // The arena's draw said no: the nulled memory is passed over, and
        // the usable success of the task below it is followed.
        let mut input = act_input(&t, &[nulled.clone(), good.clone()], &[]);
        input.reuse_null = false;
        assert_eq!(
            offline_act(&input),
            ActOutput::Execute {
                sql: "SELECT name, amount FROM members WHERE amount > 60".into()
            }
        );
        let episode = run_episode_with(
            &mut RoleCaller::new(std::sync::Arc::new(evomem_llm::LlmHub::offline())),
            &t,
            &[nulled],
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!episode.episode.steps.is_empty(), "solved afresh");
    }

    #[test]
    fn offline_executes_then_commits_rows() {
        let t = task();
        let first = offline_act(&act_input(&t, &[], &[]));
        let ActOutput::Execute { sql } = first else {
            panic!("expected execute, got {first:?}");
        };
        assert_eq!(sql, "SELECT name, amount FROM members WHERE amount > 60;");
        let after = offline_act(&act_input(&t, &[], &[step(&sql, "[('Bob', 70)]", true)]));
        assert_eq!(after, ActOutput::Commit);
    }

    #[test]
    fn offline_moves_on_after_an_error_or_empty_result() {
        let t = task();
        let hyps = nl2sql::hypotheses(&t.instruction, &t.table);
        let h = vec![step(&hyps[0], "ERROR: no such column", false)];
        let out = offline_act(&act_input(&t, &[], &h));
        match (hyps.get(1), out) {
            (Some(next), ActOutput::Execute { sql }) => assert_eq!(&sql, next),
            (None, out) => assert_eq!(out, ActOutput::Commit),
            (Some(_), out) => panic!("unexpected {out:?}"),
        }
    }

    #[test]
    fn failed_memory_of_the_same_task_is_not_repeated() {
        let t = task();
        let hyps = nl2sql::hypotheses(&t.instruction, &t.table);
        let failed = MemoryView {
            task: t.instruction.clone(),
            table: t.table.name.clone(),
            columns: vec!["member_id".into(), "name".into(), "amount".into()],
            answer: Some(hyps[0].clone()),
            steps: vec![step(&hyps[0], "[('Bob', 70)]", true)],
            success: false,
            score: 1.0,
        };
        let out = offline_act(&act_input(&t, std::slice::from_ref(&failed), &[]));
        assert_ne!(
            out,
            ActOutput::Execute {
                sql: hyps[0].clone()
            }
        );
        // A successful memory of the same task is replayed first.
        let ok = MemoryView {
            answer: Some("SELECT name, amount FROM members WHERE amount > 60 LIMIT 9;".into()),
            success: true,
            ..failed
        };
        let out = offline_act(&act_input(&t, &[ok], &[]));
        assert_eq!(
            out,
            ActOutput::Execute {
                sql: "SELECT name, amount FROM members WHERE amount > 60 LIMIT 9;".into()
            }
        );
    }

    #[test]
    fn data_change_is_committed_after_it_changes_rows() {
        let mut t = task();
        t.instruction = "Update the amount to 80 where the name is 'Ann'.".into();
        let h = vec![step(
            "UPDATE members SET amount = 80 WHERE name = 'Ann';",
            "OK, 1 row affected",
            true,
        )];
        assert_eq!(offline_act(&act_input(&t, &[], &h)), ActOutput::Commit);
    }

    #[test]
    fn parse_accepts_json_and_sql_in_free_text() {
        let input = act_input(&task(), &[], &[]);
        let p = |v: serde_json::Value| ActRole.parse(&input, v);
        assert_eq!(p(json!({"action": "commit"})), Ok(ActOutput::Commit));
        assert_eq!(
            p(json!({"action": "execute", "sql": "SELECT 1;"})),
            Ok(ActOutput::Execute {
                sql: "SELECT 1;".into()
            })
        );
        assert_eq!(
            p(json!({"action": "execute", "sql": "```sql\nSELECT name FROM members;\n```"})),
            Ok(ActOutput::Execute {
                sql: "SELECT name FROM members;".into()
            })
        );
        assert_eq!(
            p(json!({"answer": "I will run this.\nSQL: SELECT amount FROM members;"})),
            Ok(ActOutput::Execute {
                sql: "SELECT amount FROM members;".into()
            })
        );
        assert!(p(json!({"action": "dance"})).is_err());
        assert!(p(json!({"action": "execute"})).is_err());
        assert!(p(json!(["SELECT 1"])).is_err());
    }

    #[test]
    fn extract_sql_variants() {
        assert_eq!(extract_sql("SELECT 1").as_deref(), Some("SELECT 1"));
        assert_eq!(
            extract_sql("Let me check. UPDATE t SET a = 1 WHERE b = 2; then commit").as_deref(),
            Some("UPDATE t SET a = 1 WHERE b = 2;")
        );
        assert_eq!(
            extract_sql("```\nDELETE FROM t;\n```").as_deref(),
            Some("DELETE FROM t;")
        );
        assert_eq!(extract_sql("no statement here, just selecting words"), None);
    }

    #[test]
    fn serde_shape_of_actions() {
        let e = ActOutput::Execute {
            sql: "SELECT 1".into(),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap_or_default(),
            json!({"action": "execute", "sql": "SELECT 1"})
        );
        assert_eq!(
            serde_json::to_value(ActOutput::Commit).unwrap_or_default(),
            json!({"action": "commit"})
        );
    }

    fn render(input: &ActInput) -> String {
        let msgs = evomem_llm::template::render(
            ActRole.name(),
            ActRole.template(),
            &ActRole.variables(input),
        )
        .unwrap_or_default();
        msgs.iter()
            .map(|m| format!("### {:?}\n{}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    #[test]
    fn act_prompt_snapshot() {
        let t = task();
        let memories = vec![
            MemoryView {
                task: "What are the names of members with an amount below 40? Return the name."
                    .into(),
                table: "members".into(),
                columns: vec!["member_id".into(), "name".into(), "amount".into()],
                answer: Some("SELECT name FROM members WHERE amount < 40;".into()),
                steps: vec![step(
                    "SELECT name FROM members WHERE amount < 40;",
                    "[('Cy',)]",
                    true,
                )],
                success: true,
                score: 0.81,
            },
            MemoryView {
                task: "Delete members with an amount of 0.".into(),
                table: "members".into(),
                columns: vec!["member_id".into(), "name".into(), "amount".into()],
                answer: None,
                steps: vec![],
                success: false,
                score: 0.42,
            },
        ];
        let h = vec![step(
            "SELECT name FROM member;",
            "ERROR: no such table: member",
            false,
        )];
        insta::assert_snapshot!("act_prompt", render(&act_input(&t, &memories, &h)));
    }
}
