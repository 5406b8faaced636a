//! # evomem-policy
//!
//! Memory policies behind the [`evomem_core::Policy`] trait.
//!
//! - [`baselines`]: `random`, `pop`, `itemknn`, `bpr` (and `no-memory`, from core);
//! - [`mars`]: MARS hierarchical belief-state memory;
//! - [`atomrec`]: AtomRec atomic collaborative memory;
//! - `memrl`, `romerl` (in [`families`]): trajectory memories with learned
//!   utilities, sharing [`utility`].

pub mod atomrec;
pub mod baselines;
pub mod families;
pub mod mars;
pub mod registry;
pub mod utility;

pub use registry::{family, Capabilities, Family, PolicyDeps, PolicySpec, FAMILIES};
