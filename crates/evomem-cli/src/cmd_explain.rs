//! `evomem explain --run DIR --user U [--policy SPEC]`: why did a policy
//! rank its top candidate first? Reads `decisions.jsonl` and the op log
//! (`ops.jsonl.zst`, or a plain `ops.jsonl`) of one policy folder of an eval
//! run (`--policy`, else the single folder whose family produces evidence
//! paths, today `atomrec`) and prints the 1-hop and 2-hop evidence paths (AtomRec §2.6) that end on the top-ranked candidate,
//! with the relation of each link and the provenance of each atom on the
//! path: which op created it, which ops evolved it, their reasons and source
//! interactions. Paths are read as data (`ContextEntry::path`), never parsed
//! out of rendered text. Other users' atoms appear only under their `anon:`
//! label (the run's operator sees their provenance, never their owner).
//! A decision without paths (a policy without them, e.g. one written in
//! Python, read with `--policy NAME`) lists the memories its usage trace
//! names, with the same provenance.

use crate::pick;
use anyhow::{bail, Context};
use evomem_core::{EvidencePath, LoggedOp, MemoryOp};
use evomem_eval::run::dir::{DecisionLine, PolicyDir};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Flags of `evomem explain`.
#[derive(clap::Args)]
pub struct Args {
    /// Eval output folder (`evomem eval --out DIR`) or one policy folder in it.
    #[arg(long)]
    pub run: PathBuf,
    /// User token.
    #[arg(long)]
    pub user: String,
    /// Policy spec or slug inside the run folder (default: the first `atomrec*` folder).
    #[arg(long)]
    pub policy: Option<String>,
    /// Also print paths ending on other candidates.
    #[arg(long, default_value_t = false)]
    pub all: bool,
}

/// One op of the log, reduced to what provenance needs.
#[derive(Debug, Clone)]
struct OpLine {
    seq: u64,
    kind: String,
    label: String,
    reason: String,
    sources: Vec<u64>,
    at: u64,
}

/// Run `evomem explain`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = pick::policy_dir(
        &args.run,
        args.policy.as_deref(),
        pick::Need {
            what: "evidence paths",
            cap: |c| c.evidence_paths,
            ops: false,
            decisions: true,
        },
    )?;
    let mut decision: Option<DecisionLine> = None;
    dir.for_each_decision(&format!("\"{}\"", args.user), |d| {
        if d.user == args.user {
            decision = Some(d);
        }
        Ok(())
    })?;
    let Some(d) = decision else {
        bail!(
            "{}: no decision for user `{}`",
            dir.path().display(),
            args.user
        );
    };
    let top = d.top().with_context(|| {
        format!(
            "{}: decision of `{}` has no scores",
            dir.path().display(),
            args.user
        )
    })?;
    let top_item = d.candidates.get(top).cloned().unwrap_or_default();
    let top_id = d.candidate_ids.get(top).copied();
    println!("policy folder: {}", dir.path().display());
    println!(
        "user {} · decision {} at {} · top-ranked candidate: item {top_item} (score {:.4}){}",
        args.user,
        d.decision_id,
        d.at,
        d.scores.get(top).copied().unwrap_or(0.0),
        if top_item == d.target {
            " = target"
        } else {
            ""
        }
    );
    if let Some(p) = &d.context.profile {
        println!("collaborative evidence: {p}");
    }
    let paths: Vec<(&str, &EvidencePath, f32)> = d
        .context
        .entries
        .iter()
        .filter_map(|e| {
            let p = e.path.as_ref()?;
            (args.all || (top_id.is_some() && e.item == top_id)).then_some((
                e.text.as_str(),
                p,
                e.weight,
            ))
        })
        .collect();
    if paths.is_empty() {
        println!(
            "no evidence path ends on item {top_item}; it was ranked by user/item memory alone."
        );
        print_used(&dir, &d)?;
    }
    let wanted: BTreeSet<String> = paths
        .iter()
        .flat_map(|(_, p, _)| p.nodes.iter().map(|n| n.as_str().to_string()))
        .collect();
    let prov = provenance(&dir, &wanted)?;
    for hops in [1usize, 2] {
        let sel: Vec<_> = paths.iter().filter(|(_, p, _)| p.hops() == hops).collect();
        println!("\n{hops}-hop evidence paths ({}):", sel.len());
        for (text, p, w) in sel {
            println!("  [score {w:.4}] {text}");
            for id in &p.nodes {
                print_node(id.as_str(), prov.get(id.as_str()));
            }
        }
    }
    Ok(())
}

/// The memories the decision's usage trace names, with their provenance:
/// what a policy without evidence paths (a Python policy) reported using.
fn print_used(dir: &PolicyDir, d: &DecisionLine) -> anyhow::Result<()> {
    if d.trace.used.is_empty() {
        return Ok(());
    }
    let wanted: BTreeSet<String> = d
        .trace
        .used
        .iter()
        .map(|u| u.id.as_str().to_string())
        .collect();
    let prov = provenance(dir, &wanted)?;
    println!("\nmemories used ({}):", d.trace.used.len());
    for u in &d.trace.used {
        println!("  [weight {:.2}]", u.weight);
        print_node(u.id.as_str(), prov.get(u.id.as_str()));
    }
    Ok(())
}

fn print_node(id: &str, ops: Option<&Vec<OpLine>>) {
    let who = if id.starts_with("anon:") {
        " (another user's atom, anonymised)"
    } else {
        ""
    };
    println!("    {id}{who}");
    match ops {
        None => println!("      (no op in the op log)"),
        Some(ops) => {
            for o in ops {
                println!(
                    "      op #{} {} [{}] at t{}: {} (sources: {})",
                    o.seq,
                    o.kind,
                    o.label,
                    o.at,
                    o.reason,
                    o.sources
                        .iter()
                        .map(|s| format!("t{s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
    }
}

/// Provenance of the wanted ids (raw ids and `anon:` labels) from the op log:
/// the create, evolve (update) and link ops that target each atom.
fn provenance(
    dir: &PolicyDir,
    wanted: &BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, Vec<OpLine>>> {
    if !dir.has_ops() {
        bail!(
            "no op log (ops.jsonl.zst or ops.jsonl) in {}: the run was made with `--ops-log off`, so atom provenance is \
             unavailable; rerun with `--ops-log on`",
            dir.path().display()
        );
    }
    let mut out: BTreeMap<String, Vec<OpLine>> = BTreeMap::new();
    let mut anon: BTreeMap<String, String> = BTreeMap::new();
    let want_anon = wanted.iter().any(|w| w.starts_with("anon:"));
    let keep = |line: &str| {
        wanted.iter().any(|w| line.contains(w.as_str()))
            || (want_anon && line.contains("\"op\":\"create\""))
    };
    dir.for_each_op(keep, |lo: LoggedOp| {
        let target = lo.op.target().as_str().to_string();
        let key = if wanted.contains(&target) {
            target.clone()
        } else if want_anon {
            if let MemoryOp::Create { .. } = &lo.op {
                let label = evomem_policy::atomrec::anon_label(lo.op.target());
                if wanted.contains(&label) {
                    anon.insert(target.clone(), label);
                }
            }
            match anon.get(&target) {
                Some(l) => l.clone(),
                None => return Ok(()),
            }
        } else {
            return Ok(());
        };
        out.entry(key.clone()).or_default().push(op_line(&lo, &key));
        Ok(())
    })?;
    // Keep the create and evolve ops, and at most 5 link ops per atom.
    for ops in out.values_mut() {
        let mut links = 0;
        ops.retain(|o| {
            if o.kind == "link" {
                links += 1;
                links <= 5
            } else {
                true
            }
        });
    }
    Ok(out)
}

/// One op as `explain` prints it; another user's atom ids are hidden.
fn op_line(lo: &LoggedOp, key: &str) -> OpLine {
    let hide = |w: &str| w.starts_with("atom:u") && key.starts_with("anon:");
    let mut reason = lo.provenance.reason.clone();
    if key.starts_with("anon:") {
        // Never print another user's atom ids.
        reason = reason
            .split_whitespace()
            .map(|w| if hide(w) { "<anon>" } else { w })
            .collect::<Vec<_>>()
            .join(" ");
    }
    if let MemoryOp::Link { to, .. } = &lo.op {
        let to = if hide(to.as_str()) {
            "<anon>"
        } else {
            to.as_str()
        };
        reason = format!("link → {to}: {reason}");
    }
    OpLine {
        seq: lo.seq,
        kind: lo.op.name().to_string(),
        label: lo.provenance.label.clone(),
        reason,
        sources: lo.provenance.sources.iter().map(|t| t.0).collect(),
        at: lo.provenance.logical_time.0,
    }
}
