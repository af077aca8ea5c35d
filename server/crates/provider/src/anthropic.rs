//! Anthropic Messages over SSE: text, `thinking` (kept with its signature for replay),
//! `tool_use` with `input_json_delta`, usage with cache reads and writes, and prompt caching
//! (`cache_control` breakpoints on the system prompt and the two most recent user turns).

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::error::StreamFailure;
use crate::http::{Connection, Target};
use crate::model::{
    ChatRequest, FinishReason, ModelMessage, Reasoning, StreamEvent, ToolCallRequest, Usage,
    UserPart,
};
use crate::sse::SseEvent;
use crate::stream::{Decoder, Out, parse_json, stream_error};
use crate::{ChatProvider, EventStream, ProviderError};

const NAME: &str = "anthropic";
/// The API version header value.
pub const API_VERSION: &str = "2023-06-01";

/// Messages API settings beyond the connection.
#[derive(Debug, Clone, Copy)]
pub struct AnthropicOptions {
    /// `max_tokens` when the request sets none (the API requires one).
    pub default_max_tokens: u32,
    /// Extended thinking budget in tokens, when enabled.
    pub thinking_budget: Option<u32>,
}

/// The Anthropic Messages provider.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    target: Target,
    options: AnthropicOptions,
}

impl AnthropicProvider {
    /// A client for the endpoint (`/v1/messages` is appended unless the base ends in `/v1`).
    pub fn new(connection: Connection, options: AnthropicOptions) -> Result<Self, ProviderError> {
        let path = if connection.base_url.trim_end_matches('/').ends_with("/v1") {
            "/messages"
        } else {
            "/v1/messages"
        };
        let url = Target::under_base(&connection, path);
        Ok(Self {
            target: Target::new(NAME, connection, url)?,
            options,
        })
    }
}

impl ChatProvider for AnthropicProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let body = request_body(
            request,
            self.options.default_max_tokens,
            self.options.thinking_budget,
        );
        let mut builder = self
            .target
            .post(body.to_string())
            .header("anthropic-version", API_VERSION);
        if let Some(key) = self.target.connection.key(request.credential) {
            builder = builder.header("x-api-key", key);
        }
        self.target.start(builder, NAME, MessagesDecoder::default())
    }
}

fn user_content(parts: &[UserPart]) -> Vec<Value> {
    parts
        .iter()
        .map(|part| match part {
            UserPart::Text { text } => json!({"type": "text", "text": text}),
            UserPart::Image { mime_type, data } => {
                json!({"type": "image", "source": {"type": "base64", "media_type": mime_type, "data": data}})
            }
        })
        .collect()
}

/// An assistant message's blocks: signed thinking (replayed as it was), text, tool uses.
fn assistant_content(
    text: &str,
    reasoning: Option<&Reasoning>,
    tool_calls: &[crate::ToolCallRequest],
) -> Vec<Value> {
    let mut content = Vec::new();
    if let Some(Reasoning {
        text: thinking,
        signature: Some(signature),
    }) = reasoning
    {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
    }
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in tool_calls {
        let input = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    content
}

/// Prompt caching: the system prompt, and the last block of the two most recent user turns.
fn mark_cache_points(system: &mut [Value], messages: &mut [Value]) {
    if let Some(last) = system.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let mut marked = 0;
    for message in messages.iter_mut().rev() {
        if marked == 2 {
            break;
        }
        if message["role"] == "user"
            && let Some(last) = message["content"].as_array_mut().and_then(|c| c.last_mut())
        {
            last["cache_control"] = json!({"type": "ephemeral"});
            marked += 1;
        }
    }
}

/// The JSON body of a streaming request.
pub fn request_body(
    request: &ChatRequest<'_>,
    default_max_tokens: u32,
    thinking_budget: Option<u32>,
) -> Value {
    let mut system: Vec<Value> = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    let mut push = |role: &str, content: Vec<Value>| {
        if content.is_empty() {
            return;
        }
        // The API wants strictly alternating roles: merge neighbours of the same role.
        if let Some(last) = messages.last_mut()
            && last["role"] == role
            && let Some(existing) = last["content"].as_array_mut()
        {
            existing.extend(content);
            return;
        }
        messages.push(json!({"role": role, "content": content}));
    };
    for message in &request.transcript.model_messages() {
        match message {
            ModelMessage::System(text) => system.push(json!({"type": "text", "text": text})),
            ModelMessage::User(parts) => push("user", user_content(parts)),
            ModelMessage::Assistant {
                text,
                reasoning,
                tool_calls,
            } => push("assistant", assistant_content(text, *reasoning, tool_calls)),
            ModelMessage::Tool { call_id, content } => {
                push(
                    "user",
                    vec![
                        json!({"type": "tool_result", "tool_use_id": call_id, "content": content}),
                    ],
                );
            }
        }
    }
    mark_cache_points(&mut system, &mut messages);
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens.unwrap_or(default_max_tokens),
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = Value::Array(system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    // A session's thought level decides over the configured budget (`minimal`: none).
    let budget = match request.effort {
        Some(effort) => effort.thinking_budget(),
        None => thinking_budget,
    };
    if let Some(budget) = budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        // The answer needs room beyond the thinking (the API refuses a budget that is not
        // below max_tokens).
        let max = body["max_tokens"].as_u64().unwrap_or(0);
        if max <= u64::from(budget) {
            body["max_tokens"] = json!(u64::from(budget) + u64::from(default_max_tokens.max(1024)));
        }
    }
    body
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking,
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    Other,
}

/// Decodes Messages stream events.
#[derive(Debug, Default)]
struct MessagesDecoder {
    blocks: Vec<(u64, Block)>,
    calls: Vec<ToolCallRequest>,
    usage: Usage,
    stop_reason: Option<String>,
}

impl MessagesDecoder {
    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    /// A content block starts: text shown at once, a tool use announced.
    fn block_started(&mut self, data: &Value, out: &mut Out) {
        let index = number(data, "index");
        let block = &data["content_block"];
        let parsed = match block["type"].as_str() {
            Some("text") => {
                if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                    out.push_back(Ok(StreamEvent::TextDelta(text.to_string())));
                }
                Block::Text
            }
            Some("thinking") => Block::Thinking,
            Some("tool_use") => {
                let id = block["id"].as_str().unwrap_or_default().to_string();
                let name = block["name"].as_str().unwrap_or_default().to_string();
                out.push_back(Ok(StreamEvent::ToolCallStarted {
                    id: id.clone(),
                    name: name.clone(),
                }));
                Block::ToolUse {
                    id,
                    name,
                    input: String::new(),
                }
            }
            _ => Block::Other,
        };
        self.blocks.push((index, parsed));
    }

    /// A content block grows: text, thinking, its signature, a tool use's arguments.
    fn block_delta(&mut self, data: &Value, out: &mut Out) {
        let index = number(data, "index");
        let delta = &data["delta"];
        match delta["type"].as_str() {
            Some("text_delta") => {
                if let Some(text) = delta["text"].as_str().filter(|t| !t.is_empty()) {
                    out.push_back(Ok(StreamEvent::TextDelta(text.to_string())));
                }
            }
            Some("thinking_delta") => {
                if let Some(text) = delta["thinking"].as_str().filter(|t| !t.is_empty()) {
                    out.push_back(Ok(StreamEvent::ReasoningDelta(text.to_string())));
                }
            }
            Some("signature_delta") => {
                if let Some(signature) = delta["signature"].as_str() {
                    out.push_back(Ok(StreamEvent::ReasoningSignature(signature.to_string())));
                }
            }
            Some("input_json_delta") => {
                if let Some(Block::ToolUse { input, .. }) = self.block(index) {
                    input.push_str(delta["partial_json"].as_str().unwrap_or_default());
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut Out) {
        out.push_back(Ok(StreamEvent::Usage(self.usage)));
        let reason = match self.stop_reason.as_deref() {
            Some("max_tokens") => FinishReason::Length,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("refusal") => FinishReason::ContentFilter,
            Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
            Some(other) => FinishReason::Other(other.to_string()),
        };
        out.push_back(Ok(StreamEvent::Finished {
            reason,
            tool_calls: std::mem::take(&mut self.calls),
        }));
    }
}

fn number(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl Decoder for MessagesDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Out) -> bool {
        let Some(data) = parse_json(NAME, &event.data) else {
            return false;
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        match kind {
            "message_start" => {
                let usage = &data["message"]["usage"];
                self.usage.input_tokens = number(usage, "input_tokens")
                    + number(usage, "cache_read_input_tokens")
                    + number(usage, "cache_creation_input_tokens");
                self.usage.cached_input_tokens = number(usage, "cache_read_input_tokens");
                self.usage.cache_write_tokens = number(usage, "cache_creation_input_tokens");
                self.usage.output_tokens = number(usage, "output_tokens");
            }
            "content_block_start" => self.block_started(&data, out),
            "content_block_delta" => self.block_delta(&data, out),
            "content_block_stop" => {
                let index = number(&data, "index");
                if let Some(position) = self.blocks.iter().position(|(i, _)| *i == index)
                    && let (_, Block::ToolUse { id, name, input }) = self.blocks.remove(position)
                {
                    self.calls.push(ToolCallRequest {
                        id,
                        name,
                        arguments: if input.is_empty() { "{}".into() } else { input },
                    });
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(output) = data["usage"]["output_tokens"].as_u64() {
                    self.usage.output_tokens = output;
                }
            }
            "message_stop" => {
                self.finish(out);
                return true;
            }
            "error" => {
                let error = &data["error"];
                let message = error["message"].as_str().unwrap_or("unknown error");
                let kind = error["type"].as_str().unwrap_or("error");
                out.push_back(Err(stream_error(
                    NAME,
                    StreamFailure::ErrorEvent,
                    format!("{kind}: {message}"),
                )));
                return true;
            }
            _ => {}
        }
        false
    }
}

/// The request for the model list (`GET /v1/models`, the key in `x-api-key`): what
/// `talaria doctor` asks.
pub fn models_request(
    client: &reqwest::Client,
    base_url: &str,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let base = base_url.trim_end_matches('/');
    let url = if base.ends_with("/v1") {
        format!("{base}/models")
    } else {
        format!("{base}/v1/models")
    };
    let request = client.get(url).header("anthropic-version", API_VERSION);
    match key {
        Some(key) => request.header("x-api-key", key),
        None => request,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Transcript;

    fn decode(body: &'static str) -> Vec<Result<StreamEvent, ProviderError>> {
        crate::stream::decode_chunks(&[body], MessagesDecoder::default())
    }

    #[test]
    fn thinking_text_and_tool_use_stream() {
        let events = decode(concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me see\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig==\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading.\"}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read_file\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\":\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"a.rs\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":42}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ));
        let events: Vec<StreamEvent> = events.into_iter().map(|e| e.expect("ok")).collect();
        assert_eq!(events[0], StreamEvent::ReasoningDelta("Let me see".into()));
        assert_eq!(events[1], StreamEvent::ReasoningSignature("sig==".into()));
        assert_eq!(events[2], StreamEvent::TextDelta("Reading.".into()));
        assert!(matches!(&events[3], StreamEvent::ToolCallStarted { id, .. } if id == "toolu_1"));
        assert_eq!(
            events[4],
            StreamEvent::Usage(Usage {
                input_tokens: 105,
                output_tokens: 42,
                cached_input_tokens: 90,
                cache_write_tokens: 5,
                reasoning_tokens: 0
            })
        );
        assert_eq!(
            events[5],
            StreamEvent::Finished {
                reason: FinishReason::ToolCalls,
                tool_calls: vec![ToolCallRequest {
                    id: "toolu_1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a.rs\"}".into()
                }]
            }
        );
    }

    #[test]
    fn error_events_and_cut_streams_fail() {
        let overloaded = decode(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        );
        assert!(
            matches!(overloaded.last(), Some(Err(ProviderError::Stream { detail, .. })) if detail.contains("overloaded_error"))
        );
        let cut = decode(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\n",
        );
        assert!(
            matches!(cut.last(), Some(Err(ProviderError::Stream { detail, .. })) if detail.contains("ended before"))
        );
    }

    #[test]
    fn a_compaction_summary_before_the_latest_ask_keeps_roles_alternating() {
        use talaria_record::testing::{assistant, result, user};
        let mut transcript = Transcript::with_system("sys");
        let first = transcript.push(user("old ask"));
        transcript.push(assistant("old answer", &[]));
        transcript.push(user("latest ask"));
        transcript.push(assistant("", &[("t1", "read_file", "{}")]));
        transcript.push(result("t1", "read_file", "data"));
        for entry in transcript.entries_mut().iter_mut().take(3).skip(1) {
            entry.compacted = true;
        }
        transcript.push(talaria_record::EntryBody::Summary {
            text: "[CONTEXT COMPACTION — REFERENCE ONLY] summary".into(),
            first,
            last: first + 1,
        });
        let body = request_body(
            &ChatRequest {
                model: "claude",
                transcript: &transcript,
                tools: &[],
                max_tokens: None,
                credential: None,
                effort: None,
            },
            4096,
            None,
        );
        let messages = body["messages"].as_array().expect("messages");
        let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        let first_turn = messages[0].to_string();
        assert!(
            first_turn.find("REFERENCE ONLY") < first_turn.find("latest ask"),
            "the summary comes before the latest ask: {first_turn}"
        );
    }

    #[test]
    fn body_alternates_roles_replays_thinking_and_marks_cache_breakpoints() {
        use talaria_record::testing::{result, user};
        let mut transcript = Transcript::with_system("sys");
        transcript.push(user("q1"));
        transcript.push(talaria_record::EntryBody::Assistant(
            talaria_record::AssistantEntry {
                text: String::new(),
                reasoning: Some(Reasoning {
                    text: "think".into(),
                    signature: Some("sig".into()),
                }),
                tool_calls: vec![ToolCallRequest {
                    id: "t1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into(),
                }],
                model: None,
                message_id: None,
            },
        ));
        transcript.push(result("t1", "read_file", "data"));
        transcript.push(user("q2"));
        let body = request_body(
            &ChatRequest {
                model: "claude",
                transcript: &transcript,
                tools: &[],
                max_tokens: None,
                credential: None,
                effort: None,
            },
            4096,
            None,
        );
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter_map(|m| m["role"].as_str())
            .collect();
        assert_eq!(
            roles,
            ["user", "assistant", "user"],
            "tool result and next question merged"
        );
        assert_eq!(
            body["messages"][1]["content"][0],
            json!({"type": "thinking", "thinking": "think", "signature": "sig"})
        );
        assert_eq!(
            body["messages"][1]["content"][1]["input"],
            json!({"path": "a"})
        );
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(
            body["messages"][2]["content"][1]["cache_control"]["type"],
            "ephemeral"
        );
        assert_eq!(
            body["messages"][0]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
    }
}
