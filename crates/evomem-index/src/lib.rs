//! # evomem-index
//!
//! Vector indexes (skeleton).
