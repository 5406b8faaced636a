//! Token and call accounting, per role and per user.
//!
//! Two parts, kept apart on purpose:
//!
//! - the **deterministic** part ([`Accounting::to_json`]): role runs, model
//!   calls (repair turns included), prompt and completion tokens, repairs and
//!   fallbacks. It is a function of the requests and the recorded answers
//!   only, so a run replayed from the cache reports the same numbers byte for
//!   byte. It goes into `metrics.json` (key `llm`).
//! - the **runtime** part ([`Accounting::runtime_json`]): cache hits, network
//!   requests and wall-clock latency. These differ between a recording run
//!   and its replay by construction, so they are reported separately (the
//!   eval harness writes them to `timing.json` beside `metrics.json`)
//!   and never enter the compared metrics.
//!
//! Counts are sums of integers, so the result does not depend on the order in
//! which concurrent calls finish; maps are `BTreeMap`s, so key order is fixed.

use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Deterministic counters of one role (or one user and role).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// `LlmHub::run` invocations.
    pub runs: u64,
    /// Runs answered by the offline algorithm because the role is offline.
    pub offline_runs: u64,
    /// Chat-completion calls (first turns and repair turns).
    pub calls: u64,
    /// Prompt tokens as reported by the backend.
    pub prompt_tokens: u64,
    /// Completion tokens as reported by the backend.
    pub completion_tokens: u64,
    /// Repairs: repair turns sent, plus answers the parser completed itself
    /// (e.g. a ranking missing some candidates).
    pub repairs: u64,
    /// Model-backed runs that ended in the offline algorithm.
    pub fallbacks: u64,
    /// Offline runs only, with estimation on ([`crate::LlmHub::with_estimate`]):
    /// the prompt tokens the rendered prompt would cost a model, by
    /// [`approx_tokens`] per message plus 4 (the fixture server's rule).
    #[serde(skip_serializing_if = "is_zero")]
    pub est_prompt_tokens: u64,
    /// Offline runs only, with estimation on: [`approx_tokens`] of the offline
    /// answer serialised as compact JSON (what a model would have to write).
    #[serde(skip_serializing_if = "is_zero")]
    pub est_completion_tokens: u64,
    /// Model-backed runs answered offline because the user's token cap
    /// (`llm.user_token_cap`, [`crate::LlmHub::with_user_token_cap`]) would
    /// have been exceeded by the call; each is also a fallback with reason
    /// `user_token_cap`.
    #[serde(skip_serializing_if = "is_zero")]
    pub capped: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The token estimate used wherever no tokenizer is at hand: one token per
/// four characters, rounded up (the usual rule of thumb for English BPE
/// vocabularies; the fixture server reports usage with it).
pub fn approx_tokens(s: &str) -> u64 {
    (s.chars().count() as u64).div_ceil(4)
}

/// Prompt tokens of a chat by the same rule: [`approx_tokens`] of each
/// message's content plus 4 per message (role and framing). The fixture
/// server charges this and offline estimates record it, so the two agree.
pub fn approx_prompt_tokens<'a>(contents: impl IntoIterator<Item = &'a str>) -> u64 {
    contents.into_iter().map(|c| 4 + approx_tokens(c)).sum()
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.runs += o.runs;
        self.offline_runs += o.offline_runs;
        self.calls += o.calls;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.repairs += o.repairs;
        self.fallbacks += o.fallbacks;
        self.est_prompt_tokens += o.est_prompt_tokens;
        self.est_completion_tokens += o.est_completion_tokens;
        self.capped += o.capped;
    }
}

/// Runtime counters of one role (not reproducible; see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Runtime {
    /// Calls answered from the cache.
    pub cache_hits: u64,
    /// Calls sent to the backend (network requests, retries not counted).
    pub backend_calls: u64,
    /// Total backend latency, milliseconds.
    pub latency_ms_total: u64,
    /// Slowest backend call, milliseconds.
    pub latency_ms_max: u64,
}

/// All counters of one hub.
#[derive(Debug, Clone, Default)]
pub struct Accounting {
    per_role: BTreeMap<String, Counters>,
    per_user: BTreeMap<String, BTreeMap<String, Counters>>,
    fallback_reasons: BTreeMap<String, BTreeMap<String, u64>>,
    runtime: BTreeMap<String, Runtime>,
}

impl Accounting {
    /// Add `delta` to `role` (and to `user`'s row, when known).
    pub fn record(&mut self, role: &str, user: Option<&str>, delta: &Counters) {
        self.per_role
            .entry(role.to_string())
            .or_default()
            .add(delta);
        if let Some(u) = user {
            self.per_user
                .entry(u.to_string())
                .or_default()
                .entry(role.to_string())
                .or_default()
                .add(delta);
        }
    }

    /// Count one fallback reason (`transient`, `malformed_answer`, ...).
    pub fn record_fallback_reason(&mut self, role: &str, reason: &str) {
        *self
            .fallback_reasons
            .entry(role.to_string())
            .or_default()
            .entry(reason.to_string())
            .or_default() += 1;
    }

    /// Record one cache hit.
    pub fn record_cache_hit(&mut self, role: &str) {
        self.runtime.entry(role.to_string()).or_default().cache_hits += 1;
    }

    /// Record one backend call and its latency.
    pub fn record_backend_call(&mut self, role: &str, latency_ms: u64) {
        let r = self.runtime.entry(role.to_string()).or_default();
        r.backend_calls += 1;
        r.latency_ms_total += latency_ms;
        r.latency_ms_max = r.latency_ms_max.max(latency_ms);
    }

    /// Tokens a model has charged for `user` so far (prompt plus completion,
    /// all roles); what the hub's per-user cap is checked against.
    pub fn user_tokens(&self, user: &str) -> u64 {
        self.per_user
            .get(user)
            .map(|roles| {
                roles
                    .values()
                    .map(|c| c.prompt_tokens + c.completion_tokens)
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Totals over all roles.
    pub fn totals(&self) -> Counters {
        let mut t = Counters::default();
        for c in self.per_role.values() {
            t.add(c);
        }
        t
    }

    /// Counters of one role.
    pub fn role(&self, role: &str) -> Counters {
        self.per_role.get(role).cloned().unwrap_or_default()
    }

    /// Runtime counters of one role.
    pub fn role_runtime(&self, role: &str) -> Runtime {
        self.runtime.get(role).cloned().unwrap_or_default()
    }

    /// The deterministic part as JSON (see the module docs):
    /// `{"totals", "per_role", "fallback_reasons", "per_user_mean", "per_user"}`.
    /// `per_user_mean` averages calls and tokens over the users with at least
    /// one run, per role and in total (the MARS/MemRec "calls and tokens per
    /// user" comparison).
    pub fn to_json(&self) -> Value {
        let n_users = self.per_user.len() as u64;
        let mut mean_per_role: BTreeMap<String, Value> = BTreeMap::new();
        for role in self.per_role.keys() {
            let mut s = Counters::default();
            for roles in self.per_user.values() {
                if let Some(c) = roles.get(role) {
                    s.add(c);
                }
            }
            mean_per_role.insert(role.clone(), mean_json(&s, n_users));
        }
        let mut all = Counters::default();
        for roles in self.per_user.values() {
            for c in roles.values() {
                all.add(c);
            }
        }
        json!({
            "totals": self.totals(),
            "per_role": self.per_role,
            "fallback_reasons": self.fallback_reasons,
            "per_user_mean": {
                "n_users": n_users,
                "all_roles": mean_json(&all, n_users),
                "per_role": mean_per_role,
            },
            "per_user": self.per_user,
        })
    }

    /// The runtime part as JSON: `{"totals", "per_role"}` with cache hits,
    /// backend calls and latency.
    pub fn runtime_json(&self) -> Value {
        let mut t = Runtime::default();
        for r in self.runtime.values() {
            t.cache_hits += r.cache_hits;
            t.backend_calls += r.backend_calls;
            t.latency_ms_total += r.latency_ms_total;
            t.latency_ms_max = t.latency_ms_max.max(r.latency_ms_max);
        }
        json!({"totals": t, "per_role": self.runtime})
    }
}

fn mean_json(c: &Counters, n: u64) -> Value {
    let d = n.max(1) as f64;
    let r = |x: u64| ((x as f64 / d) * 1000.0).round() / 1000.0;
    let mut v = json!({
        "calls": r(c.calls),
        "prompt_tokens": r(c.prompt_tokens),
        "completion_tokens": r(c.completion_tokens),
        "tokens": r(c.prompt_tokens + c.completion_tokens),
    });
    if c.capped > 0 {
        v["capped"] = json!(r(c.capped));
    }
    if c.est_prompt_tokens + c.est_completion_tokens > 0 {
        v["runs"] = json!(r(c.runs));
        v["est_prompt_tokens"] = json!(r(c.est_prompt_tokens));
        v["est_completion_tokens"] = json!(r(c.est_completion_tokens));
        v["est_tokens"] = json!(r(c.est_prompt_tokens + c.est_completion_tokens));
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn per_user_means_and_stable_order() {
        let mut a = Accounting::default();
        let c = Counters {
            runs: 1,
            calls: 1,
            prompt_tokens: 100,
            completion_tokens: 10,
            ..Counters::default()
        };
        a.record("rank", Some("u2"), &c);
        a.record("rank", Some("u1"), &c);
        a.record("extract", Some("u1"), &c);
        a.record_cache_hit("rank");
        let j = a.to_json();
        assert_eq!(j["totals"]["calls"], 3);
        assert_eq!(j["per_user_mean"]["n_users"], 2);
        assert_eq!(j["per_user_mean"]["all_roles"]["calls"], 1.5);
        assert_eq!(j["per_user_mean"]["per_role"]["extract"]["tokens"], 55.0);
        assert_eq!(j["per_user"]["u1"]["rank"]["prompt_tokens"], 100);
        let text = serde_json::to_string(&j).unwrap();
        assert!(text.find("\"u1\"").unwrap() < text.find("\"u2\"").unwrap());
        assert!(!text.contains("cache_hits"));
        assert_eq!(a.runtime_json()["totals"]["cache_hits"], 1);
        assert!(!text.contains("est_"));
    }

    #[test]
    fn estimates_appear_only_when_recorded() {
        let mut a = Accounting::default();
        let c = Counters {
            runs: 2,
            offline_runs: 2,
            est_prompt_tokens: 300,
            est_completion_tokens: 20,
            ..Counters::default()
        };
        a.record("extract", Some("u1"), &c);
        let j = a.to_json();
        assert_eq!(j["totals"]["est_prompt_tokens"], 300);
        assert_eq!(
            j["per_user_mean"]["per_role"]["extract"]["est_tokens"],
            320.0
        );
        assert_eq!(j["per_user_mean"]["per_role"]["extract"]["runs"], 2.0);
        assert_eq!(j["per_user_mean"]["all_roles"]["calls"], 0.0);
        assert_eq!(approx_tokens("abcde"), 2);
        assert_eq!(approx_tokens(""), 0);
    }
}
