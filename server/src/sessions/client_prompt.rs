//! A client's system prompt (`systemPrompt` on `session/new`, `load`, `resume` and `fork`,
//! checked by the wire room, `acp/client_prompt.rs`) applied to the session's instructions.
//! `append` goes after Talaria's stable instructions, so sessions that append the same text
//! share a byte-identical system prompt (and a server's prompt cache); `override` replaces
//! Talaria's own instructions and keeps the project's. The record keeps the result in its
//! system entry, so a reload keeps it.

/// How the client's text joins Talaria's instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptMode {
    Append,
    Override,
}

/// A client's system prompt, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPrompt {
    pub mode: PromptMode,
    pub text: String,
}

/// The heading of appended text in the system prompt.
const APPENDED_HEADING: &str = "\n\n# Instructions from the client\n\n";

impl ClientPrompt {
    /// The instructions with the client's text: `talaria` is Talaria's own (identity, skill
    /// index, memory), `project` the project's instruction files.
    pub fn apply(&self, talaria: &str, project: &str) -> String {
        match self.mode {
            PromptMode::Append => format!("{talaria}{project}{APPENDED_HEADING}{}", self.text),
            PromptMode::Override => format!("{}{project}", self.text),
        }
    }
}
