//! `mars_categories`: the one-time derivation of a domain's preference
//! categories (Appendix, Table 6). Offline: the metadata-derived categories
//! of [`crate::mars::categories`].

use super::{arr, lines, obj, str_field};
use crate::mars::categories::CategoryDef;
use evomem_core::{LlmError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

/// One sample item for category derivation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleItem {
    /// Title.
    pub title: String,
    /// Categories.
    pub categories: Vec<String>,
    /// Attributes.
    pub attributes: BTreeMap<String, String>,
    /// First text field, shortened.
    pub text: String,
}

/// Input of `mars_categories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoriesInput {
    /// Domain (dataset name).
    pub domain: String,
    /// How many categories.
    pub n: usize,
    /// Sample items (the prompt shows the first 10, as in the paper).
    pub samples: Vec<SampleItem>,
    /// The metadata-derived categories (the offline answer).
    pub derived: Vec<CategoryDef>,
}

/// Output of `mars_categories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoriesOutput {
    /// The categories.
    pub categories: Vec<CategoryDef>,
}

/// One-time derivation of a domain's preference categories.
#[derive(Debug, Clone, Copy, Default)]
pub struct CategoriesRole;

impl Role for CategoriesRole {
    type Input = CategoriesInput;
    type Output = CategoriesOutput;

    fn name(&self) -> &'static str {
        "mars_categories"
    }
    /// Completion limit: 1.25 × the offline answer's estimated tokens on ml-100k (170:
    /// six categories with descriptions), rounded up to a multiple of 64.
    fn max_tokens(&self) -> Option<u32> {
        Some(256)
    }
    fn template(&self) -> &'static str {
        include_str!("../../../../prompts/mars_categories.md")
    }
    fn variables(&self, i: &CategoriesInput) -> BTreeMap<String, String> {
        let samples = lines(&i.samples[..i.samples.len().min(10)], |s| {
            let attrs: Vec<String> = s
                .attributes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "- {} | categories: {} | {} | {}",
                s.title,
                s.categories.join(", "),
                attrs.join(" "),
                s.text
            )
        });
        BTreeMap::from([
            ("domain".into(), i.domain.clone()),
            ("n".into(), i.n.to_string()),
            ("samples".into(), samples),
        ])
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": ["categories"],
               "properties": {"categories": {"type": "array", "items": {"type": "object",
                   "required": ["name", "description"],
                   "properties": {"name": {"type": "string"}, "description": {"type": "string"}}}}}})
    }
    /// The schema bounded by its input: 1 to `n` categories, a name of at
    /// most 24 characters and a description of at most 100, no other keys.
    /// Unbounded, SmolLM2 listed categories until its token limit.
    fn schema_for(&self, i: &CategoriesInput) -> serde_json::Value {
        json!({"type": "object", "required": ["categories"], "additionalProperties": false,
               "properties": {"categories": {"type": "array", "minItems": 1, "maxItems": i.n.max(1),
                   "items": {"type": "object", "required": ["name", "description"],
                       "additionalProperties": false,
                       "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 24},
                                      "description": {"type": "string", "minLength": 1, "maxLength": 100}}}}}})
    }
    fn parse(
        &self,
        i: &CategoriesInput,
        answer: serde_json::Value,
    ) -> Result<CategoriesOutput, String> {
        let o = obj(&answer)?;
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (k, v) in arr(o, "categories")?.into_iter().enumerate() {
            let ctx = format!("categories[{k}]");
            let name = str_field(v, "name", &ctx)?.to_lowercase();
            let description = str_field(v, "description", &ctx)?.to_string();
            if !seen.insert(name.clone()) {
                continue;
            }
            let axis = i
                .derived
                .iter()
                .find(|d| d.name == name)
                .and_then(|d| d.axis.clone());
            out.push(CategoryDef {
                name,
                description,
                axis,
            });
        }
        if out.is_empty() || out.len() > i.n {
            return Err(format!(
                "expected 1..={} categories, got {}",
                i.n,
                out.len()
            ));
        }
        Ok(CategoriesOutput { categories: out })
    }
    fn offline(&self, i: &CategoriesInput) -> Result<CategoriesOutput, LlmError> {
        Ok(CategoriesOutput {
            categories: i.derived.iter().take(i.n).cloned().collect(),
        })
    }
}
