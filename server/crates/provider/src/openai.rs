//! OpenAI Chat Completions over SSE (also what OpenRouter, vLLM, llama.cpp, Ollama and
//! LM Studio speak).

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

use crate::error::StreamFailure;
use crate::http::{Connection, Target};
use crate::model::{ChatRequest, FinishReason, StreamEvent, ToolCallRequest, Usage};
use crate::sse::SseEvent;
use crate::stream::{Decoder, Out, stream_error};
use crate::{ChatProvider, EventStream, ProviderError};

const NAME: &str = "openai";

/// The OpenAI Chat Completions provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    target: Target,
}

impl OpenAiProvider {
    /// A client for the endpoint (`/chat/completions` is appended to the base URL).
    pub fn new(connection: Connection) -> Result<Self, ProviderError> {
        let url = Target::under_base(&connection, "/chat/completions");
        Ok(Self {
            target: Target::new(NAME, connection, url)?,
        })
    }
}

impl ChatProvider for OpenAiProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn stream(
        &self,
        request: &ChatRequest<'_>,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let post = self.target.post(request_text(request));
        let post = self.target.connection.bearer(post, request.credential);
        self.target.start(post, NAME, ChatDecoder::default())
    }
}

mod body;

/// The JSON text of a streaming request (`body.rs`: written from the record, keys in a fixed
/// order for servers' prompt caches).
pub fn request_text(request: &ChatRequest<'_>) -> String {
    let messages = request.transcript.model_messages();
    serde_json::to_string(&body::Body::new(request, &messages))
        .unwrap_or_else(|_| request_body(request).to_string())
}

/// The JSON body of a streaming request, as a tree (for cassettes and trajectories).
pub fn request_body(request: &ChatRequest<'_>) -> Value {
    let messages = request.transcript.model_messages();
    serde_json::to_value(body::Body::new(request, &messages)).unwrap_or(Value::Null)
}

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Debug, Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
    announced: bool,
}

/// Decodes Chat Completions chunks.
#[derive(Debug, Default)]
struct ChatDecoder {
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
}

impl Decoder for ChatDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Out) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return false;
        }
        if data == "[DONE]" {
            self.finish(out);
            return true;
        }
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                tracing::warn!("skipping malformed SSE data ({e}): {:.200}", data);
                return false;
            }
        };
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            let streamed = self.calls_so_far();
            if !streamed.is_empty() {
                out.push_back(Ok(StreamEvent::CallsBeforeFailure(streamed)));
            }
            out.push_back(Err(stream_error(NAME, StreamFailure::ErrorEvent, message)));
            return true;
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta {
                if let Some(reasoning) = delta.reasoning_content.or(delta.reasoning)
                    && !reasoning.is_empty()
                {
                    out.push_back(Ok(StreamEvent::ReasoningDelta(reasoning)));
                }
                if let Some(text) = delta.content
                    && !text.is_empty()
                {
                    out.push_back(Ok(StreamEvent::TextDelta(text)));
                }
                for (position, call) in delta.tool_calls.into_iter().enumerate() {
                    self.assemble(call, position, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            out.push_back(Ok(StreamEvent::Usage(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                cached_input_tokens: usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens),
                cache_write_tokens: 0,
                reasoning_tokens: usage
                    .completion_tokens_details
                    .map_or(0, |d| d.reasoning_tokens),
            })));
        }
        false
    }

    fn ended(&mut self, out: &mut Out) -> bool {
        // Some servers end after the finish reason without `[DONE]`.
        if self.finish_reason.is_some() {
            self.finish(out);
            return true;
        }
        false
    }
}

impl ChatDecoder {
    fn assemble(&mut self, delta: ToolCallDelta, position: usize, out: &mut Out) {
        let index = delta.index.unwrap_or(position);
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, PartialCall::default);
        }
        let call = &mut self.calls[index];
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name {
                call.name.push_str(&name);
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            if call.id.is_empty() {
                call.id = format!("call_{index}");
            }
            out.push_back(Ok(StreamEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
            }));
        }
    }

    /// The calls streamed so far (named ones), taken out of the decoder.
    fn calls_so_far(&mut self) -> Vec<ToolCallRequest> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .enumerate()
            .filter(|(_, call)| !call.name.is_empty())
            .map(|(index, call)| ToolCallRequest {
                id: if call.id.is_empty() {
                    format!("call_{index}")
                } else {
                    call.id
                },
                name: call.name,
                arguments: call.arguments,
            })
            .collect()
    }

    fn finish(&mut self, out: &mut Out) {
        let tool_calls = self.calls_so_far();
        let reason = match self.finish_reason.as_deref() {
            Some(reason) => FinishReason::from_openai(reason),
            None if !tool_calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        out.push_back(Ok(StreamEvent::Finished { reason, tool_calls }));
    }
}

/// The request for the server's model list (`GET /models`, the key as a bearer token): what
/// `talaria doctor` asks. The Responses API shares it.
pub fn models_request(
    client: &reqwest::Client,
    base_url: &str,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = client.get(format!("{}/models", base_url.trim_end_matches('/')));
    match key {
        Some(key) => request.bearer_auth(key),
        None => request,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Transcript, UserPart};
    use serde_json::json;

    fn decode(chunks: Vec<&'static str>) -> Vec<Result<StreamEvent, ProviderError>> {
        crate::stream::decode_chunks(&chunks, ChatDecoder::default())
    }

    #[test]
    fn text_reasoning_usage_and_done() {
        let events = decode(vec![
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: not json\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n",
        ]);
        let events: Vec<StreamEvent> = events.into_iter().map(|e| e.expect("ok")).collect();
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta("hm".into()),
                StreamEvent::TextDelta("Hel".into()),
                StreamEvent::TextDelta("lo".into()),
                StreamEvent::Usage(Usage {
                    input_tokens: 10,
                    output_tokens: 2,
                    cached_input_tokens: 4,
                    cache_write_tokens: 0,
                    reasoning_tokens: 0
                }),
                StreamEvent::Finished {
                    reason: FinishReason::Stop,
                    tool_calls: vec![]
                },
            ]
        );
    }

    #[test]
    fn tool_call_fragments_are_assembled_in_order() {
        let events = decode(vec![
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"c2\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"th\\\":\\\"a\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        ]);
        let events: Vec<StreamEvent> = events.into_iter().map(|e| e.expect("ok")).collect();
        assert_eq!(events.len(), 3);
        assert_eq!(
            events[2],
            StreamEvent::Finished {
                reason: FinishReason::ToolCalls,
                tool_calls: vec![
                    ToolCallRequest {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: "{\"path\":\"a\"}".into()
                    },
                    ToolCallRequest {
                        id: "c2".into(),
                        name: "read_file".into(),
                        arguments: "{}".into()
                    },
                ]
            }
        );
    }

    #[test]
    fn a_cut_stream_is_an_error() {
        let events = decode(vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        ]);
        assert!(matches!(
            events.last(),
            Some(Err(ProviderError::Stream { .. }))
        ));
    }

    #[test]
    fn body_carries_stream_options_tools_and_images() {
        let mut transcript = Transcript::with_system("sys");
        transcript.push(talaria_record::EntryBody::User {
            input: Vec::new(),
            model_view: vec![
                UserPart::text("look"),
                UserPart::Image {
                    mime_type: "image/png".into(),
                    data: "AAA".into(),
                },
            ],
        });
        let tools = vec![crate::ToolSpec {
            name: "t".into(),
            description: "d".into(),
            parameters: json!({"type":"object"}),
        }];
        let body = request_body(&ChatRequest {
            model: "m",
            transcript: &transcript,
            tools: &tools,
            max_tokens: None,
            credential: None,
            effort: None,
        });
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["tools"][0]["function"]["name"], "t");
        assert_eq!(
            body["messages"][1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAA"
        );
    }

    #[test]
    fn the_text_sent_holds_every_key_of_the_body() {
        let transcript = Transcript::with_system("s");
        let tools = vec![crate::ToolSpec {
            name: "t".into(),
            description: "d".into(),
            parameters: json!({"type":"object"}),
        }];
        let request = ChatRequest {
            model: "gpt-5",
            transcript: &transcript,
            tools: &tools,
            max_tokens: Some(100),
            credential: None,
            effort: Some(crate::Effort::High),
        };
        let sent: Value = serde_json::from_str(&request_text(&request)).expect("json");
        assert_eq!(sent, request_body(&request));
        assert_eq!(sent["reasoning_effort"], "high");
    }

    #[test]
    fn calls_streamed_before_an_error_event_come_before_the_error() {
        let events = decode(vec![
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}}]}}]}\n\n",
            "data: {\"error\":{\"message\":\"does not match the expected peg-native format\"}}\n\n",
        ]);
        assert!(
            matches!(&events[0], Ok(StreamEvent::ToolCallStarted { name, .. }) if name == "read_file")
        );
        assert_eq!(
            events[1].as_ref().ok(),
            Some(&StreamEvent::CallsBeforeFailure(vec![ToolCallRequest {
                id: "c1".into(),
                name: "read_file".into(),
                arguments: "{\"path\":\"a\"}".into(),
            }]))
        );
        assert!(events[2].is_err());
    }
}
