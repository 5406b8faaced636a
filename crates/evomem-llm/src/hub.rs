//! The role executor that policies call.

use evomem_core::{LlmError, Role};

/// Per-role backend choice plus accounting. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct LlmHub {}

impl LlmHub {
    /// Every role offline (the default).
    pub fn offline() -> Self {
        Self {}
    }

    /// Run `role` on `input` for `user` (used for per-user accounting).
    pub fn run<R: Role>(
        &self,
        role: &R,
        input: &R::Input,
        _user: Option<&str>,
    ) -> Result<R::Output, LlmError> {
        role.offline(input)
    }
}
