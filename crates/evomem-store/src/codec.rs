//! Encoding of ops, snapshots, records and vectors for the database stores.
//!
//! Bodies are JSON of the core types (serde_json with `float_roundtrip`, so
//! every f64 comes back bit for bit). Record bodies are stored without their
//! embedding; the vector goes to its own table (SQLite: little-endian f32
//! bytes; PostgreSQL: `real[]`).

use crate::error::StoreError;
use evomem_core::{LoggedOp, MemoryRecord, MemoryState};

/// JSON of a logged op.
pub(crate) fn op_body(op: &LoggedOp, location: &str) -> Result<String, StoreError> {
    serde_json::to_string(op).map_err(|source| StoreError::Decode {
        location: location.to_string(),
        what: format!("op seq {} (encoding)", op.seq),
        source,
    })
}

/// Parse a logged op and check that it carries the seq of its row.
pub(crate) fn parse_op(seq: u64, body: &str, location: &str) -> Result<LoggedOp, StoreError> {
    let op: LoggedOp = serde_json::from_str(body).map_err(|source| StoreError::Decode {
        location: location.to_string(),
        what: format!("op seq {seq}"),
        source,
    })?;
    if op.seq != seq {
        return Err(StoreError::Corrupt {
            location: location.to_string(),
            detail: format!("row seq {seq} holds an op with seq {}", op.seq),
        });
    }
    Ok(op)
}

/// JSON of a whole state.
pub(crate) fn state_body(state: &MemoryState, location: &str) -> Result<String, StoreError> {
    serde_json::to_string(state).map_err(|source| StoreError::Decode {
        location: location.to_string(),
        what: "snapshot (encoding)".to_string(),
        source,
    })
}

/// Parse a snapshot body.
pub(crate) fn parse_state(seq: u64, body: &str, location: &str) -> Result<MemoryState, StoreError> {
    serde_json::from_str(body).map_err(|source| StoreError::Decode {
        location: location.to_string(),
        what: format!("snapshot at seq {seq}"),
        source,
    })
}

/// JSON of a record without its embedding.
pub(crate) fn record_body(r: &MemoryRecord, location: &str) -> Result<String, StoreError> {
    let mut bare = r.clone();
    bare.embedding = None;
    serde_json::to_string(&bare).map_err(|source| StoreError::Decode {
        location: location.to_string(),
        what: format!("record {} (encoding)", r.id),
        source,
    })
}

/// Parse a record body.
pub(crate) fn parse_record(
    id: &str,
    body: &str,
    location: &str,
) -> Result<MemoryRecord, StoreError> {
    serde_json::from_str(body).map_err(|source| StoreError::Decode {
        location: location.to_string(),
        what: format!("record {id}"),
        source,
    })
}

/// Stable text of a record kind (for the `kind` column).
pub(crate) fn kind_text(r: &MemoryRecord) -> String {
    serde_json::to_value(&r.kind)
        .ok()
        .map(|v| match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Little-endian bytes of a vector.
#[cfg(feature = "sqlite")]
pub(crate) fn vector_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A vector from little-endian bytes.
#[cfg(feature = "sqlite")]
pub(crate) fn vector_from_bytes(
    b: &[u8],
    id: &str,
    location: &str,
) -> Result<Vec<f32>, StoreError> {
    if !b.len().is_multiple_of(4) {
        return Err(StoreError::Corrupt {
            location: location.to_string(),
            detail: format!(
                "vector of record {id} has {} bytes, not a multiple of 4",
                b.len()
            ),
        });
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A seq or logical time as a database integer.
pub(crate) fn to_i64(v: u64, what: &str, location: &str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Corrupt {
        location: location.to_string(),
        detail: format!("{what} {v} does not fit a 64-bit signed column"),
    })
}

/// A database integer as a seq or logical time.
pub(crate) fn to_u64(v: i64, what: &str, location: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt {
        location: location.to_string(),
        detail: format!("negative {what} {v}"),
    })
}
