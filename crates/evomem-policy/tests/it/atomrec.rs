//! Integration tests for atomrec.
