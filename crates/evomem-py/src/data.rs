//! Datasets from Python: `load(path, format)` through the Rust loaders, and
//! `Dataset.from_interactions(rows, items)` from Python sequences.
//!
//! Rows from Python are written as lines of evomem's own JSONL format and
//! read by its loader (`evomem_eval::data::parse_jsonl`), so they meet
//! exactly the checks a file meets; the loader's line numbers are mapped
//! back to `rows[i]` and `items[token]` in the error.

use crate::convert::to_json;
use crate::errors::DataError;
use evomem_core::Dataset;
use evomem_eval::data::{self, Format};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde_json::{json, Value};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A loaded dataset: users, items (with their metadata) and interactions in
/// replay order.
#[pyclass(name = "Dataset", module = "evomem", frozen)]
pub struct PyDataset {
    /// The dataset.
    pub inner: Arc<Dataset>,
    /// SHA-256 of every file read (or of the rows handed over).
    pub files: BTreeMap<String, String>,
    /// Where it was loaded from (`None` for rows from Python).
    pub path: Option<PathBuf>,
    /// The format it was loaded with (`None`: detected, or rows).
    pub format: Option<String>,
}

#[pymethods]
impl PyDataset {
    /// Build a dataset from `(user, item, timestamp[, rating])` rows (or
    /// dicts with those keys and an optional `split`), with optional item
    /// metadata `{token: {"title", "categories", "text", "attributes"}}`.
    #[staticmethod]
    #[pyo3(signature = (rows, items=None, name="python"))]
    fn from_interactions(
        rows: &Bound<'_, PyAny>,
        items: Option<&Bound<'_, PyAny>>,
        name: &str,
    ) -> PyResult<Self> {
        let mut lines = vec![json!({"type": "dataset", "name": name}).to_string()];
        // What each line was, for errors: index 0 is line 1.
        let mut origin = vec!["the dataset name".to_string()];
        if let Some(items) = items {
            let items = items.downcast::<PyDict>().map_err(|_| {
                DataError::new_err(
                    "items: expected a dict {token: {title, categories, text, attributes}}",
                )
            })?;
            for (token, meta) in items.iter() {
                let token_j = to_json(&token)
                    .map_err(|e| DataError::new_err(format!("items: a key: {e}")))?;
                let label = format!("items[{}]", token_j);
                let mut line = match to_json(&meta)
                    .map_err(|e| DataError::new_err(format!("{label}: {e}")))?
                {
                    Value::Object(m) => m,
                    Value::Null => serde_json::Map::new(),
                    other => {
                        return Err(DataError::new_err(format!(
                            "{label}: expected a dict of item metadata, found {other}"
                        )))
                    }
                };
                line.insert("type".into(), json!("item"));
                line.insert("id".into(), token_j);
                lines.push(Value::Object(line).to_string());
                origin.push(label);
            }
        }
        for (i, row) in rows.try_iter()?.enumerate() {
            let row = row?;
            let label = format!("rows[{i}]");
            let line = row_json(&row).map_err(|e| DataError::new_err(format!("{label}: {e}")))?;
            lines.push(line.to_string());
            origin.push(label);
        }
        let text = lines.join("\n");
        let dataset = data::parse_jsonl(Path::new("<rows>"), name, &text)
            .map_err(|e| DataError::new_err(row_error(&e, &origin)))?;
        let digest = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        Ok(Self {
            inner: Arc::new(dataset),
            files: BTreeMap::from([("<rows>".to_string(), digest)]),
            path: None,
            format: None,
        })
    }

    /// The dataset's name.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
    /// Number of users.
    #[getter]
    fn n_users(&self) -> usize {
        self.inner.users.len()
    }
    /// Number of items.
    #[getter]
    fn n_items(&self) -> usize {
        self.inner.catalog.len()
    }
    /// Number of interactions.
    #[getter]
    fn n_interactions(&self) -> usize {
        self.inner.interactions.len()
    }
    /// The folder or file it was loaded from, if any.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }
    /// SHA-256 of every file read, by file name.
    #[getter]
    fn files(&self) -> BTreeMap<String, String> {
        self.files.clone()
    }
    /// User tokens, by dense id.
    fn users(&self) -> Vec<String> {
        self.inner.users.iter().map(|u| u.token.clone()).collect()
    }
    /// Item tokens, by dense id.
    fn items(&self) -> Vec<String> {
        self.inner
            .catalog
            .items
            .iter()
            .map(|i| i.token.clone())
            .collect()
    }
    /// Interactions in replay order, as `(user, item, timestamp, rating,
    /// time)` with tokens and the logical time.
    #[allow(clippy::type_complexity)]
    fn interactions(&self) -> Vec<(String, String, i64, Option<f32>, u64)> {
        let d = &self.inner;
        d.interactions
            .iter()
            .map(|e| {
                (
                    token_of_user(d, e.user),
                    token_of_item(d, e.item),
                    e.timestamp,
                    e.rating,
                    e.time.0,
                )
            })
            .collect()
    }
    fn __repr__(&self) -> String {
        format!(
            "Dataset({:?}: {} users, {} items, {} interactions)",
            self.inner.name,
            self.inner.users.len(),
            self.inner.catalog.len(),
            self.inner.interactions.len()
        )
    }
}

/// The token of a user.
pub fn token_of_user(d: &Dataset, u: evomem_core::UserId) -> String {
    d.users
        .get(u.index())
        .map_or_else(|| u.0.to_string(), |x| x.token.clone())
}

/// The token of an item.
pub fn token_of_item(d: &Dataset, i: evomem_core::ItemId) -> String {
    d.catalog
        .get(i)
        .map_or_else(|| i.0.to_string(), |x| x.token.clone())
}

/// Load a dataset folder (or file) with the Rust loaders; `format` is
/// `recbole`, `agentcf`, `iagent` or `jsonl`, detected when omitted.
#[pyfunction]
#[pyo3(signature = (path, format=None))]
pub fn load(py: Python<'_>, path: PathBuf, format: Option<String>) -> PyResult<PyDataset> {
    let fmt = format
        .as_deref()
        .map(|f| f.parse::<Format>())
        .transpose()
        .map_err(|e| DataError::new_err(e.to_string()))?;
    let loaded = py
        .allow_threads(|| match fmt {
            Some(f) => data::load(&path, f),
            None => data::load_auto(&path),
        })
        .map_err(|e| DataError::new_err(e.to_string()))?;
    Ok(PyDataset {
        inner: Arc::new(loaded.dataset),
        files: loaded.files,
        path: Some(path),
        format,
    })
}

/// One row as a JSONL interaction object.
fn row_json(row: &Bound<'_, PyAny>) -> PyResult<Value> {
    if row.downcast::<PyDict>().is_ok() {
        let mut v = to_json(row)?;
        if let Value::Object(m) = &mut v {
            m.insert("type".into(), json!("interaction"));
        }
        return Ok(v);
    }
    let fields: Vec<Bound<'_, PyAny>> = if let Ok(t) = row.downcast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = row.downcast::<PyList>() {
        l.iter().collect()
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected a tuple (user, item, timestamp[, rating]) or a dict, found `{}`",
            row.get_type().name()?
        )));
    };
    if !(3..=4).contains(&fields.len()) {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected (user, item, timestamp[, rating]), found {} fields",
            fields.len()
        )));
    }
    let mut m = serde_json::Map::new();
    m.insert("type".into(), json!("interaction"));
    for (name, f) in ["user", "item", "timestamp", "rating"].iter().zip(&fields) {
        let v = to_json(f)?;
        if *name == "rating" && v.is_null() {
            continue;
        }
        m.insert((*name).into(), v);
    }
    Ok(Value::Object(m))
}

/// A loader error on the rows' JSONL, told in terms of rows and fields.
fn row_error(e: &data::DataError, origin: &[String]) -> String {
    let at = |line: usize| {
        origin
            .get(line.wrapping_sub(1))
            .cloned()
            .unwrap_or_else(|| format!("line {line}"))
    };
    if let data::DataError::Field {
        line,
        field,
        expected,
        found,
        ..
    } = e
    {
        return format!(
            "{}, field `{field}`: expected {expected}, found {found}",
            at(*line)
        );
    }
    if let data::DataError::Inconsistent { line, reason, .. } = e {
        return format!("{}: {reason}", at(*line));
    }
    if let data::DataError::Parse {
        line,
        expected,
        found,
        ..
    } = e
    {
        return format!("{}: expected {expected}, found {found}", at(*line));
    }
    e.to_string()
}
