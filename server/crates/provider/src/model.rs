//! The provider-neutral conversation model: messages, tools, requests and stream events.

use serde_json::Value;

pub use talaria_record::{ModelMessage, Reasoning, ToolCallRequest, Transcript, UserPart};

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// One model call. Borrows the conversation record so that no history is copied per call;
/// each API adapter renders it ([`Transcript::model_messages`]) into its own wire format.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub transcript: &'a Transcript,
    pub tools: &'a [ToolSpec],
    pub max_tokens: Option<u32>,
    /// The API key to use for this call (from the credential pool); `None` uses the
    /// provider's own.
    pub credential: Option<&'a str>,
    /// How hard a reasoning model thinks (`None`: the API's default); each wire API words
    /// it its own way.
    pub effort: Option<Effort>,
}

/// How hard a reasoning model thinks before it answers (ACP's `thought_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

impl Effort {
    /// The id on the wire (OpenAI's `reasoning_effort` values) and in ACP.
    pub fn id(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Effort::Minimal => "Minimal",
            Effort::Low => "Low",
            Effort::Medium => "Medium",
            Effort::High => "High",
        }
    }

    pub fn from_id(id: &str) -> Option<Effort> {
        [Effort::Minimal, Effort::Low, Effort::Medium, Effort::High]
            .into_iter()
            .find(|e| e.id() == id)
    }

    /// Anthropic's thinking budget for this effort (`None`: no extended thinking).
    pub fn thinking_budget(self) -> Option<u32> {
        match self {
            Effort::Minimal => None,
            Effort::Low => Some(2_048),
            Effort::Medium => Some(8_192),
            Effort::High => Some(24_576),
        }
    }

    /// The levels `model` takes, by its family's name: OpenAI's reasoning models (`o1`,
    /// `o3`, `o4-…`, `gpt-5…`, `gpt-oss…`) take `reasoning_effort`; Claude models with
    /// extended thinking (3.7 and the 4 family) take a thinking budget. Others take none, and
    /// no level is offered for them.
    pub fn levels_of(model: &str) -> &'static [Effort] {
        const THREE: &[Effort] = &[Effort::Low, Effort::Medium, Effort::High];
        const FOUR: &[Effort] = &[Effort::Minimal, Effort::Low, Effort::Medium, Effort::High];
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let starts = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
        if starts(&["gpt-5"]) {
            FOUR
        } else if starts(&["o1", "o3", "o4", "gpt-oss"]) {
            THREE
        } else if starts(&[
            "claude-3-7",
            "claude-sonnet-4",
            "claude-opus-4",
            "claude-haiku-4",
        ]) || starts(&["claude-4"])
        {
            FOUR
        } else {
            &[]
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end.
    Stop,
    /// Output token limit reached.
    Length,
    /// The model wants tools run.
    ToolCalls,
    /// The provider's content filter stopped it.
    ContentFilter,
    /// Anything else the provider said.
    Other(String),
}

impl FinishReason {
    /// Maps an OpenAI-style `finish_reason`.
    pub fn from_openai(reason: &str) -> Self {
        match reason {
            "stop" | "end_turn" => Self::Stop,
            "length" | "max_tokens" => Self::Length,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolCalls,
            "content_filter" | "refusal" => Self::ContentFilter,
            other => Self::Other(other.to_string()),
        }
    }
}

/// Token counts of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
}

/// What a streaming call yields, in order (serde: cassettes keep them, one a line).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEvent {
    /// A piece of the answer text.
    TextDelta(String),
    /// A piece of the model's reasoning.
    ReasoningDelta(String),
    /// The signature that seals the reasoning (Anthropic thinking), for replay.
    ReasoningSignature(String),
    /// The model began a tool call (its arguments are still streaming).
    ToolCallStarted { id: String, name: String },
    /// Token counts (usually just before the end).
    Usage(Usage),
    /// The provider's rate limits as the response's headers stated them (the first event,
    /// when they stated any).
    RateLimits(crate::rate_limits::RateLimits),
    /// The stream is about to fail (the next item is its error); these tool calls had
    /// streamed by then, in the model's order, their arguments as far as they came (a
    /// server's parser that rejects what follows a complete call loses nothing with it).
    CallsBeforeFailure(Vec<ToolCallRequest>),
    /// The call ended; tool calls are complete and in the model's order.
    Finished {
        reason: FinishReason,
        tool_calls: Vec<ToolCallRequest>,
    },
}

#[cfg(test)]
mod tests {
    use super::Effort;

    #[test]
    fn levels_follow_the_model_family_and_ids_round_trip() {
        assert_eq!(Effort::levels_of("gpt-5-mini").len(), 4);
        assert_eq!(Effort::levels_of("openai/gpt-oss-20b").len(), 3);
        assert_eq!(Effort::levels_of("o3").first(), Some(&Effort::Low));
        assert_eq!(Effort::levels_of("claude-opus-4-1").len(), 4);
        assert!(Effort::levels_of("gpt-4.1-mini").is_empty());
        assert!(Effort::levels_of("qwen2.5-coder").is_empty());
        for effort in [Effort::Minimal, Effort::Low, Effort::Medium, Effort::High] {
            assert_eq!(Effort::from_id(effort.id()), Some(effort));
        }
        assert_eq!(Effort::Minimal.thinking_budget(), None);
        assert!(Effort::High.thinking_budget() > Effort::Low.thinking_budget());
    }
}
