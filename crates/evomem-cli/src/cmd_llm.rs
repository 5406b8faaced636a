//! `evomem llm` (skeleton; being implemented).

/// Flags of `evomem llm`.
#[derive(clap::Args)]
pub struct Args {}

/// Run `evomem llm`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem llm` is not implemented yet")
}
