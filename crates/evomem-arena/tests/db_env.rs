//! The DB environment end to end: reading LifelongAgentBench's task file,
//! executing SQL in a fresh SQLite database with the MySQL compatibility
//! layer, and judging as LifelongAgentBench does. The central check runs
//! every task's ground-truth SQL and requires the judge to accept all 500.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use evomem_arena::lifelong::judge::{judge, table_md5, validate_judge};
use evomem_arena::lifelong::sqlenv::{SqlEnv, MAX_STEPS};
use evomem_arena::lifelong::task::{load_tasks, parse_tasks};
use evomem_arena::lifelong::{Cell, DbTask};
use evomem_arena::ArenaError;

/// The real task file, or `None` (the test returns early, loudly).
fn data_file() -> Option<PathBuf> {
    let dir = evomem_kit::testing::shared_dataset("lifelong-agent-bench")?;
    Some(dir.join("db_bench_data.json"))
}

fn all_tasks() -> Option<Vec<DbTask>> {
    let path = data_file()?;
    Some(load_tasks(&path).unwrap())
}

fn task(tasks: &[DbTask], index: usize) -> &DbTask {
    tasks.iter().find(|t| t.index == index).unwrap()
}

/// Runs `sql` on a fresh copy of the task's table and judges it.
fn verdict_of(task: &DbTask, sql: &str) -> evomem_arena::lifelong::judge::Verdict {
    let mut env = SqlEnv::new(task).unwrap();
    let out = env.execute(sql);
    judge(task, &env, Some(&out), Some(sql))
}

#[test]
fn all_500_tasks_load_sorted_with_their_tables() {
    let Some(tasks) = all_tasks() else { return };
    assert_eq!(tasks.len(), 500);
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!(t.index, i);
        assert!(!t.instruction.is_empty(), "task {i}");
        assert!(!t.skills.is_empty(), "task {i}");
        assert!(!t.table.columns.is_empty(), "task {i}");
        for row in &t.table.rows {
            assert_eq!(row.len(), t.table.columns.len(), "task {i}");
        }
    }
    let first = &tasks[0];
    assert_eq!(first.table.name, "membership_payments");
    assert_eq!(first.table.columns[0].name, "payment_id");
    assert_eq!(first.table.columns[0].ty, "INT");
    assert_eq!(first.table.rows[0][2], Cell::Text("2023-01-05".into()));
    assert_eq!(first.skills, vec!["insert".to_string()]);
}

#[test]
fn ground_truth_sql_passes_the_judge_on_all_500_tasks() {
    let Some(tasks) = all_tasks() else { return };
    let report = validate_judge(&tasks);
    for (index, reason) in &report.failed {
        eprintln!("task {index}: {reason}");
    }
    assert_eq!(report.passed, 500, "failed: {:?}", report.failed);
    assert!(report.failed.is_empty());
}

#[test]
fn an_sql_error_is_a_failed_step_with_the_database_message() {
    let Some(tasks) = all_tasks() else { return };
    let mut env = SqlEnv::new(task(&tasks, 1)).unwrap();
    let out = env.execute("SELECT no_such_column FROM customer_feedback");
    assert!(!out.ok);
    assert!(!out.is_query);
    assert_eq!(out.error.as_deref(), Some("no such column: no_such_column"));
    assert_eq!(out.observation, "ERROR: no such column: no_such_column");
    let out = env.execute("SELEC 1");
    assert!(out.error.unwrap().contains("syntax error"));
    // The environment still works after errors; they count as steps.
    let out = env.execute("SELECT COUNT(*) FROM customer_feedback");
    assert!(out.ok && out.is_query);
    assert_eq!(out.rows, vec![vec![Cell::Int(25)]]);
    assert_eq!(env.steps(), 3);
}

#[test]
fn the_step_budget_refuses_the_sixteenth_statement() {
    let Some(tasks) = all_tasks() else { return };
    let mut env = SqlEnv::new(task(&tasks, 8)).unwrap();
    assert_eq!(MAX_STEPS, 15);
    for i in 0..MAX_STEPS {
        let out = env.execute("UPDATE travel_destinations SET average_cost = average_cost + 1");
        assert!(out.ok, "step {i}: {out:?}");
    }
    let before = env.table_rows().unwrap();
    let out = env.execute("UPDATE travel_destinations SET average_cost = 0");
    assert!(!out.ok);
    assert!(out.error.unwrap().contains("step budget spent"));
    assert_eq!(env.steps(), MAX_STEPS);
    // Refused means not executed.
    assert_eq!(env.table_rows().unwrap(), before);
}

// ---------------------------------------------------------------------------
// Malformed task files.

/// A well-formed one-task file; each malformed case edits one field.
fn entry(table_info: &str, answer_info: &str, skill_list: &str) -> String {
    serde_json::json!({
        "7": {
            "sample_index": 7,
            "instruction": "Count the rows.",
            "table_info": table_info,
            "answer_info": answer_info,
            "skill_list": skill_list,
        }
    })
    .to_string()
}

const TABLE: &str = "{'name': 't', 'column_info_list': [{'name': 'id', 'type': 'INT'}, \
                     {'name': 'name', 'type': 'TEXT'}], 'row_list': [[1, 'a'], [2, \"b's\"]]}";
const ANSWER: &str = "{'direct': [[2]], 'md5': None, 'sql': 'SELECT COUNT(*) FROM t'}";
const SKILLS: &str = "['select']";

fn parse_error(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.json");
    std::fs::write(&path, text).unwrap();
    match load_tasks(&path) {
        Err(e @ ArenaError::BadTask { .. }) => {
            let shown = e.to_string();
            assert!(shown.contains(&path.display().to_string()), "{shown}");
            shown
        }
        other => panic!("expected BadTask, got {other:?}"),
    }
}

#[test]
fn a_well_formed_tiny_file_parses() {
    let tasks = parse_tasks(&PathBuf::from("x.json"), &entry(TABLE, ANSWER, SKILLS)).unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].index, 7);
    assert_eq!(tasks[0].table.rows[1][1], Cell::Text("b's".into()));
    // And its ground truth is accepted.
    let report = validate_judge(&tasks);
    assert_eq!(report.passed, 1, "{:?}", report.failed);
}

#[test]
fn a_bad_python_literal_in_table_info_names_sample_and_field() {
    let bad = TABLE.replace("[2, ", "[2 ");
    let shown = parse_error(&entry(&bad, ANSWER, SKILLS));
    assert!(
        shown.contains("sample 7: field `table_info`: not a Python literal"),
        "{shown}"
    );
    assert!(shown.contains("expected `,` or `]`"), "{shown}");
}

#[test]
fn a_row_arity_mismatch_names_the_row() {
    let bad = TABLE.replace("[1, 'a']", "[1, 'a', 3]");
    let shown = parse_error(&entry(&bad, ANSWER, SKILLS));
    assert!(
        shown.contains("sample 7: field `table_info.row_list[0]`: the row has 3 values but the table has 2 columns"),
        "{shown}"
    );
}

#[test]
fn a_non_scalar_cell_names_the_cell() {
    let bad = TABLE.replace("[2, \"b's\"]", "[2, ['x']]");
    let shown = parse_error(&entry(&bad, ANSWER, SKILLS));
    assert!(
        shown.contains(
            "sample 7: field `table_info.row_list[1][1]`: expected a scalar value, found a list"
        ),
        "{shown}"
    );
}

#[test]
fn both_direct_and_md5_none_is_rejected() {
    let bad = "{'direct': None, 'md5': None, 'sql': 'SELECT 1'}";
    let shown = parse_error(&entry(TABLE, bad, SKILLS));
    assert!(
        shown.contains("sample 7: field `answer_info`: both `direct` and `md5` are None"),
        "{shown}"
    );
    let both = "{'direct': [[1]], 'md5': '0123456789abcdef0123456789abcdef', 'sql': 'SELECT 1'}";
    let shown = parse_error(&entry(TABLE, both, SKILLS));
    assert!(
        shown.contains("both `direct` and `md5` are given"),
        "{shown}"
    );
}

#[test]
fn a_missing_field_is_named() {
    let mut value: serde_json::Value = serde_json::from_str(&entry(TABLE, ANSWER, SKILLS)).unwrap();
    value["7"].as_object_mut().unwrap().remove("instruction");
    let shown = parse_error(&value.to_string());
    assert!(
        shown.contains("sample 7: field `instruction`: missing field"),
        "{shown}"
    );
    let no_sql = "{'direct': [[2]], 'md5': None}";
    let shown = parse_error(&entry(TABLE, no_sql, SKILLS));
    assert!(
        shown.contains("sample 7: field `answer_info.sql`: missing key"),
        "{shown}"
    );
}

#[test]
fn not_json_is_a_bad_file() {
    let err = parse_tasks(&PathBuf::from("x.json"), "{not json").unwrap_err();
    assert!(matches!(err, ArenaError::BadFile { .. }), "{err:?}");
}

// ---------------------------------------------------------------------------
// The md5 rule.

/// Computed with Python's hashlib for the rows (1, 'Ann', NULL),
/// (2, NULL, 7), (3, 'Cy', 9): row strings `1,Ann`, `2,7`, `3,Cy,9`
/// (CONCAT_WS skips NULL), first five hex digits of each md5, sorted,
/// joined with `,`, md5.
const NULL_TABLE_MD5: &str = "8a22dfbfc5b8bfd25d8923aa89b1fd50";
/// The same table with 7 changed to 8.
const NULL_TABLE_MD5_AFTER: &str = "cb5f79ca8e79d163ff835e1babcca568";

#[test]
fn the_md5_rule_skips_nulls_and_sorts_row_hashes() {
    let rows = vec![
        vec![Cell::Int(3), Cell::Text("Cy".into()), Cell::Int(9)],
        vec![Cell::Int(1), Cell::Text("Ann".into()), Cell::Null],
        vec![Cell::Int(2), Cell::Null, Cell::Int(7)],
    ];
    assert_eq!(table_md5(&rows).as_deref(), Some(NULL_TABLE_MD5));

    // End to end: a mutation task whose expected md5 is that hash.
    let table = "{'name': 'p', 'column_info_list': [{'name': 'id', 'type': 'INT'}, \
                 {'name': 'name', 'type': 'TEXT'}, {'name': 'score', 'type': 'INT'}], \
                 'row_list': [[1, 'Ann', None], [2, None, 5], [3, 'Cy', 9]]}";
    let answer = format!(
        "{{'direct': None, 'md5': '{NULL_TABLE_MD5}', 'sql': 'UPDATE p SET score = 7 WHERE id = 2'}}"
    );
    let tasks = parse_tasks(
        &PathBuf::from("x.json"),
        &entry(table, &answer, "['update']"),
    )
    .unwrap();
    let t = &tasks[0];
    let mut env = SqlEnv::new(t).unwrap();
    assert!(
        !judge(t, &env, None, None).success,
        "untouched table accepted"
    );
    // 6.6 is stored as MySQL would store it in an INT column: 7.
    let out = env.execute("UPDATE p SET score = 6.6 WHERE id = 2");
    assert!(out.ok, "{out:?}");
    let v = judge(t, &env, Some(&out), None);
    assert!(v.success, "{v:?}");
    assert!(
        env.execute("UPDATE p SET score = score + 1 WHERE id = 2")
            .ok
    );
    assert_eq!(
        table_md5(&env.table_rows().unwrap()).as_deref(),
        Some(NULL_TABLE_MD5_AFTER)
    );
    assert!(!judge(t, &env, None, None).success);
}

// ---------------------------------------------------------------------------
// The judge rejects wrong answers.

#[test]
fn the_judge_rejects_a_query_with_the_wrong_where() {
    let Some(tasks) = all_tasks() else { return };
    let t = task(&tasks, 1);
    let right =
        "SELECT customer_id, rating, comments FROM customer_feedback WHERE rating >= 4 LIMIT 5;";
    assert!(verdict_of(t, right).success);
    let wrong =
        "SELECT customer_id, rating, comments FROM customer_feedback WHERE rating > 4 LIMIT 5;";
    let v = verdict_of(t, wrong);
    assert!(!v.success, "{v:?}");
    assert!(v.reason.contains("matches no expected row"), "{}", v.reason);
    // The reason does not quote the expected rows.
    assert!(!v.reason.contains("Good experience"), "{}", v.reason);
}

#[test]
fn the_judge_rejects_a_wrong_order_under_order_by_and_accepts_reordered_ties() {
    let Some(tasks) = all_tasks() else { return };
    let t = task(&tasks, 41);
    // SQLite breaks the ties of this ORDER BY differently from MySQL
    // (e.g. the two rows with score 95 and term 2022-09-01 come out in the
    // other order), so this passes only through the tie-run rule.
    let right = "SELECT student_id, course_id, final_score, term FROM academic_records ORDER BY final_score DESC, term ASC;";
    let v = verdict_of(t, right);
    assert!(v.success, "{v:?}");
    let mut env = SqlEnv::new(t).unwrap();
    let out = env.execute(right);
    assert_eq!(
        out.rows[0][0],
        Cell::Int(1001),
        "SQLite's tie order changed; pick another task"
    );
    // Same rows, wrong order.
    let wrong = "SELECT student_id, course_id, final_score, term FROM academic_records ORDER BY final_score ASC, term ASC;";
    let v = verdict_of(t, wrong);
    assert!(!v.success, "{v:?}");
    // Same rows and order, but without ORDER BY in the committed SQL the
    // rows compare as a multiset: also accepted.
    let unordered = "SELECT student_id, course_id, final_score, term FROM academic_records";
    assert!(verdict_of(t, unordered).success);
}

#[test]
fn the_judge_rejects_an_update_that_touches_the_wrong_rows() {
    let Some(tasks) = all_tasks() else { return };
    let t = task(&tasks, 8);
    let right = "UPDATE travel_destinations SET average_cost = 1200 WHERE country = 'France' AND popularity_rating > 4;";
    assert!(verdict_of(t, right).success);
    let wrong = "UPDATE travel_destinations SET average_cost = 1200 WHERE country = 'France' AND popularity_rating > 3;";
    let v = verdict_of(t, wrong);
    assert!(!v.success, "{v:?}");
    assert!(
        v.reason.contains("differs from the expected table"),
        "{}",
        v.reason
    );
    // A query is no answer to a mutation task.
    let v = verdict_of(t, "SELECT * FROM travel_destinations");
    assert!(!v.success);
}

#[test]
fn the_judge_rejects_a_failed_or_missing_or_non_query_commit_on_a_query_task() {
    let Some(tasks) = all_tasks() else { return };
    let t = task(&tasks, 1);
    let env = SqlEnv::new(t).unwrap();
    assert!(!judge(t, &env, None, None).success);
    let v = verdict_of(t, "SELECT nope FROM customer_feedback");
    assert!(!v.success && v.reason.contains("failed"), "{v:?}");
    let v = verdict_of(t, "DELETE FROM customer_feedback WHERE rating < 4");
    assert!(!v.success && v.reason.contains("not a query"), "{v:?}");
}

#[test]
fn four_decimal_averages_match_mysql_and_coarser_rounding_does_not() {
    let Some(tasks) = all_tasks() else { return };
    let t = task(&tasks, 18);
    // Expected 3.6667 (MySQL's AVG); SQLite gives 3.6666666666666665,
    // outside isclose's 1e-6 tolerance.
    let right = "SELECT event_id, AVG(rating) AS avg_rating FROM event_feedback GROUP BY event_id ORDER BY avg_rating DESC;";
    let v = verdict_of(t, right);
    assert!(v.success, "{v:?}");
    let coarse = "SELECT event_id, ROUND(AVG(rating), 2) AS avg_rating FROM event_feedback GROUP BY event_id ORDER BY avg_rating DESC;";
    let v = verdict_of(t, coarse);
    assert!(!v.success, "{v:?}");
}
