//! `evomem`: the command-line tool (skeleton).

fn main() -> anyhow::Result<()> {
    Ok(())
}
