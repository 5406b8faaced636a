//! `evomem compare` (skeleton; being implemented).

/// Flags of `evomem compare`.
#[derive(clap::Args)]
pub struct Args {}

/// Run `evomem compare`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem compare` is not implemented yet")
}
