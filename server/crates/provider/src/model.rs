//! The provider-neutral conversation model: messages, tools, requests and stream events.

use serde_json::Value;

/// One part of a user message.
#[derive(Debug, Clone, PartialEq)]
pub enum UserPart {
    /// Plain text.
    Text(String),
    /// An image, base64-encoded.
    Image { mime_type: String, data: String },
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRequest {
    /// The model's id for the call (echoed back with the result).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The raw arguments text (normally a JSON object; may be malformed).
    pub arguments: String,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    /// The system prompt.
    System(String),
    /// What the user said.
    User(Vec<UserPart>),
    /// What the model said, with any tool calls it made.
    Assistant {
        text: String,
        reasoning: Option<String>,
        /// The provider's signature of the reasoning (Anthropic thinking), kept for replay.
        reasoning_signature: Option<String>,
        tool_calls: Vec<ToolCallRequest>,
    },
    /// The result of one tool call.
    Tool { call_id: String, content: String },
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// One model call. Borrows the conversation so that no history is copied per call.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSpec],
    pub max_tokens: Option<u32>,
    /// The API key to use for this call (from the credential pool); `None` uses the
    /// provider's own.
    pub credential: Option<&'a str>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
}

/// What a streaming call yields, in order.
#[derive(Debug, Clone, PartialEq)]
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
    /// The call ended; tool calls are complete and in the model's order.
    Finished {
        reason: FinishReason,
        tool_calls: Vec<ToolCallRequest>,
    },
}
