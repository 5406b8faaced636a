//! `evomem bench` (skeleton; being implemented).

/// Flags of `evomem bench`.
#[derive(clap::Args)]
pub struct Args {}

/// Run `evomem bench`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem bench` is not implemented yet")
}
