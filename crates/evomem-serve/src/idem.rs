//! `Idempotency-Key` on writes: a client that retries a write after a
//! timeout or a dropped connection, with the same key, gets the first
//! answer again instead of a second write.
//!
//! The first request with a key runs in a task of its own, so that it
//! finishes and records its answer even when the client (or the request
//! timeout) stops waiting. A retry that arrives while it runs is answered
//! 409 `in_progress` with `Retry-After`; one that arrives after gets the
//! recorded status and body. A key sent again with another method, path or
//! body is refused (422), so that a key cannot silently stand for two
//! different writes. Keys are scoped by tenant and remembered in memory
//! (not across a restart), each tenant's within its own bound in bytes
//! (`serve.idempotency_tenant_bytes`, oldest first out), so that one
//! tenant's keyed writes never evict another tenant's answers. An
//! answer that says "not now" is never recorded, so that a retry with the
//! same key runs the write then ([`is_final`]): a 5xx, and a 429 (the
//! rate limit, charged at the door and per entry inside the handler, which
//! runs behind this layer).
//!
//! **Across instances and restarts.** The answers live in this process,
//! but the fact that a keyed write was applied does not: its key and
//! request digest are stored with its ops, in the same transaction
//! ([`evomem_store::Commit::keys`]). A key this process does not know is
//! looked up in the tenant's store before the write runs; one found there
//! (another instance ran the write and died or was drained, or this one
//! restarted) is answered 410 `applied_before`, and the write is not run
//! again. Two instances running one key at once cannot both commit: the
//! second commit is refused whole and answered 503 `write_race`, and its
//! retry finds the key. How the key reaches the commit: this layer runs
//! the request in a task that carries it ([`task_key`]); the tenant's
//! blocking work takes it onto its thread ([`on_thread`]), and the add
//! pipeline carries it in each job.
//!
//! A recorded answer may hold memory text (an add's or an update's
//! memories, a recommendation's evidence and profile). Each answer is
//! tagged with the memories and users whose text it holds; a hard delete
//! or a user deletion purges the answers tagged with what it deleted
//! ([`Idempotency::purge`]), leaving a tombstone: a retry with such a key
//! is answered 410 `answer_purged`, and the write is not run a second time
//! (which would bring the deleted memory back). A request still running
//! when the purge happens is checked when it records its answer.

use crate::error::ApiError;
use crate::lock;
use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

tokio::task_local! {
    /// The key of the keyed write the current task runs.
    static WRITE_KEY: evomem_store::WriteKey;
}

thread_local! {
    /// The key of the keyed write the current blocking thread runs, until
    /// a commit has stored it ([`pending_key`], [`key_stored`]).
    static THREAD_KEY: std::cell::RefCell<Option<evomem_store::WriteKey>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` (a keyed write's request) in a task that carries `key`.
pub async fn with_task_key<F: std::future::Future>(key: evomem_store::WriteKey, f: F) -> F::Output {
    WRITE_KEY.scope(key, f).await
}

/// The key of the keyed write the current task runs, if any.
pub fn task_key() -> Option<evomem_store::WriteKey> {
    WRITE_KEY.try_with(Clone::clone).ok()
}

/// Run `f` on this thread with `key` as its pending write key, cleared
/// afterwards (the blocking pool reuses threads).
pub(crate) fn on_thread<T>(key: Option<evomem_store::WriteKey>, f: impl FnOnce() -> T) -> T {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            THREAD_KEY.with(|k| k.borrow_mut().take());
        }
    }
    THREAD_KEY.with(|k| *k.borrow_mut() = key);
    let _clear = Clear;
    f()
}

/// The write key this thread's next commit should store, if any.
pub(crate) fn pending_key() -> Option<evomem_store::WriteKey> {
    THREAD_KEY.with(|k| k.borrow().clone())
}

/// A commit stored this thread's pending key: later commits of the same
/// request (a loop's) carry none.
pub(crate) fn key_stored() {
    THREAD_KEY.with(|k| k.borrow_mut().take());
}

/// Bytes of remembered answers per tenant unless set
/// (`serve.idempotency_tenant_bytes`).
pub const TENANT_BYTES: usize = 4 << 20;

/// What an entry costs beyond its key and answer: the map's slot, the
/// tenant's name, the request digest and the bookkeeping.
const ENTRY_BYTES: usize = 160;

/// The header.
pub const HEADER: &str = "idempotency-key";

/// Purges remembered for requests still running (older ones count as
/// matching every running request of their tenant).
const PURGES_KEPT: usize = 1024;

enum Entry {
    Running {
        request: [u8; 32],
        /// Purges made before the request started (the purge counter).
        since: u64,
        /// The tenant's count of log rewrites by other instances when the
        /// request started ([`Idempotency::start`]).
        epoch: u64,
    },
    Done {
        request: [u8; 32],
        status: StatusCode,
        body: axum::body::Bytes,
        /// Whose text the answer holds: `mem:<id>`, `user:<id>`.
        tags: BTreeSet<String>,
        /// As in `Running`: an answer holding text is not replayed once
        /// another instance rewrote the tenant's log (a hard delete or a
        /// user deletion there, which this process cannot tag).
        epoch: u64,
    },
    /// The answer held text deleted since; only the request digest stays.
    Purged { request: [u8; 32] },
}

/// (tenant, key).
type Id = (String, String);

/// One tenant's remembered keys.
#[derive(Default)]
struct Remembered {
    /// Keys, oldest first.
    order: VecDeque<String>,
    /// What its entries cost ([`cost`]).
    bytes: usize,
}

/// What an entry costs, in bytes, against its tenant's bound.
fn cost(key: &str, e: &Entry) -> usize {
    ENTRY_BYTES
        + key.len()
        + match e {
            Entry::Done { body, tags, .. } => {
                body.len() + tags.iter().map(|t| t.len() + 32).sum::<usize>()
            }
            Entry::Running { .. } | Entry::Purged { .. } => 0,
        }
}

/// What the map holds, behind one lock.
#[derive(Default)]
struct Inner {
    map: HashMap<Id, Entry>,
    /// Per tenant: its keys and their cost.
    tenants: HashMap<String, Remembered>,
    /// Purges so far.
    purged: u64,
    /// The last [`PURGES_KEPT`] purges: (number, tenant, tag).
    purges: VecDeque<(u64, String, String)>,
}

impl Inner {
    /// Put `entry` in for `id` (a key not yet remembered goes last in its
    /// tenant's order) and account for it.
    fn put(&mut self, id: Id, entry: Entry) {
        let added = cost(&id.1, &entry);
        let old = self.map.insert(id.clone(), entry);
        let r = self.tenants.entry(id.0).or_default();
        match old {
            Some(o) => r.bytes = r.bytes.saturating_sub(cost(&id.1, &o)),
            None => r.order.push_back(id.1),
        }
        r.bytes += added;
    }

    /// Forget `id`.
    fn forget(&mut self, id: &Id) {
        if let Some(o) = self.map.remove(id) {
            if let Some(r) = self.tenants.get_mut(&id.0) {
                r.bytes = r.bytes.saturating_sub(cost(&id.1, &o));
                r.order.retain(|k| k != &id.1);
            }
        }
        if self.tenants.get(&id.0).is_some_and(|r| r.order.is_empty()) {
            self.tenants.remove(&id.0);
        }
    }

    /// Forget `tenant`'s oldest keys while its entries cost more than
    /// `limit`; `keep` (the key just recorded) stays whatever its size.
    fn evict(&mut self, tenant: &str, keep: &str, limit: usize) {
        let Some(r) = self.tenants.get_mut(tenant) else {
            return;
        };
        while r.bytes > limit && r.order.len() > 1 {
            let Some(k) = r.order.pop_front() else {
                break;
            };
            if k == keep {
                r.order.push_back(k);
                continue;
            }
            if let Some(o) = self.map.remove(&(tenant.to_string(), k.clone())) {
                r.bytes = r.bytes.saturating_sub(cost(&k, &o));
            }
        }
    }
}

/// Answers by (tenant, key), each tenant's within its bound in bytes.
pub struct Idempotency {
    map: Mutex<Inner>,
    /// Bytes of entries each tenant may keep ([`cost`]).
    tenant_bytes: usize,
}

impl Default for Idempotency {
    /// With [`TENANT_BYTES`] per tenant.
    fn default() -> Self {
        Self::new(TENANT_BYTES)
    }
}

/// What a hard delete or a user deletion removed, for [`Idempotency::purge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted<'a> {
    /// One memory, by id.
    Memory(&'a str),
    /// A user, by id.
    User(&'a str),
}

impl Deleted<'_> {
    fn tag(&self) -> String {
        match self {
            Deleted::Memory(id) => format!("mem:{id}"),
            Deleted::User(id) => format!("user:{id}"),
        }
    }
}

/// What to do with a request.
pub enum Start {
    /// First with this key: run it, then [`Idempotency::finish`].
    Run,
    /// Answered before: send this.
    Replay(Response),
}

impl Idempotency {
    /// Remember at most `tenant_bytes` of entries per tenant (at least the
    /// newest one).
    pub fn new(tenant_bytes: usize) -> Self {
        Self {
            map: Mutex::default(),
            tenant_bytes,
        }
    }

    /// What `tenant`'s remembered entries cost, in bytes.
    #[cfg(test)]
    pub fn bytes_of(&self, tenant: &str) -> usize {
        lock(&self.map).tenants.get(tenant).map_or(0, |r| r.bytes)
    }

    /// Whether an answer (or a running request) is remembered for `key`.
    pub fn knows(&self, tenant: &str, key: &str) -> bool {
        lock(&self.map)
            .map
            .contains_key(&(tenant.to_string(), key.to_string()))
    }

    /// Look `key` up for `tenant`; `request` is a digest of the method, path
    /// and body; `epoch` the tenant's count of log rewrites made by other
    /// instances (PostgreSQL), caught up first: a remembered answer that
    /// holds text and was recorded before a later one is not replayed
    /// (410 `answer_purged`), since the rewrite may have deleted that text.
    pub fn start(
        &self,
        tenant: &str,
        key: &str,
        request: [u8; 32],
        epoch: u64,
    ) -> Result<Start, ApiError> {
        let mut g = lock(&self.map);
        let id = (tenant.to_string(), key.to_string());
        let since = g.purged;
        match g.map.get(&id) {
            Some(Entry::Running { request: r, .. })
            | Some(Entry::Done { request: r, .. })
            | Some(Entry::Purged { request: r })
                if *r != request =>
            {
                Err(ApiError::field(
                    "Idempotency-Key",
                    "this key was used for another request (method, path or body differ)",
                ))
            }
            Some(Entry::Running { .. }) => Err(ApiError::InProgress),
            Some(Entry::Purged { .. }) => Err(ApiError::AnswerPurged),
            Some(Entry::Done {
                request: r,
                tags,
                epoch: at,
                ..
            }) if *at != epoch && !tags.is_empty() => {
                let r = *r;
                g.put(id, Entry::Purged { request: r });
                Err(ApiError::AnswerPurged)
            }
            Some(Entry::Done { status, body, .. }) => {
                let mut resp = (*status, body.clone()).into_response();
                resp.headers_mut().insert(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                );
                resp.headers_mut().insert(
                    "idempotent-replay",
                    axum::http::HeaderValue::from_static("true"),
                );
                Ok(Start::Replay(resp))
            }
            None => {
                g.put(
                    id,
                    Entry::Running {
                        request,
                        since,
                        epoch,
                    },
                );
                g.evict(tenant, key, self.tenant_bytes);
                Ok(Start::Run)
            }
        }
    }

    /// Record the answer of a request started with [`Start::Run`]; an
    /// answer that is not final ([`is_final`]: a 5xx or a 429) forgets the
    /// key instead, so that a retry runs again.
    /// `user` is the request's `user_id`, if it named one. An answer that
    /// holds text of something purged while the request ran is recorded as
    /// purged.
    pub fn finish(
        &self,
        tenant: &str,
        key: &str,
        request: [u8; 32],
        status: StatusCode,
        body: axum::body::Bytes,
        user: Option<&str>,
    ) {
        let tags = tags_of(&body, user);
        let mut g = lock(&self.map);
        let id = (tenant.to_string(), key.to_string());
        if !is_final(status) {
            g.forget(&id);
            return;
        }
        let (since, epoch) = match g.map.get(&id) {
            Some(Entry::Running { since, epoch, .. }) => (*since, *epoch),
            _ => (0, 0),
        };
        // Purges older than those kept may have matched: count them in.
        let purges = &g.purges;
        let forgotten = purges.front().is_some_and(|(n, _, _)| *n > since + 1);
        let hit = !tags.is_empty()
            && (forgotten
                || purges
                    .iter()
                    .any(|(n, t, tag)| *n > since && t == tenant && tags.contains(tag)));
        let entry = if hit {
            Entry::Purged { request }
        } else {
            Entry::Done {
                request,
                status,
                body,
                tags,
                epoch,
            }
        };
        // A key evicted while its request ran is remembered again (last).
        g.put(id, entry);
        g.evict(tenant, key, self.tenant_bytes);
    }

    /// Forget every remembered answer of `tenant` that holds text of what
    /// was deleted, keeping a tombstone (module docs). Returns how many.
    pub fn purge(&self, tenant: &str, deleted: &Deleted<'_>) -> usize {
        let tag = deleted.tag();
        let mut g = lock(&self.map);
        let Inner {
            map,
            tenants,
            purged,
            purges,
        } = &mut *g;
        let mut n = 0;
        for ((t, k), e) in map.iter_mut() {
            if t != tenant {
                continue;
            }
            let request = match e {
                Entry::Done { request, tags, .. } if tags.contains(&tag) => *request,
                _ => continue,
            };
            let before = cost(k, e);
            *e = Entry::Purged { request };
            if let Some(r) = tenants.get_mut(t) {
                r.bytes = r.bytes.saturating_sub(before) + cost(k, e);
            }
            n += 1;
        }
        *purged += 1;
        purges.push_back((*purged, tenant.to_string(), tag));
        while purges.len() > PURGES_KEPT {
            purges.pop_front();
        }
        n
    }
}

/// Whether an answer is the request's final one, to replay for a retry:
/// not a 5xx (the service failed or was overloaded), not a 429 (the
/// key's rate limit; a retry after `Retry-After` must get its write in)
/// and not a 403 (a tenant quota; a retry once room is made must too).
pub fn is_final(status: StatusCode) -> bool {
    !status.is_server_error()
        && status != StatusCode::TOO_MANY_REQUESTS
        && status != StatusCode::FORBIDDEN
}

/// Whose text an answer holds: every object with a `text` (or `profile`)
/// field gives `mem:<id>` for its `id` or `memory_id` and `user:<id>` for
/// its `user_id`; an answer holding any text is also tagged with the
/// request's user. Answers without text (deletions, counts) get no tags.
fn tags_of(body: &[u8], user: Option<&str>) -> BTreeSet<String> {
    fn walk(v: &Value, tags: &mut BTreeSet<String>) -> bool {
        match v {
            Value::Object(m) => {
                let texty = ["text", "profile"]
                    .iter()
                    .any(|k| m.get(*k).is_some_and(|t| !t.is_null()));
                if texty {
                    for (k, prefix) in [("id", "mem"), ("memory_id", "mem"), ("user_id", "user")] {
                        if let Some(Value::String(s)) = m.get(k) {
                            tags.insert(format!("{prefix}:{s}"));
                        }
                    }
                }
                let mut any = texty;
                for x in m.values() {
                    any |= walk(x, tags);
                }
                any
            }
            Value::Array(a) => a.iter().fold(false, |any, x| walk(x, tags) | any),
            _ => false,
        }
    }
    let mut tags = BTreeSet::new();
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return tags;
    };
    if walk(&v, &mut tags) {
        if let Some(u) = user {
            tags.insert(format!("user:{u}"));
        }
    }
    tags
}

/// The top-level `user_id` of a JSON request body, if any.
pub fn user_of(body: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(body).ok()?.get("user_id")? {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The key of a request, if it sent one; checked for length and characters.
pub fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(HEADER) else {
        return Ok(None);
    };
    let k = v
        .to_str()
        .ok()
        .filter(|k| (1..=128).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::field(
                "Idempotency-Key",
                "must be 1-128 printable ASCII characters",
            )
        })?;
    Ok(Some(k.to_string()))
}

/// Split a request into its parts and body bytes (at most `limit`), and the
/// digest that identifies it, and its `user_id` ([`user_of`]).
pub async fn digest(
    req: Request,
    limit: usize,
) -> Result<(Request, [u8; 32], Option<String>), ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::BodyTooLarge { limit })?;
    let mut h = Sha256::new();
    h.update(parts.method.as_str().as_bytes());
    h.update([0]);
    h.update(parts.uri.path().as_bytes());
    h.update([0]);
    h.update(parts.uri.query().unwrap_or("").as_bytes());
    h.update([0]);
    h.update(&bytes);
    let d: [u8; 32] = h.finalize().into();
    let user = user_of(&bytes);
    Ok((Request::from_parts(parts, Body::from(bytes)), d, user))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(i: &Idempotency, key: &str, body: &str, user: Option<&str>) {
        assert!(matches!(i.start("t", key, [1; 32], 0), Ok(Start::Run)));
        i.finish(
            "t",
            key,
            [1; 32],
            StatusCode::CREATED,
            body.as_bytes().to_vec().into(),
            user,
        );
    }

    fn replay(i: &Idempotency, key: &str) -> Result<(), ApiError> {
        i.start("t", key, [1; 32], 0).map(|_| ())
    }

    /// Record answer `body` for `key` of `tenant`.
    fn record(i: &Idempotency, tenant: &str, key: &str, body: &str) {
        assert!(matches!(i.start(tenant, key, [1; 32], 0), Ok(Start::Run)));
        i.finish(
            tenant,
            key,
            [1; 32],
            StatusCode::OK,
            body.to_string().into(),
            None,
        );
    }

    /// Issue 57: the remembered answers were one queue of 10,000 keys for
    /// the whole process, so a tenant sending 12,000 keyed writes evicted
    /// every other tenant's answers (whose retries then wrote again). A
    /// tenant's keys now evict only that tenant's answers.
    #[test]
    fn one_tenants_keyed_writes_do_not_evict_another_tenants_answers() {
        let i = Idempotency::default();
        record(&i, "quiet", "k", r#"{"ops":1}"#);
        for n in 0..12_000 {
            record(&i, "busy", &format!("k{n}"), r#"{"ops":1}"#);
        }
        assert!(
            matches!(i.start("quiet", "k", [1; 32], 0), Ok(Start::Replay(_))),
            "another tenant's keys evicted this tenant's answer"
        );
    }

    /// Issue 57: a tenant's remembered answers are bounded in bytes, not
    /// in keys: its oldest go first once the bound is passed, and the
    /// newest answer stays even when it alone is larger.
    #[test]
    fn a_tenants_answers_are_bounded_in_bytes() {
        let i = Idempotency::new(64 << 10);
        let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1000));
        for n in 0..200 {
            record(&i, "t", &format!("k{n}"), &big);
        }
        assert!(i.bytes_of("t") <= 64 << 10, "{}", i.bytes_of("t"));
        assert!(i.bytes_of("t") > 32 << 10, "{}", i.bytes_of("t"));
        assert!(matches!(i.start("t", "k0", [1; 32], 0), Ok(Start::Run)));
        assert!(matches!(
            i.start("t", "k199", [1; 32], 0),
            Ok(Start::Replay(_))
        ));
        let huge = format!(r#"{{"pad":"{}"}}"#, "x".repeat(100 << 10));
        record(&i, "t", "huge", &huge);
        assert!(matches!(
            i.start("t", "huge", [1; 32], 0),
            Ok(Start::Replay(_))
        ));
    }

    /// Issue 57: a 429 (the per-entry rate limit, charged inside the
    /// handler) was recorded as the key's answer, so a client retrying
    /// with the same key after `Retry-After` got the 429 again, forever.
    /// Neither a 429 nor a 503 is remembered; a 4xx that is final is.
    #[test]
    fn a_rate_limited_or_overloaded_answer_is_not_remembered() {
        let i = Idempotency::default();
        for (key, status) in [
            ("limited", StatusCode::TOO_MANY_REQUESTS),
            ("overloaded", StatusCode::SERVICE_UNAVAILABLE),
            ("over-quota", StatusCode::FORBIDDEN),
        ] {
            assert!(matches!(i.start("t", key, [1; 32], 0), Ok(Start::Run)));
            i.finish("t", key, [1; 32], status, "{}".into(), None);
            assert!(
                matches!(i.start("t", key, [1; 32], 0), Ok(Start::Run)),
                "a {status} answer was replayed for a retry"
            );
            assert!(!is_final(status));
        }
        assert!(matches!(i.start("t", "bad", [1; 32], 0), Ok(Start::Run)));
        i.finish(
            "t",
            "bad",
            [1; 32],
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}".into(),
            None,
        );
        assert!(matches!(
            i.start("t", "bad", [1; 32], 0),
            Ok(Start::Replay(_))
        ));
    }

    #[test]
    fn answers_are_tagged_with_whose_text_they_hold() {
        let add = r#"{"memories":[{"id":"m1","user_id":"u","text":"x"}]}"#;
        let t = tags_of(add.as_bytes(), Some("u"));
        assert_eq!(t, BTreeSet::from(["mem:m1".into(), "user:u".into()]));
        let rec = r#"{"decision_id":1,"profile":null,"evidence":[{"memory_id":"m2","text":"y"}]}"#;
        let t = tags_of(rec.as_bytes(), Some("v"));
        assert_eq!(t, BTreeSet::from(["mem:m2".into(), "user:v".into()]));
        let del = r#"{"id":"m1","deleted":true,"hard":true,"verified":[]}"#;
        assert!(tags_of(del.as_bytes(), Some("u")).is_empty());
    }

    /// Issue 37: a hard delete or a user deletion must not leave the
    /// deleted text in a remembered answer, and a retry must not write
    /// again.
    #[test]
    fn a_purge_replaces_answers_holding_deleted_text_by_tombstones() {
        let i = Idempotency::default();
        done(
            &i,
            "k1",
            r#"{"memories":[{"id":"m1","user_id":"u","text":"secret"}]}"#,
            Some("u"),
        );
        done(
            &i,
            "k2",
            r#"{"memories":[{"id":"m2","user_id":"u","text":"other"}]}"#,
            Some("u"),
        );
        done(
            &i,
            "k3",
            r#"{"memories":[{"id":"m3","user_id":"w","text":"kept"}]}"#,
            Some("w"),
        );
        assert_eq!(i.purge("t", &Deleted::Memory("m1")), 1);
        assert!(matches!(replay(&i, "k1"), Err(ApiError::AnswerPurged)));
        assert!(
            matches!(replay(&i, "k2"), Ok(())),
            "another memory's answer stays"
        );
        assert_eq!(i.purge("other-tenant", &Deleted::User("u")), 0);
        assert!(matches!(replay(&i, "k2"), Ok(())), "purges are per tenant");
        assert_eq!(i.purge("t", &Deleted::User("u")), 1);
        assert!(matches!(replay(&i, "k2"), Err(ApiError::AnswerPurged)));
        assert!(
            matches!(replay(&i, "k3"), Ok(())),
            "another user's answer stays"
        );
        // A request running across the purge records a tombstone.
        assert!(matches!(i.start("t", "k4", [1; 32], 0), Ok(Start::Run)));
        i.purge("t", &Deleted::Memory("m4"));
        i.finish(
            "t",
            "k4",
            [1; 32],
            StatusCode::CREATED,
            r#"{"memories":[{"id":"m4","user_id":"z","text":"late"}]}"#
                .as_bytes()
                .to_vec()
                .into(),
            Some("z"),
        );
        assert!(matches!(replay(&i, "k4"), Err(ApiError::AnswerPurged)));
    }

    /// Issue 37, several instances on one PostgreSQL: a hard delete or a
    /// user deletion made by another instance cannot purge this process's
    /// answers by tag; its log rewrite moves the tenant's epoch instead,
    /// and a remembered answer holding text from before is then not
    /// replayed. Answers without text still are.
    #[test]
    fn a_rewrite_by_another_instance_stops_replays_of_answers_with_text() {
        let i = Idempotency::default();
        done(
            &i,
            "k1",
            r#"{"memories":[{"id":"m1","text":"secret"}]}"#,
            Some("u"),
        );
        done(&i, "k2", r#"{"deleted":true}"#, None);
        assert!(matches!(
            i.start("t", "k1", [1; 32], 0),
            Ok(Start::Replay(_))
        ));
        assert!(matches!(
            i.start("t", "k1", [1; 32], 1),
            Err(ApiError::AnswerPurged)
        ));
        // The tombstone stays, whatever the epoch.
        assert!(matches!(
            i.start("t", "k1", [1; 32], 0),
            Err(ApiError::AnswerPurged)
        ));
        assert!(matches!(
            i.start("t", "k2", [1; 32], 1),
            Ok(Start::Replay(_))
        ));
        assert!(i.knows("t", "k1") && !i.knows("t", "k3"));
    }
}
