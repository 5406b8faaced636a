//! Crash safety: SIGKILL an ingesting child at random seeded moments,
//! reopen the SQLite store, and check that every acknowledged op is present
//! and no batch is half applied.
//!
//! A SIGKILL keeps the kernel's page cache, so it cannot tell an fsynced
//! commit from one that was only written. The power-loss test runs the child
//! under an `LD_PRELOAD` shim that records each file's content at every
//! fsync, then throws away everything written after the last fsync before
//! reopening: with `synchronous=NORMAL` it loses every acknowledged op of
//! the last trials, with FULL none.

use evomem_store::Engine;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

/// Check that the log consists of whole batches (labels
/// `batch:<first>:<i>:<n>`); returns the number of partial batches.
fn partial_batches(log: &[evomem_core::LoggedOp]) -> usize {
    let mut partial = 0;
    let mut i = 0;
    while i < log.len() {
        let parts: Vec<u64> = log[i]
            .provenance
            .label
            .split(':')
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let [first, idx, n] = parts[..] else {
            panic!("bad label {}", log[i].provenance.label);
        };
        let whole = idx == 0
            && first == log[i].seq
            && (0..n as usize).all(|k| {
                log.get(i + k)
                    .is_some_and(|o| o.provenance.label == format!("batch:{first}:{k}:{n}"))
            });
        if !whole {
            partial += 1;
        }
        i += n.max(1) as usize;
    }
    partial
}

#[test]
fn sigkill_loses_no_acknowledged_op() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(20_261_130);
    let trials = 120;
    let (mut acked_total, mut lost, mut partial, mut kills_before_ack) = (0u64, 0u64, 0usize, 0);
    // Trials where the store held more than was acknowledged: the kill
    // landed between a commit and its ACK line.
    let mut durable_unacked = 0;
    let mut path = dir.path().join("crash.sqlite");
    let mut len_before = 0u64;
    for trial in 0..trials {
        if trial % 20 == 0 {
            path = dir.path().join(format!("crash{trial}.sqlite"));
            len_before = 0;
        }
        let wait_acks = rng.gen_range(0..20);
        let extra_us = rng.gen_range(0..4000);
        let max_acked = kill_child(&path, trial, wait_acks, extra_us, &[]);
        if max_acked == 0 {
            kills_before_ack += 1;
        }
        let mut e = Engine::sqlite(&path)
            .unwrap_or_else(|err| panic!("trial {trial}: reopen failed: {err}"));
        e.verify()
            .unwrap_or_else(|err| panic!("trial {trial}: inconsistent store: {err}"));
        let len = e.log().len() as u64;
        lost += max_acked.saturating_sub(len);
        if len > max_acked.max(len_before) {
            durable_unacked += 1;
        }
        acked_total += max_acked.saturating_sub(len_before);
        partial += partial_batches(e.log());
        len_before = len;
    }
    eprintln!(
        "crash: {trials} SIGKILL trials, {acked_total} acknowledged ops checked, {lost} lost, {partial} partial batches, {kills_before_ack} kills before the first ack, {durable_unacked} kills during a commit (batch on disk, not yet acknowledged)"
    );
    assert_eq!(lost, 0, "acknowledged ops lost");
    assert_eq!(partial, 0, "half-applied batches");
    // The test must have tested something: measured 4,932 acknowledged ops
    // and 57 kills between a commit and its ACK over the 120 seeded trials.
    assert!(
        acked_total >= 1000,
        "only {acked_total} acknowledged ops were checked"
    );
    assert!(
        durable_unacked >= 10,
        "only {durable_unacked} kills landed between a commit and its ACK"
    );
}

/// Start the crash child on `path` with `seed` and `env`, read `wait_acks`
/// ACK lines, wait `extra_us` more, SIGKILL it, and return the highest
/// acknowledged sequence number. The child never exits by itself: if it
/// did (an open or write failure), the trial tested nothing and this fails
/// with the child's stderr.
fn kill_child(
    path: &std::path::Path,
    seed: usize,
    wait_acks: usize,
    extra_us: u64,
    env: &[(&str, &std::path::Path)],
) -> u64 {
    let exe = env!("CARGO_BIN_EXE_evomem-store-crash-child");
    let mut cmd = Command::new(exe);
    cmd.arg(path)
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut max_acked = 0u64;
    let mut line = String::new();
    for _ in 0..wait_acks {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        max_acked = max_acked.max(ack(seed, &line));
    }
    std::thread::sleep(std::time::Duration::from_micros(extra_us));
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).unwrap();
    }
    assert!(
        status.code().is_none(),
        "seed {seed}: the child exited by itself ({status}) before the kill:\n{err}"
    );
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    for l in rest.lines() {
        max_acked = max_acked.max(ack(seed, l));
    }
    max_acked
}

/// The sequence number of an `ACK n` line of the child. Any other output
/// (the ACK format changed) fails the test instead of counting 0.
fn ack(trial: usize, line: &str) -> u64 {
    let line = line.trim();
    if line.is_empty() {
        return 0;
    }
    match line.strip_prefix("ACK ").map(str::parse::<u64>) {
        Some(Ok(n)) => n,
        _ => panic!("trial {trial}: unexpected line from the child: `{line}`"),
    }
}

/// An `LD_PRELOAD` shim that models power loss: whenever a process fsyncs a
/// file under `$EVOMEM_DURABLE_DIR`, the file's content at that moment is
/// copied (atomically, by rename) to `<file>.durable`. After a SIGKILL the
/// test replaces every file by its `.durable` copy, or deletes it when it
/// was never fsynced: what a machine would find on disk after losing power
/// with nothing but fsynced data written through.
const DURABLE_SHIM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void snapshot(int fd) {
    const char *dir = getenv("EVOMEM_DURABLE_DIR");
    if (!dir) return;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = 0;
    if (strncmp(path, dir, strlen(dir)) != 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    char tmp[PATH_MAX + 16], dst[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.durable-tmp", path);
    snprintf(dst, sizeof dst, "%s.durable", path);
    int in = open(path, O_RDONLY);
    if (in < 0) return;
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) { close(in); return; }
    char buf[65536];
    ssize_t r;
    while ((r = read(in, buf, sizeof buf)) > 0) {
        if (write(out, buf, (size_t)r) != r) break;
    }
    close(in);
    close(out);
    rename(tmp, dst);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    snapshot(fd);
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    snapshot(fd);
    return real(fd);
}
"#;

/// Build the shim with the system C compiler (the build needs one for the
/// bundled SQLite anyway). Without one the test fails, loudly: it is the
/// only test that notices a lowered `synchronous` (SIGKILL keeps the page
/// cache), so it must never pass by not running.
fn durable_shim(dir: &std::path::Path) -> std::path::PathBuf {
    let src = dir.join("durable.c");
    let so = dir.join("durable.so");
    std::fs::write(&src, DURABLE_SHIM).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .status();
    match built {
        Ok(s) if s.success() => so,
        other => panic!(
            "cannot build the fsync shim with `{cc}` ({other:?}): the power-loss test cannot run; install a C compiler or set CC"
        ),
    }
}

/// Replace each store file by its last fsynced content (or remove it when
/// it was never fsynced); the WAL index is shared memory and goes.
fn lose_unsynced(path: &std::path::Path) {
    for suffix in ["", "-wal"] {
        let f = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        let durable = std::path::PathBuf::from(format!("{}.durable", f.display()));
        if durable.exists() {
            std::fs::copy(&durable, &f).unwrap();
        } else if f.exists() {
            std::fs::remove_file(&f).unwrap();
        }
    }
    let shm = std::path::PathBuf::from(format!("{}-shm", path.display()));
    if shm.exists() {
        std::fs::remove_file(&shm).unwrap();
    }
}

/// What [`power_loss_trials`] saw.
struct PowerLoss {
    trials: usize,
    acked_total: u64,
    lost: u64,
    partial: usize,
    rolled_back: u64,
}

#[test]
fn power_loss_keeps_every_acknowledged_op() {
    let r = power_loss_trials(false);
    eprintln!(
        "power loss: {} trials, {} acknowledged ops checked, {} lost, {} partial batches, {} unacknowledged ops rolled back by the loss",
        r.trials, r.acked_total, r.lost, r.partial, r.rolled_back
    );
    assert_eq!(r.lost, 0, "acknowledged ops lost to power loss");
    assert_eq!(r.partial, 0, "half-applied batches after power loss");
    assert!(
        r.acked_total >= 100,
        "only {} acknowledged ops were checked",
        r.acked_total
    );
}

/// The control: with `synchronous=NORMAL` (commits acknowledged before
/// the WAL is fsynced) the same trials must lose acknowledged ops, or the
/// power-loss test could not notice a lowered `synchronous`.
#[test]
fn power_loss_control_with_synchronous_normal_loses_acknowledged_ops() {
    let r = power_loss_trials(true);
    eprintln!(
        "power loss control (synchronous=NORMAL): {} trials, {} acknowledged ops, {} lost",
        r.trials, r.acked_total, r.lost
    );
    assert!(
        r.lost > 0,
        "synchronous=NORMAL lost no acknowledged op: the power-loss test cannot see a lowered synchronous"
    );
    assert_eq!(r.partial, 0, "half-applied batches after power loss");
}

/// Kill an ingesting child under the fsync shim, throw away what it never
/// fsynced, reopen and count; `weak`: the child lowers `synchronous`.
fn power_loss_trials(weak: bool) -> PowerLoss {
    let dir = tempfile::tempdir().unwrap();
    let shim = durable_shim(dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let data = data.canonicalize().unwrap();
    let path = data.join("power.sqlite");
    let mut rng = ChaCha8Rng::seed_from_u64(20_261_201);
    let trials = 12;
    let (mut acked_total, mut lost, mut partial, mut rolled_back) = (0u64, 0u64, 0usize, 0u64);
    let mut len_before = 0u64;
    for trial in 0..trials {
        let wait_acks = rng.gen_range(5..40);
        let normal = std::path::Path::new("normal");
        let mut env = vec![
            ("LD_PRELOAD", shim.as_path()),
            ("EVOMEM_DURABLE_DIR", data.as_path()),
        ];
        if weak {
            env.push(("EVOMEM_CRASH_SYNCHRONOUS", normal));
        }
        let max_acked = kill_child(&path, 1000 + trial, wait_acks, 0, &env);
        // What was written but never fsynced is gone now.
        let live = Engine::sqlite(&path).map(|e| e.log().len() as u64);
        lose_unsynced(&path);
        let mut e = Engine::sqlite(&path)
            .unwrap_or_else(|err| panic!("trial {trial}: reopen after power loss failed: {err}"));
        e.verify()
            .unwrap_or_else(|err| panic!("trial {trial}: inconsistent store: {err}"));
        let len = e.log().len() as u64;
        if let Ok(l) = live {
            rolled_back += l.saturating_sub(len);
        }
        lost += max_acked.saturating_sub(len);
        acked_total += max_acked.saturating_sub(len_before);
        partial += partial_batches(e.log());
        len_before = len;
        drop(e);
        // This process's own reopen wrote through a real fsync (it runs
        // without the shim): record its result as the durable state.
        for suffix in ["", "-wal"] {
            let f = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
            let d = std::path::PathBuf::from(format!("{}{suffix}.durable", path.display()));
            if f.exists() {
                std::fs::copy(&f, &d).unwrap();
            } else if d.exists() {
                std::fs::remove_file(&d).unwrap();
            }
        }
    }
    PowerLoss {
        trials,
        acked_total,
        lost,
        partial,
        rolled_back,
    }
}
