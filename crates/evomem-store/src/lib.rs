//! # evomem-store
//!
//! The engine that applies policy ops, and the stores that persist them.
//! (Skeleton: the in-memory engine below is the stable API; persistent stores
//! are added behind the same `Engine`.)

pub mod engine;

pub use engine::{Engine, StoreError};
