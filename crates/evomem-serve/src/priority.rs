//! Lower the OS priority of the threads doing bulk work, so that one
//! tenant's large adds, user deletions and graph builds do not take the
//! CPU from every other tenant's searches.
//!
//! Why: on a small machine (2 cores) the service's latency under a noisy
//! neighbour is set by CPU contention, not by locks
//! (docs/notes/service-noisy-neighbours.md): the bulk adds' embedding and
//! writes keep both cores busy, and a search waits for a core. Linux's
//! scheduler weighs a thread of niceness 10 at about a tenth of one of
//! niceness 0, so reads get the CPU first and bulk work takes what is left
//! (it still runs at full speed when nothing else wants the CPU). Niceness
//! is per thread on Linux (`setpriority` on a thread id); elsewhere this
//! does nothing.
//!
//! Niceness alone is not enough on Linux's EEVDF scheduler (6.6 and
//! later): a waking thread of niceness 0 may wait for a running bulk
//! thread to finish its time slice, about 3 ms, whatever that thread's
//! niceness (two `nice -n 19` spinning loops raised an idle search's p99
//! from about 1 ms to 3-5 ms here). A thread of the `SCHED_IDLE` class is
//! preempted at once. So bulk work that holds no lock a reader waits on
//! runs on a scoped thread of that class ([`run_bulk`], `serve.bulk_idle`),
//! and the short steps under a tenant's core lock stay at normal priority:
//! a bulk thread starved by searches must never hold up those searches.

/// Give the calling thread niceness `nice` (0: leave it). Lowering needs
/// no privilege; a failure is logged and otherwise ignored (the thread
/// keeps its priority).
pub fn lower_current_thread(nice: i32) {
    if nice <= 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
            tracing::debug!("bulk priority: setpriority({nice}) failed: {e}");
        }
    }
}

/// The calling thread's niceness (Linux; `None` elsewhere or on error).
#[cfg(test)]
pub fn current_nice() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        rustix::process::getpriority_process(Some(tid)).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// How bulk work runs: under `SCHED_IDLE` when `idle` (and the class is
/// available), else at niceness `nice` (0 and not idle: unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bulk {
    /// Niceness when `SCHED_IDLE` is not used (0-19).
    pub nice: i32,
    /// Use `SCHED_IDLE` (Linux).
    pub idle: bool,
}

impl Bulk {
    /// Whether work at this priority runs as the caller's does.
    fn is_unchanged(self) -> bool {
        !self.idle && self.nice <= 0
    }
}

/// Move the calling thread to `bulk`: `SCHED_IDLE` if asked and granted,
/// else niceness `bulk.nice`. A failure is logged and otherwise ignored.
pub fn lower_current_thread_to(bulk: Bulk) {
    if bulk.idle && set_current_idle() {
        return;
    }
    lower_current_thread(bulk.nice);
}

/// Put the calling thread in the `SCHED_IDLE` class; whether it worked.
fn set_current_idle() -> bool {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadSchedulePolicy,
        };
        let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        match set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            policy,
        ) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("bulk priority: SCHED_IDLE refused: {e:?}");
                false
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether the calling thread runs in the `SCHED_IDLE` class (Linux).
#[cfg(test)]
pub fn current_is_idle() -> bool {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy,
        };
        matches!(
            thread_schedule_policy(),
            Ok(ThreadSchedulePolicy::Normal(
                NormalThreadSchedulePolicy::Idle
            ))
        )
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Run `f` on a scoped thread moved to `bulk` ([`lower_current_thread_to`])
/// and wait for it: for bulk work that a request thread would otherwise do
/// at full priority (a thread's own priority cannot be raised back
/// afterwards without privilege). Fails only when no thread can start. `f` must not hold a lock
/// that readers wait on (module docs).
pub fn run_bulk<T: Send>(bulk: Bulk, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    if bulk.is_unchanged() {
        return Ok(f());
    }
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("evomem-bulk".into())
            .spawn_scoped(s, move || {
                lower_current_thread_to(bulk);
                f()
            })?;
        match worker.join() {
            Ok(v) => Ok(v),
            // The work panicked: the panic goes on here, as if it ran here.
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(all(test, target_os = "linux"))]
pub(crate) mod tests {
    use super::*;

    /// The niceness of this process's thread named `name` (from /proc).
    pub(crate) fn nice_of_thread(name: &str) -> Option<i32> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
                // Fields after the parenthesised name: state is field 3,
                // nice is field 19.
                let rest = stat.rsplit_once(')')?.1;
                return rest.split_whitespace().nth(16)?.parse().ok();
            }
        }
        None
    }

    #[test]
    fn bulk_work_runs_in_the_idle_class_and_the_caller_keeps_its_own() {
        let bulk = Bulk {
            nice: 10,
            idle: true,
        };
        assert!(run_bulk(bulk, current_is_idle).unwrap(), "not SCHED_IDLE");
        assert!(!current_is_idle(), "the caller was moved");
        let niced = Bulk {
            nice: 7,
            idle: false,
        };
        let before = current_nice().unwrap_or(0);
        if before < 7 {
            assert_eq!(run_bulk(niced, current_nice).unwrap(), Some(7));
        }
        assert!(!run_bulk(niced, current_is_idle).unwrap());
    }

    #[test]
    fn a_lowered_thread_shows_in_proc() {
        let h = std::thread::Builder::new()
            .name("evomem-nicetest".into())
            .spawn(|| {
                lower_current_thread(19);
                std::thread::sleep(std::time::Duration::from_millis(300));
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(nice_of_thread("evomem-nicetest"), Some(19));
        h.join().unwrap();
    }
}
