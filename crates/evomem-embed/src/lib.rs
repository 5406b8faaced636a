//! # evomem-embed
//!
//! Embedders (skeleton).
