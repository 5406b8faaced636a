//! `evomem explain` (skeleton; being implemented).

/// Flags of `evomem explain`.
#[derive(clap::Args)]
pub struct Args {}

/// Run `evomem explain`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem explain` is not implemented yet")
}
