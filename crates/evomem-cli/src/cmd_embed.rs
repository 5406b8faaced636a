//! `evomem embed TEXT TEXT…`: embed texts and print their pairwise cosine
//! similarities.
//!
//! The embedder is the `embedder` setting (`--embedder`, `EVOMEM_EMBEDDER`,
//! `evomem.toml`; MiniLM in f32 by default, `minilm-int8`, or `hashing`),
//! as for `evomem eval`; MiniLM falls back to the hashing embedder when its
//! model folder is missing, saying so on stderr in one line, and a value
//! that names no embedder is refused. Output on stdout: one line per pair
//! `i j cosine`, the pair (0, 1) last, and a final line holding only the
//! cosine of the first two texts, so scripts can read it with `tail -n1`.

use crate::settings::Settings;
use anyhow::Context;
use evomem_core::{dot, Embedder};
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `evomem embed`.
#[derive(clap::Args)]
pub struct Args {
    /// Texts to embed (at least two).
    #[arg(required = true, num_args = 2..)]
    pub texts: Vec<String>,
    /// Models directory holding `all-MiniLM-L6-v2/` [settings `models_dir`].
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Embedder: minilm (f32; the hashing fallback when its folder is
    /// missing), minilm-int8 (8-bit dense layers) or hashing [settings
    /// `embedder`, minilm].
    #[arg(long, value_parser = ["minilm", "minilm-int8", "hashing"])]
    pub embedder: Option<String>,
    /// The same as `--embedder hashing` (`embedder`).
    #[arg(long, conflicts_with = "embedder")]
    pub hashing: bool,
}

/// Run `evomem embed`.
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<()> {
    let mut s = settings.clone();
    if let Some(e) = &args.embedder {
        s.embedder = e.clone();
    }
    if args.hashing {
        s.embedder = "hashing".into();
    }
    if let Some(d) = &args.models_dir {
        s.models_dir = d.clone();
    }
    s.validate()?;
    let embedder: Arc<dyn Embedder> = match s.embedder.as_str() {
        "hashing" => Arc::new(evomem_embed::HashingEmbedder::new(
            evomem_embed::FALLBACK_DIM,
        )),
        name => {
            let (e, notice) =
                evomem_embed::load_default_as(&s.models_dir, s.threads(), 0, name == "minilm-int8")
                    .with_context(|| format!("loading the embedder `{name}`"))?;
            if let Some(n) = notice {
                eprintln!("{n}");
            }
            e
        }
    };
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let vecs = embedder.embed(&texts).context("embedding the texts")?;
    eprintln!("model: {} ({} dims)", embedder.model_id(), embedder.dim());
    let n = vecs.len();
    let mut pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .filter(|&p| p != (0, 1))
        .collect();
    pairs.push((0, 1));
    for (i, j) in &pairs {
        println!("{i} {j} {:.4}", dot(&vecs[*i], &vecs[*j]));
    }
    println!("{:.4}", dot(&vecs[0], &vecs[1]));
    Ok(())
}
