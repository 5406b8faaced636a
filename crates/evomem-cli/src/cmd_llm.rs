//! `evomem llm`: talk to a language-model backend.
//!
//! - `evomem llm ping --llm SPEC` sends one tiny request and prints latency,
//!   usage and the reply (the key comes from the env var named in the
//!   `[llm]` config, `OPENAI_API_KEY` by default, and is never printed);
//! - `evomem llm fixture-server --port P` serves the scriptable
//!   chat-completions fixture in auto mode until killed, so that a whole
//!   `evomem eval --llm openai:fixture@http://127.0.0.1:P/v1` run can go
//!   through a real HTTP server; `GET /stats` returns the request counter.

use crate::settings::Settings;
use anyhow::{bail, Context};
#[cfg(any(feature = "http", feature = "gguf"))]
use evomem_core::{ChatMessage, ChatRequest, LanguageModel};
use evomem_llm::{BackendSpec, LlmConfig};
#[cfg(feature = "http")]
use std::io::Write;
use std::path::PathBuf;
#[cfg(feature = "http")]
use std::time::Duration;
#[cfg(any(feature = "http", feature = "gguf"))]
use std::time::Instant;

/// Flags of `evomem llm`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: LlmCommand,
}

#[derive(clap::Subcommand)]
enum LlmCommand {
    /// Send one tiny request and print latency and usage.
    Ping {
        /// Backend spec: `offline` or `openai:<model>@<base_url>` [settings
        /// `llm.default`].
        #[arg(long)]
        llm: Option<String>,
        /// TOML file whose `[llm]` table sets key env var, timeout, retries
        /// (default: the `[llm]` table of the settings).
        #[arg(long = "llm-config")]
        config: Option<PathBuf>,
    },
    /// Serve the chat-completions fixture server until killed.
    #[cfg(feature = "http")]
    FixtureServer {
        /// Port on 127.0.0.1 (0: any free port; the chosen one is printed).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Answer mode; `auto` answers every role with valid JSON.
        #[arg(long, default_value = "auto")]
        mode: String,
    },
}

/// Run `evomem llm`.
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<()> {
    match args.command {
        LlmCommand::Ping { llm, config } => ping(llm.as_deref(), config, settings),
        #[cfg(feature = "http")]
        LlmCommand::FixtureServer { port, mode } => fixture_server(port, &mode),
    }
}

fn ping(spec: Option<&str>, config: Option<PathBuf>, settings: &Settings) -> anyhow::Result<()> {
    let cfg = match &config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config {}", path.display()))?;
            let mut c = LlmConfig::from_toml_str(&text, &path.display().to_string())?;
            c.api_key = settings.llm.api_key.clone();
            c
        }
        None => settings.llm.clone(),
    };
    let spec = spec.unwrap_or(&cfg.default);
    match BackendSpec::parse(spec, "--llm")? {
        BackendSpec::Offline => {
            println!("backend: offline (every role runs its offline algorithm; nothing to ping)");
            Ok(())
        }
        #[cfg(not(feature = "http"))]
        BackendSpec::OpenAi { .. } => {
            bail!("`{spec}`: this evomem was built without the `http` feature (cargo build --release -p evomem)")
        }
        #[cfg(feature = "http")]
        BackendSpec::OpenAi { model, base_url } => {
            let mut oc = evomem_llm::openai::OpenAiConfig::new(model, base_url);
            oc.api_key_env = cfg.api_key_env.clone();
            oc.api_key = cfg.api_key.clone();
            oc.timeout = Duration::from_secs_f64(cfg.timeout_s);
            oc.max_retries = cfg.max_retries;
            let client = evomem_llm::openai::OpenAiCompatible::new(oc)?;
            let mut req = ChatRequest::new(vec![
                ChatMessage::system("Reply with the single word pong."),
                ChatMessage::user("ping"),
            ]);
            req.max_tokens = Some(8);
            let t0 = Instant::now();
            let resp = client
                .complete(&req)
                .with_context(|| format!("ping {} failed", client.url()))?;
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            println!("backend: {}", client.id());
            println!("endpoint: {}", client.url());
            println!("latency_ms: {ms:.1}");
            println!(
                "usage: prompt_tokens={} completion_tokens={}",
                resp.usage.prompt_tokens, resp.usage.completion_tokens
            );
            println!("reply: {}", resp.text.trim());
            Ok(())
        }
        #[cfg(not(feature = "gguf"))]
        BackendSpec::Gguf { .. } => {
            bail!("`{spec}`: this evomem was built without the `gguf` feature (cargo build --release -p evomem)")
        }
        #[cfg(feature = "gguf")]
        BackendSpec::Gguf { path } => {
            let t0 = Instant::now();
            let lm = evomem_gguf::GgufModel::load(
                std::path::Path::new(&path),
                evomem_gguf::GgufOptions::default(),
            )?;
            let load_ms = t0.elapsed().as_secs_f64() * 1000.0;
            let mut req = ChatRequest::new(vec![
                ChatMessage::system("Reply with the single word pong."),
                ChatMessage::user("ping"),
            ]);
            req.max_tokens = Some(8);
            let (resp, timing) = lm
                .complete_timed(&req)
                .with_context(|| format!("ping {path} failed"))?;
            println!(
                "backend: {} (in process, context {})",
                lm.id(),
                lm.context()
            );
            println!("load_ms: {load_ms:.1}");
            println!(
                "latency_ms: {:.1} (prompt {:.1}, generation {:.1})",
                (timing.prompt_s + timing.generate_s) * 1000.0,
                timing.prompt_s * 1000.0,
                timing.generate_s * 1000.0
            );
            println!(
                "usage: prompt_tokens={} completion_tokens={}",
                resp.usage.prompt_tokens, resp.usage.completion_tokens
            );
            println!("reply: {}", resp.text.trim());
            Ok(())
        }
    }
}

#[cfg(feature = "http")]
fn fixture_server(port: u16, mode: &str) -> anyhow::Result<()> {
    if mode != "auto" {
        bail!("unknown fixture-server mode `{mode}` (supported: auto)");
    }
    let server = evomem_llm::fixture::FixtureServer::start_on(port)
        .with_context(|| format!("cannot bind 127.0.0.1:{port}"))?;
    let base = server.base_url();
    println!("fixture chat-completions server listening on {base}");
    println!("use: --llm openai:fixture@{base}");
    println!("request counter: GET http://{}/stats", server.addr());
    std::io::stdout().flush()?;
    server.wait();
    Ok(())
}
