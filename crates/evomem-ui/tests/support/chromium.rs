//! Headless Chromium for the inspector's browser tests, shared by
//! evomem-ui's `tests/browser.rs` (run mode) and evomem-serve's
//! `tests/it/inspector.rs` (service mode), which include this file by path:
//! chromedriver in a process group of its own, a fantoccini session on a
//! fresh profile, and the few page helpers both tests use (wait for a JS
//! condition, click, read text, move the time slider, screenshot, the
//! errors the page collected in `window.__evomemErrors`, Content-Security-Policy
//! violations included).
//!
//! Without `/usr/bin/chromium` and `/usr/bin/chromedriver` (or the binaries
//! named by `EVOMEM_CHROMIUM` / `EVOMEM_CHROMEDRIVER`) a test fails under CI
//! (`CI` set) and is skipped with a loud notice otherwise.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// chromedriver in a process group of its own (which the browser it
/// starts inherits), killed with the group when dropped.
pub struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-TERM", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser and its driver, when installed.
pub fn binaries() -> Option<(PathBuf, PathBuf)> {
    let pick = |var: &str, default: &str| {
        let p = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
        p.exists().then_some(p)
    };
    Some((
        pick("EVOMEM_CHROMIUM", "/usr/bin/chromium")?,
        pick("EVOMEM_CHROMEDRIVER", "/usr/bin/chromedriver")?,
    ))
}

/// The browser and its driver, or `None` (after a loud notice naming
/// `test`) when they are not installed and this is not CI.
pub fn browser_or_skip(test: &str) -> Option<(PathBuf, PathBuf)> {
    if let Some(b) = binaries() {
        return Some(b);
    }
    let msg = "headless Chromium is not installed (/usr/bin/chromium and /usr/bin/chromedriver): \
               `apt-get install -y chromium chromium-driver`, or set EVOMEM_CHROMIUM and EVOMEM_CHROMEDRIVER";
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and {test} cannot run: {msg}");
    }
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\n!!! SKIPPED {test}: {msg}\n{bar}\n");
    None
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start chromedriver and a headless Chromium session (1400×1000).
pub async fn start_browser(chromium: &Path, chromedriver: &Path) -> (Driver, Client) {
    use std::os::unix::process::CommandExt as _;
    let port = free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let driver = Driver {
        child,
        port,
        _profile: tempfile::tempdir().unwrap(),
    };
    let profile = format!("--user-data-dir={}", driver._profile.path().display());
    let args = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        profile.as_str(),
    ];
    let caps = json!({"goog:chromeOptions": {"binary": chromium, "args": args}});
    let caps = caps.as_object().cloned().unwrap();
    let url = format!("http://127.0.0.1:{}", driver.port);
    let started = Instant::now();
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => return (driver, c),
            Err(_) if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot start a chromedriver session: {e}"),
        }
    }
}

/// Poll `cond` (a JS expression) until it is truthy; panics with `what`,
/// the page's errors, status line and main text after 15 s.
pub async fn wait_for(c: &Client, cond: &str, what: &str) -> Value {
    let started = Instant::now();
    let script = format!("try {{ return ({cond}); }} catch (e) {{ return null; }}");
    loop {
        let v = c.execute(&script, vec![]).await.unwrap();
        if !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("") {
            return v;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let page = c
                .execute(
                    "return [window.__evomemErrors, \
                     (document.getElementById('status') || {}).textContent, \
                     document.getElementById('main').innerText.slice(0, 600)]",
                    vec![],
                )
                .await
                .ok();
            panic!("timed out waiting for {what} ({cond}); page (errors, status, main): {page:?}");
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Save a PNG of the page as `target/ui-screenshots/<name>`.
pub async fn shot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    std::fs::write(dir.join(name), png).unwrap();
}

/// The errors the page collected (script errors, unhandled rejections,
/// `console.error`).
pub async fn errors(c: &Client) -> Vec<Value> {
    c.execute(
        "return window.__evomemErrors || ['no error collector']",
        vec![],
    )
    .await
    .unwrap()
    .as_array()
    .cloned()
    .unwrap_or_default()
}

/// Click the element at `at`.
pub async fn click(c: &Client, at: Locator<'_>) {
    c.find(at).await.unwrap().click().await.unwrap();
}

/// Run `script` in the page.
pub async fn js(c: &Client, script: &str, args: Vec<Value>) -> Value {
    c.execute(script, args).await.unwrap()
}

/// The string value of the JS expression `expr` ("" when not a string).
pub async fn text(c: &Client, expr: &str) -> String {
    js(c, &format!("return {expr}"), vec![])
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Set the time slider to `at` as a user dragging it would (an `input` event).
pub async fn slide(c: &Client, at: u64) {
    js(
        c,
        "const s = document.getElementById('time-slider'); s.value = String(arguments[0]); \
         s.dispatchEvent(new Event('input', {bubbles: true}));",
        vec![json!(at)],
    )
    .await;
}
