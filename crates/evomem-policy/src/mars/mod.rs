//! mars (skeleton).
