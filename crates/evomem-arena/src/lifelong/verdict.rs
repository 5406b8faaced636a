//! The lifelong arena's verdicts: the RoMeRL paper's claims, each judged on
//! per-seed paired differences.
//!
//! Every variant of a run goes through the same seeds, so the same task
//! orders: two variants' marginal intervals carry that shared variation and
//! can overlap while one variant is above the other on every seed. So no
//! claim here is judged on whether two marginal intervals overlap. A
//! comparison of variant `a` with variant `b` is the mean of `a[s] − b[s]`
//! over the seeds `s` both ran, with its Student-t interval
//! ([`crate::stats::mean_ci`]); it *separates* when that interval excludes
//! 0 (with at least two seeds).
//!
//! **Cells.** The keys that decide what happens to a nulled memory
//! (`actionless`, `replace_rule`) and the arena's `reuse_null` are not part
//! of a design: a claim compares two designs *within* each cell of those
//! keys that the run holds both of (`romerl[actionless=replace]` against
//! `memrl[actionless=replace]`, never against `memrl`). A claim **holds**
//! when the paired difference separates in the claimed direction in every
//! cell, **does not hold** when it separates the other way in every cell,
//! and is **not comparable** otherwise: the cells disagree, or the seeds do
//! not separate the two. A noise claim also needs every rule for nulled
//! memories in the run (`actionless=keep`, and `replace` with each
//! `replace_rule`): until it holds under every rule, the rule decides it,
//! and its verdict says "not comparable".

use crate::lifelong::run::{base_name, PolicyRun, REUSE_NULL, REUSE_NULL_DEFAULT};
use crate::stats::{mean_ci, MeanCi};
use evomem_policy::registry::PolicySpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The keys that make a cell rather than a design.
const CELL_KEYS: [&str; 3] = ["actionless", "replace_rule", REUSE_NULL];

/// The rules for nulled memories a noise claim must be judged under.
const RULES: [&str; 3] = [
    "actionless=keep",
    "actionless=replace,replace_rule=same_polarity",
    "actionless=replace,replace_rule=any",
];

/// A claim's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Separates in the claimed direction in every cell (and, for a noise
    /// claim, under every rule).
    Holds,
    /// Separates the other way in every cell.
    DoesNotHold,
    /// Anything else: cells that disagree, seeds that do not separate the
    /// two variants, a rule not run, or a claim about another task.
    NotComparable,
}

impl Verdict {
    /// `holds`, `does not hold`, `not comparable`.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::NotComparable => "not comparable",
        }
    }
}

/// Where a paired difference lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Separates in the claimed direction.
    Claimed,
    /// Separates the other way.
    Opposite,
    /// Its interval holds 0 (or fewer than two seeds).
    Level,
}

/// One cell of a claim: the two variants and their paired difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The cell (`actionless=replace,replace_rule=any,reuse_null=0.5`).
    pub cell: String,
    /// The first variant's requested spec.
    pub a: String,
    /// The second variant's requested spec.
    pub b: String,
    /// The first variant's marginal mean over the seeds both ran.
    pub a_mean: MeanCi,
    /// The second variant's.
    pub b_mean: MeanCi,
    /// Mean of `a[s] − b[s]` with its interval.
    pub diff: MeanCi,
    /// Where the difference lies.
    pub side: Side,
}

/// One claim of the paper, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The claim as the paper makes it.
    pub claim: String,
    /// The metric compared.
    pub metric: String,
    /// Every cell the run holds both variants of.
    pub cells: Vec<Cell>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in a sentence.
    pub why: String,
}

/// A side of a claim: a family with the design keys that make the variant
/// (`memrl` with `cap=4`).
struct Variant {
    family: &'static str,
    keys: &'static [(&'static str, &'static str)],
}

/// A metric read from one run.
type Metric = fn(&PolicyRun) -> Option<f64>;

/// A claim of the paper: `a` above `b` on `metric` (or below, `higher`
/// false).
struct ClaimDef {
    claim: &'static str,
    metric: (&'static str, Metric),
    a: Variant,
    b: Variant,
    higher: bool,
    /// Judged on noise-injection runs (and then under every rule).
    noise: bool,
    /// A verdict the setup fixes whatever the numbers (with why).
    fixed: Option<&'static str>,
}

const ROMERL: Variant = Variant {
    family: "romerl",
    keys: &[],
};
const MEMRL: Variant = Variant {
    family: "memrl",
    keys: &[],
};
const MEMRL_4: Variant = Variant {
    family: "memrl",
    keys: &[("cap", "4")],
};

fn last(r: &PolicyRun) -> Option<&crate::lifelong::run::EpochMetrics> {
    r.epochs.last()
}

const FIGURE_5: &str =
    "Figure 5 is an OS-task result; this arena runs DB tasks, so the difference is shown, not judged";

const NO_LLM_OF_THEIR_OWN: &str = "neither design calls an LLM of its own in this arena (the paper's saving comes partly from procedural memories RoMeRL does not generate): only the agent's `act` role is counted, estimated offline, so the difference is shown, not judged";

/// The claims, in the order of the paper.
const CLAIMS: &[ClaimDef] = &[
    ClaimDef {
        claim: "RoMeRL above MemRL-4 in last-epoch SR (0.645 → 0.680)",
        metric: ("last-epoch SR", |r| last(r).map(|m| m.sr)),
        a: ROMERL,
        b: MEMRL_4,
        higher: true,
        noise: false,
        fixed: None,
    },
    ClaimDef {
        claim: "RoMeRL above MemRL-4 in CSR (0.940 → 0.952)",
        metric: ("last-epoch CSR", |r| last(r).map(|m| m.csr)),
        a: ROMERL,
        b: MEMRL_4,
        higher: true,
        noise: false,
        fixed: None,
    },
    ClaimDef {
        claim: "RoMeRL has a lower Cold-Q ratio than MemRL-4 (19.6% → 9.7%)",
        metric: ("last-epoch Cold-Q", |r| last(r).map(|m| m.cold_q)),
        a: ROMERL,
        b: MEMRL_4,
        higher: false,
        noise: false,
        fixed: None,
    },
    ClaimDef {
        claim: "RoMeRL has a higher feedback density than MemRL-4 (8.0 → 16.1)",
        metric: ("last-epoch feedback density", |r| last(r).map(|m| m.density)),
        a: ROMERL,
        b: MEMRL_4,
        higher: true,
        noise: false,
        fixed: None,
    },
    ClaimDef {
        claim: "Q tracks provenance better under RoMeRL than MemRL (point-biserial r 0.493 → 0.673)",
        metric: ("last-epoch point-biserial r", |r| {
            last(r).and_then(|m| m.point_biserial)
        }),
        a: ROMERL,
        b: MEMRL,
        higher: true,
        noise: false,
        fixed: None,
    },
    ClaimDef {
        claim: "lower token consumption than MemRL (OS and DB tasks)",
        metric: ("last-epoch act tokens", |r| last(r).map(|m| m.tokens as f64)),
        a: ROMERL,
        b: MEMRL,
        higher: false,
        noise: false,
        fixed: Some(NO_LLM_OF_THEIR_OWN),
    },
    ClaimDef {
        claim: "fewer LLM calls than MemRL (OS and DB tasks)",
        metric: ("last-epoch act calls", |r| last(r).map(|m| m.calls as f64)),
        a: ROMERL,
        b: MEMRL,
        higher: false,
        noise: false,
        fixed: Some(NO_LLM_OF_THEIR_OWN),
    },
    ClaimDef {
        claim: "Figure 5: dropping NCC costs SR",
        metric: ("last-epoch SR", |r| last(r).map(|m| m.sr)),
        a: ROMERL,
        b: Variant {
            family: "romerl",
            keys: &[("ncc", "false")],
        },
        higher: true,
        noise: false,
        fixed: Some(FIGURE_5),
    },
    ClaimDef {
        claim: "Figure 5: dropping PAC costs SR",
        metric: ("last-epoch SR", |r| last(r).map(|m| m.sr)),
        a: ROMERL,
        b: Variant {
            family: "romerl",
            keys: &[("pac", "false")],
        },
        higher: true,
        noise: false,
        fixed: Some(FIGURE_5),
    },
    ClaimDef {
        claim: "under 10% noise RoMeRL replaces most noisy entries, MemRL keeps and propagates them: a lower final noise ratio",
        metric: ("final noise ratio", |r| {
            r.noise.as_ref().map(|n| n.final_noise_ratio)
        }),
        a: ROMERL,
        b: MEMRL,
        higher: false,
        noise: true,
        fixed: None,
    },
    ClaimDef {
        claim: "the same, counted: fewer noisy entries at the end",
        metric: ("final noisy entries", |r| {
            r.noise.as_ref().map(|n| n.noisy_entries as f64)
        }),
        a: ROMERL,
        b: MEMRL,
        higher: false,
        noise: true,
        fixed: None,
    },
    ClaimDef {
        claim: "MemRL+UCB ends with more noise than MemRL",
        metric: ("final noise ratio", |r| {
            r.noise.as_ref().map(|n| n.final_noise_ratio)
        }),
        a: Variant {
            family: "memrl",
            keys: &[("ucb", "true")],
        },
        b: MEMRL,
        higher: true,
        noise: true,
        fixed: None,
    },
];

/// A requested spec split into its variant (family and design keys, less
/// `delta`, which the arena fills) and its cell (the nulled-memory rule
/// and `reuse_null`, defaults written out; `replace_rule` only under
/// `replace`, where it acts).
fn variant_and_cell(group: &str) -> Option<(String, BTreeMap<String, String>, String)> {
    let spec = PolicySpec::parse(group).ok()?;
    let mut design = spec.params.clone();
    design.remove("delta");
    let mut cell = BTreeMap::new();
    for k in CELL_KEYS {
        if let Some(v) = design.remove(k) {
            cell.insert(k, v);
        }
    }
    let actionless = cell.remove("actionless").unwrap_or_else(|| "keep".into());
    let rule = cell
        .remove("replace_rule")
        .unwrap_or_else(|| "same_polarity".into());
    let reuse = cell
        .remove(REUSE_NULL)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(REUSE_NULL_DEFAULT);
    let cell = if actionless == "replace" {
        format!("actionless=replace,replace_rule={rule},{REUSE_NULL}={reuse}")
    } else {
        format!("actionless={actionless},{REUSE_NULL}={reuse}")
    };
    Some((spec.name, design, cell))
}

fn is(v: &Variant, family: &str, design: &BTreeMap<String, String>) -> bool {
    v.family == family
        && design.len() == v.keys.len()
        && v.keys
            .iter()
            .all(|(k, val)| design.get(*k).is_some_and(|x| x == val))
}

/// The seeds' values of `metric` for the runs of `group`, by seed.
fn by_seed(runs: &[PolicyRun], group: &str, metric: Metric) -> BTreeMap<u64, f64> {
    runs.iter()
        .filter(|r| base_name(r) == group)
        .filter_map(|r| metric(r).filter(|x| x.is_finite()).map(|x| (r.seed, x)))
        .collect()
}

/// The paired comparison of `a` and `b` on `metric` over the seeds both
/// ran: (a's marginal, b's marginal, the mean of `a[s] − b[s]`); `None`
/// when they share no seed.
pub fn paired(
    runs: &[PolicyRun],
    a: &str,
    b: &str,
    metric: fn(&PolicyRun) -> Option<f64>,
) -> Option<(MeanCi, MeanCi, MeanCi)> {
    let (xa, xb) = (by_seed(runs, a, metric), by_seed(runs, b, metric));
    let common: Vec<(f64, f64)> = xa
        .iter()
        .filter_map(|(s, x)| xb.get(s).map(|y| (*x, *y)))
        .collect();
    if common.is_empty() {
        return None;
    }
    let pick = |f: fn(&(f64, f64)) -> f64| common.iter().map(f).collect::<Vec<_>>();
    Some((
        mean_ci(&pick(|p| p.0)),
        mean_ci(&pick(|p| p.1)),
        mean_ci(&pick(|p| p.0 - p.1)),
    ))
}

/// Where `diff` lies for a claim that `a` is `higher` (or lower).
pub fn side(diff: &MeanCi, higher: bool) -> Side {
    if diff.n < 2 || !diff.lo.is_finite() || !diff.hi.is_finite() {
        return Side::Level;
    }
    match (diff.lo > 0.0, diff.hi < 0.0) {
        (true, _) if higher => Side::Claimed,
        (_, true) if !higher => Side::Claimed,
        (true, _) | (_, true) => Side::Opposite,
        _ => Side::Level,
    }
}

/// Every claim the runs can judge (both of its variants present in at
/// least one common cell); `noise` picks the noise-injection claims.
pub fn claims(runs: &[PolicyRun], noise: bool) -> Vec<Claim> {
    let mut groups: Vec<String> = runs.iter().map(base_name).collect();
    let mut seen = std::collections::BTreeSet::new();
    groups.retain(|g| seen.insert(g.clone()));
    let parsed: Vec<(String, String, BTreeMap<String, String>, String)> = groups
        .iter()
        .filter_map(|g| variant_and_cell(g).map(|(f, d, c)| (g.clone(), f, d, c)))
        .collect();
    let mut out = Vec::new();
    for def in CLAIMS.iter().filter(|d| d.noise == noise) {
        let mut cells = Vec::new();
        for (ga, fa, da, ca) in &parsed {
            if !is(&def.a, fa, da) {
                continue;
            }
            let Some((gb, ..)) = parsed
                .iter()
                .find(|(_, fb, db, cb)| is(&def.b, fb, db) && cb == ca)
            else {
                continue;
            };
            if let Some((a_mean, b_mean, diff)) = paired(runs, ga, gb, def.metric.1) {
                cells.push(Cell {
                    cell: ca.clone(),
                    a: ga.clone(),
                    b: gb.clone(),
                    a_mean,
                    b_mean,
                    side: side(&diff, def.higher),
                    diff,
                });
            }
        }
        if cells.is_empty() {
            continue;
        }
        let (verdict, why) = judge(def, &cells);
        out.push(Claim {
            claim: def.claim.to_string(),
            metric: def.metric.0.to_string(),
            cells,
            verdict,
            why,
        });
    }
    out
}

/// The verdict over a claim's cells (module docs).
fn judge(def: &ClaimDef, cells: &[Cell]) -> (Verdict, String) {
    let n = cells.len();
    let count = |s: Side| cells.iter().filter(|c| c.side == s).count();
    let (claimed, opposite) = (count(Side::Claimed), count(Side::Opposite));
    let tally = format!(
        "paired by seed, the claimed direction separates in {claimed} of {n} cell(s), the opposite in {opposite}"
    );
    if let Some(why) = def.fixed {
        return (Verdict::NotComparable, format!("{why} ({tally})"));
    }
    if def.noise {
        let missing: Vec<&str> = RULES
            .iter()
            .filter(|r| !cells.iter().any(|c| c.cell.starts_with(&format!("{r},"))))
            .copied()
            .collect();
        if !missing.is_empty() {
            return (
                Verdict::NotComparable,
                format!(
                    "{tally}; not run under {}: until the claim holds under every rule for nulled memories, the rule decides it",
                    missing.join(" nor ")
                ),
            );
        }
    }
    if claimed == n {
        (Verdict::Holds, tally)
    } else if opposite == n {
        (Verdict::DoesNotHold, tally)
    } else if def.noise {
        (
            Verdict::NotComparable,
            format!(
                "{tally}: the rule for nulled memories and the agent's reuse of a null decide it"
            ),
        )
    } else {
        (
            Verdict::NotComparable,
            format!("{tally}: the seeds do not separate the two"),
        )
    }
}

/// The claims section of the report.
pub fn markdown(s: &mut String, claims: &[Claim]) {
    if claims.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## The paper's claims, judged on paired differences\n");
    let _ = writeln!(
        s,
        "Each cell compares the two variants under the same rule for nulled memories and the same `{REUSE_NULL}`, seed by seed; the difference separates when its 95% interval excludes 0.\n"
    );
    let _ = writeln!(
        s,
        "| claim | cell | first | second | first − second, paired | verdict |\n|---|---|---|---|---|---|"
    );
    for c in claims {
        for (i, cell) in c.cells.iter().enumerate() {
            let digits = if c.metric.contains("entries") { 1 } else { 4 };
            let _ = writeln!(
                s,
                "| {} | {} | `{}` {} | `{}` {} | {} | {} |",
                if i == 0 {
                    format!("{} ({})", c.claim, c.metric)
                } else {
                    String::new()
                },
                cell.cell,
                cell.a,
                cell.a_mean.show(digits),
                cell.b,
                cell.b_mean.show(digits),
                cell.diff.show(digits),
                if i == 0 {
                    format!("**{}**: {}", c.verdict.text(), c.why)
                } else {
                    String::new()
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::lifelong::run::{EpochMetrics, NoiseMetrics};

    fn run(policy: &str, seed: u64, sr: f64, noise: Option<(f64, usize)>) -> PolicyRun {
        PolicyRun {
            spec: policy.into(),
            policy: policy.into(),
            seed,
            reuse_null: REUSE_NULL_DEFAULT,
            epochs: vec![EpochMetrics {
                epoch: 1,
                sr,
                csr: sr,
                ..EpochMetrics::default()
            }],
            transfer_sr: None,
            noise: noise.map(|(ratio, noisy)| NoiseMetrics {
                final_noise_ratio: ratio,
                noisy_entries: noisy,
                ..NoiseMetrics::default()
            }),
            q_bins: Vec::new(),
            stats: serde_json::Value::Null,
            episodes: Vec::new(),
        }
    }

    /// The seeds' task orders move every variant together: here SR varies
    /// from 0.50 to 0.58 across seeds, and RoMeRL is about 0.01 above
    /// MemRL-4 on every seed. The marginal intervals overlap (the old
    /// reading: "does not hold beyond the CIs"); the paired difference
    /// separates, and the verdict says the claim holds. Reversed, it does
    /// not hold; with a seed where the sign flips, the two are level and
    /// the claim is not comparable.
    #[test]
    fn a_paired_difference_separates_where_the_marginals_overlap() {
        let base = [0.50, 0.56, 0.52, 0.58, 0.54];
        let lift = [0.010, 0.012, 0.009, 0.011, 0.010];
        let runs_with = |lift: &[f64]| -> Vec<PolicyRun> {
            let mut v = Vec::new();
            for (s, (b, l)) in base.iter().zip(lift).enumerate() {
                v.push(run("romerl", s as u64, b + l, None));
                v.push(run("memrl[cap=4]", s as u64, *b, None));
            }
            v
        };
        let runs = runs_with(&lift);
        let (a, b, d) = paired(&runs, "romerl", "memrl[cap=4]", |r| {
            r.epochs.last().map(|m| m.sr)
        })
        .unwrap();
        assert!(a.lo < b.hi, "the marginals must overlap: {a:?} {b:?}");
        assert!(d.lo > 0.0, "the paired difference separates: {d:?}");
        let sr = claims(&runs, false).into_iter().next().unwrap();
        assert!(sr.claim.contains("SR"), "{}", sr.claim);
        assert_eq!(sr.verdict, Verdict::Holds, "{}", sr.why);
        assert_eq!(sr.cells[0].side, Side::Claimed);
        let down: Vec<f64> = lift.iter().map(|l| -l).collect();
        let sr = claims(&runs_with(&down), false).into_iter().next().unwrap();
        assert_eq!(sr.verdict, Verdict::DoesNotHold, "{}", sr.why);
        let mixed = [0.010, -0.012, 0.009, -0.011, 0.010];
        let sr = claims(&runs_with(&mixed), false)
            .into_iter()
            .next()
            .unwrap();
        assert_eq!(sr.verdict, Verdict::NotComparable, "{}", sr.why);
        let mut s = String::new();
        markdown(&mut s, &claims(&runs, false));
        assert!(s.contains("**holds**"), "{s}");
    }

    /// The token and call claims get their paired difference by seed, and
    /// the verdict the setup fixes: neither design calls a model of its
    /// own here.
    #[test]
    fn the_token_claims_are_paired_and_not_judged() {
        let mut runs = Vec::new();
        for s in 0..3u64 {
            for (name, tokens) in [("romerl", 2_000 + 10 * s), ("memrl", 1_990 + 10 * s)] {
                let mut r = run(name, s, 0.5, None);
                r.epochs[0].tokens = tokens;
                r.epochs[0].calls = 100;
                runs.push(r);
            }
        }
        let all = claims(&runs, false);
        let tokens = all
            .iter()
            .find(|c| c.metric == "last-epoch act tokens")
            .unwrap();
        assert_eq!(tokens.verdict, Verdict::NotComparable);
        assert!(tokens.why.contains("shown, not judged"), "{}", tokens.why);
        assert!(
            (tokens.cells[0].diff.mean - 10.0).abs() < 1e-9,
            "{:?}",
            tokens.cells[0].diff
        );
        assert_eq!(tokens.cells[0].side, Side::Opposite);
        let calls = all
            .iter()
            .find(|c| c.metric == "last-epoch act calls")
            .unwrap();
        assert_eq!(calls.cells[0].diff.mean, 0.0);
    }

    /// A noise claim holds only when it holds under every rule for nulled
    /// memories: under one rule it is not comparable however clear, and
    /// when the rules disagree it is not comparable either.
    #[test]
    fn a_noise_claim_needs_every_rule() {
        let cells = [
            "",
            "actionless=replace,replace_rule=same_polarity",
            "actionless=replace,replace_rule=any",
        ];
        let runs_for = |cells: &[&str], flip_any: bool| -> Vec<PolicyRun> {
            let mut v = Vec::new();
            for c in cells {
                let name = |f: &str| {
                    if c.is_empty() {
                        f.to_string()
                    } else {
                        format!("{f}[{c}]")
                    }
                };
                for s in 0..3u64 {
                    let x = 0.05 + 0.01 * s as f64;
                    let (ro, me) = if flip_any && c.ends_with("any") {
                        (x + 0.02, x)
                    } else {
                        (x, x + 0.02 + 0.001 * s as f64)
                    };
                    v.push(run(
                        &name("romerl"),
                        s,
                        0.5,
                        Some((ro, (ro * 1000.0) as usize)),
                    ));
                    v.push(run(
                        &name("memrl"),
                        s,
                        0.5,
                        Some((me, (me * 1000.0) as usize)),
                    ));
                }
            }
            v
        };
        let ratio = |runs: &[PolicyRun]| {
            claims(runs, true)
                .into_iter()
                .find(|c| c.metric == "final noise ratio" && c.claim.contains("RoMeRL"))
                .unwrap()
        };
        let one = ratio(&runs_for(&cells[..1], false));
        assert_eq!(one.cells[0].side, Side::Claimed);
        assert_eq!(one.verdict, Verdict::NotComparable, "{}", one.why);
        assert!(one.why.contains("every rule"), "{}", one.why);
        let all = ratio(&runs_for(&cells, false));
        assert_eq!(all.cells.len(), 3);
        assert_eq!(all.verdict, Verdict::Holds, "{}", all.why);
        let split = ratio(&runs_for(&cells, true));
        assert_eq!(split.verdict, Verdict::NotComparable, "{}", split.why);
    }
}
