//! Building policies from command-line specs.
//!
//! A spec is `NAME` or `NAME[key=value,key=value]`, e.g. `mars[tiers=ep,kcat=4]`.
//! A list of specs is comma-separated at bracket depth zero:
//! `random,pop,mars[kcat=2],mars[kcat=4]`. Each policy family parses its own
//! parameters and rejects unknown keys with an error naming the key.

use crate::{atomrec, baselines, mars};
use evomem_core::{Embedder, Policy, PolicyError};
use evomem_llm::LlmHub;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A parsed policy spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// Family name (`mars`, `bpr`, ...).
    pub name: String,
    /// Parameters in key order.
    pub params: BTreeMap<String, String>,
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.params.is_empty() {
            let kv: Vec<String> = self
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, "[{}]", kv.join(","))?;
        }
        Ok(())
    }
}

impl PolicySpec {
    /// Parse one spec.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let s = s.trim();
        let Some(open) = s.find('[') else {
            if s.is_empty() {
                return Err(PolicyError::Config("empty policy name".into()));
            }
            return Ok(Self {
                name: s.to_string(),
                params: BTreeMap::new(),
            });
        };
        let Some(inner) = s[open + 1..].strip_suffix(']') else {
            return Err(PolicyError::Config(format!(
                "policy spec `{s}`: missing closing `]`"
            )));
        };
        let mut params = BTreeMap::new();
        for kv in inner.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(PolicyError::Config(format!(
                    "policy spec `{s}`: parameter `{kv}` is not key=value"
                )));
            };
            params.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(Self {
            name: s[..open].trim().to_string(),
            params,
        })
    }

    /// Parse a comma-separated list (commas inside brackets do not split).
    pub fn parse_list(s: &str) -> Result<Vec<Self>, PolicyError> {
        let mut out = Vec::new();
        let mut depth = 0i32;
        let mut start = 0;
        for (i, c) in s.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(Self::parse(&s[start..i])?);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(Self::parse(&s[start..])?);
        Ok(out)
    }

    /// A parameter parsed as `T`, or `default` when absent; a bad value is an
    /// error naming the key.
    pub fn get<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, PolicyError> {
        match self.params.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                PolicyError::Config(format!("{}: bad value `{v}` for `{key}`", self.name))
            }),
        }
    }

    /// Fail if any parameter is not in `known`.
    pub fn check_known(&self, known: &[&str]) -> Result<(), PolicyError> {
        for k in self.params.keys() {
            if !known.contains(&k.as_str()) {
                return Err(PolicyError::Config(format!(
                    "{}: unknown parameter `{k}` (known: {})",
                    self.name,
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// Shared services handed to every policy at construction.
#[derive(Clone)]
pub struct PolicyDeps {
    /// Embedder for texts (MiniLM or hashing).
    pub embedder: Arc<dyn Embedder>,
    /// LLM role executor.
    pub llm: Arc<LlmHub>,
    /// Run seed.
    pub seed: u64,
}

/// Every policy family name this build knows.
pub const POLICY_NAMES: &[&str] = &[
    "no-memory",
    "random",
    "pop",
    "itemknn",
    "bpr",
    "mars",
    "atomrec",
];

/// Build one policy.
pub fn build(spec: &PolicySpec, deps: &PolicyDeps) -> Result<Box<dyn Policy>, PolicyError> {
    match spec.name.as_str() {
        "no-memory" => {
            spec.check_known(&[])?;
            Ok(Box::new(evomem_core::NoMemory))
        }
        "random" | "pop" | "itemknn" | "bpr" => baselines::build(spec, deps),
        "mars" => mars::build(spec, deps),
        "atomrec" => atomrec::build(spec, deps),
        other => Err(PolicyError::Config(format!(
            "unknown policy `{other}` (known: {})",
            POLICY_NAMES.join(", ")
        ))),
    }
}

/// Named ablation grids: `(policy family, grid name)` to a list of specs.
pub fn grid(policy: &str, name: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    match policy {
        "mars" => mars::grid(name),
        "atomrec" => atomrec::grid(name),
        other => Err(PolicyError::Config(format!(
            "policy `{other}` has no ablation grids"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_with_brackets() {
        let l = PolicySpec::parse_list("pop,mars[tiers=ep,kcat=2],bpr").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].name, "mars");
        assert_eq!(l[1].params["kcat"], "2");
        assert_eq!(l[1].to_string(), "mars[kcat=2,tiers=ep]");
    }

    #[test]
    fn rejects_unclosed_bracket() {
        assert!(PolicySpec::parse("mars[kcat=2").is_err());
    }
}
