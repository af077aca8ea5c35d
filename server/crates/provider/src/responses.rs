//! The OpenAI Responses API over SSE: output text, reasoning summaries (→ thoughts), function
//! calls and their outputs.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::error::StreamFailure;
use crate::http::{Connection, Target};
use crate::model::{
    ChatRequest, FinishReason, ModelMessage, StreamEvent, ToolCallRequest, Usage, UserPart,
};
use crate::sse::SseEvent;
use crate::stream::{Decoder, Out, parse_json, stream_error};
use crate::{ChatProvider, EventStream, ProviderError};

const NAME: &str = "openai-responses";

/// The Responses API provider.
#[derive(Debug, Clone)]
pub struct ResponsesProvider {
    target: Target,
    /// Ask for reasoning summaries (`reasoning.summary = "auto"`).
    reasoning_summaries: bool,
}

impl ResponsesProvider {
    /// A client for the endpoint (`/responses` is appended to the base URL).
    pub fn new(connection: Connection, reasoning_summaries: bool) -> Result<Self, ProviderError> {
        let url = Target::under_base(&connection, "/responses");
        Ok(Self {
            target: Target::new(NAME, connection, url)?,
            reasoning_summaries,
        })
    }
}

impl ChatProvider for ResponsesProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let body = request_body(request, self.reasoning_summaries).to_string();
        let post = self.target.post(body);
        let post = self.target.connection.bearer(post, request.credential);
        self.target.start(post, NAME, ResponsesDecoder::default())
    }
}

/// The JSON body of a streaming request.
pub fn request_body(request: &ChatRequest<'_>, reasoning_summaries: bool) -> Value {
    let mut instructions = Vec::new();
    let mut input = Vec::new();
    for message in &request.transcript.model_messages() {
        match message {
            ModelMessage::System(text) => instructions.push(text.to_string()),
            ModelMessage::User(parts) => {
                let content: Vec<Value> = parts
                    .iter()
                    .map(|part| match part {
                        UserPart::Text { text } => json!({"type": "input_text", "text": text}),
                        UserPart::Image { mime_type, data } => {
                            json!({"type": "input_image", "image_url": format!("data:{mime_type};base64,{data}")})
                        }
                    })
                    .collect();
                input.push(json!({"role": "user", "content": content}));
            }
            ModelMessage::Assistant {
                text, tool_calls, ..
            } => {
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                }
                for call in *tool_calls {
                    input.push(json!({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments}));
                }
            }
            ModelMessage::Tool { call_id, content } => {
                input.push(
                    json!({"type": "function_call_output", "call_id": call_id, "output": content}),
                );
            }
        }
    }
    let mut body = json!({"model": request.model, "input": input, "stream": true, "store": false});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}))
            .collect();
    }
    if let Some(max) = request.max_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if reasoning_summaries {
        body["reasoning"] = json!({"summary": "auto"});
    }
    if let Some(effort) = request.effort {
        body["reasoning"]["effort"] = json!(effort.id());
    }
    body
}

#[derive(Debug, Default)]
struct PendingCall {
    item_id: String,
    call_id: String,
    name: String,
    arguments: String,
}

/// Decodes Responses stream events.
#[derive(Debug, Default)]
struct ResponsesDecoder {
    calls: Vec<PendingCall>,
}

fn usage_of(response: &Value) -> Usage {
    let usage = &response["usage"];
    Usage {
        input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        cached_input_tokens: usage["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        cache_write_tokens: 0,
        reasoning_tokens: usage["output_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap_or(0),
    }
}

impl ResponsesDecoder {
    fn finish(&mut self, response: &Value, reason: FinishReason, out: &mut Out) {
        out.push_back(Ok(StreamEvent::Usage(usage_of(response))));
        let tool_calls: Vec<ToolCallRequest> = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|c| ToolCallRequest {
                id: c.call_id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        let reason = if reason == FinishReason::Stop && !tool_calls.is_empty() {
            FinishReason::ToolCalls
        } else {
            reason
        };
        out.push_back(Ok(StreamEvent::Finished { reason, tool_calls }));
    }
}

impl ResponsesDecoder {
    /// An output item starts: a function call is announced and its arguments collected.
    fn item_added(&mut self, item: &Value, out: &mut Out) {
        if item["type"] != "function_call" {
            return;
        }
        let call = PendingCall {
            item_id: item["id"].as_str().unwrap_or_default().to_string(),
            call_id: item["call_id"].as_str().unwrap_or_default().to_string(),
            name: item["name"].as_str().unwrap_or_default().to_string(),
            arguments: item["arguments"].as_str().unwrap_or_default().to_string(),
        };
        out.push_back(Ok(StreamEvent::ToolCallStarted {
            id: call.call_id.clone(),
            name: call.name.clone(),
        }));
        self.calls.push(call);
    }

    /// An output item is complete: a function call's final arguments replace the deltas.
    fn item_done(&mut self, item: &Value) {
        if item["type"] == "function_call"
            && let Some(call) = self
                .calls
                .iter_mut()
                .find(|c| c.item_id == item["id"].as_str().unwrap_or_default())
            && let Some(arguments) = item["arguments"].as_str()
        {
            call.arguments = arguments.to_string();
        }
    }
}

impl Decoder for ResponsesDecoder {
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
            "response.output_text.delta" => {
                if let Some(delta) = data["delta"].as_str().filter(|d| !d.is_empty()) {
                    out.push_back(Ok(StreamEvent::TextDelta(delta.to_string())));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(delta) = data["delta"].as_str().filter(|d| !d.is_empty()) {
                    out.push_back(Ok(StreamEvent::ReasoningDelta(delta.to_string())));
                }
            }
            "response.output_item.added" => self.item_added(&data["item"], out),
            "response.function_call_arguments.delta" => {
                let item_id = data["item_id"].as_str().unwrap_or_default();
                if let Some(call) = self.calls.iter_mut().find(|c| c.item_id == item_id) {
                    call.arguments
                        .push_str(data["delta"].as_str().unwrap_or_default());
                }
            }
            "response.output_item.done" => self.item_done(&data["item"]),
            "response.completed" => {
                self.finish(&data["response"], FinishReason::Stop, out);
                return true;
            }
            "response.incomplete" => {
                let reason = match data["response"]["incomplete_details"]["reason"].as_str() {
                    Some("max_output_tokens") => FinishReason::Length,
                    Some("content_filter") => FinishReason::ContentFilter,
                    Some(other) => FinishReason::Other(other.to_string()),
                    None => FinishReason::Other("incomplete".into()),
                };
                self.finish(&data["response"], reason, out);
                return true;
            }
            "response.failed" => {
                let error = &data["response"]["error"];
                let message = error["message"].as_str().unwrap_or("the response failed");
                out.push_back(Err(stream_error(NAME, StreamFailure::ErrorEvent, message)));
                return true;
            }
            "error" => {
                let message = data["message"]
                    .as_str()
                    .or(data["error"]["message"].as_str())
                    .unwrap_or("unknown error");
                out.push_back(Err(stream_error(NAME, StreamFailure::ErrorEvent, message)));
                return true;
            }
            _ => {}
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Transcript;

    fn decode(body: &'static str) -> Vec<Result<StreamEvent, ProviderError>> {
        crate::stream::decode_chunks(&[body], ResponsesDecoder::default())
    }

    #[test]
    fn summaries_text_and_function_calls() {
        let events = decode(concat!(
            "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"Planning\"}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n",
            "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_9\",\"name\":\"read_file\",\"arguments\":\"\"}}\n\n",
            "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"delta\":\"{\\\"path\\\":\\\"a\\\"}\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":2},\"output_tokens_details\":{\"reasoning_tokens\":1}}}}\n\n",
        ));
        let events: Vec<StreamEvent> = events.into_iter().map(|e| e.expect("ok")).collect();
        assert_eq!(events[0], StreamEvent::ReasoningDelta("Planning".into()));
        assert_eq!(events[1], StreamEvent::TextDelta("Hi".into()));
        assert_eq!(
            events[3],
            StreamEvent::Usage(Usage {
                input_tokens: 7,
                output_tokens: 3,
                cached_input_tokens: 2,
                cache_write_tokens: 0,
                reasoning_tokens: 1
            })
        );
        assert_eq!(
            events[4],
            StreamEvent::Finished {
                reason: FinishReason::ToolCalls,
                tool_calls: vec![ToolCallRequest {
                    id: "call_9".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into()
                }]
            }
        );
    }

    #[test]
    fn body_maps_history_to_items() {
        use talaria_record::testing::{assistant, result, user};
        let mut transcript = Transcript::with_system("sys");
        transcript.push(user("q"));
        transcript.push(assistant("", &[("c", "t", "{}")]));
        transcript.push(result("c", "t", "out"));
        let body = request_body(
            &ChatRequest {
                model: "o4",
                transcript: &transcript,
                tools: &[],
                max_tokens: Some(100),
                credential: None,
                effort: None,
            },
            true,
        );
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["input"][0]["content"][0]["type"], "input_text");
        assert_eq!(
            body["input"][1],
            json!({"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"})
        );
        assert_eq!(
            body["input"][2],
            json!({"type": "function_call_output", "call_id": "c", "output": "out"})
        );
        assert_eq!(body["max_output_tokens"], 100);
        assert_eq!(body["reasoning"]["summary"], "auto");
    }
}
