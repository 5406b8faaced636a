//! Integration tests of evomem-embed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fallback;
#[cfg(feature = "minilm")]
mod minilm_forward;
#[cfg(feature = "minilm")]
mod minilm_int8;
#[cfg(feature = "minilm")]
mod minilm_reference;
