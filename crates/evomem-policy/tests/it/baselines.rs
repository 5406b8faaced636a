//! Integration tests for baselines.
