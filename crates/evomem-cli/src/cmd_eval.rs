//! `evomem eval` and `evomem ablate` (skeleton; being implemented).

/// Flags of `evomem eval`.
#[derive(clap::Args)]
pub struct Args {}

/// Flags of `evomem ablate`.
#[derive(clap::Args)]
pub struct AblateArgs {}

/// Run `evomem eval`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`evomem eval` is not implemented yet")
}

/// Run `evomem ablate`.
pub fn run_ablate(_args: AblateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`evomem ablate` is not implemented yet")
}
