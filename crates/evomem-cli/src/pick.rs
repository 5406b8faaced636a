//! Choosing the policy folder a command reads, by what the policy's family
//! can do (its [`Capabilities`] in the family table), never by folder name.

use anyhow::{bail, Context as _};
use evomem_eval::run::dir::{PolicyDir, RunDir};
use evomem_policy::registry::{self, Capabilities};
use std::path::Path;

/// What the command needs from a policy folder.
#[derive(Debug, Clone, Copy)]
pub struct Need {
    /// Words for errors ("lifecycle timeline", "evidence paths").
    pub what: &'static str,
    /// The capability the family must have.
    pub cap: fn(&Capabilities) -> bool,
    /// The folder must hold its op log (`ops.jsonl.zst` or `ops.jsonl`).
    pub ops: bool,
    /// The folder must hold `decisions.jsonl`.
    pub decisions: bool,
}

/// The folder of `policy` (a spec or its slug) in `run`, or the single
/// folder whose family has the capability; failing that, the single folder
/// of a policy that is no built-in family (one written in Python, whose
/// capabilities the table cannot know; the commands show it generically).
pub fn policy_dir(run: &Path, policy: Option<&str>, need: Need) -> anyhow::Result<PolicyDir> {
    let run_dir = RunDir::new(run);
    if let Some(p) = policy {
        let dir = [PolicyDir::at(run.join(p)), run_dir.policy(p)]
            .into_iter()
            .find(|d| d.path().is_dir())
            .with_context(|| format!("no folder for policy `{p}` in {}", run.display()))?;
        check_files(&dir, need)?;
        return Ok(dir);
    }
    let all = run_dir
        .policies()
        .with_context(|| format!("reading run folder {}", run.display()))?;
    let mut able = Vec::new();
    let mut external = Vec::new();
    for d in all {
        let family = d.family()?;
        match registry::family(&family) {
            Ok(f) if (need.cap)(&f.caps) => able.push(d),
            Ok(_) => {}
            Err(_) => external.push(d),
        }
    }
    if let ([], [one]) = (able.as_slice(), external.as_slice()) {
        check_files(one, need)?;
        return Ok(one.clone());
    }
    match able.as_slice() {
        [one] => {
            check_files(one, need)?;
            Ok(one.clone())
        }
        [] => bail!(
            "no policy folder in {} whose family has {} (families with it: {}); pass --policy",
            run.display(),
            need.what,
            registry::FAMILIES
                .iter()
                .filter(|f| (need.cap)(&f.caps))
                .map(|f| f.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        many => bail!(
            "several policy folders in {} have {}: {}; pass --policy",
            run.display(),
            need.what,
            many.iter()
                .map(PolicyDir::name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn check_files(dir: &PolicyDir, need: Need) -> anyhow::Result<()> {
    if need.ops && !dir.has_ops() {
        bail!(
            "no op log (ops.jsonl.zst or ops.jsonl) in {}: the run was made with `--ops-log off`; rerun with `--ops-log on`",
            dir.path().display()
        );
    }
    if need.decisions && !dir.has_decisions() {
        bail!("no decisions.jsonl in {}", dir.path().display());
    }
    Ok(())
}
