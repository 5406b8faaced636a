//! `Idempotency-Key` on writes: a client that retries a write after a
//! timeout or a dropped connection, with the same key, gets the first
//! answer again instead of a second write.
//!
//! The first request with a key runs in a task of its own, so that it
//! finishes and records its answer even when the client (or the request
//! timeout) stops waiting. A retry that arrives while it runs is answered
//! 409 `in_progress` with `Retry-After`; one that arrives after gets the
//! recorded status and body. A key sent again with another method, path or
//! body is refused (422), so that a key cannot silently stand for two
//! different writes. Keys are scoped by tenant and remembered in memory for
//! the last [`REMEMBERED`] keys of the process (not across a restart); an
//! answer of 5xx is not recorded, so the key can be retried.

use crate::error::ApiError;
use crate::lock;
use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Keys remembered per process.
pub const REMEMBERED: usize = 10_000;

/// The header.
pub const HEADER: &str = "idempotency-key";

enum Entry {
    Running {
        request: [u8; 32],
    },
    Done {
        request: [u8; 32],
        status: StatusCode,
        body: axum::body::Bytes,
    },
}

/// (tenant, key).
type Id = (String, String);

/// Answers by (tenant, key), and the keys oldest first.
#[derive(Default)]
pub struct Idempotency {
    map: Mutex<(HashMap<Id, Entry>, VecDeque<Id>)>,
}

/// What to do with a request.
pub enum Start {
    /// First with this key: run it, then [`Idempotency::finish`].
    Run,
    /// Answered before: send this.
    Replay(Response),
}

impl Idempotency {
    /// Look `key` up for `tenant`; `request` is a digest of the method, path
    /// and body.
    pub fn start(&self, tenant: &str, key: &str, request: [u8; 32]) -> Result<Start, ApiError> {
        let mut g = lock(&self.map);
        let (map, order) = &mut *g;
        let id = (tenant.to_string(), key.to_string());
        match map.get(&id) {
            Some(Entry::Running { request: r }) | Some(Entry::Done { request: r, .. })
                if *r != request =>
            {
                Err(ApiError::field(
                    "Idempotency-Key",
                    "this key was used for another request (method, path or body differ)",
                ))
            }
            Some(Entry::Running { .. }) => Err(ApiError::InProgress),
            Some(Entry::Done { status, body, .. }) => {
                let mut resp = (*status, body.clone()).into_response();
                resp.headers_mut().insert(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                );
                resp.headers_mut().insert(
                    "idempotent-replay",
                    axum::http::HeaderValue::from_static("true"),
                );
                Ok(Start::Replay(resp))
            }
            None => {
                map.insert(id.clone(), Entry::Running { request });
                order.push_back(id);
                while order.len() > REMEMBERED {
                    if let Some(old) = order.pop_front() {
                        map.remove(&old);
                    }
                }
                Ok(Start::Run)
            }
        }
    }

    /// Record the answer of a request started with [`Start::Run`]; a 5xx
    /// answer forgets the key instead, so that a retry runs again.
    pub fn finish(
        &self,
        tenant: &str,
        key: &str,
        request: [u8; 32],
        status: StatusCode,
        body: axum::body::Bytes,
    ) {
        let mut g = lock(&self.map);
        let (map, order) = &mut *g;
        let id = (tenant.to_string(), key.to_string());
        if status.is_server_error() {
            map.remove(&id);
            order.retain(|k| k != &id);
        } else {
            map.insert(
                id,
                Entry::Done {
                    request,
                    status,
                    body,
                },
            );
        }
    }
}

/// The key of a request, if it sent one; checked for length and characters.
pub fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(HEADER) else {
        return Ok(None);
    };
    let k = v
        .to_str()
        .ok()
        .filter(|k| (1..=128).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::field(
                "Idempotency-Key",
                "must be 1-128 printable ASCII characters",
            )
        })?;
    Ok(Some(k.to_string()))
}

/// Split a request into its parts and body bytes (at most `limit`), and the
/// digest that identifies it.
pub async fn digest(req: Request, limit: usize) -> Result<(Request, [u8; 32]), ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::BodyTooLarge { limit })?;
    let mut h = Sha256::new();
    h.update(parts.method.as_str().as_bytes());
    h.update([0]);
    h.update(parts.uri.path().as_bytes());
    h.update([0]);
    h.update(parts.uri.query().unwrap_or("").as_bytes());
    h.update([0]);
    h.update(&bytes);
    let d: [u8; 32] = h.finalize().into();
    Ok((Request::from_parts(parts, Body::from(bytes)), d))
}
