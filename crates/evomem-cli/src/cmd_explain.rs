//! `evomem explain --run DIR --user U [--policy SLUG]`: why did a policy rank
//! its top candidate first? Reads `decisions.jsonl` and `ops.jsonl` of one
//! policy folder of an eval run and prints the 1-hop and 2-hop evidence paths
//! (AtomRec §2.6) that end on the top-ranked candidate, with the relation of
//! each link and the provenance of each atom on the path: which op created it,
//! which ops evolved it, their reasons and source interactions. Other users'
//! atoms appear only under their `anon:` label (the run's operator sees their
//! provenance, never their owner).

use anyhow::{bail, Context};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

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

fn slug(spec: &str) -> String {
    spec.chars()
        .map(|c| {
            if matches!(c, '[' | ']' | ',' | '=') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

fn policy_dir(run: &Path, policy: Option<&str>) -> anyhow::Result<PathBuf> {
    if run.join("decisions.jsonl").exists() && policy.is_none() {
        return Ok(run.to_path_buf());
    }
    if let Some(p) = policy {
        let d = run.join(slug(p));
        if d.join("decisions.jsonl").exists() {
            return Ok(d);
        }
        bail!("{}: no decisions.jsonl for policy `{p}`", d.display());
    }
    let mut names: Vec<String> = std::fs::read_dir(run)
        .with_context(|| format!("cannot read run folder {}", run.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("decisions.jsonl").exists())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    match names.iter().find(|n| n.starts_with("atomrec")) {
        Some(n) => Ok(run.join(n)),
        None => bail!(
            "{}: no atomrec policy folder (found: {}); pass --policy",
            run.display(),
            names.join(", ")
        ),
    }
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

fn json_u64s(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
        .unwrap_or_default()
}

/// Ids on a path line: the `[...]` tokens.
fn ids_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        let id = &rest[open + 1..open + close];
        if id.starts_with("atom:") || id.starts_with("anon:") {
            out.push(id.to_string());
        }
        rest = &rest[open + close + 1..];
    }
    out
}

/// Run `evomem explain`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = policy_dir(&args.run, args.policy.as_deref())?;
    let dpath = dir.join("decisions.jsonl");
    let f =
        std::fs::File::open(&dpath).with_context(|| format!("cannot open {}", dpath.display()))?;
    let mut decision: Option<serde_json::Value> = None;
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line =
            line.with_context(|| format!("{}: read error at line {}", dpath.display(), n + 1))?;
        if !line.contains(&format!("\"{}\"", args.user)) {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{}: line {} is not JSON", dpath.display(), n + 1))?;
        if v.get("user").and_then(|u| u.as_str()) == Some(args.user.as_str()) {
            decision = Some(v);
        }
    }
    let Some(d) = decision else {
        bail!("{}: no decision for user `{}`", dpath.display(), args.user);
    };
    let cands: Vec<String> = d["candidates"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), String::from))
                .collect()
        })
        .unwrap_or_default();
    let scores: Vec<f64> = d["scores"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    let top = scores
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| i)
        .with_context(|| {
            format!(
                "{}: decision of `{}` has no scores",
                dpath.display(),
                args.user
            )
        })?;
    let top_item = cands.get(top).cloned().unwrap_or_default();
    let target = d["target"]
        .as_str()
        .map_or_else(|| d["target"].to_string(), String::from);
    println!("policy folder: {}", dir.display());
    println!(
        "user {} · decision {} at {} · top-ranked candidate: item {top_item} (score {:.4}){}",
        args.user,
        d["decision_id"],
        d["at"],
        scores.get(top).copied().unwrap_or(0.0),
        if top_item == target { " = target" } else { "" }
    );
    if let Some(p) = d["context"]["profile"].as_str() {
        println!("collaborative evidence: {p}");
    }
    let entries = d["context"]["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut paths: Vec<(String, f64)> = Vec::new();
    for e in &entries {
        let text = e["text"].as_str().unwrap_or_default();
        if !text.starts_with("evidence path") {
            continue;
        }
        let to_top = text.contains(&format!(" to item {top_item} "));
        if to_top || args.all {
            paths.push((text.to_string(), e["weight"].as_f64().unwrap_or(0.0)));
        }
    }
    if paths.is_empty() {
        println!(
            "no evidence path ends on item {top_item}; it was ranked by user/item memory alone."
        );
    }
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for (p, _) in &paths {
        wanted.extend(ids_in(p));
    }
    let prov = provenance(&dir.join("ops.jsonl"), &wanted)?;
    for hops in [1usize, 2] {
        let sel: Vec<&(String, f64)> = paths
            .iter()
            .filter(|(p, _)| p.starts_with(&format!("evidence path ({hops} hops)")))
            .collect();
        println!("\n{hops}-hop evidence paths ({}):", sel.len());
        for (p, w) in sel {
            println!("  [score {w:.4}] {p}");
            for id in ids_in(p) {
                let who = if id.starts_with("anon:") {
                    " (another user's atom, anonymised)"
                } else {
                    ""
                };
                println!("    {id}{who}");
                match prov.get(&id) {
                    None => println!("      (no op in ops.jsonl)"),
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
        }
    }
    Ok(())
}

/// Provenance of the wanted ids (raw ids and `anon:` labels) from the op log:
/// the create, evolve (update) and link ops that target each atom.
fn provenance(
    path: &Path,
    wanted: &BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, Vec<OpLine>>> {
    if !path.exists() {
        anyhow::bail!(
            "no {}: the run was made with `--ops-log off`, so atom provenance is unavailable; \
             rerun with `--ops-log on`",
            path.display()
        );
    }
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut out: BTreeMap<String, Vec<OpLine>> = BTreeMap::new();
    let mut anon: BTreeMap<String, String> = BTreeMap::new();
    let want_anon = wanted.iter().any(|w| w.starts_with("anon:"));
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line =
            line.with_context(|| format!("{}: read error at line {}", path.display(), n + 1))?;
        let cheap = wanted.iter().any(|w| line.contains(w.as_str()));
        if !(cheap || (want_anon && line.contains("\"op\":\"create\""))) {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{}: line {} is not a logged op", path.display(), n + 1))?;
        let op = &v["op"];
        let kind = op["op"].as_str().unwrap_or("?").to_string();
        let target = match kind.as_str() {
            "create" => op["record"]["id"].as_str(),
            "link" | "unlink" => op["from"].as_str(),
            _ => op["id"].as_str(),
        }
        .unwrap_or_default()
        .to_string();
        let key = if wanted.contains(&target) {
            target.clone()
        } else {
            let label =
                evomem_policy::atomrec::anon_label(&evomem_core::MemoryId::new(target.clone()));
            if kind == "create" && wanted.contains(&label) {
                anon.insert(target.clone(), label.clone());
            }
            match anon.get(&target) {
                Some(l) => l.clone(),
                None => continue,
            }
        };
        let p = &v["provenance"];
        let mut reason = p["reason"].as_str().unwrap_or_default().to_string();
        if key.starts_with("anon:") {
            // Never print another user's atom ids.
            reason = reason
                .split_whitespace()
                .map(|w| if w.starts_with("atom:u") { "<anon>" } else { w })
                .collect::<Vec<_>>()
                .join(" ");
        }
        if kind == "link" {
            reason = format!(
                "link → {}: {reason}",
                op["to"].as_str().map_or("?".to_string(), |t| {
                    if t.starts_with("atom:u") && key.starts_with("anon:") {
                        "<anon>".to_string()
                    } else {
                        t.to_string()
                    }
                })
            );
        }
        out.entry(key).or_default().push(OpLine {
            seq: v["seq"].as_u64().unwrap_or(0),
            kind,
            label: p["label"].as_str().unwrap_or_default().to_string(),
            reason,
            sources: json_u64s(&p["sources"]),
            at: p["logical_time"].as_u64().unwrap_or(0),
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_from_path_text() {
        let t = "evidence path (2 hops) to item 50 \"Star Wars\": [atom:u1:t5] you: Rated 5/5: Heat —shared topic→ [anon:1234abcd] another user: Rated 4/5: Heat —intent progression→ [atom:item:50] item: Star Wars";
        assert_eq!(
            ids_in(t),
            vec!["atom:u1:t5", "anon:1234abcd", "atom:item:50"]
        );
        assert_eq!(slug("atomrec[h=1,kt=false]"), "atomrec_h_1_kt_false_");
    }
}
