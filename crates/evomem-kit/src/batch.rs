//! Batched roles: several inputs of one role answered in one model call.
//!
//! A budget mode that must stay within a few thousand tokens per user cannot
//! pay one prompt header per note. [`Batch`] turns any [`Batchable`] role
//! into a role whose input is a list of the inner role's inputs and whose
//! answer is `{"answers": [one inner answer per input, in order]}`:
//!
//! - the prompt is the batch's own file ([`Batchable::batch_template`]); each
//!   input appears in it as `[i] <item text>` ([`Batchable::item_text`], a
//!   compact rendering written for the batch, not the inner prompt);
//! - the schema is the inner role's answer schema, as an array of exactly
//!   `n` items ([`Role::schema_for`]);
//! - the parse checks the count and parses every answer with the inner
//!   role's own [`Role::parse`] (through [`Batchable::parse_item`]), so a batched answer is held to the same
//!   rules as a single one; an error names the answer's position;
//! - the offline algorithm is the inner role's, input by input: batching
//!   never changes what an offline run computes.
//!
//! The hub treats a batch as one role run (one repair turn, one fallback,
//! one accounting row under [`Batchable::batch_name`]).

use evomem_core::{LlmError, Role};
use std::collections::BTreeMap;

/// A role whose inputs can be answered several at a time.
pub trait Batchable: Role {
    /// Name of the batched role (also its prompt file stem).
    fn batch_name(&self) -> &'static str;
    /// The batched role's prompt. Variables: `n`, `items` (the numbered
    /// item texts, one block per input) and [`Batchable::batch_variables`].
    fn batch_template(&self) -> &'static str;
    /// How one input appears in the batched prompt.
    fn item_text(&self, input: &Self::Input) -> String;
    /// Variables shared by the whole batch (relation lists, limits).
    fn batch_variables(&self, items: &[Self::Input]) -> BTreeMap<String, String>;
    /// Schema of one answer within the batch, given the whole batch (so
    /// that bounds can cover every item). Default: [`Role::schema`].
    fn item_schema(&self, _items: &[Self::Input]) -> serde_json::Value {
        self.schema()
    }
    /// Completion tokens that fit one item's answer in the batch.
    fn item_max_tokens(&self) -> u32;
    /// Parse one answer within the batch. Default: [`Role::parse`]; a role
    /// whose batched prompt asks for less (no link weights, say) fills the
    /// rest in here before delegating.
    fn parse_item(
        &self,
        input: &Self::Input,
        answer: serde_json::Value,
    ) -> Result<Self::Output, String> {
        self.parse(input, answer)
    }
}

/// The batched form of role `R`, for at most `max_items` inputs per call
/// (which sizes the completion limit).
#[derive(Debug, Clone, Copy)]
pub struct Batch<R> {
    /// The inner role.
    pub role: R,
    /// Most inputs per call.
    pub max_items: usize,
}

impl<R: Batchable> Role for Batch<R> {
    type Input = Vec<R::Input>;
    type Output = Vec<R::Output>;

    fn name(&self) -> &'static str {
        self.role.batch_name()
    }
    fn template(&self) -> &'static str {
        self.role.batch_template()
    }
    fn variables(&self, items: &Vec<R::Input>) -> BTreeMap<String, String> {
        let mut v = self.role.batch_variables(items);
        v.insert("n".into(), items.len().to_string());
        v.insert(
            "items".into(),
            items
                .iter()
                .enumerate()
                .map(|(i, x)| format!("[{i}] {}", self.role.item_text(x)))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        v
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "required": ["answers"],
            "properties": {"answers": {"type": "array", "items": self.role.schema()}}
        })
    }
    fn schema_for(&self, items: &Vec<R::Input>) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "required": ["answers"],
            "properties": {"answers": {
                "type": "array",
                "minItems": items.len(),
                "maxItems": items.len(),
                "items": self.role.item_schema(items)
            }}
        })
    }
    fn parse(
        &self,
        items: &Vec<R::Input>,
        mut answer: serde_json::Value,
    ) -> Result<Vec<R::Output>, String> {
        let answers = match answer.get_mut("answers").map(serde_json::Value::take) {
            Some(serde_json::Value::Array(a)) => a,
            Some(_) => return Err("answers: not an array".into()),
            None => return Err("answers: missing".into()),
        };
        if answers.len() != items.len() {
            return Err(format!(
                "answers: {} answers for {} items",
                answers.len(),
                items.len()
            ));
        }
        items
            .iter()
            .zip(answers)
            .enumerate()
            .map(|(i, (x, a))| {
                self.role
                    .parse_item(x, a)
                    .map_err(|e| format!("answers[{i}]: {e}"))
            })
            .collect()
    }
    fn offline(&self, items: &Vec<R::Input>) -> Result<Vec<R::Output>, LlmError> {
        items.iter().map(|x| self.role.offline(x)).collect()
    }
    fn max_tokens(&self) -> Option<u32> {
        let n = u32::try_from(self.max_items.max(1)).unwrap_or(u32::MAX);
        Some(
            self.role
                .item_max_tokens()
                .saturating_mul(n)
                .saturating_add(16),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde::{Deserialize, Serialize};

    /// A toy role: doubles a number; the answer must be `{"y": 2x}`.
    #[derive(Clone, Copy)]
    struct Double;
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Out {
        y: i64,
    }
    impl Role for Double {
        type Input = i64;
        type Output = Out;
        fn name(&self) -> &'static str {
            "double"
        }
        fn template(&self) -> &'static str {
            "## user\n{{x}}"
        }
        fn variables(&self, x: &i64) -> BTreeMap<String, String> {
            BTreeMap::from([("x".to_string(), x.to_string())])
        }
        fn schema(&self) -> serde_json::Value {
            serde_json::json!({"type": "object", "required": ["y"]})
        }
        fn parse(&self, x: &i64, a: serde_json::Value) -> Result<Out, String> {
            let o: Out = serde_json::from_value(a).map_err(|e| e.to_string())?;
            if o.y != 2 * x {
                return Err(format!("y: {} is not twice {x}", o.y));
            }
            Ok(o)
        }
        fn offline(&self, x: &i64) -> Result<Out, LlmError> {
            Ok(Out { y: 2 * x })
        }
    }
    impl Batchable for Double {
        fn batch_name(&self) -> &'static str {
            "double_batch"
        }
        fn batch_template(&self) -> &'static str {
            "## user\n{{n}}:\n{{items}}"
        }
        fn item_text(&self, x: &i64) -> String {
            format!("x = {x}")
        }
        fn batch_variables(&self, _: &[i64]) -> BTreeMap<String, String> {
            BTreeMap::new()
        }
        fn item_max_tokens(&self) -> u32 {
            8
        }
    }

    fn batch() -> Batch<Double> {
        Batch {
            role: Double,
            max_items: 3,
        }
    }

    #[test]
    fn items_are_numbered_in_order() {
        let v = batch().variables(&vec![4, 7]);
        assert_eq!(v["items"], "[0] x = 4\n[1] x = 7");
        assert_eq!(v["n"], "2");
        assert_eq!(batch().name(), "double_batch");
        assert_eq!(batch().max_tokens(), Some(3 * 8 + 16));
    }

    #[test]
    fn schema_fixes_the_answer_count() {
        let s = batch().schema_for(&vec![1, 2]);
        assert_eq!(s["properties"]["answers"]["minItems"], 2);
        assert_eq!(s["properties"]["answers"]["maxItems"], 2);
        assert_eq!(s["properties"]["answers"]["items"]["required"][0], "y");
    }

    #[test]
    fn parse_holds_each_answer_to_the_inner_rules() {
        let b = batch();
        let ok = b
            .parse(
                &vec![1, 5],
                serde_json::json!({"answers": [{"y": 2}, {"y": 10}]}),
            )
            .unwrap();
        assert_eq!(ok, vec![Out { y: 2 }, Out { y: 10 }]);
        let bad = b
            .parse(
                &vec![1, 5],
                serde_json::json!({"answers": [{"y": 2}, {"y": 11}]}),
            )
            .unwrap_err();
        assert!(bad.starts_with("answers[1]: "), "{bad}");
        let short = b
            .parse(&vec![1, 5], serde_json::json!({"answers": [{"y": 2}]}))
            .unwrap_err();
        assert!(short.contains("1 answers for 2 items"), "{short}");
        assert!(b.parse(&vec![1], serde_json::json!({"y": 2})).is_err());
    }

    #[test]
    fn offline_is_the_inner_offline_input_by_input() {
        let xs = vec![3, -1, 0];
        let got = batch().offline(&xs).unwrap();
        let want: Vec<Out> = xs.iter().map(|x| Double.offline(x).unwrap()).collect();
        assert_eq!(got, want);
    }
}
