//! What the tests that run `evomem serve` as a process share: HTTP/1.1
//! over a plain socket (so that a request cut off by a kill is told apart
//! from one the server never saw), starting the server and waiting for its
//! address, adding keys, listing a user's memories through the cursors and
//! running `evomem serve check`. Included by `serve_crash.rs` and
//! `serve_soak.rs` with `#[path]`.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_evomem");

/// What became of one request.
pub enum Sent {
    /// Answered.
    Answer(u16, Value),
    /// The connection was not opened: the server was gone before it.
    NoServer,
    /// Sent (at least in part), never answered: the server died while the
    /// request was in flight.
    Died,
}

/// Send one request on a new connection.
pub fn send(addr: &str, method: &str, path: &str, key: &str, body: Option<&Value>) -> Sent {
    send_with(addr, method, path, key, &[], body)
}

/// [`send`] with extra headers (`Idempotency-Key`, say).
pub fn send_with(
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Sent {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return Sent::NoServer;
    };
    match exchange(&mut s, method, path, key, headers, body) {
        Some((st, v)) => Sent::Answer(st, v),
        None => Sent::Died,
    }
}

/// One request and its answer, `None` when there was none.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let mut s = TcpStream::connect(addr).ok()?;
    exchange(&mut s, method, path, key, &[], body)
}

/// Write one request on `s` and read the whole answer (the connection is
/// closed after it).
pub fn exchange(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let b = body.map(|v| v.to_string()).unwrap_or_default();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
        b.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status: u16 = out.split_whitespace().nth(1)?.parse().ok()?;
    let (_, body) = out.split_once("\r\n\r\n")?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// Start `evomem serve` (hashing embedder, no rate limit) on a free
/// loopback port; its child and address.
pub fn start(data: &Path, store: &str) -> (Child, String) {
    start_with(
        data,
        store,
        "127.0.0.1:0",
        &[("EVOMEM_SERVE__RATE_LIMIT_PER_S", "0")],
    )
    .unwrap_or_else(|| panic!("evomem serve did not start"))
}

/// Start `evomem serve` (hashing embedder) bound to `bind` with the
/// environment `env`; `None` when it printed no address (it exited: the
/// port was taken, say).
pub fn start_with(
    data: &Path,
    store: &str,
    bind: &str,
    env: &[(&str, &str)],
) -> Option<(Child, String)> {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--embedder",
            "hashing",
            "--bind",
            bind,
            "--store",
            store,
        ])
        .arg("--data-dir")
        .arg(data)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .map(str::to_string);
    match addr {
        Some(a) => Some((child, a)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// Adds a key for `tenant` in `data` with `evomem serve keys add`; returns it.
pub fn add_key(data: &Path, tenant: &str) -> String {
    let out = Command::new(BIN)
        .args(["serve", "keys", "add", "--tenant", tenant])
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Every memory of `user`, following the listing's cursors page by page
/// (a listing without `limit` answers one page).
pub fn list_all(addr: &str, key: &str, user: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/users/{user}/memories?limit=1000&cursor={c}"),
            None => format!("/v1/users/{user}/memories?limit=1000"),
        };
        let (st, v) = http(addr, "GET", &path, key, None).unwrap();
        assert_eq!(st, 200, "{v}");
        all.extend(v["memories"].as_array().unwrap().iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return all,
        }
    }
}

/// `evomem serve check` finds log, records and index in agreement for
/// `tenant`.
pub fn check_store(data: &Path, store: &str, tenant: &str) {
    check_tenants(data, store, &[tenant]);
}

/// One `evomem serve check` of the data folder; each of `tenants` must be
/// reported in agreement.
pub fn check_tenants(data: &Path, store: &str, tenants: &[&str]) {
    let out = Command::new(BIN)
        .args(["serve", "check", "--embedder", "hashing", "--store", store])
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "serve check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for tenant in tenants {
        assert!(text.contains(&format!("tenant {tenant}: ok")), "{text}");
    }
    eprintln!("{text}");
}
