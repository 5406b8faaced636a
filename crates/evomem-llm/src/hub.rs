//! The role executor that policies call: [`LlmHub::run`].
//!
//! For each role the hub picks a backend (the role's entry in `[llm.roles]`,
//! else the default). Offline roles run their offline algorithm. Model-backed
//! roles go through this sequence, which is what keeps a malformed answer
//! from ever reaching memory:
//!
//! 1. render `prompts/<role>.md` with the role's variables and ask for JSON
//!    matching the role's schema;
//! 2. extract JSON tolerantly (code fences, chatter), validate it against the
//!    schema, then parse it with [`Role::parse`];
//! 3. on failure send **one** repair turn (the bad answer plus the error);
//! 4. on a second failure run [`Role::offline`] for this call (a fallback).
//!
//! A call that fails at the transport level after the client's retries
//! (`Transient`), a prompt that is too long (`ContextTooLong`) and a body that
//! is not a chat completion (`Malformed`) also fall back. A `Permanent` error
//! (bad key, unknown model, bad config) and a replay-cache miss are returned
//! to the caller: they are configuration mistakes that must not silently turn
//! a model run into an offline one. Every repair and fallback is counted per
//! role and per user (see [`crate::accounting`]).
//!
//! A backend that fails at the transport level on every call (a dead server,
//! connection refused) would otherwise turn every call into a fallback, and
//! the run would finish as an offline run under the model's name. The hub
//! therefore counts *consecutive* transport failures (after the client's own
//! retries); at [`DEFAULT_MAX_CONSECUTIVE_FAILURES`] in a row it returns a
//! `Permanent` error that fails the run. One successful call resets the count.
//!
//! **Completion limits.** A request carries the smaller of the role's own
//! limit ([`Role::max_tokens`], sized to its answer) and the configured
//! `llm.max_tokens` ([`request_limit`]).
//!
//! **Per-user token cap** (`llm.user_token_cap`,
//! [`LlmHub::with_user_token_cap`]). Before each model call for a known user
//! the hub adds the tokens that user has been charged so far, the prompt by
//! the `ceil(chars / 4)` rule and the request's completion limit; when the
//! sum would exceed the cap the run is answered by the offline algorithm
//! instead, counted as `capped` and as a fallback with reason
//! `user_token_cap` (per role and per user), and logged at `warn`. Runs with
//! no user are not capped. Calls of one user that run concurrently are
//! checked against the same spent total, so together they may pass the cap
//! by at most one call each.

use crate::accounting::{approx_prompt_tokens, approx_tokens, Accounting, Counters};
use crate::cache::{cache_key, Cache, CacheMode, CacheSettings};
use crate::json::{drop_repeats, extract_json, validate};
use crate::spec::{BackendSpec, LlmConfig};
use crate::template::{json_schema_format, render};
use evomem_core::{ChatMessage, ChatRequest, ChatResponse, LanguageModel, LlmError, Role};
use serde_json::{json, Value};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

thread_local! {
    static PARSER_REPAIRS: Cell<u64> = const { Cell::new(0) };
}

/// Log an answer that did not parse, with its error and length, at debug
/// (`EVOMEM_LOG=evomem_llm=debug`): what a user needs to see why a model's
/// runs fall back.
fn log_unusable(role: &str, err: &impl std::fmt::Display, answer: &ChatResponse, what: &str) {
    tracing::debug!(
        role,
        error = %err,
        completion_tokens = answer.usage.completion_tokens,
        answer = %answer.text,
        "{what}"
    );
}

/// Called by a [`Role::parse`] that accepted an answer only after completing
/// or fixing it itself (e.g. a ranking that left candidates out). The hub
/// counts it as a repair of the current call. Outside [`LlmHub::run`] it has
/// no effect.
pub fn note_parser_repair() {
    PARSER_REPAIRS.with(|c| c.set(c.get() + 1));
}

fn take_parser_repairs() -> u64 {
    PARSER_REPAIRS.with(|c| c.replace(0))
}

/// Where a role runs.
#[derive(Clone)]
pub enum Backend {
    /// The role's offline algorithm.
    Offline,
    /// A language model; `model` is the model name used in cache keys.
    Model {
        /// The backend.
        lm: Arc<dyn LanguageModel>,
        /// Model name.
        model: String,
    },
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Offline => f.write_str("Offline"),
            Self::Model { lm, .. } => write!(f, "Model({})", lm.id()),
        }
    }
}

impl Backend {
    fn label(&self) -> String {
        match self {
            Self::Offline => "offline".to_string(),
            Self::Model { lm, .. } => lm.id(),
        }
    }
}

/// How many transport failures in a row (each after the client's retries)
/// make the hub fail the run instead of falling back again.
pub const DEFAULT_MAX_CONSECUTIVE_FAILURES: u32 = 5;

/// Per-role backend choice, record/replay cache and accounting. Cheap to
/// share behind an `Arc`; `run` may be called from many threads.
pub struct LlmHub {
    default: Backend,
    roles: BTreeMap<String, Backend>,
    cache: Option<Cache>,
    max_tokens: Option<u32>,
    user_token_cap: Option<u64>,
    estimate: bool,
    acct: Mutex<Accounting>,
    max_consecutive_failures: u32,
    consecutive_failures: AtomicU32,
}

impl fmt::Debug for LlmHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmHub")
            .field("default", &self.default)
            .field("roles", &self.roles)
            .field("cache", &self.cache)
            .finish()
    }
}

impl Default for LlmHub {
    fn default() -> Self {
        Self::offline()
    }
}

/// What one role call adds to the accounting: its counters and, when it
/// fell back to the offline algorithm, why.
struct RunTally {
    delta: Counters,
    reason: Option<&'static str>,
}

impl LlmHub {
    /// Every role offline (the default).
    pub fn offline() -> Self {
        Self {
            default: Backend::Offline,
            roles: BTreeMap::new(),
            cache: None,
            max_tokens: Some(1024),
            user_token_cap: None,
            estimate: false,
            acct: Mutex::new(Accounting::default()),
            max_consecutive_failures: DEFAULT_MAX_CONSECUTIVE_FAILURES,
            consecutive_failures: AtomicU32::new(0),
        }
    }

    /// Every role on one backend spec (`offline` or
    /// `openai:<model>@<base_url>`), with the cache described by `cache`.
    pub fn from_spec(spec: &str, cache: CacheSettings) -> Result<Self, LlmError> {
        Self::from_config(&LlmConfig::from_spec(spec), cache)
    }

    /// A hub from an `[llm]` table (per-role backends).
    pub fn from_config(cfg: &LlmConfig, cache: CacheSettings) -> Result<Self, LlmError> {
        cfg.validate("llm config")
            .map_err(|e| LlmError::Permanent(e.to_string()))?;
        // One backend per distinct spec, shared by the roles that name it.
        let mut built: BTreeMap<String, Backend> = BTreeMap::new();
        let mut get = |spec: &str, field: &str| -> Result<Backend, LlmError> {
            if let Some(b) = built.get(spec) {
                return Ok(b.clone());
            }
            let b = build_backend(spec, field, cfg)?;
            built.insert(spec.to_string(), b.clone());
            Ok(b)
        };
        let default = get(&cfg.default, "llm.default")?;
        let mut roles = BTreeMap::new();
        for (role, spec) in &cfg.roles {
            roles.insert(role.clone(), get(spec, &format!("llm.roles.{role}"))?);
        }
        let cache = Cache::open(&cache).map_err(|e| LlmError::Permanent(e.to_string()))?;
        Ok(Self {
            default,
            roles,
            cache,
            max_tokens: cfg.max_tokens,
            user_token_cap: cfg.user_token_cap,
            estimate: false,
            acct: Mutex::new(Accounting::default()),
            max_consecutive_failures: DEFAULT_MAX_CONSECUTIVE_FAILURES,
            consecutive_failures: AtomicU32::new(0),
        })
    }

    /// A hub whose default backend is `lm` (tests, embedding applications).
    pub fn with_model(lm: Arc<dyn LanguageModel>, cache: CacheSettings) -> Result<Self, LlmError> {
        let mut hub = Self::offline();
        let model = lm.id();
        hub.default = Backend::Model { lm, model };
        hub.cache = Cache::open(&cache).map_err(|e| LlmError::Permanent(e.to_string()))?;
        Ok(hub)
    }

    /// Builder: run `role` on `backend` instead of the default.
    pub fn with_role(mut self, role: &str, backend: Backend) -> Self {
        self.roles.insert(role.to_string(), backend);
        self
    }

    /// Builder: for runs answered offline, also record what a model would
    /// have been charged (`est_prompt_tokens`, `est_completion_tokens` in the
    /// accounting): the rendered prompt and the offline answer as JSON, by the
    /// `ceil(chars / 4)` rule. Off by default, since rendering every prompt
    /// costs time in long offline runs.
    pub fn with_estimate(mut self, on: bool) -> Self {
        self.estimate = on;
        self
    }

    /// Builder: fail the run after `n` transport failures in a row instead
    /// of falling back again (default [`DEFAULT_MAX_CONSECUTIVE_FAILURES`];
    /// at least 1).
    pub fn with_max_consecutive_failures(mut self, n: u32) -> Self {
        self.max_consecutive_failures = n.max(1);
        self
    }

    /// Builder: completion token limit of every request (default 1024).
    pub fn with_max_tokens(mut self, max_tokens: Option<u32>) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Builder: answer a user's model-backed runs offline once a call would
    /// take the tokens charged for that user past `cap` (default `None`: no
    /// cap; see the module docs).
    pub fn with_user_token_cap(mut self, cap: Option<u64>) -> Self {
        self.user_token_cap = cap;
        self
    }

    /// The backend `role` runs on.
    pub fn backend_for(&self, role: &str) -> &Backend {
        self.roles.get(role).unwrap_or(&self.default)
    }

    /// True when every role runs offline.
    pub fn is_offline(&self) -> bool {
        matches!(self.default, Backend::Offline)
            && self.roles.values().all(|b| matches!(b, Backend::Offline))
    }

    /// Run `role` on `input` for `user` (used for per-user accounting).
    pub fn run<R: Role>(
        &self,
        role: &R,
        input: &R::Input,
        user: Option<&str>,
    ) -> Result<R::Output, LlmError> {
        let name = role.name();
        let mut t = RunTally {
            delta: Counters {
                runs: 1,
                ..Counters::default()
            },
            reason: None,
        };
        let result = match self.backend_for(name) {
            Backend::Offline => {
                t.delta.offline_runs = 1;
                let out = role.offline(input);
                if self.estimate {
                    estimate_offline(role, input, out.as_ref().ok(), &mut t.delta);
                }
                out
            }
            Backend::Model { lm, model } => {
                self.run_model(role, input, user, (lm.as_ref(), model), &mut t)
            }
        };
        let RunTally { delta, reason } = t;
        if let Ok(mut a) = self.acct.lock() {
            a.record(name, user, &delta);
            if let Some(r) = reason {
                a.record_fallback_reason(name, r);
            }
        }
        result
    }
    /// One role call through a model: the request, one repair turn when the
    /// answer is unusable, and the offline algorithm (counted in `t`) when
    /// the cap, the transport or the answers fail.
    fn run_model<R: Role>(
        &self,
        role: &R,
        input: &R::Input,
        user: Option<&str>,
        (lm, model): (&dyn LanguageModel, &str),
        t: &mut RunTally,
    ) -> Result<R::Output, LlmError> {
        let name = role.name();
        let schema = role.schema_for(input);
        let messages = render(name, role.template(), &role.variables(input))
            .map_err(|e| LlmError::Permanent(e.to_string()))?;
        let mut req = ChatRequest::new(messages);
        req.max_tokens = request_limit(role.max_tokens(), self.max_tokens);
        req.response_format = json_schema_format(name, schema.clone());

        let fallback = |why: &'static str, t: &mut RunTally| {
            t.delta.fallbacks += 1;
            t.reason = Some(why);
            tracing::debug!(role = name, why, "falling back to the offline algorithm");
            role.offline(input)
        };

        if self.over_cap(name, user, &req, &t.delta) {
            t.delta.capped += 1;
            return fallback("user_token_cap", t);
        }
        let first = match self.call(name, lm, model, &req, &mut t.delta) {
            Ok(r) => {
                self.consecutive_failures.store(0, Ordering::Relaxed);
                r
            }
            Err(e) => {
                let why = fallback_reason(&e)?;
                self.note_transport_failure(lm, &e)?;
                return fallback(why, t);
            }
        };
        take_parser_repairs();
        let err = match parse_answer(role, input, &schema, &first.text) {
            Ok(out) => {
                t.delta.repairs += take_parser_repairs();
                return Ok(out);
            }
            Err(e) => e,
        };
        log_unusable(
            name,
            &err,
            &first,
            "answer unusable; sending one repair turn",
        );
        t.delta.repairs += 1;
        let mut repair = req.clone();
        repair.messages.push(ChatMessage::assistant(first.text));
        repair.messages.push(ChatMessage::user(format!(
            "Your answer could not be used: {err}\nAnswer again with only a JSON value matching this schema, no other text:\n{schema}"
        )));
        if self.over_cap(name, user, &repair, &t.delta) {
            t.delta.capped += 1;
            return fallback("user_token_cap", t);
        }
        let second = match self.call(name, lm, model, &repair, &mut t.delta) {
            Ok(r) => {
                self.consecutive_failures.store(0, Ordering::Relaxed);
                r
            }
            Err(e) => {
                let why = fallback_reason(&e)?;
                self.note_transport_failure(lm, &e)?;
                return fallback(why, t);
            }
        };
        take_parser_repairs();
        match parse_answer(role, input, &schema, &second.text) {
            Ok(out) => {
                t.delta.repairs += take_parser_repairs();
                Ok(out)
            }
            Err(e) => {
                log_unusable(name, &e, &second, "repaired answer unusable too");
                fallback("malformed_answer", t)
            }
        }
    }

    /// True when sending `req` for `user` could take the tokens charged for
    /// that user (earlier runs, plus `delta` of this run) past the cap: its
    /// prompt by the `ceil(chars / 4)` rule plus its completion limit.
    fn over_cap(
        &self,
        role: &str,
        user: Option<&str>,
        req: &ChatRequest,
        delta: &Counters,
    ) -> bool {
        let (Some(cap), Some(u)) = (self.user_token_cap, user) else {
            return false;
        };
        let spent = self.accounting_user_tokens(u) + delta.prompt_tokens + delta.completion_tokens;
        let next = approx_prompt_tokens(req.messages.iter().map(|m| m.content.as_str()))
            + u64::from(req.max_tokens.unwrap_or(0));
        let over = spent + next > cap;
        if over {
            tracing::warn!(
                role,
                user = u,
                spent,
                next,
                cap,
                "user token cap reached: answering offline"
            );
        }
        over
    }

    fn accounting_user_tokens(&self, user: &str) -> u64 {
        self.acct.lock().map(|a| a.user_tokens(user)).unwrap_or(0)
    }

    /// Count one more transport failure in a row; at the limit, the error
    /// that fails the run. A prompt that is too long says nothing about the
    /// backend's health and is not counted.
    fn note_transport_failure(&self, lm: &dyn LanguageModel, e: &LlmError) -> Result<(), LlmError> {
        if matches!(e, LlmError::ContextTooLong(_)) {
            return Ok(());
        }
        let n = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.max_consecutive_failures {
            return Err(LlmError::Permanent(format!(
                "backend `{}` failed {n} calls in a row (last: {e}); stopping instead of finishing as an offline run",
                lm.id()
            )));
        }
        Ok(())
    }

    /// One chat call through the cache. Counts the call and its tokens.
    fn call(
        &self,
        role: &str,
        lm: &dyn LanguageModel,
        model: &str,
        req: &ChatRequest,
        delta: &mut Counters,
    ) -> Result<ChatResponse, LlmError> {
        let backend = lm.id();
        let key = cache_key(&backend, model, req);
        let cache_err = |e: crate::cache::CacheError| LlmError::Permanent(e.to_string());
        if let Some(c) = &self.cache {
            if let Some(hit) = c.get(&key).map_err(cache_err)? {
                self.note(|a| a.record_cache_hit(role));
                count(delta, &hit);
                return Ok(hit);
            }
            if c.mode() == CacheMode::ReplayOnly {
                if let Some((kind, message)) = c.get_failure(&key).map_err(cache_err)? {
                    self.note(|a| a.record_cache_hit(role));
                    delta.calls += 1;
                    return Err(error_from_kind(&kind, message));
                }
                return Err(LlmError::CacheMiss {
                    role: role.to_string(),
                    key,
                });
            }
        }
        let t0 = Instant::now();
        let result = lm.complete(req);
        let ms = t0.elapsed().as_millis() as u64;
        self.note(|a| a.record_backend_call(role, ms));
        match result {
            Ok(resp) => {
                count(delta, &resp);
                if let Some(c) = &self.cache {
                    c.put(&key, role, &backend, req, &resp).map_err(cache_err)?;
                    c.clear_failure(&key).map_err(cache_err)?;
                }
                Ok(resp)
            }
            Err(e) => {
                // A final failure that leads to a fallback is a call (with no
                // tokens) and is noted so that a replay falls back the same way.
                if let Some(kind) = error_kind(&e) {
                    delta.calls += 1;
                    if let Some(c) = &self.cache {
                        c.put_failure(&key, role, &backend, kind, &e.to_string())
                            .map_err(cache_err)?;
                    }
                }
                Err(e)
            }
        }
    }

    fn note(&self, f: impl FnOnce(&mut Accounting)) {
        if let Ok(mut a) = self.acct.lock() {
            f(&mut a);
        }
    }

    /// A copy of the counters so far.
    pub fn accounting(&self) -> Accounting {
        self.acct.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// The reproducible accounting for `metrics.json`: backends per role plus
    /// calls, tokens, repairs and fallbacks per role and per user (see
    /// [`crate::accounting`]). A replayed run gives the same value.
    pub fn accounting_json(&self) -> Value {
        let mut v = self.accounting().to_json();
        v["backends"] = self.backends_json();
        v
    }

    /// The non-reproducible part: cache mode, cache hits, backend calls and
    /// latency. Report it beside `metrics.json`, never inside the compared
    /// metrics.
    pub fn runtime_json(&self) -> Value {
        let mut v = self.accounting().runtime_json();
        v["cache_mode"] = json!(self
            .cache
            .as_ref()
            .map(|c| c.mode())
            .unwrap_or(CacheMode::Off)
            .to_string());
        v
    }

    fn backends_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("default".into(), json!(self.default.label()));
        for (role, b) in &self.roles {
            m.insert(role.clone(), json!(b.label()));
        }
        Value::Object(m)
    }
}

/// The completion limit a request carries: the smaller of the role's own
/// limit ([`Role::max_tokens`]) and the configured one, or whichever is set.
pub fn request_limit(role: Option<u32>, configured: Option<u32>) -> Option<u32> {
    match (role, configured) {
        (Some(r), Some(c)) => Some(r.min(c)),
        (Some(r), None) => Some(r),
        (None, c) => c,
    }
}

fn count(delta: &mut Counters, r: &ChatResponse) {
    delta.calls += 1;
    delta.prompt_tokens += r.usage.prompt_tokens;
    delta.completion_tokens += r.usage.completion_tokens;
}

/// The kind under which a final failure is noted in the cache, or `None`
/// for errors that are returned to the caller instead of falling back.
fn error_kind(e: &LlmError) -> Option<&'static str> {
    match e {
        LlmError::Transient { .. } => Some("transient"),
        LlmError::ContextTooLong(_) => Some("context_too_long"),
        LlmError::Malformed(_) => Some("malformed"),
        LlmError::Permanent(_) | LlmError::CacheMiss { .. } | LlmError::Offline { .. } => None,
    }
}

fn error_from_kind(kind: &str, message: String) -> LlmError {
    match kind {
        "transient" => LlmError::Transient {
            message,
            retry_after_ms: None,
        },
        "context_too_long" => LlmError::ContextTooLong(message),
        "malformed" => LlmError::Malformed(message),
        _ => LlmError::Permanent(message),
    }
}

/// The fallback reason for a call error, or the error itself when it must
/// reach the caller.
fn fallback_reason(e: &LlmError) -> Result<&'static str, LlmError> {
    match e {
        LlmError::Transient { .. } => Ok("transient"),
        LlmError::ContextTooLong(_) => Ok("context_too_long"),
        LlmError::Malformed(_) => Ok("malformed_response"),
        LlmError::Permanent(_) | LlmError::CacheMiss { .. } | LlmError::Offline { .. } => {
            Err(e.clone())
        }
    }
}

fn parse_answer<R: Role>(
    role: &R,
    input: &R::Input,
    schema: &Value,
    text: &str,
) -> Result<R::Output, String> {
    let mut v = match extract_json(text) {
        Ok(v) => v,
        Err(e) => return role.parse_text(input, text).ok_or(e),
    };
    if drop_repeats(schema, &mut v) > 0 {
        note_parser_repair();
    }
    validate(schema, &v)?;
    role.parse(input, v)
}

fn build_backend(spec: &str, field: &str, cfg: &LlmConfig) -> Result<Backend, LlmError> {
    match BackendSpec::parse(spec, field).map_err(|e| LlmError::Permanent(e.to_string()))? {
        BackendSpec::Offline => Ok(Backend::Offline),
        BackendSpec::OpenAi { model, base_url } => build_openai(model, base_url, cfg),
        BackendSpec::Gguf { path } => build_gguf(&path, cfg),
    }
}

/// The in-process backend decodes under the role's schema unless
/// `llm.response_format` asks for less (`json_object`, `none`); `gbnf`
/// means the same as `json_schema` here.
#[cfg(feature = "gguf")]
fn build_gguf(path: &str, cfg: &LlmConfig) -> Result<Backend, LlmError> {
    let opts = evomem_gguf::GgufOptions {
        schema_constrained: matches!(cfg.response_format.as_str(), "json_schema" | "gbnf"),
        ..evomem_gguf::GgufOptions::default()
    };
    let lm = evomem_gguf::GgufModel::load(std::path::Path::new(path), opts)
        .map_err(|e| LlmError::Permanent(e.to_string()))?;
    let model = lm.id();
    Ok(Backend::Model {
        lm: Arc::new(lm),
        model,
    })
}

#[cfg(not(feature = "gguf"))]
fn build_gguf(path: &str, _cfg: &LlmConfig) -> Result<Backend, LlmError> {
    Err(LlmError::Permanent(format!(
        "backend `gguf:{path}` needs evomem-llm built with the `gguf` feature (the `evomem` binary: cargo build --release -p evomem)"
    )))
}

#[cfg(feature = "http")]
fn build_openai(model: String, base_url: String, cfg: &LlmConfig) -> Result<Backend, LlmError> {
    use crate::openai::{OpenAiCompatible, OpenAiConfig};
    use std::time::Duration;
    let mut oc = OpenAiConfig::new(model.clone(), base_url);
    oc.api_key_env = cfg.api_key_env.clone();
    oc.api_key = cfg.api_key.clone();
    oc.timeout = Duration::from_secs_f64(cfg.timeout_s);
    oc.max_concurrency = cfg.max_concurrency;
    oc.max_retries = cfg.max_retries;
    oc.backoff_base = Duration::from_millis(cfg.backoff_base_ms);
    oc.backoff_max = Duration::from_millis(cfg.backoff_max_ms);
    oc.response_format = cfg.response_format.clone();
    Ok(Backend::Model {
        lm: Arc::new(OpenAiCompatible::new(oc)?),
        model,
    })
}

#[cfg(not(feature = "http"))]
fn build_openai(model: String, _base_url: String, _cfg: &LlmConfig) -> Result<Backend, LlmError> {
    Err(LlmError::Permanent(format!(
        "backend `openai:{model}@...` needs evomem-llm built with the `http` feature (the `evomem` binary: cargo build --release -p evomem)"
    )))
}

/// What an offline run would have cost a model (see
/// [`LlmHub::with_estimate`]): the rendered prompt and the offline answer
/// as JSON, both by [`approx_tokens`]. A template that does not render
/// counts nothing (the model path would have failed before any call).
fn estimate_offline<R: Role>(
    role: &R,
    input: &R::Input,
    out: Option<&R::Output>,
    delta: &mut Counters,
) {
    if let Ok(messages) = render(role.name(), role.template(), &role.variables(input)) {
        delta.est_prompt_tokens = approx_prompt_tokens(messages.iter().map(|m| m.content.as_str()));
    }
    if let Some(json) = out.and_then(|o| serde_json::to_string(o).ok()) {
        delta.est_completion_tokens = approx_tokens(&json);
    }
}
