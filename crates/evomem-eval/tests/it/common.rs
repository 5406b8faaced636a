//! Shared helpers of the integration tests.

pub use evomem_kit::testing::shared_dataset;
