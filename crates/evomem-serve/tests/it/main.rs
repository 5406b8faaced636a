#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Integration tests of the HTTP service, on 127.0.0.1.

/// The `evomem` binary's allocator (`crates/evomem-cli/src/main.rs`), so
/// that the service runs here as it runs there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod api;
mod backup;
mod common;
mod harddelete;
mod idempotency;
mod inspector;
mod isolation;
mod keys;
mod limits;
mod locks;
mod mcp;
mod neighbours;
mod openapi;
mod overload;
mod paging;
mod postgres;
mod reembed;
