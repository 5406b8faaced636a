//! atomrec (skeleton; being implemented).

use crate::registry::{PolicyDeps, PolicySpec};
use evomem_core::{Policy, PolicyError};

/// Build a `atomrec` policy from its spec.
pub fn build(spec: &PolicySpec, _deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    Err(PolicyError::Config(format!("policy `{}` is not implemented yet", spec.name)))
}

/// Named ablation grids.
pub fn grid(name: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    Err(PolicyError::Config(format!("unknown grid `{name}`")))
}
