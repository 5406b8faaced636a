//! `evomem inspect --run DIR --user U`: a user's lifecycle timeline.
//!
//! Reads the op log of one policy folder of an eval run (`--policy` names it;
//! else the single folder whose family has a lifecycle timeline in the
//! family table, today `mars`; a Python policy's folder, whose family is in
//! no table, gets a generic view: every op and the final records by kind),
//! keeps the ops that touch records of
//! `user:<U>` and replays them into a fresh `MemoryState`, so strengths
//! before and after each op are exact. Prints the lifecycle ops (extract,
//! boost, demote, merge, forget, synthesize; `--all` adds event and
//! bookkeeping ops) like the MARS paper's Appendix F case study, then the op
//! distribution, the final chunks and the final profile.

use crate::pick;
use anyhow::{bail, Context as _};
use evomem_core::{LoggedOp, MemoryId, MemoryOp, MemoryState, Namespace, RecordKind};
use evomem_eval::run::dir::PolicyDir;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Flags of `evomem inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run directory (holding `ops.jsonl.zst`, or `ops.jsonl`, or one folder
    /// per policy).
    #[arg(long)]
    pub run: PathBuf,
    /// User token.
    #[arg(long)]
    pub user: String,
    /// Policy folder (slug) inside the run directory.
    #[arg(long)]
    pub policy: Option<String>,
    /// Also print event pushes/evictions and bookkeeping ops.
    #[arg(long)]
    pub all: bool,
}

/// Ops of one user: the records created in the user's namespace and every
/// later op on them, plus ops on ids with the prefix `user:<U>:` (MARS).
/// Policies name their records differently (AtomRec's `atom:u<U>:t<T>`), so
/// a record is the user's by the namespace it was created in.
fn user_ops(dir: &PolicyDir, user: &str) -> anyhow::Result<Vec<LoggedOp>> {
    let prefix = format!("user:{user}:");
    let ns = Namespace::user(user);
    let mut mine_ids: std::collections::HashSet<MemoryId> = std::collections::HashSet::new();
    let mut out = Vec::new();
    dir.for_each_op(
        // A cheap pre-filter on the raw line; the parsed op decides.
        |line| line.contains(user),
        |op| {
            let mine = match &op.op {
                MemoryOp::Create { record } if record.namespace == ns => {
                    mine_ids.insert(record.id.clone());
                    true
                }
                other => {
                    mine_ids.contains(other.target())
                        || other.target().as_str().starts_with(&prefix)
                }
            };
            if mine {
                out.push(op);
            }
            Ok(())
        },
    )?;
    Ok(out)
}

fn label_of(state: &MemoryState, id: &MemoryId) -> String {
    match state.get(id) {
        Some(r) => match r.field_str("category") {
            Some(c) => format!("[{c}] \"{}\"", r.text),
            None => format!("\"{}\"", r.text.chars().take(60).collect::<String>()),
        },
        None => id.to_string(),
    }
}

/// What an op's target (and a merge's sources) looked like before the op.
struct Before {
    /// Strength and evidence of the target, for ops that change them.
    numbers: Option<(f64, u32)>,
    /// The target's label.
    desc: String,
    /// The labels of a merge's sources.
    merged: Vec<String>,
}

impl Before {
    fn of(op: &MemoryOp, state: &MemoryState) -> Self {
        let numbers = match op {
            MemoryOp::AdjustStrength { id, .. }
            | MemoryOp::Forget { id }
            | MemoryOp::Merge { into: id, .. } => state.get(id).map(|r| (r.strength, r.evidence)),
            _ => None,
        };
        let merged = match op {
            MemoryOp::Merge { sources, .. } => sources.iter().map(|s| label_of(state, s)).collect(),
            _ => Vec::new(),
        };
        Self {
            numbers,
            desc: label_of(state, op.target()),
            merged,
        }
    }
}

/// One timeline line for an op already applied to `state`.
fn describe(op: &MemoryOp, label: &str, state: &MemoryState, b: &Before) -> String {
    let after = state.get(op.target()).map(|r| (r.strength, r.evidence));
    let desc_before = &b.desc;
    match (op, label) {
        (MemoryOp::Create { record }, "extract") => format!(
            "{} (strength {:.1}, evidence {})",
            label_of(state, &record.id),
            record.strength.clamp(-1.0, 1.0),
            record.evidence
        ),
        (MemoryOp::AdjustStrength { .. }, _) => match (b.numbers, after) {
            (Some((s0, e0)), Some((s1, e1))) => {
                format!("{desc_before} ({s0:.1} → {s1:.1}, evidence {e0} → {e1})")
            }
            _ => desc_before.clone(),
        },
        (MemoryOp::Forget { .. }, _) => match b.numbers {
            Some((s, e)) => format!("{desc_before} (strength {s:.1}, evidence {e})"),
            None => desc_before.clone(),
        },
        (MemoryOp::Merge { .. }, _) => format!(
            "{} into {desc_before} ({} → {})",
            b.merged.join(", "),
            b.numbers.map_or("?".into(), |x| format!("{:.1}", x.0)),
            after.map_or("?".into(), |a| format!("{:.1}", a.0))
        ),
        (_, "synthesize") => {
            let words = state
                .get(op.target())
                .map_or(0, |r| r.text.split_whitespace().count());
            format!("profile ({words} words)")
        }
        (op, _) => format!("{} {}", op.name(), desc_before),
    }
}

/// Run `evomem inspect`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = pick::policy_dir(
        &args.run,
        args.policy.as_deref(),
        pick::Need {
            what: "a lifecycle timeline",
            cap: |c| !c.lifecycle_timeline.is_empty(),
            ops: true,
            decisions: false,
        },
    )?;
    let family = dir.family()?;
    // A folder outside the family table (a Python policy's, from
    // `evomem.evaluate(..., out=)`) gets the generic view: every op, and the
    // final memory by record kind.
    let builtin = evomem_policy::registry::family(&family).ok();
    let lifecycle: &[&str] = builtin.map(|f| f.caps.lifecycle_timeline).unwrap_or(&[]);
    let path = dir.ops_file();
    let ops = user_ops(&dir, &args.user)?;
    if ops.is_empty() {
        bail!("no ops for user `{}` in {}", args.user, path.display());
    }
    println!(
        "user {} — {} ops from {}",
        args.user,
        ops.len(),
        path.display()
    );
    let mut state = MemoryState::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut signals = 0u64;
    for lo in &ops {
        let label = lo.provenance.label.as_str();
        let at = lo.provenance.logical_time;
        let before_view = Before::of(&lo.op, &state);
        if let MemoryOp::Create { record } = &lo.op {
            if record.kind == RecordKind::Event {
                signals += 1;
            }
        }
        // A link from the user's record to another user's (AtomRec's
        // collaborative links) points outside this slice of the log: it is
        // shown, not replayed.
        let outside = matches!(&lo.op, MemoryOp::Link { to, .. } if state.get(to).is_none());
        if !outside {
            state
                .apply(&lo.op, at)
                .with_context(|| format!("replaying op seq {} ({label})", lo.seq))?;
        }
        *counts.entry(label.to_string()).or_insert(0) += 1;
        let show = args.all || builtin.is_none() || lifecycle.contains(&label);
        if !show {
            continue;
        }
        let line = match (&lo.op, builtin) {
            // The generic view names a created record by its text.
            (MemoryOp::Create { record }, None) => {
                format!("create {}", label_of(&state, &record.id))
            }
            _ => describe(&lo.op, label, &state, &before_view),
        };
        println!(
            "  {:>8}  {:<10} {}  — {}",
            format!("t{}", at.0),
            label,
            line,
            lo.provenance.reason
        );
    }
    let labels: Vec<&str> = match builtin {
        Some(_) => lifecycle.to_vec(),
        None => counts.keys().map(String::as_str).collect(),
    };
    let total: u64 = labels
        .iter()
        .map(|l| counts.get(*l).copied().unwrap_or(0))
        .sum();
    let which = if builtin.is_some() {
        "lifecycle"
    } else {
        "all"
    };
    println!("\nsignals observed: {signals}; {which} ops: {total}");
    if total > 0 {
        let dist: Vec<String> = labels
            .iter()
            .filter_map(|l| {
                let n = counts.get(*l).copied().unwrap_or(0);
                (n > 0).then(|| format!("{l} {:.0}% ({n})", 100.0 * n as f64 / total as f64))
            })
            .collect();
        println!("distribution: {}", dist.join(", "));
    }
    if builtin.is_some() {
        print_final(&state, &args.user);
    } else {
        print_records(&state, &args.user);
    }
    Ok(())
}

/// The generic view of the user's final memory: every record, by kind.
fn print_records(state: &MemoryState, user: &str) {
    let ns = [Namespace::user(user)];
    let mut recs: Vec<_> = state.scan(&ns).collect();
    recs.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.id.cmp(&b.id)));
    println!("\nfinal memory ({} records):", recs.len());
    for r in recs {
        let kind = serde_json::to_value(&r.kind)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_else(|| format!("{:?}", r.kind));
        println!(
            "  [{kind}] {} — {} (strength {:.1}, evidence {})",
            r.id.as_str(),
            r.text,
            r.strength,
            r.evidence
        );
    }
}

/// The user's final preference chunks and profile.
fn print_final(state: &MemoryState, user: &str) {
    let ns = [Namespace::user(user)];
    let mut chunks: Vec<_> = state.scan_kind(&ns, &RecordKind::PreferenceChunk).collect();
    chunks.sort_by(|a, b| {
        a.field_str("category")
            .cmp(&b.field_str("category"))
            .then(b.strength.total_cmp(&a.strength))
    });
    println!("\nfinal preference chunks ({}):", chunks.len());
    for c in chunks {
        println!(
            "  [{}] {} — strength {:.1}, evidence {}",
            c.field_str("category").unwrap_or("?"),
            c.text,
            c.strength,
            c.evidence
        );
    }
    let profile = state.scan_kind(&ns, &RecordKind::Profile).next();
    match profile {
        Some(p) => println!("\nfinal profile:\n{}", p.text),
        None => println!("\nno profile was synthesized"),
    }
}
