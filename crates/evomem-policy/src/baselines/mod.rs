//! baselines (skeleton).
