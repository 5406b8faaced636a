//! `evomem eval` and `evomem ablate`: load data, run policies under a ranking
//! protocol, write the run directory and print a results table.

use crate::settings::{EvalSettings, Settings};
use anyhow::{bail, Context as _};
use evomem_core::Embedder;
use evomem_embed::CachedEmbedder;
use evomem_eval::protocol::{
    FixedCandidates, MemoryUsers, ProtocolConfig, ProtocolKind, Sampling, TargetSplit,
    UserSelection,
};
use evomem_eval::run::{EvalConfig, ProgressEvent, RunInputs};
use evomem_llm::{CacheMode, CacheSettings, LlmConfig, LlmHub};
use evomem_policy::registry::PolicySpec;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Data, protocol, backend and output flags shared by `eval` and `ablate`.
/// Flags without a value here take theirs from the settings (see
/// `crate::settings`: defaults, `evomem.toml`, `EVOMEM_*`), whose defaults
/// are given in brackets.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Dataset folder.
    #[arg(long)]
    pub data: PathBuf,
    /// Data format; detected from the files when omitted.
    #[arg(long, value_parser = ["recbole", "agentcf", "iagent", "jsonl"])]
    pub format: Option<String>,
    /// Ranking protocol [retrospective].
    #[arg(long, value_parser = ["retrospective", "evolving"])]
    pub protocol: Option<String>,
    /// Negatives per decision [9].
    #[arg(long)]
    pub negatives: Option<usize>,
    /// Negative sampling: uniform or popularity [uniform].
    #[arg(long, value_parser = ["uniform", "popularity"])]
    pub sampling: Option<String>,
    /// Fixed candidate lists from the source: as-given or first-n (first
    /// --negatives) [as-given].
    #[arg(long, value_parser = ["as-given", "first-n"])]
    pub fixed_candidates: Option<String>,
    /// Seed for negatives, shuffles, subsamples and policies [42].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Users: all, a number N (seeded choice), active (MARS: 50-200 interactions,
    /// 100 users, seed 42) or light (10-30, 100 users, seed 64) [all].
    #[arg(long)]
    pub users: Option<String>,
    /// With --users: whose interactions build memory. `selected`: the
    /// subsample is the dataset; `all`: only the decisions are subsampled and
    /// every user's visible history is observed (AtomRec's 1,000-user
    /// ablations) [selected; `ablate` uses all].
    #[arg(long, value_parser = ["selected", "all"])]
    pub memory_users: Option<String>,
    /// Evolving protocol: maintain(Tick) every N interactions, 0 = never [1000].
    #[arg(long)]
    pub tick: Option<usize>,
    /// Which held-out interaction is ranked: test (reported numbers) or valid
    /// (the one before it, for tuning; test interactions stay hidden) [test].
    #[arg(long, value_parser = ["test", "valid"])]
    pub target: Option<String>,
    /// LLM backend of every role without its own: offline,
    /// openai:MODEL@URL or gguf:PATH [settings `llm.default`: offline].
    #[arg(long)]
    pub llm: Option<String>,
    /// Backend of one role, `ROLE=SPEC` (repeatable), e.g.
    /// `--llm-role mars_plan=openai:m@http://127.0.0.1:8080/v1`.
    #[arg(long = "llm-role", value_name = "ROLE=SPEC")]
    pub llm_role: Vec<String>,
    /// For roles answered offline, also estimate the prompt and completion
    /// tokens a model would have been charged (rendered prompt and offline
    /// answer, ceil(chars/4)); reported in metrics.json and the report.
    #[arg(long)]
    pub llm_estimate: bool,
    /// Write each policy's full op log to `OUT/<policy>/ops.jsonl.zst` (on), or
    /// skip it (off: grids of large policies, e.g. AtomRec writes ~72 MB per
    /// variant on ml-100k). `evomem inspect` and `explain` need it [on].
    #[arg(long, value_parser = ["on", "off"])]
    pub ops_log: Option<String>,
    /// Op log format: zst (`ops.jsonl.zst`, zstd level 3) or jsonl (plain
    /// `ops.jsonl`, about ten times larger); `inspect` and `explain` read
    /// either [settings `eval.ops_log_format`: zst].
    #[arg(long, value_parser = ["zst", "jsonl"])]
    pub ops_log_format: Option<String>,
    /// LLM cache mode: off, read-write or replay-only [off].
    #[arg(long, value_parser = ["off", "read-write", "replay-only"])]
    pub llm_cache: Option<String>,
    /// LLM cache file (default: OUT/llm-cache.sqlite when the cache is on).
    #[arg(long)]
    pub llm_cache_path: Option<PathBuf>,
    /// Models folder for the embedder [~/.cache/evomem/models].
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Threads of embedding inference, 0 = every core [0].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Embedder: minilm (f32; the hashing fallback when its folder is
    /// missing), minilm-int8 (8-bit dense layers, docs/int8.md) or hashing
    /// [minilm].
    #[arg(long, value_parser = ["minilm", "minilm-int8", "hashing"])]
    pub embedder: Option<String>,
    /// Persistent embedding cache (SQLite, keyed by model id and text hash):
    /// a path, `off`, or `auto` (`embed-cache.sqlite` next to the models
    /// folder) [auto]. Only model embedders are cached; the hashing fallback
    /// is cheaper than a lookup.
    #[arg(long)]
    pub embed_cache: Option<String>,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
}

impl CommonArgs {
    /// The settings with these flags applied on top, validated.
    pub fn apply(&self, mut s: Settings) -> anyhow::Result<Settings> {
        fn set<T: Clone>(slot: &mut T, flag: &Option<T>) {
            if let Some(v) = flag {
                *slot = v.clone();
            }
        }
        let e = &mut s.eval;
        set(&mut e.protocol, &self.protocol);
        set(&mut e.negatives, &self.negatives);
        set(&mut e.sampling, &self.sampling);
        set(&mut e.fixed_candidates, &self.fixed_candidates);
        set(&mut e.seed, &self.seed);
        set(&mut e.users, &self.users);
        set(&mut e.tick, &self.tick);
        set(&mut e.target, &self.target);
        set(&mut e.memory_users, &self.memory_users);
        set(&mut e.ops_log_format, &self.ops_log_format);
        set(&mut e.llm_cache, &self.llm_cache);
        if self.llm_cache_path.is_some() {
            e.llm_cache_path = self.llm_cache_path.clone();
        }
        if let Some(o) = &self.ops_log {
            e.ops_log = o == "on";
        }
        e.llm_estimate |= self.llm_estimate;
        apply_llm_flags(&mut s, self.llm.as_ref(), &self.llm_role)?;
        set(&mut s.models_dir, &self.models_dir);
        set(&mut s.threads, &self.threads);
        set(&mut s.embedder, &self.embedder);
        set(&mut s.embed_cache, &self.embed_cache);
        s.validate()?;
        Ok(s)
    }
}

/// Flags of `evomem eval`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated policy specs, e.g. `random,pop,mars[kcat=4]`; `all`
    /// is every family that ranks, in the family table's order.
    #[arg(long)]
    pub policy: String,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Flags of `evomem ablate`.
#[derive(clap::Args, Debug)]
pub struct AblateArgs {
    /// Policy family whose grid to run, e.g. `mars`.
    #[arg(long)]
    pub policy: String,
    /// Grid name, e.g. `tiers`.
    #[arg(long)]
    pub grid: String,
    /// Extra policy specs to run alongside the grid (e.g. `no-memory,pop`).
    #[arg(long)]
    pub with: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Run `evomem eval`.
pub fn run(args: Args, settings: Settings) -> anyhow::Result<()> {
    let specs = evomem_policy::registry::parse_list_serving(
        &args.policy,
        &[evomem_core::DecisionTag::Rank],
    )
    .context("parsing --policy")?;
    let settings = args.common.apply(settings)?;
    run_specs(specs, &args.common, &settings)
}

/// Run `evomem ablate`.
pub fn run_ablate(args: AblateArgs, settings: Settings) -> anyhow::Result<()> {
    let mut specs = evomem_policy::registry::grid(&args.policy, &args.grid)
        .with_context(|| format!("expanding grid `{}` of `{}`", args.grid, args.policy))?;
    if let Some(extra) = &args.with {
        let mut more = PolicySpec::parse_list(extra).context("parsing --with")?;
        more.extend(specs);
        specs = more;
    }
    let mut settings = args.common.apply(settings)?;
    // A grid decides for a sample while memory holds everyone (AtomRec
    // Table 2) unless `--memory-users` is given; a settings value of
    // `selected` is the default and cannot be told apart, so only the flag
    // overrides this.
    if args.common.memory_users.is_none() && settings.eval.memory_users == "selected" {
        settings.eval.memory_users = "all".into();
    }
    run_specs(specs, &args.common, &settings)
}

fn protocol_config(e: &EvalSettings) -> anyhow::Result<ProtocolConfig> {
    Ok(ProtocolConfig {
        protocol: e.protocol.parse::<ProtocolKind>()?,
        negatives: e.negatives,
        sampling: e.sampling.parse::<Sampling>()?,
        fixed_candidates: e.fixed_candidates.parse::<FixedCandidates>()?,
        seed: e.seed,
        users: e.users.parse::<UserSelection>()?,
        tick: e.tick,
        target: e.target.parse::<TargetSplit>()?,
        memory_users: e.memory_users.parse::<MemoryUsers>()?,
    })
}

fn run_specs(specs: Vec<PolicySpec>, a: &CommonArgs, s: &Settings) -> anyhow::Result<()> {
    let e = &s.eval;
    let protocol = protocol_config(e)?;
    let cache = llm_cache(&e.llm_cache, e.llm_cache_path.as_ref(), &a.out)?;
    let config = EvalConfig {
        data: a.data.clone(),
        format: a.format.clone(),
        protocol,
        policies: specs.iter().map(|s| s.to_string()).collect(),
        llm: llm_label(&s.llm),
        llm_estimate: e.llm_estimate,
        ops_log: e.ops_log,
        ops_log_format: e.ops_log_format.parse()?,
        llm_cache: e.llm_cache.clone(),
        llm_cache_path: cache.path.clone(),
        models_dir: a.models_dir.clone(),
    };

    let loaded = evomem_eval::compat::load_data(&a.data, a.format.as_deref())
        .with_context(|| format!("loading {}", a.data.display()))?;
    eprintln!(
        "loaded `{}`: {} users, {} items, {} interactions",
        loaded.dataset.name,
        loaded.dataset.users.len(),
        loaded.dataset.catalog.len(),
        loaded.dataset.interactions.len()
    );
    let (embedder, notice, cache_handle) = load_embedder(s)?;
    let settings = cache;
    let llm = s.llm.clone();
    let estimate = e.llm_estimate;
    let hub_for = move |_spec: &PolicySpec| -> Result<Arc<LlmHub>, String> {
        LlmHub::from_config(&llm, settings.clone())
            .map(|h| Arc::new(h.with_estimate(estimate)))
            .map_err(|e| e.to_string())
    };

    let bar = Arc::new(Mutex::new(None::<ProgressBar>));
    let progress = |ev: ProgressEvent| show_progress(&bar, ev);
    let train_bar = bar.clone();
    evomem_train::configure(evomem_train::TrainEnv {
        threads: s.threads(),
        observer: Some(Arc::new(move |ev: &evomem_train::TrainEvent| {
            show_training(&train_bar, ev)
        })),
    });
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    evomem_eval::run::dir::write_json(&a.out.join("settings.json"), s)?;
    let summary = evomem_eval::run::run_eval(
        &config,
        RunInputs {
            dataset: &loaded.dataset,
            data_sha256: loaded.files,
            embedder,
            embedder_notice: notice,
            hub_for: &hub_for,
            embed_cache: cache_handle.as_deref(),
        },
        &a.out,
        &progress,
    )?;
    if let Ok(mut guard) = bar.lock() {
        if let Some(pb) = guard.take() {
            pb.finish_and_clear();
        }
    }
    let rows: Vec<(String, evomem_core::metrics::RankMetrics)> = summary
        .policies
        .iter()
        .map(|p| (p.spec.clone(), p.metrics))
        .collect();
    println!(
        "{} users, {:?} protocol, seed {}; wall time {:.1} s; results in {}",
        summary.plan.decisions,
        config.protocol.protocol,
        config.protocol.seed,
        summary.wall_s,
        a.out.display()
    );
    print!("{}", evomem_eval::report::results_table(&rows));
    let ours: Vec<&str> = summary.policies.iter().map(|p| p.slug.as_str()).collect();
    let stale = stale_policy_folders(&a.out, &ours);
    if !stale.is_empty() {
        eprintln!(
            "warning: {} also holds policy folders this run did not write ({}): they are from an earlier run, and summary.json and report.md cover only this run's policies; use a new --out or remove them",
            a.out.display(),
            stale.join(", ")
        );
    }
    if let Some(line) = &summary.embed_cache {
        eprintln!("{line}");
    }
    let mut never_reached = Vec::new();
    for p in &summary.policies {
        let Some(f) = model_fallbacks(&a.out.join(&p.slug).join("metrics.json")) else {
            continue;
        };
        if let Some(line) = f.notice(&p.spec) {
            eprintln!("{line}");
        }
        if f.none_answered() {
            never_reached.push(p.spec.clone());
        }
    }
    if !never_reached.is_empty() {
        bail!(
            "every model run of {} fell back to the offline algorithm: the model never answered \
             usably, so these are not model figures (the run folder keeps them for diagnosis)",
            never_reached.join(", ")
        );
    }
    Ok(())
}

/// How a policy's model-backed role runs ended, read back from its
/// `metrics.json`.
struct ModelFallbacks {
    /// Model-backed runs (every run that was not offline by configuration).
    runs: u64,
    /// Of those, runs answered by the offline algorithm.
    fallbacks: u64,
    /// Fallbacks per reason, summed over roles.
    reasons: std::collections::BTreeMap<String, u64>,
}

impl ModelFallbacks {
    /// True when the policy made model-backed runs and not one of them was
    /// answered by the model. Runs refused by the user token cap are a
    /// budget the user set, not a failure, so a run whose only fallbacks are
    /// capped ones does not count.
    fn none_answered(&self) -> bool {
        let capped = self.reasons.get("user_token_cap").copied().unwrap_or(0);
        self.runs > 0 && self.fallbacks >= self.runs && capped < self.fallbacks
    }

    /// A loud line when any model run fell back to the offline algorithm
    /// (malformed answers, a user token cap, a failing backend): its
    /// figures are then partly, or wholly, the offline roles'.
    fn notice(&self, spec: &str) -> Option<String> {
        if self.fallbacks == 0 {
            return None;
        }
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let share = if self.fallbacks >= self.runs {
            "all"
        } else {
            "some"
        };
        Some(format!(
            "!!! {spec}: {} of {} model runs fell back to the offline algorithm ({}); {share} of its figures are the offline roles' (per role in metrics.json and report.md) !!!",
            self.fallbacks,
            self.runs,
            reasons.join(", ")
        ))
    }
}

/// The model-backed runs and fallbacks of one policy's `metrics.json`;
/// `None` when it cannot be read or has no LLM accounting.
fn model_fallbacks(metrics: &std::path::Path) -> Option<ModelFallbacks> {
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(metrics).ok()?).ok()?;
    let llm = m.get("llm")?;
    let (mut runs, mut fallbacks) = (0u64, 0u64);
    for c in llm.get("per_role")?.as_object()?.values() {
        let get = |k: &str| c.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        runs += get("runs").saturating_sub(get("offline_runs"));
        fallbacks += get("fallbacks");
    }
    let mut reasons = std::collections::BTreeMap::new();
    if let Some(by_role) = llm.get("fallback_reasons").and_then(|v| v.as_object()) {
        for r in by_role.values().filter_map(|v| v.as_object()) {
            for (k, n) in r {
                *reasons.entry(k.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
            }
        }
    }
    Some(ModelFallbacks {
        runs,
        fallbacks,
        reasons,
    })
}

/// `--llm SPEC` and every `--llm-role ROLE=SPEC` on top of the settings.
pub(crate) fn apply_llm_flags(
    s: &mut Settings,
    llm: Option<&String>,
    roles: &[String],
) -> anyhow::Result<()> {
    if let Some(l) = llm {
        s.llm.default = l.clone();
    }
    for r in roles {
        let Some((role, spec)) = r.split_once('=') else {
            bail!("--llm-role `{r}`: expected ROLE=SPEC");
        };
        s.llm
            .roles
            .insert(role.trim().to_string(), spec.trim().to_string());
    }
    Ok(())
}

/// The LLM cache of a run: `mode` (off, read-write, replay-only) and its
/// file, by default `OUT/llm-cache.sqlite`; the file's folder is created.
pub(crate) fn llm_cache(
    mode: &str,
    path: Option<&PathBuf>,
    out: &Path,
) -> anyhow::Result<CacheSettings> {
    let mode: CacheMode = mode
        .parse()
        .map_err(|err| anyhow::anyhow!("llm cache: {err}"))?;
    let path = match (mode, path) {
        (CacheMode::Off, _) => None,
        (_, Some(p)) => Some(p.clone()),
        (_, None) => Some(out.join("llm-cache.sqlite")),
    };
    if let Some(parent) = path.as_ref().and_then(|p| p.parent()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    Ok(CacheSettings { mode, path })
}

/// An embedder, its fallback notice, and the persistent cache wrapping it.
pub(crate) type LoadedEmbedder = (
    Arc<dyn Embedder>,
    Option<String>,
    Option<Arc<CachedEmbedder<Arc<dyn Embedder>>>>,
);

/// The embedder of the settings (`embedder`: MiniLM in f32 or int8, else
/// the hashing fallback with a notice; or hashing), wrapped in the
/// persistent embedding cache when one is set. The cache keys by the
/// embedder's model id, which differs between f32 and int8, so the two
/// never read each other's vectors. Returns the embedder, the fallback
/// notice and the cache handle.
pub(crate) fn load_embedder(s: &Settings) -> anyhow::Result<LoadedEmbedder> {
    let (embedder, notice): (Arc<dyn Embedder>, _) = match s.embedder.as_str() {
        "hashing" => (
            Arc::new(evomem_embed::HashingEmbedder::new(
                evomem_embed::FALLBACK_DIM,
            )),
            None,
        ),
        name @ ("minilm" | "minilm-int8") => {
            evomem_embed::load_default_as(&s.models_dir, s.threads(), 0, name == "minilm-int8")
                .with_context(|| format!("loading the embedder `{name}`"))?
        }
        other => bail!(
            "embedder: `{other}` is not one of {}",
            crate::settings::EMBEDDERS.join(", ")
        ),
    };
    if let Some(n) = &notice {
        eprintln!("{n}");
    }
    let embed_cache = if embedder.model_id().starts_with("hash") {
        None
    } else {
        s.embed_cache_path()
    };
    Ok(match embed_cache {
        None => (embedder, notice, None),
        Some(path) => {
            let c = Arc::new(
                CachedEmbedder::open(embedder, &path)
                    .with_context(|| format!("opening the embedding cache {}", path.display()))?,
            );
            (c.clone(), notice, Some(c))
        }
    })
}

/// The backend label of a run: the default spec, plus `+N roles` when some
/// roles have their own backend (the full table is in `settings.json`).
pub(crate) fn llm_label(llm: &LlmConfig) -> String {
    if llm.roles.is_empty() {
        llm.default.clone()
    } else {
        format!("{}+{} roles", llm.default, llm.roles.len())
    }
}

/// Drive the progress bar (created on `Started`); per-policy lines go to
/// stderr even when the bar is hidden.
fn show_progress(bar: &Mutex<Option<ProgressBar>>, ev: ProgressEvent) {
    let Ok(mut guard) = bar.lock() else { return };
    match ev {
        ProgressEvent::Started { total, policies } => {
            let pb = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} steps ({eta}) {msg}",
            ) {
                pb.set_style(style);
            }
            pb.set_message(format!("{policies} policies"));
            *guard = Some(pb);
        }
        ProgressEvent::Advanced(n) => {
            if let Some(pb) = guard.as_ref() {
                pb.inc(n);
            }
        }
        ProgressEvent::PolicyDone { spec, wall_s } => {
            let line = format!("done: {spec} in {wall_s:.1} s");
            // A hidden bar (stderr is not a terminal: CI logs, `2> file`)
            // drops `println`; the per-policy lines still belong in the log.
            match guard.as_ref() {
                Some(pb) if !pb.is_hidden() => pb.println(line),
                _ => eprintln!("{line}"),
            }
        }
    }
}

/// A trained baseline's epochs on the progress bar's message (epoch, loss,
/// validation NDCG@10, best epoch), and one line when its training ends;
/// without a visible bar, one line per epoch.
fn show_training(bar: &Mutex<Option<ProgressBar>>, ev: &evomem_train::TrainEvent) {
    let Ok(guard) = bar.lock() else { return };
    let valid = ev
        .valid_ndcg10
        .map_or(String::new(), |v| format!(", valid NDCG@10 {v:.4}"));
    let line = format!(
        "{}: epoch {}/{} loss {:.4}{valid} (best epoch {}) [{:.1} s]",
        ev.model, ev.epoch, ev.epochs, ev.loss, ev.best_epoch, ev.seconds
    );
    match guard.as_ref() {
        Some(pb) if !pb.is_hidden() => {
            if ev.done {
                pb.println(format!("trained {line}"));
            } else {
                pb.set_message(line);
            }
        }
        // A hidden bar (CI logs, `2> file`): one line per epoch.
        _ if ev.done => eprintln!("trained {line}"),
        _ => eprintln!("{line}"),
    }
}

/// Policy folders in the run folder `out` ([`evomem_eval::run::dir::RunDir::policies`])
/// that are not among `ours`: left by an earlier run into the same `--out`.
fn stale_policy_folders(out: &Path, ours: &[&str]) -> Vec<String> {
    evomem_eval::run::dir::RunDir::new(out)
        .policies()
        .unwrap_or_default()
        .iter()
        .map(|p| p.name())
        .filter(|n| !ours.contains(&n.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// `minilm` and `minilm-int8` may share one embedding cache file (the
    /// default `auto` file does) and never read each other's vectors: the
    /// cache keys by model id, and the two ids differ.
    #[test]
    fn f32_and_int8_share_a_cache_file_without_mixing() {
        let home = std::env::var_os("HOME");
        let models = evomem_embed::default_models_dir(home.as_deref().map(Path::new));
        if !evomem_embed::minilm_dir(&models).is_dir() {
            assert!(
                std::env::var_os("CI").is_none(),
                "no MiniLM folder under {} in CI: run scripts/fetch-models.sh",
                models.display()
            );
            eprintln!(
                "\n!!!!! SKIPPING the f32/int8 cache test: no MiniLM folder under {} !!!!!\n",
                models.display()
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("embed-cache.sqlite");
        let settings = |embedder: &str| Settings {
            models_dir: models.clone(),
            threads: 1,
            embedder: embedder.into(),
            embed_cache: file.display().to_string(),
            ..Settings::default()
        };
        let text = ["one text, embedded in both precisions"];
        let mut first = Vec::new();
        for name in ["minilm", "minilm-int8", "minilm"] {
            let (e, notice, cache) = load_embedder(&settings(name)).unwrap();
            assert_eq!(notice, None);
            let cache = cache.unwrap();
            let v = e.embed(&text).unwrap();
            assert_eq!(e.embed(&text).unwrap(), v);
            let stats = cache.stats();
            if first.len() < 2 {
                // The other precision's vector is in the file: still a miss.
                assert_eq!((stats.hits, stats.misses), (1, 1), "{name}");
                assert_eq!(cache.stored().unwrap(), 1, "{name}: its own entries only");
                first.push(v);
            } else {
                assert_eq!((stats.hits, stats.misses), (2, 0), "f32 reopened");
                assert_eq!(v, first[0], "f32 reopened gets its own vector back");
            }
        }
        assert_ne!(first[0], first[1], "f32 and int8 vectors differ");
        assert_ne!(
            load_embedder(&settings("minilm")).unwrap().0.model_id(),
            load_embedder(&settings("minilm-int8"))
                .unwrap()
                .0
                .model_id()
        );
    }
}
