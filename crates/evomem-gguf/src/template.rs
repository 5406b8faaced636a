//! Chat templates, recognised from the GGUF's `tokenizer.chat_template`.
//!
//! GGUF files carry their chat template as a Jinja program. Rather than
//! embed a Jinja interpreter, evomem recognises the template family by its
//! markers and renders it natively; a file whose template is of no known
//! family is refused at load time with the reason, never rendered wrongly.
//!
//! Supported: **ChatML** (`<|im_start|>role\ncontent<|im_end|>\n`, used by
//! SmolLM2 and Qwen2). The messages are rendered in order and the prompt
//! ends with the opening of the assistant's turn, plus an optional prefill
//! (`{` for JSON answers).

use evomem_core::{ChatMessage, ChatRole};

/// A recognised chat template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatTemplate {
    /// `<|im_start|>` / `<|im_end|>` turns.
    ChatMl,
}

impl ChatTemplate {
    /// Recognise `source` (the Jinja text from the GGUF metadata).
    pub fn detect(source: &str) -> Result<Self, String> {
        if source.is_empty() {
            return Err("the file has no `tokenizer.chat_template`".to_string());
        }
        if source.contains("<|im_start|>") && source.contains("<|im_end|>") {
            return Ok(Self::ChatMl);
        }
        let head: String = source.chars().take(80).collect();
        Err(format!(
            "unsupported template family (supported: ChatML); it starts `{head}`"
        ))
    }

    /// The token that ends a turn; generation stops on it.
    pub fn end_of_turn(self) -> &'static str {
        match self {
            Self::ChatMl => "<|im_end|>",
        }
    }

    /// Render `messages` and open the assistant's turn, followed by `prefill`.
    pub fn render(self, messages: &[ChatMessage], prefill: &str) -> String {
        match self {
            Self::ChatMl => {
                let mut out = String::new();
                for m in messages {
                    let role = match m.role {
                        ChatRole::System => "system",
                        ChatRole::User => "user",
                        ChatRole::Assistant => "assistant",
                    };
                    out.push_str("<|im_start|>");
                    out.push_str(role);
                    out.push('\n');
                    out.push_str(&m.content);
                    out.push_str("<|im_end|>\n");
                }
                out.push_str("<|im_start|>assistant\n");
                out.push_str(prefill);
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_turns_and_opens_the_assistant() {
        let t = ChatTemplate::detect(
            "{% for m in messages %}<|im_start|>{{m.role}}\n{{m.content}}<|im_end|>\n{% endfor %}",
        )
        .unwrap();
        let s = t.render(
            &[ChatMessage::system("Be brief."), ChatMessage::user("Hi")],
            "{",
        );
        assert_eq!(
            s,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n{"
        );
    }

    #[test]
    fn unknown_or_missing_templates_are_refused_with_the_reason() {
        assert!(ChatTemplate::detect("")
            .unwrap_err()
            .contains("no `tokenizer.chat_template`"));
        let e = ChatTemplate::detect("[INST] {{ m }} [/INST]").unwrap_err();
        assert!(e.contains("unsupported") && e.contains("[INST]"), "{e}");
    }
}
