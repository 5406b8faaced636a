//! The open tenants: a tenant is opened on its first request and closed
//! when the registry is over its budget and the tenant is idle, least
//! recently used first (issue 60).
//!
//! Owns the table of open tenants (each with its leases and the time of
//! its last use), the per-tenant open gates that make concurrent first
//! requests wait for one open, the budget (`serve.max_open_tenants`,
//! `serve.max_resident_bytes`; 0: no limit) and the closer thread.
//!
//! A request holds a [`Lease`] on its tenant from the door (`api::auth`)
//! until its handler ends; a tenant with a lease, a write waiting for its
//! writer or work on the blocking pool ([`Tenant::is_busy`]) is never
//! closed. When every open tenant is busy the budget is exceeded for the
//! while, and that is counted (`evomem_tenant_over_budget_total`), not an
//! error. Closing calls [`Tenant::close`] (its writer commits what it
//! holds) and drops the registry's reference, on a blocking thread (the
//! closer thread, or the opening request's blocking task): a PostgreSQL
//! client owns a runtime, which must not be dropped on an async thread.
//!
//! Locks: the table (`Inner::table`, a std mutex) is held only for
//! bookkeeping, never while a tenant opens or closes; a tenant's open gate
//! (a tokio mutex, awaited without a thread by requests, taken blocking
//! by the closer and the re-embed job) is held for the whole open or
//! close of that tenant, and taken only without the table lock (the
//! closer takes it with `try_lock` under the table lock, which never
//! waits). No tenant lock is taken here.

use crate::error::ApiError;
use crate::lock;
use crate::tenant::{Shared, Tenant};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// A tenant's open gate: held for the whole open or close of that tenant.
type Gate = Arc<tokio::sync::Mutex<()>>;

/// The open tenants and their budget (module docs).
pub(crate) struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    table: Mutex<Table>,
    /// Wakes the closer thread ([`Registry::start_closer`]).
    wake: Condvar,
}

/// An open tenant in the table.
struct Slot {
    tenant: Arc<Tenant>,
    /// Leases held.
    leases: usize,
    /// The table's clock at its last lease taken or given back.
    last_use: u64,
}

#[derive(Default)]
struct Table {
    open: HashMap<String, Slot>,
    /// One gate per tenant ever opened: held while it opens or closes.
    gates: HashMap<String, Gate>,
    /// Counts leases taken and given back: the LRU order.
    clock: u64,
    /// Set by [`Registry::close_all`]: nothing opens any more.
    stopped: bool,
    /// The closer thread has work (a lease given back over budget).
    wanted: bool,
    /// The last eviction pass ended over budget (counted once until a
    /// pass ends within it again).
    over: bool,
}

impl Table {
    /// A lease on `name` when it is open.
    fn lease(&mut self, name: &str, inner: &Arc<Inner>) -> Option<Lease> {
        self.clock += 1;
        let clock = self.clock;
        let slot = self.open.get_mut(name)?;
        slot.leases += 1;
        slot.last_use = clock;
        Some(Lease {
            tenant: slot.tenant.clone(),
            registry: Some(Arc::downgrade(inner)),
        })
    }

    fn gate(&mut self, name: &str) -> Gate {
        self.gates.entry(name.to_string()).or_default().clone()
    }
}

/// A request's hold on an open tenant: while one is held the tenant is
/// not closed. Given back on drop (which also marks the tenant's last use).
pub(crate) struct Lease {
    tenant: Arc<Tenant>,
    /// `None` for a tenant held outside any registry (`serve reembed` run
    /// by the command itself).
    registry: Option<Weak<Inner>>,
}

impl Lease {
    /// A lease on a tenant no registry holds (it is never closed by one).
    pub(crate) fn detached(tenant: Arc<Tenant>) -> Self {
        Self {
            tenant,
            registry: None,
        }
    }

    /// The tenant.
    pub(crate) fn tenant(&self) -> &Arc<Tenant> {
        &self.tenant
    }
}

impl std::ops::Deref for Lease {
    type Target = Tenant;
    fn deref(&self) -> &Tenant {
        &self.tenant
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(inner) = self.registry.take().and_then(|w| w.upgrade()) else {
            return;
        };
        let mut t = lock(&inner.table);
        t.clock += 1;
        let clock = t.clock;
        if let Some(slot) = t.open.get_mut(self.tenant.name()) {
            if Arc::ptr_eq(&slot.tenant, &self.tenant) {
                slot.leases = slot.leases.saturating_sub(1);
                slot.last_use = clock;
            }
        }
        // Over budget because every tenant was busy: the closer looks
        // again now that this one may be idle.
        if inner.over_budget(&t) {
            t.wanted = true;
            inner.wake.notify_one();
        }
    }
}

/// What [`Registry::stats`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Tenants open.
    pub open: usize,
    /// Their resident bytes ([`Tenant::resident_bytes`]), all together.
    pub resident_bytes: u64,
}

impl Inner {
    fn over_budget(&self, t: &Table) -> bool {
        self.exceeds(t.open.len(), resident(t))
    }

    /// Whether `open` tenants holding `bytes` are past either bound (0:
    /// none).
    fn exceeds(&self, open: usize, bytes: u64) -> bool {
        let cfg = &self.shared.config;
        (cfg.max_open_tenants > 0 && open > cfg.max_open_tenants)
            || (cfg.max_resident_bytes > 0 && bytes > cfg.max_resident_bytes)
    }
}

fn resident(t: &Table) -> u64 {
    t.open.values().map(|s| s.tenant.resident_bytes()).sum()
}

/// The answer to a request whose tenant could not be opened: 503
/// `tenant_unavailable` with `Retry-After` when its store did not answer
/// (a database down or out of connections, a file busy: a retry may find
/// it back), 500 when the store is damaged or the service misconfigured.
fn open_failure(name: &str, e: crate::ServeError) -> ApiError {
    match e {
        crate::ServeError::Store { source, .. } if source.is_transient() => {
            ApiError::TenantUnavailable { retry_after_s: 1 }
        }
        e => ApiError::Internal(format!("tenant `{name}` could not be opened: {e}")),
    }
}

impl Registry {
    /// An empty registry over `shared` (its settings, metrics and what
    /// tenants open with).
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared,
                table: Mutex::default(),
                wake: Condvar::new(),
            }),
        }
    }

    /// Start the closer thread: it closes idle tenants when a lease given
    /// back finds the registry over budget, and ends with the registry or
    /// at [`Registry::close_all`].
    pub(crate) fn start_closer(&self) -> std::io::Result<()> {
        let weak = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name("evomem-registry".into())
            .spawn(move || loop {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                {
                    let t = lock(&inner.table);
                    let (mut t, _) =
                        match inner
                            .wake
                            .wait_timeout_while(t, Duration::from_secs(1), |t| {
                                !t.wanted && !t.stopped
                            }) {
                            Ok(r) => r,
                            Err(p) => p.into_inner(),
                        };
                    if t.stopped {
                        return;
                    }
                    if !t.wanted {
                        continue;
                    }
                    t.wanted = false;
                }
                Registry { inner }.evict(0);
            })?;
        Ok(())
    }

    /// The open tenant `name` leased, opening it first when it is closed
    /// (on the blocking pool; concurrent first requests wait for one
    /// open), after closing idle tenants to make room for it.
    pub(crate) async fn acquire(&self, name: &str) -> Result<Lease, ApiError> {
        let gate = match self.leased_or_gate(name)? {
            Ok(lease) => return Ok(lease),
            Err(gate) => gate,
        };
        let guard = gate.lock_owned().await;
        let me = Registry {
            inner: self.inner.clone(),
        };
        let name = name.to_string();
        tokio::task::spawn_blocking(move || me.open_under_gate(&name, guard))
            .await
            .map_err(|e| ApiError::Internal(format!("opening a tenant: {e}")))?
    }

    /// [`Registry::acquire`] for a thread outside the async runtime (the
    /// re-embed job).
    pub(crate) fn acquire_blocking(&self, name: &str) -> Result<Lease, ApiError> {
        let gate = match self.leased_or_gate(name)? {
            Ok(lease) => return Ok(lease),
            Err(gate) => gate,
        };
        let guard = gate.blocking_lock_owned();
        self.open_under_gate(name, guard)
    }

    /// Both acquires' first step, under the table lock alone: `name` leased
    /// when it is open, else its open gate to wait on; refused once the
    /// registry stopped.
    fn leased_or_gate(&self, name: &str) -> Result<Result<Lease, Gate>, ApiError> {
        let mut t = lock(&self.inner.table);
        if t.stopped {
            return Err(ApiError::ShuttingDown);
        }
        Ok(match t.lease(name, &self.inner) {
            Some(lease) => Ok(lease),
            None => Err(t.gate(name)),
        })
    }

    /// With `name`'s gate held: lease it if another caller opened it
    /// meanwhile; else close idle tenants to make room for one more,
    /// open it, put it in the table leased, and close idle tenants again
    /// if its bytes took the registry over budget. Blocking.
    fn open_under_gate(
        &self,
        name: &str,
        guard: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<Lease, ApiError> {
        {
            let mut t = lock(&self.inner.table);
            if t.stopped {
                return Err(ApiError::ShuttingDown);
            }
            if let Some(l) = t.lease(name, &self.inner) {
                return Ok(l);
            }
        }
        self.evict(1);
        let metrics = &self.inner.shared.metrics;
        let started = Instant::now();
        let tenant = Tenant::open(name, self.inner.shared.clone()).map_err(|e| {
            tracing::error!("tenant {name}: opening failed: {e}");
            metrics.tenant_open_failures.fetch_add(1, Ordering::Relaxed);
            open_failure(name, e)
        })?;
        let took = started.elapsed();
        metrics.tenant_opens.fetch_add(1, Ordering::Relaxed);
        metrics
            .tenant_open_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        tracing::info!(
            "tenant {name}: opened ({} memories, {} ms)",
            tenant.index_len(),
            took.as_millis()
        );
        let lease = {
            let mut t = lock(&self.inner.table);
            if t.stopped {
                drop(t);
                tenant.close();
                return Err(ApiError::ShuttingDown);
            }
            t.clock += 1;
            let last_use = t.clock;
            t.open.insert(
                name.to_string(),
                Slot {
                    tenant: tenant.clone(),
                    leases: 1,
                    last_use,
                },
            );
            Lease {
                tenant,
                registry: Some(Arc::downgrade(&self.inner)),
            }
        };
        drop(guard);
        self.evict(0);
        Ok(lease)
    }

    /// Close idle tenants, least recently used first, until the registry
    /// is within its budget with room for `room` more tenants; closes
    /// nothing busy ([`Tenant::is_busy`], a lease held, its gate held). If
    /// it cannot get within the budget, counts one over-budget event (until
    /// a pass gets within it again). Blocking: closes on this thread.
    pub(crate) fn evict(&self, room: usize) -> usize {
        let mut closing = Vec::new();
        {
            let mut t = lock(&self.inner.table);
            if t.stopped {
                return 0;
            }
            let mut bytes = resident(&t);
            loop {
                if !self.inner.exceeds(t.open.len() + room, bytes) {
                    t.over = false;
                    break;
                }
                let victim = t
                    .open
                    .iter()
                    .filter(|(_, s)| s.leases == 0 && !s.tenant.is_busy())
                    .filter_map(|(n, s)| {
                        let gate = t.gates.get(n)?.clone().try_lock_owned().ok()?;
                        Some((s.last_use, n.clone(), gate))
                    })
                    .min_by_key(|(last, _, _)| *last);
                let Some((_, name, gate)) = victim else {
                    if !t.over {
                        t.over = true;
                        self.inner
                            .shared
                            .metrics
                            .tenant_over_budget
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            "over the open-tenant budget ({} open, {bytes} resident bytes): every open tenant is busy",
                            t.open.len()
                        );
                    }
                    break;
                };
                if let Some(slot) = t.open.remove(&name) {
                    bytes = bytes.saturating_sub(slot.tenant.resident_bytes());
                    closing.push((slot.tenant, gate));
                }
            }
        }
        let n = closing.len();
        for (tenant, gate) in closing {
            tenant.close();
            self.inner
                .shared
                .metrics
                .tenant_closes
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!("tenant {}: closed (idle, over budget)", tenant.name());
            drop(tenant);
            drop(gate);
        }
        n
    }

    /// The open tenants, by name (for `/metrics`: per-tenant series are
    /// written for these only).
    pub(crate) fn open_tenants(&self) -> Vec<(String, Arc<Tenant>)> {
        let t = lock(&self.inner.table);
        let mut v: Vec<_> = t
            .open
            .iter()
            .map(|(n, s)| (n.clone(), s.tenant.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// How many are open and what they hold.
    pub(crate) fn stats(&self) -> Stats {
        let t = lock(&self.inner.table);
        Stats {
            open: t.open.len(),
            resident_bytes: resident(&t),
        }
    }

    /// Stop opening tenants and close every open one (leased or not: the
    /// service drained its requests first), each writer after it committed
    /// what it holds. Blocking: call it off the async runtime.
    pub(crate) fn close_all(&self) {
        let open: Vec<Arc<Tenant>> = {
            let mut t = lock(&self.inner.table);
            t.stopped = true;
            self.inner.wake.notify_all();
            t.open.drain().map(|(_, s)| s.tenant).collect()
        };
        for tenant in open {
            tenant.close();
            self.inner
                .shared
                .metrics
                .tenant_closes
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::config::ServeConfig;
    use crate::types::NewMemory;

    fn registry(dir: &std::path::Path, max_open: usize, max_bytes: u64) -> Registry {
        registry_with(
            dir,
            max_open,
            max_bytes,
            Arc::new(evomem_embed::HashingEmbedder::new(32)),
        )
    }

    fn registry_with(
        dir: &std::path::Path,
        max_open: usize,
        max_bytes: u64,
        embedder: Arc<dyn evomem_core::Embedder>,
    ) -> Registry {
        let config = ServeConfig {
            data_dir: dir.to_path_buf(),
            max_open_tenants: max_open,
            max_resident_bytes: max_bytes,
            ..ServeConfig::default()
        };
        Registry::new(Arc::new(Shared::for_test(config, embedder)))
    }

    /// The hashing embedder, except that a pass over a text holding
    /// `HOLD` waits until the gate opens: an add stays pending in the
    /// tenant's writer as long as a test needs.
    struct Held {
        inner: evomem_embed::HashingEmbedder,
        open: Mutex<bool>,
        cv: Condvar,
    }

    impl Held {
        fn open(&self) {
            *lock(&self.open) = true;
            self.cv.notify_all();
        }
    }

    impl evomem_core::Embedder for Held {
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn dim(&self) -> usize {
            self.inner.dim()
        }
        fn embed(&self, t: &[&str]) -> Result<Vec<Vec<f32>>, evomem_core::EmbedError> {
            if t.iter().any(|s| s.contains("HOLD")) {
                let mut g = lock(&self.open);
                while !*g {
                    g = self.cv.wait(g).unwrap();
                }
            }
            self.inner.embed(t)
        }
    }

    fn open_names(r: &Registry) -> Vec<String> {
        r.open_tenants().into_iter().map(|(n, _)| n).collect()
    }

    fn memory(text: &str) -> NewMemory {
        NewMemory {
            text: text.to_string(),
            metadata: Default::default(),
        }
    }

    /// Past `max_open_tenants` the least recently used idle tenant is
    /// closed, not the oldest opened: `a` used again after `b` stays.
    #[test]
    fn the_least_recently_used_idle_tenant_is_closed_first() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), 2, 0);
        drop(r.acquire_blocking("a").unwrap());
        drop(r.acquire_blocking("b").unwrap());
        drop(r.acquire_blocking("a").unwrap());
        drop(r.acquire_blocking("c").unwrap());
        assert_eq!(open_names(&r), ["a", "c"]);
        drop(r.acquire_blocking("d").unwrap());
        assert_eq!(open_names(&r), ["c", "d"]);
        let m = &r.inner.shared.metrics;
        assert_eq!(m.tenant_opens.load(Ordering::SeqCst), 4);
        assert_eq!(m.tenant_closes.load(Ordering::SeqCst), 2);
        assert_eq!(m.tenant_over_budget.load(Ordering::SeqCst), 0);
        r.close_all();
    }

    /// A tenant with a lease held (a request in flight) is never closed,
    /// even over budget: the budget is exceeded, counted once, and the
    /// tenant closes once the lease is given back and the closer runs.
    #[test]
    fn a_leased_tenant_is_never_closed_even_over_budget() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), 1, 0);
        let a = r.acquire_blocking("a").unwrap();
        let b = r.acquire_blocking("b").unwrap();
        assert_eq!(open_names(&r), ["a", "b"]);
        let m = &r.inner.shared.metrics;
        assert_eq!(m.tenant_over_budget.load(Ordering::SeqCst), 1);
        assert_eq!(r.evict(0), 0, "both are leased");
        assert_eq!(
            m.tenant_over_budget.load(Ordering::SeqCst),
            1,
            "counted once"
        );
        drop(a);
        assert_eq!(r.evict(0), 1);
        assert_eq!(open_names(&r), ["b"]);
        drop(b);
        r.close_all();
    }

    /// A tenant whose writer holds memories not yet committed is never
    /// closed, even with no lease: its close waits for nothing it would
    /// lose, and the commit lands.
    #[test]
    fn a_tenant_with_a_write_pending_is_never_closed() {
        let dir = tempfile::tempdir().unwrap();
        let held = Arc::new(Held {
            inner: evomem_embed::HashingEmbedder::new(32),
            open: Mutex::new(false),
            cv: Condvar::new(),
        });
        let r = Arc::new(registry_with(dir.path(), 1, 0, held.clone()));
        let a = r.acquire_blocking("a").unwrap();
        // The add's embedding waits at the gate: its memory stays queued
        // for the writer, with no lease held.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let t = a.tenant().clone();
        drop(a);
        let add = rt.spawn(async move { t.add("u".into(), vec![memory("HOLD this")]).await });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !r.open_tenants()[0].1.is_busy() {
            assert!(Instant::now() < deadline, "the add never queued");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Opening b past the bound must not close a: a close would wait
        // for the held write (so the open would hang) and then lose
        // nothing, but it would be closed all the same.
        let opening_b = {
            let r = r.clone();
            std::thread::spawn(move || drop(r.acquire_blocking("b").unwrap()))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !opening_b.is_finished() {
            if Instant::now() > deadline {
                held.open();
                opening_b.join().unwrap();
                panic!("opening b waited for a's close: a was closed with a write pending");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        opening_b.join().unwrap();
        assert_eq!(open_names(&r), ["a", "b"], "a closed with a write pending");
        held.open();
        let added = rt.block_on(add).unwrap().unwrap();
        assert_eq!(added.len(), 1);
        assert_eq!(r.evict(0), 1);
        assert_eq!(open_names(&r), ["b"]);
        drop(r.acquire_blocking("a").unwrap());
        let a = r.acquire_blocking("a").unwrap();
        assert_eq!(a.index_len(), 1, "the pending write was committed");
        drop(a);
        r.close_all();
    }

    /// Under `max_resident_bytes`, opening a large tenant closes as many
    /// idle ones as it takes, least recently used first.
    #[test]
    fn the_bytes_budget_closes_enough_idle_tenants() {
        let dir = tempfile::tempdir().unwrap();
        // Fill four tenants with no budget; measure them.
        let r = registry(dir.path(), 0, 0);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut each = 0;
        for name in ["a", "b", "c", "big"] {
            let l = r.acquire_blocking(name).unwrap();
            let n = if name == "big" { 60 } else { 20 };
            let mems = (0..n)
                .map(|i| memory(&format!("{name} note {i}")))
                .collect();
            rt.block_on(l.add("u".into(), mems)).unwrap();
            if name == "a" {
                each = l.resident_bytes();
            }
        }
        let big = r
            .open_tenants()
            .into_iter()
            .find(|(n, _)| n == "big")
            .unwrap()
            .1
            .resident_bytes();
        assert!(big > 2 * each, "{big} vs {each}");
        r.close_all();
        // A budget that holds a, b and c, but not c and big together
        // with a or b.
        let r = registry(dir.path(), 0, 3 * each + each / 2);
        for name in ["a", "b", "c"] {
            drop(r.acquire_blocking(name).unwrap());
        }
        assert_eq!(open_names(&r), ["a", "b", "c"]);
        drop(r.acquire_blocking("big").unwrap());
        let open = open_names(&r);
        assert!(
            !open.contains(&"a".to_string()) && open.contains(&"big".to_string()),
            "{open:?}"
        );
        assert!(
            r.stats().resident_bytes <= 3 * each + each / 2,
            "{:?}",
            r.stats()
        );
        r.close_all();
    }

    /// Concurrent first requests to one closed tenant open it once and
    /// share it.
    #[test]
    fn concurrent_first_requests_open_a_tenant_once() {
        let dir = tempfile::tempdir().unwrap();
        let r = Arc::new(registry(dir.path(), 0, 0));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        let leases = rt.block_on(async {
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let r = r.clone();
                    tokio::spawn(async move { r.acquire("a").await.unwrap() })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        assert_eq!(
            r.inner.shared.metrics.tenant_opens.load(Ordering::SeqCst),
            1
        );
        assert!(leases
            .windows(2)
            .all(|w| Arc::ptr_eq(w[0].tenant(), w[1].tenant())));
        drop(leases);
        rt.block_on(async { tokio::task::spawn_blocking(move || r.close_all()).await })
            .unwrap();
    }

    /// A tenant closed by the budget and opened again answers the same
    /// searches (ids and scores) as before it closed.
    #[test]
    fn a_reopened_tenant_answers_the_same_searches() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), 1, 0);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let texts = [
            "likes quiet jazz in the evening",
            "allergic to peanuts",
            "runs every morning before work",
            "prefers trains to planes",
            "reads science fiction",
        ];
        let search = |l: &Lease| {
            let emb = l.embedder();
            ["jazz music", "food allergy", "travel"]
                .iter()
                .map(|q| {
                    let v = emb.embed(&[q]).unwrap().remove(0);
                    l.search("u", &v, 3, &Default::default())
                        .unwrap()
                        .into_iter()
                        .map(|h| (h.memory.id, h.score))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        let a = r.acquire_blocking("a").unwrap();
        rt.block_on(a.add("u".into(), texts.iter().map(|t| memory(t)).collect()))
            .unwrap();
        let before = search(&a);
        let first = Arc::downgrade(a.tenant());
        drop(a);
        drop(r.acquire_blocking("b").unwrap());
        assert_eq!(open_names(&r), ["b"]);
        assert!(
            first.upgrade().is_none(),
            "the closed tenant was not dropped"
        );
        let a = r.acquire_blocking("a").unwrap();
        assert_eq!(search(&a), before);
        drop(a);
        r.close_all();
    }
}
