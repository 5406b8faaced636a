//! Tab-separated files with RecBole's typed header (`name:type`), shared by the
//! RecBole and AgentCF loaders.
//!
//! The header names each column and its type: `token` (one string),
//! `token_seq` (space-separated strings), `float`, or `float_seq`
//! (space-separated floats). Every data line must have as many tab-separated
//! fields as the header; float fields must parse (an empty float field means
//! "missing"). Errors give the 1-based line and field number.

use super::files::lines;
use super::DataError;
use std::path::{Path, PathBuf};

/// The type of a column, from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldType {
    /// One string.
    Token,
    /// Space-separated strings.
    TokenSeq,
    /// A float.
    Float,
    /// Space-separated floats.
    FloatSeq,
}

impl FieldType {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "token" => Some(Self::Token),
            "token_seq" => Some(Self::TokenSeq),
            "float" => Some(Self::Float),
            "float_seq" => Some(Self::FloatSeq),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::TokenSeq => "token_seq",
            Self::Float => "float",
            Self::FloatSeq => "float_seq",
        }
    }
}

/// One column of the header.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    /// Name before the `:`.
    pub name: String,
    /// Type after the `:`.
    pub ty: FieldType,
}

/// One data line.
#[derive(Debug)]
pub(crate) struct Row<'a> {
    /// 1-based line number.
    pub line: usize,
    /// Fields, as many as columns.
    pub fields: Vec<&'a str>,
}

/// A parsed, type-checked file.
#[derive(Debug)]
pub(crate) struct Table<'a> {
    /// The file.
    pub path: PathBuf,
    /// The header.
    pub columns: Vec<Column>,
    /// Data lines (blank lines skipped).
    pub rows: Vec<Row<'a>>,
}

impl<'a> Table<'a> {
    /// Parse `text` (the contents of `path`).
    pub fn parse(path: &Path, text: &'a str) -> Result<Self, DataError> {
        let mut it = lines(text);
        let Some((hline, header)) = it.next() else {
            return Err(DataError::Parse {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                expected: "a header line of `name:type` columns".into(),
                found: "an empty file".into(),
            });
        };
        let mut columns = Vec::new();
        for (i, h) in header.split('\t').enumerate() {
            let bad = |found: String| DataError::Parse {
                path: path.to_path_buf(),
                line: hline,
                column: i + 1,
                expected: "a header `name:type` with type token, token_seq, float or float_seq"
                    .into(),
                found,
            };
            let Some((name, ty)) = h.rsplit_once(':') else {
                return Err(bad(format!("`{h}`")));
            };
            let Some(ty) = FieldType::parse(ty.trim()) else {
                return Err(bad(format!("`{h}`")));
            };
            if name.trim().is_empty() {
                return Err(bad(format!("`{h}`")));
            }
            columns.push(Column {
                name: name.trim().to_string(),
                ty,
            });
        }
        let mut rows = Vec::new();
        for (line, l) in it {
            let fields: Vec<&str> = l.split('\t').collect();
            if fields.len() != columns.len() {
                return Err(DataError::Parse {
                    path: path.to_path_buf(),
                    line,
                    column: fields.len().min(columns.len()) + 1,
                    expected: format!("{} tab-separated fields", columns.len()),
                    found: format!("{} fields", fields.len()),
                });
            }
            for (c, (col, f)) in columns.iter().zip(&fields).enumerate() {
                let ok = match col.ty {
                    FieldType::Token | FieldType::TokenSeq => true,
                    FieldType::Float => f.trim().is_empty() || f.trim().parse::<f64>().is_ok(),
                    FieldType::FloatSeq => f.split_whitespace().all(|x| x.parse::<f64>().is_ok()),
                };
                if !ok {
                    return Err(DataError::Parse {
                        path: path.to_path_buf(),
                        line,
                        column: c + 1,
                        expected: format!("a {} for column `{}`", col.ty.name(), col.name),
                        found: format!("`{f}`"),
                    });
                }
            }
            rows.push(Row { line, fields });
        }
        Ok(Self {
            path: path.to_path_buf(),
            columns,
            rows,
        })
    }

    /// Index of column `name`, if present.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Index of column `name`, which must exist with one of the types `tys`.
    pub fn require(&self, name: &str, tys: &[FieldType]) -> Result<usize, DataError> {
        let header = self
            .columns
            .iter()
            .map(|c| format!("{}:{}", c.name, c.ty.name()))
            .collect::<Vec<_>>()
            .join(" ");
        let want = tys
            .iter()
            .map(|t| format!("`{name}:{}`", t.name()))
            .collect::<Vec<_>>()
            .join(" or ");
        match self.find(name) {
            None => Err(DataError::Parse {
                path: self.path.clone(),
                line: 1,
                column: self.columns.len() + 1,
                expected: format!("a column {want}"),
                found: format!("header `{header}`"),
            }),
            Some(i) if !tys.contains(&self.columns[i].ty) => Err(DataError::Parse {
                path: self.path.clone(),
                line: 1,
                column: i + 1,
                expected: format!("column {want}"),
                found: format!("`{name}:{}`", self.columns[i].ty.name()),
            }),
            Some(i) => Ok(i),
        }
    }

    /// An error at (`row`, column `col`).
    pub fn error(&self, row: &Row<'_>, col: usize, expected: &str, found: &str) -> DataError {
        DataError::Parse {
            path: self.path.clone(),
            line: row.line,
            column: col + 1,
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }
}

/// Parse an already type-checked float field; empty means `None`.
pub(crate) fn float(f: &str) -> Option<f64> {
    f.trim().parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_untyped_header() {
        let e = Table::parse(Path::new("x.inter"), "user_id:token\titem_id\n1\t2\n").unwrap_err();
        match e {
            DataError::Parse { line, column, .. } => assert_eq!((line, column), (1, 2)),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn rejects_bad_float_with_line_and_column() {
        let e = Table::parse(Path::new("x.inter"), "a:token\tb:float\n1\t2\n\n1\tx\n").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("x.inter:4:2"), "{s}");
        assert!(s.contains("`b`"), "{s}");
    }

    #[test]
    fn rejects_wrong_field_count() {
        let e = Table::parse(Path::new("x.inter"), "a:token\tb:float\n1\n").unwrap_err();
        assert!(e.to_string().contains("x.inter:2:2"), "{e}");
    }
}
