//! `evomem serve reembed`: move a data folder to another embedder, tenant
//! by tenant, while the service keeps serving.
//!
//! Each tenant is staged and swapped on its own (`tenant/reembed.rs`):
//! its old vectors answer searches until its new index is complete, then
//! one swap. When every tenant has moved, each is verified as
//! `serve check` does, and the folder's manifest (`embedder.json`,
//! [`crate::embedders`]) names the new embedder, so a restart uses it.
//!
//! Who runs it. A running service holds a shared lock on
//! `<data>/reembed/serve.lock`. `serve reembed` takes that lock
//! exclusively when it can: no service runs on the folder, and the command
//! opens the tenants and runs the job itself (a service started meanwhile
//! refuses to start, naming the lock). When a service holds the lock, the
//! command writes a request (`<data>/reembed/request.json`); the service,
//! which looks for one every second, runs the job on a thread of its own
//! and writes its progress to `<data>/reembed/status.json`, which the
//! command follows and prints. Either way the job resumes from the stage
//! files after a kill, and a tenant already on the target is skipped.
//!
//! On PostgreSQL with several instances, one instance runs the job; the
//! others find the rewritten log when they catch up and refuse its
//! vectors (their embedder is the old one) until restarted: restart them
//! after the job (docs/service.md).

use crate::embedders::{write_manifest, Manifest};
use crate::error::ServeError;
use crate::registry::Lease;
use crate::tenant::{Tenant, TenantReembed};
use evomem_core::Embedder;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Texts embedded per batch by default.
pub const DEFAULT_BATCH: usize = 256;

/// How often a service looks for a request.
pub const POLL: Duration = Duration::from_secs(1);

/// The folder of the job's files in `data_dir`.
pub fn job_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("reembed")
}

fn request_path(data_dir: &Path) -> PathBuf {
    job_dir(data_dir).join("request.json")
}

/// Where a running job writes its progress.
pub fn status_path(data_dir: &Path) -> PathBuf {
    job_dir(data_dir).join("status.json")
}

fn stage_path(data_dir: &Path, tenant: &str, embedder: &str) -> PathBuf {
    job_dir(data_dir).join(format!("{tenant}.{embedder}.stage"))
}

/// A request to a running service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The target embedder's name.
    pub embedder: String,
    /// Texts per batch.
    pub batch: usize,
    /// An id the status repeats, to tell this request's status from an
    /// earlier one's.
    pub id: String,
}

/// A job's state, as `status.json` holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The request's id (empty for a job the command runs itself).
    pub id: String,
    /// `running`, `done` or `failed`.
    pub state: String,
    /// The target embedder's name.
    pub embedder: String,
    /// Per tenant: texts staged and texts to stage.
    pub progress: Vec<(String, usize, usize)>,
    /// What each finished tenant's re-embed did.
    pub tenants: Vec<TenantReembed>,
    /// Per tenant, the memories `serve check`'s verification found.
    pub checked: Vec<(String, usize)>,
    /// Why it failed.
    pub error: Option<String>,
    /// Seconds from the start.
    pub elapsed_s: f64,
}

/// The lock a running service holds on its data folder (shared, so that
/// instances on PostgreSQL sharing a folder can all hold it).
pub fn serving_lock(data_dir: &Path) -> Result<File, ServeError> {
    let f = lock_file(data_dir)?;
    match f.try_lock_shared() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(ServeError::Config(format!(
            "{}: `evomem serve reembed` is moving this data folder to another embedder; start the service when it has finished",
            lock_path(data_dir).display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// The folder's lock taken exclusively, when no service holds it.
pub fn offline_lock(data_dir: &Path) -> Result<Option<File>, ServeError> {
    let f = lock_file(data_dir)?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

fn lock_path(data_dir: &Path) -> PathBuf {
    job_dir(data_dir).join("serve.lock")
}

fn lock_file(data_dir: &Path) -> Result<File, ServeError> {
    std::fs::create_dir_all(job_dir(data_dir))?;
    Ok(std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(data_dir))?)
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), ServeError> {
    let text = serde_json::to_vec_pretty(v).map_err(|e| ServeError::Config(format!("{e}")))?;
    crate::private_file::write_atomically(path, &text)?;
    Ok(())
}

/// Ask the service running on `data_dir` to run the job.
pub fn request(data_dir: &Path, r: &Request) -> Result<(), ServeError> {
    std::fs::create_dir_all(job_dir(data_dir))?;
    write_json(&request_path(data_dir), r)
}

/// The job's status file, when there is one that parses.
pub fn read_status(data_dir: &Path) -> Option<Status> {
    let text = std::fs::read(status_path(data_dir)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The environment variable that names the point [`test_point`] kills the
/// process at (feature `test-utils` only).
pub const KILL_AT: &str = "EVOMEM_TEST_KILL_AT";

/// What a test runs at each [`test_point`]: `(tenant, point)`.
#[cfg(feature = "test-utils")]
pub type TestHook = Arc<dyn Fn(&str, &str) + Send + Sync>;

#[cfg(feature = "test-utils")]
static HOOK: std::sync::Mutex<Option<TestHook>> = std::sync::Mutex::new(None);

/// Run `hook` at every [`test_point`] of this process from now on (`None`:
/// no more). Feature `test-utils` only.
#[cfg(feature = "test-utils")]
pub fn set_test_hook(hook: Option<TestHook>) {
    *HOOK.lock().unwrap_or_else(|p| p.into_inner()) = hook;
}

/// Where a test stops or kills the job of tenant `tenant`; with feature
/// `test-utils` only (otherwise nothing). The process is killed here
/// (SIGKILL: nothing is flushed, no destructor runs) when [`KILL_AT`]
/// names `point`; else the hook [`set_test_hook`] set, if any, runs.
/// Points, in the order a tenant meets them: `vectors-staged` (after a
/// batch of vectors), `log-staging` (after a part of the rewritten log
/// went to the staging area), `log-staged` (the staging area complete up
/// to the point, before the write gate), `tail-staged` (under the gate,
/// before the store's swap), `store-swapped` (the store swapped, the
/// tenant's memory not yet) and `swapped` (before the replaced tables are
/// dropped).
#[inline]
pub(crate) fn test_point(tenant: &str, point: &str) {
    #[cfg(feature = "test-utils")]
    {
        if std::env::var(KILL_AT).is_ok_and(|p| p == point) {
            #[cfg(target_os = "linux")]
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
            std::process::abort();
        }
        let hook = HOOK.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(h) = hook {
            h(tenant, point);
        }
    }
    #[cfg(not(feature = "test-utils"))]
    let _ = (tenant, point);
}

/// Run the job on the tenants named `tenants` (module docs): move each to
/// `target` (named `name`), verify each, write the folder's manifest.
/// `open` gives each tenant held open while the job works on it (a
/// service's registry leases it, opening a closed one: every keyed
/// tenant is covered, open or not). `on_status` sees the status after
/// each batch and at the end (the caller prints it or writes it to
/// `status.json`). Returns the final status; a failure is in it too
/// (`state = "failed"`, with the error).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_job(
    tenants: &[String],
    open: &dyn Fn(&str) -> Result<Lease, String>,
    target: Arc<dyn Embedder>,
    name: &str,
    data_dir: &Path,
    batch: usize,
    id: &str,
    on_status: &mut dyn FnMut(&Status),
) -> Status {
    let started = Instant::now();
    let mut status = Status {
        id: id.to_string(),
        state: "running".into(),
        embedder: name.to_string(),
        progress: tenants.iter().map(|t| (t.clone(), 0, 0)).collect(),
        ..Status::default()
    };
    let outcome = (|| -> Result<(), String> {
        for (i, tenant) in tenants.iter().enumerate() {
            let t = open(tenant).map_err(|e| format!("tenant {tenant}: {e}"))?;
            let stage = stage_path(data_dir, t.name(), name);
            let mut last = Instant::now();
            let report = t
                .reembed(target.clone(), &stage, batch, &mut |done, total| {
                    status.progress[i].1 = done;
                    status.progress[i].2 = total;
                    if last.elapsed() >= Duration::from_millis(500) || done == total {
                        last = Instant::now();
                        status.elapsed_s = started.elapsed().as_secs_f64();
                        on_status(&status);
                    }
                })
                .map_err(|e| format!("tenant {}: {e}", t.name()))?;
            status.tenants.push(report);
            status.elapsed_s = started.elapsed().as_secs_f64();
            on_status(&status);
        }
        for tenant in tenants {
            let t = open(tenant).map_err(|e| format!("tenant {tenant}: {e}"))?;
            t.verify()
                .map_err(|e| format!("tenant {}: check after the re-embed: {e}", t.name()))?;
            status.checked.push((t.name().to_string(), t.index_len()));
        }
        write_manifest(
            data_dir,
            &Manifest {
                embedder: name.to_string(),
                model: target.model_id().to_string(),
            },
        )
        .map_err(|e| e.to_string())
    })();
    status.elapsed_s = started.elapsed().as_secs_f64();
    match outcome {
        Ok(()) => status.state = "done".into(),
        Err(e) => {
            status.state = "failed".into();
            status.error = Some(e);
        }
    }
    on_status(&status);
    status
}

/// The job run by the command itself, on a folder no service runs on
/// (the caller holds [`offline_lock`]): open every tenant of `keys` as
/// the service would, run [`run_job`], close them.
pub fn run_offline(
    shared: crate::tenant::Shared,
    keys: &crate::auth::KeyRing,
    target: Arc<dyn Embedder>,
    name: &str,
    batch: usize,
    on_status: &mut dyn FnMut(&Status),
) -> Result<Status, ServeError> {
    shared.config.validate()?;
    let dir = shared.config.data_dir.clone();
    let shared = Arc::new(shared);
    let names = keys.tenants();
    let mut open = std::collections::BTreeMap::new();
    for t in &names {
        open.insert(t.clone(), Tenant::open(t, shared.clone())?);
    }
    let hold = |t: &str| {
        open.get(t)
            .map(|t| Lease::detached(t.clone()))
            .ok_or_else(|| "not opened".to_string())
    };
    let status = run_job(&names, &hold, target, name, &dir, batch, "", on_status);
    for t in open.values() {
        t.close();
    }
    Ok(status)
}

/// A service's side: look for a request every [`POLL`] and run it, until
/// `stop` says to stop. Runs on a thread of its own.
pub(crate) fn watch(state: std::sync::Weak<crate::ServiceState>) {
    let mut last_done = String::new();
    loop {
        std::thread::sleep(POLL);
        let Some(st) = state.upgrade() else {
            return;
        };
        if st.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let shared = st.shared.clone();
        let dir = shared.config.data_dir.clone();
        let Ok(text) = std::fs::read(request_path(&dir)) else {
            continue;
        };
        // Every keyed tenant, open or not: each is opened through the
        // registry and leased while the job works on it.
        let tenants = st.keys.tenants();
        let req: Request = match serde_json::from_slice(&text) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("{}: {e}", request_path(&dir).display());
                let _ = std::fs::remove_file(request_path(&dir));
                continue;
            }
        };
        if req.id == last_done {
            continue;
        }
        last_done = req.id.clone();
        let status_file = status_path(&dir);
        let mut write = |s: &Status| {
            if let Err(e) = write_json(&status_file, s) {
                tracing::warn!("{}: {e}", status_file.display());
            }
        };
        let target = match shared.embedders.by_name(&req.embedder) {
            Ok(t) => t,
            Err(e) => {
                write(&Status {
                    id: req.id.clone(),
                    state: "failed".into(),
                    embedder: req.embedder.clone(),
                    error: Some(e),
                    ..Status::default()
                });
                let _ = std::fs::remove_file(request_path(&dir));
                continue;
            }
        };
        tracing::info!("re-embedding every tenant with {}", req.embedder);
        // Tenants without a vector that open during or after the job take
        // the target (tenants open on demand, and may close and reopen
        // between their move and the manifest).
        shared
            .embedders
            .set_moving_to(Some(target.model_id().to_string()));
        let hold = |t: &str| st.tenants.acquire_blocking(t).map_err(|e| e.to_string());
        let s = run_job(
            &tenants,
            &hold,
            target,
            &req.embedder,
            &dir,
            req.batch,
            &req.id,
            &mut write,
        );
        if s.state != "done" {
            shared.embedders.set_moving_to(None);
        }
        tracing::info!(
            "re-embed with {}: {} in {:.1} s",
            req.embedder,
            s.state,
            s.elapsed_s
        );
        let _ = std::fs::remove_file(request_path(&dir));
    }
}
