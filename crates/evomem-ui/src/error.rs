//! Errors of the inspector's JSON API, each with its HTTP status: what was
//! not found (404, naming it), a bad query (400), or a failure reading the
//! run folder (500). Every error answers `{"error": "..."}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error of the inspector.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// Something named in the request does not exist.
    #[error("unknown {what} `{id}`")]
    NotFound {
        /// What kind of thing (run, policy, user, decision, op, record).
        what: &'static str,
        /// The name asked for.
        id: String,
    },
    /// The request's parameters are not valid.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The run folder lacks a file the request needs.
    #[error("{0}")]
    Missing(String),
    /// Reading the run folder failed.
    #[error("{0}")]
    Io(String),
}

impl From<evomem_rundir::RunDirError> for UiError {
    fn from(e: evomem_rundir::RunDirError) -> Self {
        UiError::Io(e.to_string())
    }
}

impl UiError {
    /// The status the error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            UiError::NotFound { .. } | UiError::Missing(_) => StatusCode::NOT_FOUND,
            UiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            UiError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.status();
        (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}
