//! `evomem embed TEXT TEXT…`: embed texts and print their pairwise cosine
//! similarities.
//!
//! Uses MiniLM when its model folder exists (see `scripts/fetch-models.sh`),
//! otherwise the hashing embedder, saying so on stderr in one line. Output on
//! stdout: one line per pair `i j cosine`, the pair (0, 1) last, and a final
//! line holding only the cosine of the first two texts, so scripts can read
//! it with `tail -n1`.

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
    /// Use the weight-free hashing embedder even when MiniLM is available.
    #[arg(long)]
    pub hashing: bool,
}

/// Run `evomem embed`.
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<()> {
    let embedder: Arc<dyn Embedder> = if args.hashing {
        Arc::new(evomem_embed::HashingEmbedder::new(
            evomem_embed::FALLBACK_DIM,
        ))
    } else {
        let dir = args.models_dir.as_deref().unwrap_or(&settings.models_dir);
        let (e, notice) = evomem_embed::load_default(dir, settings.threads())
            .context("loading the default embedder")?;
        if let Some(n) = notice {
            eprintln!("{n}");
        }
        e
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
