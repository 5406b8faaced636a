//! # evomem-eval
//!
//! Loaders, protocols, metrics, reports (skeleton).
pub mod data;
