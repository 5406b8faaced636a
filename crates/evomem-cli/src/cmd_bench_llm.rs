//! `evomem bench llm` (the `gguf` and `http` features): prompt and generated
//! tokens per second of the in-process GGUF backend on fixed prompts of
//! three lengths, and of an OpenAI-compatible server (llama.cpp's
//! `llama-server`) on the same prompts when `--server` is given, in one run.
//! The server is timed from outside (wall time per request), so its split
//! between prompt and generation is estimated from the in-process prompt
//! rate.

use crate::settings::Settings;
use anyhow::{bail, Context};
use std::path::PathBuf;

/// Flags of `evomem bench llm`.
#[derive(clap::Args)]
pub struct LlmArgs {
    /// The GGUF file (default: SmolLM2 in the models folder, as fetched by
    /// `scripts/fetch-smollm2.sh`).
    #[arg(long)]
    gguf: Option<PathBuf>,
    /// An OpenAI-compatible server serving the same model, `MODEL@URL`
    /// (e.g. `smollm2@http://127.0.0.1:8080/v1`).
    #[arg(long)]
    server: Option<String>,
    /// Inference threads of the in-process backend.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Tokens generated per prompt (greedy; the same cap for both).
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Repetitions of each prompt; the best is kept.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Keep the file's Q4_1 tensors (candle's scalar kernel) instead of
    /// converting them to Q8_0 at load.
    #[arg(long)]
    no_requantize: bool,
}

// ------------------------------------------------------------------ llm --

/// The fixed prompts: a short question, a medium and a long preference
/// summary request (the shape of `mars_extract`), by target length.
fn llm_prompts() -> Vec<(&'static str, String)> {
    let titles = [
        "Toy Story",
        "GoldenEye",
        "Four Rooms",
        "Get Shorty",
        "Copycat",
        "Twelve Monkeys",
        "Babe",
        "Dead Man Walking",
        "Richard III",
        "Seven",
        "The Usual Suspects",
        "Mighty Aphrodite",
        "Postino, Il",
        "Braveheart",
        "Taxi Driver",
        "Apollo 13",
        "Batman Forever",
        "Belle de jour",
        "Crumb",
        "Desperado",
    ];
    let history = |n: usize| {
        (0..n)
            .map(|i| {
                format!(
                    "- rated \"{}\" {} stars",
                    titles[i % titles.len()],
                    1 + i % 5
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    vec![
        (
            "short",
            "What is the capital of France? Answer in one sentence.".to_string(),
        ),
        (
            "medium",
            format!(
                "Summarise this viewer's taste in three sentences.\n{}",
                history(20)
            ),
        ),
        (
            "long",
            format!(
                "Summarise this viewer's taste in three sentences.\n{}",
                history(90)
            ),
        ),
    ]
}

pub fn bench_llm(a: LlmArgs, settings: &Settings) -> anyhow::Result<()> {
    use evomem_core::{ChatMessage, ChatRequest, LanguageModel};
    use std::time::Instant;
    let path = a.gguf.clone().unwrap_or_else(|| {
        settings
            .models_dir
            .join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    if !path.is_file() {
        bail!(
            "{}: no GGUF model (run scripts/fetch-smollm2.sh or pass --gguf)",
            path.display()
        );
    }
    let lm = evomem_gguf::GgufModel::load(
        &path,
        evomem_gguf::GgufOptions {
            threads: a.threads,
            requantize: !a.no_requantize,
            ..Default::default()
        },
    )?;
    let server = match &a.server {
        None => None,
        Some(spec) => {
            let (model, url) = spec
                .split_once('@')
                .with_context(|| format!("--server `{spec}`: expected MODEL@URL"))?;
            let mut oc = evomem_llm::openai::OpenAiConfig::new(model.to_string(), url.to_string());
            oc.response_format = "none".to_string();
            oc.timeout = std::time::Duration::from_secs(600);
            Some(evomem_llm::openai::OpenAiCompatible::new(oc)?)
        }
    };
    println!(
        "model {} · {} thread(s) · greedy, max {} tokens · best of {}",
        path.display(),
        a.threads,
        a.max_tokens,
        a.reps
    );
    println!(
        "{:<7} {:>7} {:>7} {:>13} {:>13} {:>15} {:>9}",
        "prompt", "p_tok", "g_tok", "prompt tok/s", "gen tok/s", "server tok/s", "ratio"
    );
    for (name, text) in llm_prompts() {
        let mut req = ChatRequest::new(vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user(text),
        ]);
        req.max_tokens = Some(a.max_tokens);
        let mut best: Option<(evomem_core::ChatResponse, evomem_gguf::Timing)> = None;
        for _ in 0..a.reps.max(1) {
            let (r, t) = lm.complete_timed(&req)?;
            let better = best
                .as_ref()
                .is_none_or(|(_, b)| t.prompt_s + t.generate_s < b.prompt_s + b.generate_s);
            if better {
                best = Some((r, t));
            }
        }
        let Some((r, t)) = best else { continue };
        let p_tok = r.usage.prompt_tokens as f64;
        let g_tok = r.usage.completion_tokens as f64;
        let p_rate = p_tok / t.prompt_s.max(1e-9);
        let g_rate = g_tok / t.generate_s.max(1e-9);
        let in_process = (p_tok + g_tok) / (t.prompt_s + t.generate_s).max(1e-9);
        let (srv, ratio) = match &server {
            None => ("-".to_string(), "-".to_string()),
            Some(c) => {
                let mut best_s = f64::INFINITY;
                let mut toks = 0.0;
                for _ in 0..a.reps.max(1) {
                    let t0 = Instant::now();
                    let sr = c.complete(&req)?;
                    let s = t0.elapsed().as_secs_f64();
                    if s < best_s {
                        best_s = s;
                        toks = (sr.usage.prompt_tokens + sr.usage.completion_tokens) as f64;
                    }
                }
                let rate = toks / best_s.max(1e-9);
                (format!("{rate:.1}"), format!("{:.2}x", in_process / rate))
            }
        };
        println!(
            "{name:<7} {:>7} {:>7} {p_rate:>13.1} {g_rate:>13.1} {srv:>15} {ratio:>9}",
            r.usage.prompt_tokens, r.usage.completion_tokens
        );
    }
    println!(
        "ratio: in-process (prompt+generated) tokens/s over the server's, same prompts and cap"
    );
    Ok(())
}
