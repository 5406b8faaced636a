//! Reading one JSON object per line with field-level errors, shared by the
//! two JSON-lines loaders.

use super::DataError;
use serde_json::{Map, Value};
use std::path::Path;

/// A short description of a JSON value for error messages.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let short: String = s.chars().take(40).collect();
            format!("string \"{short}\"")
        }
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// One parsed line.
pub(crate) struct Line<'a> {
    path: &'a Path,
    /// 1-based line number.
    pub line: usize,
    obj: Map<String, Value>,
}

impl<'a> Line<'a> {
    /// Parse `text` (line `line` of `path`) as a JSON object.
    pub fn parse(path: &'a Path, line: usize, text: &str) -> Result<Self, DataError> {
        let v: Value = serde_json::from_str(text).map_err(|e| DataError::Parse {
            path: path.to_path_buf(),
            line,
            column: e.column(),
            expected: "a JSON object".into(),
            found: format!("invalid JSON ({e})"),
        })?;
        match v {
            Value::Object(obj) => Ok(Self { path, line, obj }),
            other => Err(DataError::Parse {
                path: path.to_path_buf(),
                line,
                column: 1,
                expected: "a JSON object".into(),
                found: describe(&other),
            }),
        }
    }

    /// A field error on this line.
    pub fn err(&self, field: &str, expected: &str, found: String) -> DataError {
        DataError::Field {
            path: self.path.to_path_buf(),
            line: self.line,
            field: field.to_string(),
            expected: expected.to_string(),
            found,
        }
    }

    /// Fail on any field not in `known`.
    pub fn check_known(&self, known: &[&str]) -> Result<(), DataError> {
        for k in self.obj.keys() {
            if !known.contains(&k.as_str()) {
                return Err(self.err(
                    k,
                    &format!("one of the fields {}", known.join(", ")),
                    "an unknown field".into(),
                ));
            }
        }
        Ok(())
    }

    /// The field, or `None` when absent or null.
    pub fn opt(&self, field: &str) -> Option<&Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    /// The field, which must be present and non-null.
    pub fn req(&self, field: &str, expected: &str) -> Result<&Value, DataError> {
        self.opt(field)
            .ok_or_else(|| self.err(field, expected, "nothing".into()))
    }

    /// An id: a non-empty string or an integer.
    pub fn id_value(&self, field: &str, v: &Value) -> Result<String, DataError> {
        match v {
            Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
            other => Err(self.err(
                field,
                "an id (non-empty string or integer)",
                describe(other),
            )),
        }
    }

    /// A required id field.
    pub fn id(&self, field: &str) -> Result<String, DataError> {
        let v = self.req(field, "an id (non-empty string or integer)")?;
        self.id_value(field, v)
    }

    /// An optional string field.
    pub fn opt_str(&self, field: &str) -> Result<Option<String>, DataError> {
        match self.opt(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.err(field, "a string", describe(other))),
        }
    }

    /// A required array field.
    pub fn array(&self, field: &str) -> Result<&Vec<Value>, DataError> {
        match self.req(field, "an array")? {
            Value::Array(a) => Ok(a),
            other => Err(self.err(field, "an array", describe(other))),
        }
    }

    /// An optional array field.
    pub fn opt_array(&self, field: &str) -> Result<Option<&Vec<Value>>, DataError> {
        match self.opt(field) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(self.err(field, "an array", describe(other))),
        }
    }

    /// An optional object field.
    pub fn opt_object(&self, field: &str) -> Result<Option<&Map<String, Value>>, DataError> {
        match self.opt(field) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(self.err(field, "an object", describe(other))),
        }
    }

    /// An optional finite number.
    pub fn opt_f64(&self, field: &str) -> Result<Option<f64>, DataError> {
        match self.opt(field) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(self.err(field, "a finite number", n.to_string())),
            },
            Some(other) => Err(self.err(field, "a number", describe(other))),
        }
    }
}
