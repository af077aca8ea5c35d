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
