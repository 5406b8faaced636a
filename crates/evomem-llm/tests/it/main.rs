//! Integration tests of evomem-llm: the HTTP client against a real local
//! server, the hub's repair/fallback/cache/accounting, and the rank role.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod flow;
mod http;
mod live;
mod rank;
