//! Lower the OS priority of the threads doing bulk work, so that one
//! tenant's large adds, user deletions and graph builds do not take the
//! CPU from every other tenant's searches.
//!
//! Why: on a small machine (2 cores) the service's latency under a noisy
//! neighbour is set by CPU contention, not by locks (docs/service.md,
//! noisy neighbours): the bulk adds' embedding and writes keep both cores
//! busy, and a search waits for a core. Linux's scheduler weighs a thread
//! of niceness 10 at about a tenth of one of niceness 0, so reads get the
//! CPU first and bulk work takes what is left (it still runs at full speed
//! when nothing else wants the CPU). Niceness is per thread on Linux
//! (`setpriority` on a thread id); elsewhere this does nothing.

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

/// Run `f` on a scoped thread of niceness `nice`, and wait for it: for
/// bulk work that a request thread would otherwise do at full priority
/// (a request thread's own priority cannot be raised back afterwards
/// without privilege). Fails only when no thread can be started.
pub fn run_lowered<T: Send>(nice: i32, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    if nice <= 0 {
        return Ok(f());
    }
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("evomem-bulk".into())
            .spawn_scoped(s, move || {
                lower_current_thread(nice);
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
    fn bulk_work_runs_lowered_and_the_caller_keeps_its_priority() {
        let before = current_nice();
        let want = before.unwrap_or(0) + 3;
        if want > 19 {
            return;
        }
        let inside = run_lowered(want, current_nice).unwrap();
        assert_eq!(inside, Some(want));
        assert_eq!(current_nice(), before, "the calling thread was lowered");
        assert_eq!(run_lowered(0, current_nice).unwrap(), before);
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
