//! Data loaders (skeleton).
