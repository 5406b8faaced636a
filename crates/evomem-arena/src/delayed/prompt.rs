//! Prompts of the delayed arena, rendered only to estimate what an LLM
//! would be charged (offline runs call no model).
//!
//! Three prompt files live next to this module (`prompts/*.md`, the
//! `## system` / `## user` syntax of `evomem_llm::template`):
//!
//! - `predict.md`: one prediction: the recalled memory (profile and
//!   entries, one per line) and the movie to rate;
//! - `reflect.md`: one reflection (previous summary + new ratings);
//! - `mem0.md`: one Mem0 manager decision (new fact + related memories).
//!
//! A call's tokens are `approx_prompt_tokens` of the rendered messages (one
//! token per four characters plus four per message, the hub's offline
//! estimate) plus `approx_tokens` of the answer the offline algorithm
//! serialises.

use evomem_core::{ChatMessage, DecisionContext, PolicyError};
use evomem_llm::accounting::{approx_prompt_tokens, approx_tokens};
use std::collections::BTreeMap;

/// `prompts/predict.md`.
pub const PREDICT: &str = include_str!("prompts/predict.md");
/// `prompts/reflect.md`.
pub const REFLECT: &str = include_str!("prompts/reflect.md");
/// `prompts/mem0.md`.
pub const MEM0: &str = include_str!("prompts/mem0.md");

fn render(
    name: &str,
    template: &str,
    vars: &[(&str, String)],
) -> Result<Vec<ChatMessage>, PolicyError> {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect();
    evomem_llm::template::render(name, template, &vars)
        .map_err(|e| PolicyError::Config(e.to_string()))
}

/// Tokens of one call: the rendered prompt plus the answer.
pub fn call_tokens(messages: &[ChatMessage], answer: &str) -> u64 {
    approx_prompt_tokens(messages.iter().map(|m| m.content.as_str())) + approx_tokens(answer)
}

/// The memory block of a prediction prompt: the profile, then one line per
/// entry; `(nothing yet)` when the context is empty.
pub fn memory_block(ctx: &DecisionContext) -> String {
    let mut lines: Vec<&str> = Vec::with_capacity(ctx.entries.len() + 1);
    if let Some(p) = &ctx.profile {
        lines.push(p);
    }
    lines.extend(ctx.entries.iter().map(|e| e.text.as_str()));
    if lines.is_empty() {
        "(nothing yet)".to_string()
    } else {
        lines.join("\n")
    }
}

/// The prediction prompt for `ctx` and the movie described by `item`.
pub fn predict_messages(
    ctx: &DecisionContext,
    item: &str,
) -> Result<Vec<ChatMessage>, PolicyError> {
    render(
        "predict",
        PREDICT,
        &[("memory", memory_block(ctx)), ("item", item.to_string())],
    )
}

/// Tokens of one prediction call (answer `{"rating": 3.5}`).
pub fn predict_tokens(ctx: &DecisionContext, item: &str) -> Result<u64, PolicyError> {
    Ok(call_tokens(
        &predict_messages(ctx, item)?,
        "{\"rating\": 3.5}",
    ))
}

/// Tokens of one reflection: previous summary, new rating lines, and the
/// new summary as the answer.
pub fn reflect_tokens(previous: &str, ratings: &[&str], answer: &str) -> Result<u64, PolicyError> {
    let m = render(
        "reflect",
        REFLECT,
        &[
            (
                "summary",
                if previous.is_empty() {
                    "(none yet)".to_string()
                } else {
                    previous.to_string()
                },
            ),
            ("ratings", ratings.join("\n")),
        ],
    )?;
    Ok(call_tokens(&m, answer))
}

/// Tokens of one Mem0 manager decision.
pub fn mem0_tokens(fact: &str, memories: &[&str], answer: &str) -> Result<u64, PolicyError> {
    let m = render(
        "mem0",
        MEM0,
        &[
            ("fact", fact.to_string()),
            (
                "memories",
                if memories.is_empty() {
                    "(none)".to_string()
                } else {
                    memories.join("\n")
                },
            ),
        ],
    )?;
    Ok(call_tokens(&m, answer))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use evomem_core::ContextEntry;

    fn entry(text: &str) -> ContextEntry {
        ContextEntry {
            memory: None,
            item: None,
            text: text.into(),
            weight: 1.0,
            embedding: None,
            path: None,
        }
    }

    #[test]
    fn predict_prompt_snapshot() {
        let ctx = DecisionContext {
            profile: Some("Rated 12 movies, 0.3 above the usual rating.".into()),
            entries: vec![
                entry("Toy Story (1995) [Animation, Children's, Comedy]: 5/5"),
                entry("GoldenEye (1995) [Action, Adventure, Thriller]: 3/5"),
            ],
            ..DecisionContext::default()
        };
        let m = predict_messages(&ctx, "Heat (1995) [Action, Crime, Thriller]").unwrap();
        let text: Vec<String> = m
            .iter()
            .map(|m| format!("## {:?}\n{}", m.role, m.content))
            .collect();
        insta::assert_snapshot!(text.join("\n\n"));
        let t = predict_tokens(&ctx, "Heat (1995) [Action, Crime, Thriller]").unwrap();
        assert!(t > 50 && t < 200, "{t}");
    }

    #[test]
    fn every_prompt_renders_and_more_memory_costs_more() {
        let empty = predict_tokens(&DecisionContext::default(), "x").unwrap();
        let ctx = DecisionContext {
            entries: (0..20).map(|i| entry(&format!("Movie {i}: 4/5"))).collect(),
            ..DecisionContext::default()
        };
        assert!(predict_tokens(&ctx, "x").unwrap() > empty + 40);
        assert!(reflect_tokens("", &["a: 4/5"], "summary").unwrap() > 20);
        assert!(mem0_tokens("rated a 4/5", &[], "[]").unwrap() > 20);
    }
}
