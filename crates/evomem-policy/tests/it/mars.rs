//! Integration tests for mars.
