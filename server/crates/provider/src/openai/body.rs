//! A Chat Completions request body written straight from the record: typed views that borrow
//! the transcript and the tool schemas, serialized once, with no JSON tree built or schema
//! copied per request. Keys come in a fixed order: the model, the tool schemas, then the
//! messages (system prompt first), so two sessions' requests share a byte-identical prefix
//! through the tool schemas and the system prompt, which a server's prompt cache can reuse.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use crate::model::{ChatRequest, ModelMessage, ToolCallRequest, ToolSpec, UserPart};

/// The body of a streaming request.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<Tool<'a>>,
    messages: Vec<Message<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
}

impl<'a> Body<'a> {
    pub(super) fn new(request: &'a ChatRequest<'a>, messages: &'a [ModelMessage<'a>]) -> Self {
        Self {
            model: request.model,
            tools: request.tools.iter().map(Tool::new).collect(),
            messages: messages.iter().map(Message).collect(),
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            max_tokens: request.max_tokens,
            reasoning_effort: request.effort.map(|effort| effort.id()),
        }
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> Tool<'a> {
    fn new(spec: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: Function {
                name: &spec.name,
                description: &spec.description,
                parameters: &spec.parameters,
            },
        }
    }
}

/// One message as Chat Completions takes it.
struct Message<'a>(&'a ModelMessage<'a>);

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self.0 {
            ModelMessage::System(text) => {
                map.serialize_entry("role", "system")?;
                map.serialize_entry("content", text)?;
            }
            ModelMessage::User(parts) => {
                map.serialize_entry("role", "user")?;
                if parts.iter().all(|p| matches!(p, UserPart::Text { .. })) {
                    map.serialize_entry("content", &UserPart::joined_text(parts, "\n\n"))?;
                } else {
                    let content: Vec<Part<'_>> = parts.iter().map(Part).collect();
                    map.serialize_entry("content", &content)?;
                }
            }
            ModelMessage::Assistant {
                text, tool_calls, ..
            } => {
                map.serialize_entry("role", "assistant")?;
                if tool_calls.is_empty() {
                    map.serialize_entry("content", text)?;
                } else {
                    // A message of calls alone has no content.
                    map.serialize_entry("content", &Some(text).filter(|t| !t.is_empty()))?;
                    let calls: Vec<Call<'_>> = tool_calls.iter().map(Call::new).collect();
                    map.serialize_entry("tool_calls", &calls)?;
                }
            }
            ModelMessage::Tool { call_id, content } => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", call_id)?;
                map.serialize_entry("content", content)?;
            }
        }
        map.end()
    }
}

/// A part of a user message with an image.
struct Part<'a>(&'a UserPart);

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        match self.0 {
            UserPart::Text { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            UserPart::Image { mime_type, data } => {
                map.serialize_entry("type", "image_url")?;
                let url = format!("data:{mime_type};base64,{data}");
                map.serialize_entry("image_url", &ImageUrl { url })?;
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

impl<'a> Call<'a> {
    fn new(call: &'a ToolCallRequest) -> Self {
        Self {
            id: &call.id,
            kind: "function",
            function: CallFunction {
                name: &call.name,
                arguments: &call.arguments,
            },
        }
    }
}
