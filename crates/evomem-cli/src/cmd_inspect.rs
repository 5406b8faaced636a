//! `evomem inspect` (skeleton; being implemented).

/// Flags of `evomem inspect`.
#[derive(clap::Args)]
pub struct Args {}

/// Run `evomem inspect`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem inspect` is not implemented yet")
}
