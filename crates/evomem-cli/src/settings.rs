//! The binary's one validated [`Settings`], built in layers:
//!
//! 1. built-in defaults ([`Settings::default`]);
//! 2. the settings file: `--config FILE`, else `$EVOMEM_CONFIG`, else
//!    `./evomem.toml` when it exists;
//! 3. `EVOMEM_*` environment variables: `EVOMEM_<KEY>` sets a top-level key
//!    (`EVOMEM_MODELS_DIR`, `EVOMEM_THREADS`, `EVOMEM_EMBED_CACHE`),
//!    `EVOMEM_LLM` sets `llm.default`, and `EVOMEM_<TABLE>__<KEY>` sets a key
//!    of a table (`EVOMEM_EVAL__SEED=7`, `EVOMEM_LLM__TIMEOUT_S=120`). Other
//!    `EVOMEM_*` variables are not settings: the scripts' and tests' own
//!    ([`OTHER_VARIABLES`]) are left alone, any other gets a notice naming
//!    the setting it resembles ([`unknown_variables`]);
//! 4. command-line flags.
//!
//! Unknown keys and values of the wrong type are errors that name the key
//! and the layer they came from. [`Settings::load`] also returns the keys a
//! user set in the file or the environment ([`Explicit`]); a key the running
//! command does not read is named in a notice (`crate::reads`). The library
//! crates read no environment variables: everything they need arrives
//! through these settings (the API key too, read here from the variable
//! `llm.api_key_env` names). The resolved settings are written next to
//! every run as `settings.json`.
//!
//! Every key, its default and its variable are listed in
//! `docs/settings-reference.md`, generated from these types' schema and
//! doc comments by [`reference`] (a test keeps the file current).
//!
//! ```toml
//! # evomem.toml
//! models_dir = "/data/models"
//! threads = 2
//! embedder = "minilm"           # minilm | minilm-int8 | hashing (eval, ablate, arenas, embed)
//! embed_cache = "auto"          # auto | off | a file path
//!
//! [llm]
//! default = "offline"
//! timeout_s = 120
//! [llm.roles]
//! mars_plan = "openai:qwen2.5-7b@http://127.0.0.1:8080/v1"
//!
//! [eval]
//! seed = 42
//! negatives = 9
//! ```

use anyhow::{bail, Context as _};
use evomem_llm::{LlmConfig, Secret};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[cfg(test)]
pub mod reference;

/// Every setting of the `evomem` binary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Folder holding `all-MiniLM-L6-v2/`. Default `~/.cache/evomem/models`.
    pub models_dir: PathBuf,
    /// Threads of embedding inference; 0 = every core. Default 0.
    pub threads: usize,
    /// Embedder of `eval`, `ablate` and the arenas ([`EMBEDDERS`]):
    /// `minilm` (f32; the hashing fallback when its folder is missing),
    /// `minilm-int8` (the same model with 8-bit dense layers, docs/int8.md)
    /// or `hashing`. Default `minilm`.
    pub embedder: String,
    /// Persistent embedding cache: `auto` (`embed-cache.sqlite` beside the
    /// models folder), `off`, or a file path. Default `auto`.
    pub embed_cache: String,
    /// The `[llm]` table: backends (default and per role), key variable,
    /// timeouts, retries, token limit.
    pub llm: LlmConfig,
    /// The `[eval]` table: protocol, seed and output settings of `eval` and
    /// `ablate`.
    pub eval: EvalSettings,
    /// The `[serve]` table: `evomem serve` (address, store, limits, ...).
    #[cfg(feature = "serve")]
    pub serve: evomem_serve::ServeConfig,
    /// The `[serve]` table in a binary built without `evomem serve`: read
    /// (so that one settings file serves every build) and not used.
    #[cfg(not(feature = "serve"))]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub serve: toml::Value,
}

/// The `[eval]` table. Every field has a default (shown in its doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EvalSettings {
    /// `retrospective` or `evolving`. Default `retrospective`.
    pub protocol: String,
    /// Negatives per decision. Default 9.
    pub negatives: usize,
    /// `uniform` or `popularity`. Default `uniform`.
    pub sampling: String,
    /// Fixed candidate lists: `as-given` or `first-n`. Default `as-given`.
    pub fixed_candidates: String,
    /// Seed of negatives, shuffles, subsamples and policies. Default 42.
    pub seed: u64,
    /// `all`, a number, `active` or `light`. Default `all`.
    pub users: String,
    /// Evolving protocol: maintain(Tick) every N interactions. Default 1000.
    pub tick: usize,
    /// `test` or `valid`. Default `test`.
    pub target: String,
    /// Whose interactions build memory under `users`: `selected` (the
    /// subsample is the dataset) or `all` (only decisions are subsampled).
    /// Default `selected`.
    pub memory_users: String,
    /// Write each policy's op log. Default true.
    pub ops_log: bool,
    /// Format of the op log: `zst` (`ops.jsonl.zst`, zstd level 3) or
    /// `jsonl` (plain `ops.jsonl`, about ten times larger). `inspect` and
    /// `explain` read either. Default `zst`.
    pub ops_log_format: String,
    /// Estimate what offline role runs would cost a model. Default false.
    pub llm_estimate: bool,
    /// LLM cache mode: `off`, `read-write` or `replay-only`. Default `off`.
    pub llm_cache: String,
    /// LLM cache file. Default `OUT/llm-cache.sqlite` when the cache is on.
    pub llm_cache_path: Option<PathBuf>,
}

impl Default for EvalSettings {
    fn default() -> Self {
        Self {
            protocol: "retrospective".into(),
            negatives: 9,
            sampling: "uniform".into(),
            fixed_candidates: "as-given".into(),
            seed: 42,
            users: "all".into(),
            tick: 1000,
            target: "test".into(),
            memory_users: "selected".into(),
            ops_log: true,
            ops_log_format: "zst".into(),
            llm_estimate: false,
            llm_cache: "off".into(),
            llm_cache_path: None,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            models_dir: PathBuf::from(".evomem-models"),
            threads: 0,
            embedder: "minilm".into(),
            embed_cache: "auto".into(),
            llm: LlmConfig::default(),
            eval: EvalSettings::default(),
            #[cfg(feature = "serve")]
            serve: evomem_serve::ServeConfig::default(),
            #[cfg(not(feature = "serve"))]
            serve: toml::Value::Table(Default::default()),
        }
    }
}

/// Where the layers come from: the process's environment and file system,
/// or a test's stand-ins.
pub struct Sources<'a> {
    /// `--config`, when given.
    pub config_flag: Option<&'a Path>,
    /// Environment variables.
    pub env: Vec<(String, String)>,
    /// The working directory (for `./evomem.toml`).
    pub cwd: PathBuf,
}

impl Sources<'_> {
    /// The real process environment.
    pub fn process(config_flag: Option<&Path>) -> Sources<'_> {
        Sources {
            config_flag,
            env: std::env::vars().collect(),
            cwd: PathBuf::from("."),
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// The values of the `embedder` setting (and `--embedder`).
pub const EMBEDDERS: &[&str] = &["minilm", "minilm-int8", "hashing"];

/// Top-level keys that environment variables may set.
const TOP_KEYS: &[&str] = &[
    "models_dir",
    "threads",
    "embedder",
    "embed_cache",
    "llm",
    "eval",
    "serve",
];

/// The settings keys a user set, as dotted keys (`serve.bind`, and below a
/// map its entries: `llm.roles.mars_plan`), each with where it was set (the
/// file's path, the variable's name), in the order the layers apply.
pub type Explicit = std::collections::BTreeMap<String, Vec<String>>;

impl Settings {
    /// The built-in defaults, the first layer: [`Settings::default`] with
    /// `models_dir` in the home folder `home` when there is one.
    pub fn defaults(home: Option<&Path>) -> Self {
        let mut defaults = Self::default();
        if home.is_some() {
            defaults.models_dir = evomem_embed::default_models_dir(home);
        }
        defaults
    }

    /// Defaults, then the file, then the environment (flags are applied by
    /// each command on the result, then [`Settings::validate`]); with the
    /// keys the file and the environment set.
    pub fn load(src: &Sources<'_>) -> anyhow::Result<(Self, Explicit)> {
        let mut explicit = Explicit::new();
        let defaults = Self::defaults(src.var("HOME").map(Path::new));
        let mut table = toml::Table::try_from(&defaults).context("serialising the defaults")?;
        let file = match (src.config_flag, src.var("EVOMEM_CONFIG")) {
            (Some(p), _) => Some(p.to_path_buf()),
            (None, Some(p)) => Some(PathBuf::from(p)),
            (None, None) => Some(src.cwd.join("evomem.toml")).filter(|p| p.is_file()),
        };
        if let Some(path) = &file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the settings file {}", path.display()))?;
            let over: toml::Table = toml::from_str(&text)
                .with_context(|| format!("settings file {}", path.display()))?;
            let mut keys = Vec::new();
            leaf_keys("", &over, &mut keys);
            for key in keys {
                explicit
                    .entry(key)
                    .or_default()
                    .push(path.display().to_string());
            }
            merge(&mut table, over);
            Self::from_table(table.clone())
                .with_context(|| format!("settings file {}", path.display()))?;
        }
        for (name, value) in &src.env {
            let Some(path) = env_path(name) else { continue };
            let typed = set_path(&mut table, &path, value)
                .with_context(|| format!("environment variable {name}"))?;
            if let Err(e) = Self::from_table(table.clone()) {
                // A key without a default (`llm.user_token_cap`, an
                // optional number) arrived as a string: read the value as
                // TOML reads it before giving up.
                let retried = (!typed).then(|| toml_value(value)).flatten().filter(|v| {
                    let mut t = table.clone();
                    put(&mut t, &path, v.clone()).is_ok() && Self::from_table(t).is_ok()
                });
                match retried {
                    Some(v) => put(&mut table, &path, v)?,
                    None => {
                        return Err(e)
                            .with_context(|| format!("environment variable {name}={value}"));
                    }
                }
            }
            explicit
                .entry(path.join("."))
                .or_default()
                .push(name.clone());
        }
        let mut s = Self::from_table(table)?;
        if s.llm.api_key.is_none() {
            s.llm.api_key = src.var(&s.llm.api_key_env).map(|k| Secret(k.to_string()));
        }
        Ok((s, explicit))
    }

    fn from_table(table: toml::Table) -> anyhow::Result<Self> {
        Ok(toml::Value::Table(table).try_into::<Self>()?)
    }

    /// Check values that types alone do not: backend specs and LLM ranges,
    /// and the eval words (the error names the key).
    pub fn validate(&self) -> anyhow::Result<()> {
        self.llm
            .validate("settings")
            .context("invalid [llm] settings")?;
        if !EMBEDDERS.contains(&self.embedder.as_str()) {
            bail!(
                "embedder: `{}` is not one of {}",
                self.embedder,
                EMBEDDERS.join(", ")
            );
        }
        let e = &self.eval;
        let one_of = |key: &str, v: &str, ok: &[&str]| -> anyhow::Result<()> {
            if ok.contains(&v) {
                Ok(())
            } else {
                bail!("eval.{key}: `{v}` is not one of {}", ok.join(", "))
            }
        };
        one_of("protocol", &e.protocol, &["retrospective", "evolving"])?;
        one_of("sampling", &e.sampling, &["uniform", "popularity"])?;
        one_of(
            "fixed_candidates",
            &e.fixed_candidates,
            &["as-given", "first-n"],
        )?;
        one_of("target", &e.target, &["test", "valid"])?;
        one_of("memory_users", &e.memory_users, &["selected", "all"])?;
        one_of("ops_log_format", &e.ops_log_format, &["zst", "jsonl"])?;
        one_of(
            "llm_cache",
            &e.llm_cache,
            &["off", "read-write", "replay-only"],
        )?;
        Ok(())
    }

    /// Threads to use: the setting, or every core for 0.
    pub fn threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The persistent embedding cache file, or `None` when off.
    pub fn embed_cache_path(&self) -> Option<PathBuf> {
        match self.embed_cache.as_str() {
            "off" => None,
            "auto" => Some(
                self.models_dir
                    .parent()
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
                    .join("embed-cache.sqlite"),
            ),
            p => Some(PathBuf::from(p)),
        }
    }
}

/// `EVOMEM_*` variables that are not settings and that evomem, its scripts
/// or its tests read: whole names, then families by prefix. A test keeps
/// this list in step with the repository's sources.
pub const OTHER_VARIABLES: &[&str] = &[
    "EVOMEM_CONFIG",
    "EVOMEM_LOG",
    "EVOMEM_API_KEY",
    "EVOMEM_KEY",
    "EVOMEM_DATA_DIR",
    "EVOMEM_SHARED_DATA",
    "EVOMEM_BIN",
    "EVOMEM_BLESS",
    "EVOMEM_CHROMIUM",
    "EVOMEM_CHROMEDRIVER",
    "EVOMEM_BENCH_SCALE",
    "EVOMEM_DURABLE_DIR",
    "EVOMEM_LOO_SPECS",
    "EVOMEM_OUT",
    "EVOMEM_PG_PORT",
    "EVOMEM_POLICIES",
    "EVOMEM_RESTART_N",
    "EVOMEM_SKIP_LOG",
    "EVOMEM_TEST_*",
    "EVOMEM_NEIGHBOUR_*",
    "EVOMEM_CRASH_*",
    "EVOMEM_SOAK_*",
    "EVOMEM_LLAMA_*",
    "EVOMEM_UI_*",
    "EVOMEM_FULL_*",
];

/// Whether `name` is one of [`OTHER_VARIABLES`].
fn other_variable(name: &str) -> bool {
    OTHER_VARIABLES.iter().any(|v| match v.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == *v,
    })
}

/// One notice per `EVOMEM_*` variable in `env` that is neither a setting
/// nor one of [`OTHER_VARIABLES`]: a misspelt `EVOMEM_EMBEDER` or a
/// single-underscore `EVOMEM_SERVE_BIND` is said, not ignored, with the
/// setting's variable it most resembles. `keys`: every settings key
/// ([`crate::reads::settings_keys`]).
pub fn unknown_variables(env: &[(String, String)], keys: &[String]) -> Vec<String> {
    let settings_vars: Vec<String> = keys
        .iter()
        .map(|k| format!("EVOMEM_{}", k.replace('.', "__").to_ascii_uppercase()))
        .chain(["EVOMEM_LLM".to_string()])
        .collect();
    let mut out: Vec<String> = env
        .iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("EVOMEM_") && env_path(name).is_none())
        .filter(|name| !other_variable(name))
        .map(|name| {
            let near = settings_vars
                .iter()
                .map(|v| {
                    (
                        strsim::levenshtein(&v.replace("__", "_"), &name.replace("__", "_")),
                        v,
                    )
                })
                .filter(|(d, _)| *d <= 3)
                .min();
            match near {
                Some((_, v)) => format!(
                    "notice: variable {name} is not a setting evomem reads (did you mean {v}? \
                     docs/settings-reference.md)"
                ),
                None => format!(
                    "notice: variable {name} is not a setting evomem reads \
                     (docs/settings-reference.md)"
                ),
            }
        })
        .collect();
    out.sort();
    out
}

/// The settings path an environment variable sets, if it is a setting.
fn env_path(name: &str) -> Option<Vec<String>> {
    let rest = name.strip_prefix("EVOMEM_")?.to_ascii_lowercase();
    if rest == "llm" {
        return Some(vec!["llm".into(), "default".into()]);
    }
    let path: Vec<String> = rest.split("__").map(str::to_string).collect();
    let top = path.first()?;
    if !TOP_KEYS.contains(&top.as_str()) {
        return None;
    }
    // `EVOMEM_LLM_…`/`EVOMEM_EVAL_…` with a single underscore is not ours.
    if (top == "llm" || top == "eval") && path.len() < 2 {
        return None;
    }
    Some(path)
}

/// Set `path` in `table` to `raw`, typed like the value it replaces: an
/// integer, a number, a boolean, or a list (`["a", "b"]` in TOML, or
/// `a,b` split at the commas outside brackets, so `mars[kcat=4,x=1]` stays
/// one entry). Where there is no value to follow it is a string, and the
/// answer is `false` ([`Settings::load`] then tries [`toml_value`]).
fn set_path(table: &mut toml::Table, path: &[String], raw: &str) -> anyhow::Result<bool> {
    let Some(last) = path.last() else {
        return Ok(true);
    };
    let (value, typed) = match lookup(table, path) {
        Some(toml::Value::Integer(_)) => (
            toml::Value::Integer(
                raw.trim()
                    .parse()
                    .with_context(|| format!("`{last}` must be an integer"))?,
            ),
            true,
        ),
        Some(toml::Value::Float(_)) => (
            toml::Value::Float(
                raw.trim()
                    .parse()
                    .with_context(|| format!("`{last}` must be a number"))?,
            ),
            true,
        ),
        Some(toml::Value::Boolean(_)) => (
            toml::Value::Boolean(
                raw.trim()
                    .parse()
                    .with_context(|| format!("`{last}` must be true or false"))?,
            ),
            true,
        ),
        Some(toml::Value::Array(_)) => (
            list_value(raw)
                .with_context(|| format!("`{last}` must be a list: `a,b` or `[\"a\", \"b\"]`"))?,
            true,
        ),
        Some(_) => (toml::Value::String(raw.to_string()), true),
        None => (toml::Value::String(raw.to_string()), false),
    };
    put(table, path, value)?;
    Ok(typed)
}

/// The value at `path` in `table`, if any.
fn lookup<'t>(table: &'t toml::Table, path: &[String]) -> Option<&'t toml::Value> {
    let (last, parents) = path.split_last()?;
    let mut t = table;
    for p in parents {
        t = t.get(p)?.as_table()?;
    }
    t.get(last)
}

/// Put `value` at `path` in `table`, making the tables on the way.
fn put(table: &mut toml::Table, path: &[String], value: toml::Value) -> anyhow::Result<()> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut t = table;
    for p in parents {
        let entry = t
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(inner) = entry else {
            bail!("`{p}` is not a table");
        };
        t = inner;
    }
    t.insert(last.clone(), value);
    Ok(())
}

/// `raw` as TOML reads a value (`7`, `0.5`, `true`, `[1, 2]`), or `None`
/// where it is not one.
fn toml_value(raw: &str) -> Option<toml::Value> {
    let t: toml::Table = toml::from_str(&format!("v = {raw}")).ok()?;
    t.get("v").cloned()
}

/// A list from a variable: TOML's `[…]`, or entries split at the commas
/// outside brackets.
fn list_value(raw: &str) -> anyhow::Result<toml::Value> {
    let raw = raw.trim();
    if raw.starts_with('[') {
        return match toml_value(raw) {
            Some(v @ toml::Value::Array(_)) => Ok(v),
            _ => bail!("`{raw}` is not a TOML list"),
        };
    }
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in raw.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(raw.get(start..i).unwrap_or("").trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(raw.get(start..).unwrap_or("").trim().to_string());
    Ok(toml::Value::Array(
        out.into_iter()
            .filter(|e| !e.is_empty())
            .map(toml::Value::String)
            .collect(),
    ))
}

/// The dotted keys of `table`'s values that are not tables, under `prefix`.
fn leaf_keys(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => leaf_keys(&key, t, out),
            _ => out.push(key),
        }
    }
}

/// Deep-merge `over` into `base` (tables merge, anything else replaces).
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src<'a>(flag: Option<&'a Path>, env: &[(&str, &str)], cwd: &Path) -> Sources<'a> {
        Sources {
            config_flag: flag,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: cwd.to_path_buf(),
        }
    }

    #[test]
    fn layers_apply_in_order_defaults_file_env() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(
            &file,
            "threads = 3\nembed_cache = \"off\"\n[eval]\nseed = 7\nnegatives = 5\n[llm.roles]\nmars_plan = \"offline\"\n",
        )
        .unwrap();
        let (s, explicit) = Settings::load(&src(
            Some(&file),
            &[
                ("HOME", "/home/u"),
                ("EVOMEM_EVAL__SEED", "11"),
                ("EVOMEM_LLM__TIMEOUT_S", "120"),
                ("EVOMEM_SHARED_DATA", "/not/a/setting"),
                ("EVOMEM_LLM_CACHE_DIR", "/not/a/setting/either"),
            ],
            dir.path(),
        ))
        .unwrap();
        assert_eq!(s.models_dir, Path::new("/home/u/.cache/evomem/models"));
        assert_eq!(s.threads, 3, "file over default");
        assert_eq!(s.eval.seed, 11, "env over file");
        assert_eq!(s.eval.negatives, 5, "file over default");
        assert_eq!(s.llm.timeout_s, 120.0);
        assert_eq!(s.llm.roles["mars_plan"], "offline");
        assert_eq!(s.embed_cache_path(), None);
        s.validate().unwrap();
        let f = file.display().to_string();
        let from = |k: &str| explicit.get(k).cloned().unwrap_or_default();
        assert_eq!(from("threads"), [f.as_str()]);
        assert_eq!(from("llm.roles.mars_plan"), [f.as_str()]);
        assert_eq!(from("eval.seed"), [f.as_str(), "EVOMEM_EVAL__SEED"]);
        assert_eq!(from("llm.timeout_s"), ["EVOMEM_LLM__TIMEOUT_S"]);
        let keys: Vec<&str> = explicit.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "embed_cache",
                "eval.negatives",
                "eval.seed",
                "llm.roles.mars_plan",
                "llm.timeout_s",
                "threads"
            ],
            "defaults, HOME and variables that are not settings were not set by the user"
        );
    }

    #[test]
    fn local_evomem_toml_is_read_and_env_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("evomem.toml"),
            "[eval]\nusers = \"active\"\n",
        )
        .unwrap();
        let (s, explicit) =
            Settings::load(&src(None, &[("EVOMEM_LLM", "offline")], dir.path())).unwrap();
        assert_eq!(s.eval.users, "active");
        assert_eq!(explicit["llm.default"], ["EVOMEM_LLM"]);
        assert_eq!(
            explicit["eval.users"],
            [dir.path().join("evomem.toml").display().to_string()]
        );
        let err =
            Settings::load(&src(None, &[("EVOMEM_THREADS", "many")], dir.path())).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("EVOMEM_THREADS") && msg.contains("threads"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_key_in_the_file_is_an_error_naming_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "[eval]\nseeds = 3\n").unwrap();
        let err = Settings::load(&src(Some(&file), &[], dir.path())).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("bad.toml") && msg.contains("seeds"), "{msg}");
    }

    #[test]
    fn api_key_is_read_from_the_named_variable_and_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let (s, explicit) =
            Settings::load(&src(None, &[("OPENAI_API_KEY", "sk-secret-9")], dir.path())).unwrap();
        assert!(explicit.is_empty(), "{explicit:?}");
        assert_eq!(s.llm.api_key, Some(Secret("sk-secret-9".into())));
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("sk-secret"), "{json}");
        assert!(!format!("{s:?}").contains("sk-secret"));
    }

    #[test]
    fn bad_eval_word_names_the_key() {
        let s = Settings {
            eval: EvalSettings {
                target: "train".into(),
                ..EvalSettings::default()
            },
            ..Settings::default()
        };
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("eval.target"), "{err}");
    }

    #[test]
    fn ops_log_format_defaults_to_zst_comes_from_the_layers_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Settings::default().eval.ops_log_format, "zst");
        let file = dir.path().join("s.toml");
        std::fs::write(&file, "[eval]\nops_log_format = \"jsonl\"\n").unwrap();
        let (s, _) = Settings::load(&src(Some(&file), &[], dir.path())).unwrap();
        assert_eq!(s.eval.ops_log_format, "jsonl");
        s.validate().unwrap();
        let (s, _) = Settings::load(&src(
            Some(&file),
            &[("EVOMEM_EVAL__OPS_LOG_FORMAT", "zst")],
            dir.path(),
        ))
        .unwrap();
        assert_eq!(s.eval.ops_log_format, "zst", "env over file");
        let (s, _) = Settings::load(&src(
            None,
            &[("EVOMEM_EVAL__OPS_LOG_FORMAT", "gz")],
            dir.path(),
        ))
        .unwrap();
        let err = s.validate().unwrap_err().to_string();
        assert!(
            err.contains("eval.ops_log_format") && err.contains("`gz`"),
            "{err}"
        );
    }

    #[test]
    fn a_key_without_a_default_and_a_list_are_set_by_variables() {
        let dir = tempfile::tempdir().unwrap();
        let (s, explicit) = Settings::load(&src(
            None,
            &[("EVOMEM_LLM__USER_TOKEN_CAP", "50000")],
            dir.path(),
        ))
        .unwrap();
        assert_eq!(s.llm.user_token_cap, Some(50000));
        assert_eq!(
            explicit["llm.user_token_cap"],
            ["EVOMEM_LLM__USER_TOKEN_CAP"]
        );
        let err = Settings::load(&src(
            None,
            &[("EVOMEM_LLM__USER_TOKEN_CAP", "lots")],
            dir.path(),
        ))
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("EVOMEM_LLM__USER_TOKEN_CAP"),
            "{err:#}"
        );
        assert_eq!(
            list_value("mars[kcat=4,x=1], no-memory").unwrap(),
            toml::Value::Array(vec![
                toml::Value::String("mars[kcat=4,x=1]".into()),
                toml::Value::String("no-memory".into()),
            ])
        );
        assert_eq!(
            list_value(r#"["a", "b,c"]"#).unwrap(),
            toml::Value::Array(vec![
                toml::Value::String("a".into()),
                toml::Value::String("b,c".into()),
            ])
        );
        assert!(list_value("[unclosed").is_err());
    }

    #[cfg(feature = "serve")]
    #[test]
    fn serve_policies_from_a_variable() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Settings::load(&src(
            None,
            &[
                ("EVOMEM_SERVE__POLICIES", "mars[kcat=4],no-memory,seqmem"),
                ("EVOMEM_SERVE__POLICY", "seqmem"),
            ],
            dir.path(),
        ))
        .unwrap();
        assert_eq!(s.serve.policies, ["mars[kcat=4]", "no-memory", "seqmem"]);
    }

    #[test]
    fn a_misspelt_variable_is_said_with_the_nearest_setting() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let keys = crate::reads::settings_keys();
        let n = unknown_variables(
            &env(&[
                ("EVOMEM_EMBEDER", "hashing"),
                ("EVOMEM_EVAL_SEED", "7"),
                ("EVOMEM_EMBEDDER", "hashing"),
                ("EVOMEM_TEST_PG_URL", "postgres://x"),
                ("EVOMEM_LOG", "info"),
                ("PATH", "/bin"),
                ("EVOMEM_WHATEVER_ELSE_ENTIRELY", "1"),
            ]),
            &keys,
        );
        assert_eq!(
            n,
            [
                "notice: variable EVOMEM_EMBEDER is not a setting evomem reads (did you mean EVOMEM_EMBEDDER? docs/settings-reference.md)",
                "notice: variable EVOMEM_EVAL_SEED is not a setting evomem reads (did you mean EVOMEM_EVAL__SEED? docs/settings-reference.md)",
                "notice: variable EVOMEM_WHATEVER_ELSE_ENTIRELY is not a setting evomem reads (docs/settings-reference.md)",
            ]
        );
    }

    /// Every `EVOMEM_*` name in the repository's code, scripts and docs is a
    /// setting's variable or one of [`OTHER_VARIABLES`], so a variable the
    /// project itself uses never draws the unknown-variable notice.
    #[test]
    fn every_variable_the_repository_uses_is_known() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if path.is_dir() {
                    if !(name.starts_with('.') && name != ".ci"
                        || ["target", "node_modules", "notes", "runs"].contains(&name.as_str())
                        || name.starts_with("log"))
                    {
                        stack.push(path);
                    }
                } else if ["rs", "sh", "py", "md", "toml"]
                    .iter()
                    .any(|x| name.ends_with(&format!(".{x}")))
                    || name == "run"
                {
                    files.push(path);
                }
            }
        }
        let this = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/settings.rs");
        let mut unknown = std::collections::BTreeSet::new();
        for f in files
            .iter()
            .filter(|f| f.canonicalize().ok() != this.canonicalize().ok())
        {
            let Ok(text) = std::fs::read_to_string(f) else {
                continue;
            };
            for (i, _) in text.match_indices("EVOMEM_") {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // `EVOMEM_SERVE__<KEY>`-style patterns in prose end in `_`.
                if name.ends_with('_') || name.len() <= "EVOMEM_".len() {
                    continue;
                }
                // The misspellings the docs and the CLI tests show on purpose.
                const EXAMPLES: &[&str] = &["EVOMEM_EMBEDER", "EVOMEM_THREDS"];
                if env_path(&name).is_none()
                    && !other_variable(&name)
                    && !EXAMPLES.contains(&name.as_str())
                {
                    unknown.insert(format!("{name} ({})", f.display()));
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "EVOMEM_ variables neither settings nor in OTHER_VARIABLES: {unknown:?}"
        );
    }
}
