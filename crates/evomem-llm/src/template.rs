//! Prompt templates: render a `prompts/<role>.md` file into chat messages.
//!
//! The syntax is defined in `evomem_core::llm`: a line `## system` starts the
//! system message, `## user` the user message (and `## assistant` an
//! assistant turn, for few-shot examples); `{{name}}` is replaced by the
//! variable `name`. Lines before the first section header are a comment for
//! humans and are dropped. An unknown placeholder, an unclosed `{{` or an
//! empty template is an error naming the line, so that a typo in a prompt
//! file fails loudly instead of sending a literal `{{typo}}` to a model.
//! Substituted values are inserted verbatim and never re-scanned.

use evomem_core::{ChatMessage, ChatRole, ResponseFormat};
use std::collections::BTreeMap;
use thiserror::Error;

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    /// A `{{name}}` with no matching variable.
    #[error("prompt `{template}` line {line}: unknown placeholder `{{{{{name}}}}}`")]
    UnknownPlaceholder {
        /// Template name (the role).
        template: String,
        /// 1-based line in the prompt file.
        line: usize,
        /// Placeholder name.
        name: String,
    },
    /// A `{{` without its `}}` on the same line.
    #[error("prompt `{template}` line {line}: unclosed `{{{{`")]
    Unclosed {
        /// Template name (the role).
        template: String,
        /// 1-based line in the prompt file.
        line: usize,
    },
    /// The template has no `## system` / `## user` section.
    #[error("prompt `{template}`: no `## system` or `## user` section")]
    NoSections {
        /// Template name (the role).
        template: String,
    },
}

/// Render `template` (named `name` in errors) with `vars` into messages.
///
/// Each message's text is trimmed of leading and trailing blank lines.
pub fn render(
    name: &str,
    template: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Vec<ChatMessage>, TemplateError> {
    let mut messages: Vec<ChatMessage> = Vec::new();
    let mut current: Option<(ChatRole, String)> = None;
    for (idx, line) in template.lines().enumerate() {
        let lineno = idx + 1;
        let header = match line.trim_end() {
            "## system" => Some(ChatRole::System),
            "## user" => Some(ChatRole::User),
            "## assistant" => Some(ChatRole::Assistant),
            _ => None,
        };
        if let Some(role) = header {
            if let Some((r, text)) = current.take() {
                messages.push(finish(r, &text));
            }
            current = Some((role, String::new()));
            continue;
        }
        let Some((_, text)) = current.as_mut() else {
            continue; // comment before the first section
        };
        substitute_line(name, lineno, line, vars, text)?;
        text.push('\n');
    }
    if let Some((r, text)) = current.take() {
        messages.push(finish(r, &text));
    }
    if messages.is_empty() {
        return Err(TemplateError::NoSections {
            template: name.to_string(),
        });
    }
    Ok(messages)
}

fn finish(role: ChatRole, text: &str) -> ChatMessage {
    ChatMessage {
        role,
        content: text.trim_matches('\n').trim_end().to_string(),
    }
}

fn substitute_line(
    name: &str,
    lineno: usize,
    line: &str,
    vars: &BTreeMap<String, String>,
    out: &mut String,
) -> Result<(), TemplateError> {
    let mut rest = line;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(TemplateError::Unclosed {
                template: name.to_string(),
                line: lineno,
            });
        };
        let key = after[..end].trim();
        match vars.get(key) {
            Some(v) => out.push_str(v),
            None => {
                return Err(TemplateError::UnknownPlaceholder {
                    template: name.to_string(),
                    line: lineno,
                    name: key.to_string(),
                })
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(())
}

/// The response format asking for JSON that matches a role's schema.
pub fn json_schema_format(role: &str, schema: serde_json::Value) -> ResponseFormat {
    ResponseFormat::JsonSchema {
        name: role.to_string(),
        schema,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn renders_sections_and_placeholders() {
        let t = "comment line {{ignored}}\n## system\nBe brief.\n\n## user\nHi {{ who }}, {{x}}{{x}}.\n";
        let m = render("t", t, &vars(&[("who", "Ann {{x}}"), ("x", "!")])).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0], ChatMessage::system("Be brief."));
        assert_eq!(m[1], ChatMessage::user("Hi Ann {{x}}, !!."));
    }

    #[test]
    fn unknown_placeholder_names_line() {
        let t = "## user\nok\nhello {{nope}}\n";
        let e = render("rank", t, &vars(&[])).unwrap_err();
        assert_eq!(
            e,
            TemplateError::UnknownPlaceholder {
                template: "rank".into(),
                line: 3,
                name: "nope".into()
            }
        );
        assert!(e.to_string().contains("line 3"));
        assert!(e.to_string().contains("{{nope}}"));
    }

    #[test]
    fn unclosed_and_empty_are_errors() {
        assert!(matches!(
            render("t", "## user\n{{a\n", &vars(&[("a", "1")])),
            Err(TemplateError::Unclosed { line: 2, .. })
        ));
        assert!(matches!(
            render("t", "no sections", &vars(&[])),
            Err(TemplateError::NoSections { .. })
        ));
    }
}
