//! `evomem embed` (skeleton; being implemented).

/// Flags of `evomem embed`.
#[derive(clap::Args)]
pub struct Args {}

/// Run `evomem embed`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem embed` is not implemented yet")
}
