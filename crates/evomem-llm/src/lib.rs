//! # evomem-llm
//!
//! Runs typed [`evomem_core::Role`]s either offline or through a language
//! model. (Skeleton: `LlmHub::run` is the stable entry point policies call.)

pub mod hub;

pub use hub::LlmHub;
