//! Integration tests of evomem-store, built into one binary.
//!
//! - `conformance`: one suite run against every [`evomem_store::MemoryStore`];
//! - `timetravel`: proptest, replay and `state_at` equal the live states;
//! - `isolation`: proptest, no recall leaks another user's private record;
//! - `forget`: nothing of a forgotten user is left, down to the raw bytes;
//! - `crash`: SIGKILL an ingesting child, reopen, nothing acked is lost;
//! - `corrupt`: damaged or foreign files give clear errors naming the path;
//! - `format`: the committed version-1 fixture still opens;
//! - `backup`: an online copy under concurrent writes is consistent;
//! - `pgtls`: TLS to PostgreSQL (`require`, `verify-full`), a wrong CA refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod backup;
mod common;
mod conformance;
mod corrupt;
mod crash;
mod fixture_ops;
mod forget;
mod format;
mod isolation;
mod pgsettings;
mod pgtls;
mod timetravel;
mod unlogged;
