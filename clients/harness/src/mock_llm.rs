//! A scripted mock LLM server speaking OpenAI Chat Completions (`…/chat/completions`),
//! Anthropic Messages (`…/messages`) and the OpenAI Responses API (`…/responses`), streaming
//! and not, for tests and benchmarks.
//!
//! Each model request takes the next [`MockReply`] from the script (a 500 error once the script
//! is exhausted) and renders it in the wire format of the API its path names. Every request is recorded with its headers and
//! JSON body, when it arrived, when the first response byte was sent, and whether the client
//! disconnected before the response was complete.
//!
//! A step may add response headers ([`MockReply::WithHeaders`]: rate limits, `retry-after`)
//! to any answer, an error's status and headers included.
//!
//! Control endpoints (for clients in other languages): `GET /_mock/requests` returns the
//! recorded requests; `POST /_mock/script` appends replies (a JSON array of [`MockReply`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};
use talaria_util::lock;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

/// A tool call the mock makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MockToolCall {
    pub id: String,
    pub name: String,
    /// Raw arguments text (need not be valid JSON).
    pub arguments: String,
}

/// Token counts sent in the final usage chunk.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct MockUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    #[serde(default)]
    pub cached_tokens: u64,
}

/// Which API a request was made to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Messages,
    Responses,
}

impl Api {
    fn wire(self) -> crate::mock_checks::WireApi {
        match self {
            Api::Chat => crate::mock_checks::WireApi::Chat,
            Api::Messages => crate::mock_checks::WireApi::Messages,
            Api::Responses => crate::mock_checks::WireApi::Responses,
        }
    }

    fn of(path: &str) -> Self {
        if path.ends_with("/messages") {
            Api::Messages
        } else if path.ends_with("/responses") {
            Api::Responses
        } else {
            Api::Chat
        }
    }
}

/// One scripted response.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MockReply {
    /// Streams `reasoning` then `chunks` as deltas, `delay_ms` apart, then the finish reason,
    /// usage and `[DONE]`.
    Text {
        chunks: Vec<String>,
        #[serde(default)]
        reasoning: Vec<String>,
        #[serde(default)]
        delay_ms: u64,
        #[serde(default)]
        usage: Option<MockUsage>,
        #[serde(default)]
        finish_reason: Option<String>,
    },
    /// Waits `delay_ms` before answering at all (no headers), then answers with `reply`.
    Delayed {
        delay_ms: u64,
        reply: Box<MockReply>,
    },
    /// Answers with `reply`, these response headers added (rate limits, `retry-after`, …;
    /// an error's own headers too).
    WithHeaders {
        headers: Vec<(String, String)>,
        reply: Box<MockReply>,
    },
    /// Streams tool calls with their arguments cut into fragments of `fragment_chars`,
    /// `delay_ms` apart.
    ToolCalls {
        calls: Vec<MockToolCall>,
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        fragment_chars: Option<usize>,
        #[serde(default)]
        usage: Option<MockUsage>,
        #[serde(default)]
        delay_ms: u64,
    },
    /// Answers with an HTTP error.
    Error {
        status: u16,
        body: String,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    /// Sends the chunks, then keeps the connection open and silent until the client leaves.
    Hang {
        #[serde(default)]
        chunks: Vec<String>,
    },
    /// Sends the chunks, then cuts the connection mid-stream.
    Drop {
        #[serde(default)]
        chunks: Vec<String>,
    },
    /// Sends these SSE `data:` payloads verbatim (for malformed input), then ends.
    RawSse { data: Vec<String> },
}

impl MockReply {
    /// A streamed text answer split into the given chunks.
    pub fn text(chunks: &[&str]) -> Self {
        Self::Text {
            chunks: chunks.iter().map(|c| c.to_string()).collect(),
            reasoning: Vec::new(),
            delay_ms: 0,
            usage: None,
            finish_reason: None,
        }
    }

    /// This reply with these response headers.
    pub fn with_headers(self, headers: &[(&str, &str)]) -> Self {
        Self::WithHeaders {
            headers: headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            reply: Box::new(self),
        }
    }

    /// One tool call.
    pub fn tool_call(id: &str, name: &str, arguments: Value) -> Self {
        Self::ToolCalls {
            calls: vec![MockToolCall {
                id: id.into(),
                name: name.into(),
                arguments: arguments.to_string(),
            }],
            text: None,
            fragment_chars: Some(7),
            usage: None,
            delay_ms: 0,
        }
    }
}

/// One request the mock received.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The JSON body (`null` if it was not JSON).
    pub body: Value,
    /// The body exactly as received.
    #[serde(skip)]
    pub raw: String,
    /// The client closed the connection before the response was complete.
    pub client_disconnected: bool,
    /// The response was sent in full.
    pub completed: bool,
    #[serde(skip)]
    pub received_at: Option<Instant>,
    #[serde(skip)]
    pub first_byte_at: Option<Instant>,
}

impl RecordedRequest {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<MockReply>>,
    /// Scripts of their own for requests naming these models (side models such as a
    /// summariser, whose place among the main model's requests a test need not predict).
    model_scripts: Mutex<std::collections::HashMap<String, VecDeque<MockReply>>>,
    /// Scripts of their own for conversations whose first user message holds a marker
    /// (tasks that run in parallel, whose requests interleave in no set order).
    prompt_scripts: Mutex<Vec<(String, VecDeque<MockReply>)>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// What went wrong: requests no script step expected, transcripts with broken tool-call
    /// pairing. A mock dropped with problems fails the test (see [`MockLlm`]'s `Drop`).
    problems: Mutex<Vec<String>>,
    changed: Notify,
    /// What `GET /props` answers (llama.cpp's server information); 404 when unset.
    props: Mutex<Option<Value>>,
    /// How long `GET /props` takes to answer (a server still loading its model).
    props_delay: Mutex<Duration>,
    /// Paths of the server-information requests (model lists, `/props`, …), in the order
    /// they were answered.
    info_requests: Mutex<Vec<String>>,
    /// The one key the server accepts (`Authorization: Bearer <key>`); every request with
    /// another or none is answered 401 as OpenAI answers it. Any key when unset.
    required_key: Mutex<Option<String>>,
}

/// The 417 answer to a request the mock refuses, showing the request.
fn refuse(state: &State, why: String, body: &Value) -> Response<Body> {
    lock(&state.problems).push(why.clone());
    let answer = serde_json::json!({"error": {"message": why, "request": body}});
    full(
        StatusCode::EXPECTATION_FAILED,
        answer.to_string(),
        "application/json",
    )
}

/// A running mock server; it stops when dropped.
pub struct MockLlm {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
        let problems = std::mem::take(&mut *lock(&self.state.problems));
        if !problems.is_empty() && !std::thread::panicking() {
            panic!("the mock LLM refused requests: {problems:#?}");
        }
    }
}

type Body = BoxBody<Bytes, std::io::Error>;

impl MockLlm {
    /// Starts a server on 127.0.0.1 with a free port.
    pub async fn start(script: Vec<MockReply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        lock(&state.script).extend(script);
        let serving = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| handle(request, state.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// The OpenAI-style base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes the problems recorded so far (a test that provokes them on purpose takes them,
    /// so dropping the mock does not fail it).
    pub fn take_problems(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.state.problems))
    }

    /// Appends replies to the script.
    pub fn push(&self, reply: MockReply) {
        lock(&self.state.script).push_back(reply);
    }

    /// Takes the replies left in the script and in the model and prompt scripts (a
    /// conversation cut short leaves its replies; the next one starts on empty scripts).
    pub fn take_scripts(&self) -> Vec<MockReply> {
        let mut left: Vec<MockReply> = lock(&self.state.script).drain(..).collect();
        for (_, script) in lock(&self.state.model_scripts).drain() {
            left.extend(script);
        }
        for (_, script) in lock(&self.state.prompt_scripts).drain(..) {
            left.extend(script);
        }
        left
    }

    /// Gives requests for `model` a script of their own: they take their replies from it,
    /// in order, and are refused once it is exhausted.
    pub fn script_for_model(&self, model: &str, replies: Vec<MockReply>) {
        lock(&self.state.model_scripts)
            .entry(model.to_string())
            .or_default()
            .extend(replies);
    }

    /// Gives conversations whose first user message contains `marker` a script of their
    /// own: their requests take replies from it, in order, and are refused once it is
    /// exhausted.
    pub fn script_for_prompt(&self, marker: &str, replies: Vec<MockReply>) {
        let mut scripts = lock(&self.state.prompt_scripts);
        match scripts.iter_mut().find(|(m, _)| m == marker) {
            Some((_, script)) => script.extend(replies),
            None => scripts.push((marker.to_string(), replies.into())),
        }
    }

    /// Accepts only this key from now on: other requests get OpenAI's 401 (model lists
    /// included), and are not script steps.
    pub fn require_key(&self, key: &str) {
        *lock(&self.state.required_key) = Some(key.to_string());
    }

    /// Answers `GET /props` like a llama.cpp server with these properties.
    pub fn serve_props(&self, props: Value) {
        *lock(&self.state.props) = Some(props);
    }

    /// Answers `GET /props` with these properties, `delay` after it is asked.
    pub fn serve_props_after(&self, props: Value, delay: Duration) {
        *lock(&self.state.props_delay) = delay;
        self.serve_props(props);
    }

    /// The server-information requests so far (paths), which are not script steps.
    pub fn info_requests(&self) -> Vec<String> {
        lock(&self.state.info_requests).clone()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// Waits until `predicate` holds for the recorded requests, or the timeout passes.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        predicate: impl Fn(&[RecordedRequest]) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.state.changed.notified();
            if predicate(&lock(&self.state.requests)) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return predicate(&lock(&self.state.requests));
            }
        }
    }
}

fn full(status: StatusCode, body: impl Into<Bytes>, content_type: &str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert("content-type", value);
    }
    response
}

/// OpenAI's 401 for a request without the key the server requires.
fn refuse_key(state: &State, headers: &[(String, String)]) -> Option<Response<Body>> {
    let required = lock(&state.required_key).clone()?;
    let expected = format!("Bearer {required}");
    let sent = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.as_str());
    if sent == Some(expected.as_str()) {
        return None;
    }
    let body = serde_json::json!({"error": {
        "message": "Incorrect API key provided.",
        "type": "invalid_request_error",
        "code": "invalid_api_key"
    }});
    Some(full(
        StatusCode::UNAUTHORIZED,
        body.to_string(),
        "application/json",
    ))
}

/// Answers the server-information requests a client may make besides model calls (the
/// model list `talaria doctor` asks for, the context-window probes of local servers).
fn server_info(state: &State, method: &str, path: &str) -> Option<Response<Body>> {
    let json = |body: Value| full(StatusCode::OK, body.to_string(), "application/json");
    let not_found = || full(StatusCode::NOT_FOUND, "not found", "text/plain");
    if method == "GET" && path.ends_with("/models") {
        let list = serde_json::json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]});
        return Some(json(list));
    }
    if method == "GET" && path == "/props" {
        // Unless told otherwise, a server that says only that it serves several requests at
        // once (no window: sessions keep the configured or default one).
        let props = lock(&state.props)
            .clone()
            .unwrap_or_else(|| serde_json::json!({"total_slots": 4}));
        return Some(json(props));
    }
    let lm_studio = method == "GET" && path.starts_with("/api/v0/models/");
    let ollama = method == "POST" && path == "/api/show";
    (lm_studio || ollama).then(not_found)
}

async fn handle(
    request: Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<Body>, Infallible> {
    let received_at = Instant::now();
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let bytes = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    if let Some(refused) = refuse_key(&state, &headers) {
        lock(&state.info_requests).push(path);
        return Ok(refused);
    }
    if method == "GET" && path == "/props" {
        let delay = *lock(&state.props_delay);
        tokio::time::sleep(delay).await;
    }
    if let Some(answer) = server_info(&state, &method, &path) {
        lock(&state.info_requests).push(path);
        return Ok(answer);
    }
    if let Some(answer) = control(&state, &path, &bytes) {
        return Ok(answer);
    }
    let received = Received {
        method,
        path,
        headers,
        bytes,
        received_at,
    };
    Ok(answer_model_request(&state, received).await)
}

/// A request to the model API, as received.
struct Received {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    bytes: Bytes,
    received_at: Instant,
}

/// Records a model request and answers it with the next script step (refused when the
/// script expects nothing, or when its tool calls and results do not pair up).
async fn answer_model_request(state: &Arc<State>, received: Received) -> Response<Body> {
    let api = Api::of(&received.path);
    let body: Value = serde_json::from_slice(&received.bytes).unwrap_or(Value::Null);
    let streaming = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock")
        .to_string();
    let recorded_body = body.clone();
    let index = record(state, received, body);
    let pairing = crate::mock_checks::pairing_problems(api.wire(), &recorded_body);
    if !pairing.is_empty() {
        mark(state, index, |r| r.completed = true);
        let why = format!("mock: broken tool-call pairing: {}", pairing.join("; "));
        return refuse(state, why, &recorded_body);
    }
    let mut reply = match next_reply(state, &model, &recorded_body) {
        Ok(reply) => reply,
        Err(why) => {
            mark(state, index, |r| r.completed = true);
            return refuse(state, why.to_string(), &recorded_body);
        }
    };
    let mut added = Vec::new();
    loop {
        match reply {
            MockReply::Delayed {
                delay_ms,
                reply: inner,
            } => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                reply = *inner;
            }
            MockReply::WithHeaders {
                headers,
                reply: inner,
            } => {
                added.extend(headers);
                reply = *inner;
            }
            other => {
                reply = other;
                break;
            }
        }
    }
    if let MockReply::Error {
        status,
        body,
        headers,
    } = reply
    {
        mark(state, index, |r| r.completed = true);
        added.extend(headers);
        return error_response(status, body, added);
    }
    if !streaming {
        mark(state, index, |r| {
            r.completed = true;
            r.first_byte_at = Some(Instant::now());
        });
        let body = non_streaming_body(api, &reply, &model).to_string();
        return with_headers(full(StatusCode::OK, body, "application/json"), added);
    }
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(64);
    tokio::spawn(stream_reply(api, reply, model, tx, state.clone(), index));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    with_headers(response, added)
}

/// Records a request (tests read them back); returns its index.
fn record(state: &State, received: Received, body: Value) -> usize {
    let index = {
        let mut requests = lock(&state.requests);
        requests.push(RecordedRequest {
            method: received.method,
            path: received.path,
            headers: received.headers,
            body,
            raw: String::from_utf8_lossy(&received.bytes).into_owned(),
            client_disconnected: false,
            completed: false,
            received_at: Some(received.received_at),
            first_byte_at: None,
        });
        requests.len() - 1
    };
    state.changed.notify_waiters();
    index
}

/// The mock's own endpoints: the recorded requests, and more script steps.
fn control(state: &State, path: &str, bytes: &Bytes) -> Option<Response<Body>> {
    match path {
        "/_mock/requests" => {
            let body = serde_json::to_vec(&*lock(&state.requests)).unwrap_or_default();
            Some(full(StatusCode::OK, body, "application/json"))
        }
        "/_mock/script" => Some(match serde_json::from_slice::<Vec<MockReply>>(bytes) {
            Ok(replies) => {
                lock(&state.script).extend(replies);
                full(StatusCode::OK, "{}", "application/json")
            }
            Err(e) => full(StatusCode::BAD_REQUEST, e.to_string(), "text/plain"),
        }),
        _ => None,
    }
}

/// The next script step for a request to `model`: its own script, else the shared one; an
/// exhausted script is an error (the mock fails loudly on requests no script expects).
fn next_reply(state: &State, model: &str, body: &Value) -> Result<MockReply, ScriptExhausted> {
    let first_user = first_user_text(body);
    if let Some((marker, own)) = lock(&state.prompt_scripts)
        .iter_mut()
        .find(|(marker, _)| first_user.contains(marker.as_str()))
    {
        return own.pop_front().ok_or(ScriptExhausted {
            model: Some(format!("{model} (conversation marked {marker:?})")),
        });
    }
    match lock(&state.model_scripts).get_mut(model) {
        Some(own) => own.pop_front().ok_or(ScriptExhausted {
            model: Some(model.to_string()),
        }),
        None => lock(&state.script)
            .pop_front()
            .ok_or(ScriptExhausted { model: None }),
    }
}

/// The text of a request's first user message (Chat Completions, Responses or Messages).
fn first_user_text(body: &Value) -> String {
    let messages = body
        .get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array);
    let Some(first) = messages.into_iter().flatten().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &first["content"] {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// No script step expects a request (the model's own script, or the shared one).
struct ScriptExhausted {
    model: Option<String>,
}

impl std::fmt::Display for ScriptExhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.model {
            Some(model) => write!(
                f,
                "mock script for model {model} exhausted: no script step expects this request"
            ),
            None => f.write_str("mock script exhausted: no script step expects this request"),
        }
    }
}

/// A scripted HTTP error with its headers.
fn error_response(status: u16, body: String, headers: Vec<(String, String)>) -> Response<Body> {
    let response = full(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
        "application/json",
    );
    with_headers(response, headers)
}

/// `response` with these headers added (a name or value HTTP cannot carry is left out).
fn with_headers(mut response: Response<Body>, headers: Vec<(String, String)>) -> Response<Body> {
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

fn mark(state: &State, index: usize, change: impl FnOnce(&mut RecordedRequest)) {
    if let Some(request) = lock(&state.requests).get_mut(index) {
        change(request);
    }
    state.changed.notify_waiters();
}

fn chunk(model: &str, delta: Value, finish_reason: Option<&str>) -> String {
    let payload = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    });
    format!("data: {payload}\n\n")
}

fn usage_chunk(model: &str, usage: MockUsage) -> String {
    let payload = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        },
    });
    format!("data: {payload}\n\n")
}

/// The SSE frames of a reply, and how it ends.
enum Ending {
    Done,
    Hang,
    Cut,
}

fn frames_of(reply: MockReply, model: &str) -> (Vec<String>, u64, Ending) {
    let mut frames = Vec::new();
    match reply {
        // Delays are taken before rendering; one left here is just its reply.
        MockReply::Delayed { reply, .. } | MockReply::WithHeaders { reply, .. } => {
            frames_of(*reply, model)
        }
        MockReply::Text {
            chunks,
            reasoning,
            delay_ms,
            usage,
            finish_reason,
        } => {
            frames.push(chunk(
                model,
                json!({"role": "assistant", "content": ""}),
                None,
            ));
            for r in reasoning {
                frames.push(chunk(model, json!({"reasoning_content": r}), None));
            }
            for c in chunks {
                frames.push(chunk(model, json!({"content": c}), None));
            }
            frames.push(chunk(
                model,
                json!({}),
                Some(finish_reason.as_deref().unwrap_or("stop")),
            ));
            if let Some(usage) = usage {
                frames.push(usage_chunk(model, usage));
            }
            frames.push("data: [DONE]\n\n".into());
            (frames, delay_ms, Ending::Done)
        }
        MockReply::ToolCalls {
            calls,
            text,
            fragment_chars,
            usage,
            delay_ms,
        } => {
            if let Some(text) = text {
                frames.push(chunk(model, json!({"content": text}), None));
            }
            let size = fragment_chars.unwrap_or(usize::MAX).max(1);
            for (index, call) in calls.iter().enumerate() {
                frames.extend(call_frames(model, index, call, size));
            }
            frames.push(chunk(model, json!({}), Some("tool_calls")));
            if let Some(usage) = usage {
                frames.push(usage_chunk(model, usage));
            }
            frames.push("data: [DONE]\n\n".into());
            (frames, delay_ms, Ending::Done)
        }
        MockReply::Hang { chunks } => {
            for c in chunks {
                frames.push(chunk(model, json!({"content": c}), None));
            }
            (frames, 0, Ending::Hang)
        }
        MockReply::Drop { chunks } => {
            for c in chunks {
                frames.push(chunk(model, json!({"content": c}), None));
            }
            (frames, 0, Ending::Cut)
        }
        MockReply::RawSse { data } => {
            for d in data {
                frames.push(format!("data: {d}\n\n"));
            }
            (frames, 0, Ending::Done)
        }
        MockReply::Error { .. } => (frames, 0, Ending::Done),
    }
}

/// One tool call's chunks: its id and name with the first piece of its arguments, then the
/// rest of them in pieces of `size` characters.
fn call_frames(model: &str, index: usize, call: &MockToolCall, size: usize) -> Vec<String> {
    let pieces = split_chars(&call.arguments, size);
    let mut frames = vec![chunk(
        model,
        json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": pieces.first().cloned().unwrap_or_default()}}]}),
        None,
    )];
    for piece in pieces.iter().skip(1) {
        frames.push(chunk(
            model,
            json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
            None,
        ));
    }
    frames
}

fn coalesce(frames: Vec<String>, limit: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (index, frame) in frames.into_iter().enumerate() {
        match out.last_mut() {
            Some(last) if index > 1 && last.len() + frame.len() <= limit => last.push_str(&frame),
            _ => out.push(frame),
        }
    }
    out
}

fn split_chars(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

async fn stream_reply(
    api: Api,
    reply: MockReply,
    model: String,
    tx: mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    state: Arc<State>,
    index: usize,
) {
    let (frames, delay_ms, ending) = match api {
        Api::Chat => frames_of(reply, &model),
        Api::Messages => messages_frames(reply, &model),
        Api::Responses => responses_frames(reply, &model),
    };
    // Without delays, coalesce frames into larger writes (as a real server's TCP stream would);
    // the first frame stays alone so time-to-first-byte is measured precisely.
    let frames = if delay_ms == 0 {
        coalesce(frames, 16 * 1024)
    } else {
        frames
    };
    let mut first = true;
    for frame in frames {
        if !first && delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        if tx.send(Ok(Frame::data(Bytes::from(frame)))).await.is_err() {
            mark(&state, index, |r| r.client_disconnected = true);
            return;
        }
        if first {
            first = false;
            mark(&state, index, |r| r.first_byte_at = Some(Instant::now()));
        }
    }
    match ending {
        Ending::Done => {
            // Wait for hyper to take the last frame, so a disconnect is not misreported.
            drop(tx);
            mark(&state, index, |r| r.completed = true);
        }
        Ending::Hang => {
            tx.closed().await;
            mark(&state, index, |r| r.client_disconnected = true);
        }
        Ending::Cut => {
            // Let the partial output reach the socket before the connection is cut.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "mock cut the stream",
                )))
                .await;
            mark(&state, index, |r| r.completed = true);
        }
    }
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

fn default_usage(usage: Option<MockUsage>) -> MockUsage {
    usage.unwrap_or(MockUsage {
        prompt_tokens: 10,
        completion_tokens: 5,
        cached_tokens: 0,
    })
}

/// Anthropic Messages stream events for a reply.
fn messages_frames(reply: MockReply, model: &str) -> (Vec<String>, u64, Ending) {
    let mut frames = Vec::new();
    match reply {
        // Delays are taken before rendering; one left here is just its reply.
        MockReply::Delayed { reply, .. } | MockReply::WithHeaders { reply, .. } => {
            messages_frames(*reply, model)
        }
        MockReply::Text {
            chunks,
            reasoning,
            delay_ms,
            usage,
            finish_reason,
        } => {
            frames.push(messages_start(model, usage));
            let mut index = 0;
            if !reasoning.is_empty() {
                messages_thinking_block(&reasoning, &mut frames);
                index = 1;
            }
            messages_text_block(index, &chunks, true, &mut frames);
            let stop = match finish_reason.as_deref() {
                Some("length") => "max_tokens",
                Some("content_filter") => "refusal",
                _ => "end_turn",
            };
            messages_end(stop, usage, &mut frames);
            (frames, delay_ms, Ending::Done)
        }
        MockReply::ToolCalls {
            calls,
            text,
            fragment_chars,
            usage,
            delay_ms,
        } => {
            frames.push(messages_start(model, usage));
            let mut index = 0;
            if let Some(text) = text {
                messages_text_block(0, &[text], true, &mut frames);
                index = 1;
            }
            let size = fragment_chars.unwrap_or(usize::MAX).max(1);
            for call in &calls {
                messages_tool_use_block(index, call, size, &mut frames);
                index += 1;
            }
            messages_end("tool_use", usage, &mut frames);
            (frames, delay_ms, Ending::Done)
        }
        MockReply::Hang { chunks } => {
            frames.push(messages_start(model, None));
            messages_text_block(0, &chunks, false, &mut frames);
            (frames, 0, Ending::Hang)
        }
        MockReply::Drop { chunks } => {
            frames.push(messages_start(model, None));
            messages_text_block(0, &chunks, false, &mut frames);
            (frames, 0, Ending::Cut)
        }
        MockReply::RawSse { data } => (
            data.into_iter().map(|d| format!("data: {d}\n\n")).collect(),
            0,
            Ending::Done,
        ),
        MockReply::Error { .. } => (frames, 0, Ending::Done),
    }
}

fn messages_start(model: &str, usage: Option<MockUsage>) -> String {
    let usage = default_usage(usage);
    sse(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": model, "content": [],
            "usage": {"input_tokens": usage.prompt_tokens.saturating_sub(usage.cached_tokens), "cache_read_input_tokens": usage.cached_tokens, "output_tokens": 1}
        }}),
    )
}

fn messages_text_block(index: usize, chunks: &[String], close: bool, frames: &mut Vec<String>) {
    frames.push(sse("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
    for chunk in chunks {
        frames.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": chunk}})));
    }
    if close {
        frames.push(sse(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
}

fn messages_thinking_block(reasoning: &[String], frames: &mut Vec<String>) {
    frames.push(sse("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})));
    for r in reasoning {
        frames.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": r}})));
    }
    frames.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "mock-signature"}})));
    frames.push(sse(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
}

fn messages_tool_use_block(
    index: usize,
    call: &MockToolCall,
    size: usize,
    frames: &mut Vec<String>,
) {
    frames.push(sse("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}})));
    for piece in split_chars(&call.arguments, size) {
        frames.push(sse("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
    }
    frames.push(sse(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    ));
}

fn messages_end(stop: &str, usage: Option<MockUsage>, frames: &mut Vec<String>) {
    let output = default_usage(usage).completion_tokens;
    frames.push(sse("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": output}})));
    frames.push(sse("message_stop", json!({"type": "message_stop"})));
}

/// OpenAI Responses stream events for a reply.
/// The Responses API's events for `calls`, their arguments in pieces of `size` characters.
fn responses_call_frames(calls: &[MockToolCall], size: usize, frames: &mut Vec<String>) {
    for (index, call) in calls.iter().enumerate() {
        let item_id = format!("fc_{index}");
        frames.push(sse("response.output_item.added", json!({"type": "response.output_item.added", "item": {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name, "arguments": ""}})));
        for piece in split_chars(&call.arguments, size) {
            frames.push(sse("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "delta": piece})));
        }
        frames.push(sse("response.output_item.done", json!({"type": "response.output_item.done", "item": {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name, "arguments": call.arguments}})));
    }
}

fn responses_frames(reply: MockReply, _model: &str) -> (Vec<String>, u64, Ending) {
    let usage_json = |usage: Option<MockUsage>| {
        let usage = default_usage(usage);
        json!({"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens}, "output_tokens_details": {"reasoning_tokens": 0}})
    };
    let text_deltas = |chunks: &[String], frames: &mut Vec<String>| {
        for chunk in chunks {
            frames.push(sse(
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": chunk}),
            ));
        }
    };
    let mut frames = vec![sse(
        "response.created",
        json!({"type": "response.created", "response": {"id": "resp_mock", "status": "in_progress"}}),
    )];
    match reply {
        // Delays are taken before rendering; one left here is just its reply.
        MockReply::Delayed { reply, .. } | MockReply::WithHeaders { reply, .. } => {
            responses_frames(*reply, _model)
        }
        MockReply::Text {
            chunks,
            reasoning,
            delay_ms,
            usage,
            finish_reason,
        } => {
            for r in &reasoning {
                frames.push(sse(
                    "response.reasoning_summary_text.delta",
                    json!({"type": "response.reasoning_summary_text.delta", "delta": r}),
                ));
            }
            text_deltas(&chunks, &mut frames);
            let reason = match finish_reason.as_deref() {
                Some("length") => Some("max_output_tokens"),
                Some("content_filter") => Some("content_filter"),
                _ => None,
            };
            match reason {
                Some(reason) => frames.push(sse("response.incomplete", json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": reason}, "usage": usage_json(usage)}}))),
                None => frames.push(sse("response.completed", json!({"type": "response.completed", "response": {"status": "completed", "usage": usage_json(usage)}}))),
            }
            (frames, delay_ms, Ending::Done)
        }
        MockReply::ToolCalls {
            calls,
            text,
            fragment_chars,
            usage,
            delay_ms,
        } => {
            if let Some(text) = text {
                text_deltas(&[text], &mut frames);
            }
            let size = fragment_chars.unwrap_or(usize::MAX).max(1);
            responses_call_frames(&calls, size, &mut frames);
            frames.push(sse("response.completed", json!({"type": "response.completed", "response": {"status": "completed", "usage": usage_json(usage)}})));
            (frames, delay_ms, Ending::Done)
        }
        MockReply::Hang { chunks } => {
            text_deltas(&chunks, &mut frames);
            (frames, 0, Ending::Hang)
        }
        MockReply::Drop { chunks } => {
            text_deltas(&chunks, &mut frames);
            (frames, 0, Ending::Cut)
        }
        MockReply::RawSse { data } => (
            data.into_iter().map(|d| format!("data: {d}\n\n")).collect(),
            0,
            Ending::Done,
        ),
        MockReply::Error { .. } => (frames, 0, Ending::Done),
    }
}

fn non_streaming_body(api: Api, reply: &MockReply, model: &str) -> Value {
    let (text, calls): (String, Vec<MockToolCall>) = match reply {
        MockReply::Text { chunks, .. } => (chunks.concat(), Vec::new()),
        MockReply::ToolCalls { calls, text, .. } => {
            (text.clone().unwrap_or_default(), calls.clone())
        }
        _ => (String::new(), Vec::new()),
    };
    let finish = match reply {
        MockReply::Text { finish_reason, .. } => {
            finish_reason.clone().unwrap_or_else(|| "stop".into())
        }
        MockReply::ToolCalls { .. } => "tool_calls".into(),
        _ => "stop".into(),
    };
    match api {
        Api::Chat => {
            let content = if text.is_empty() && !calls.is_empty() {
                Value::Null
            } else {
                json!(text)
            };
            let mut message = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                message["tool_calls"] = calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            json!({
                "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })
        }
        Api::Messages => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for c in &calls {
                let input = serde_json::from_str::<Value>(&c.arguments).unwrap_or(json!({}));
                content
                    .push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            let stop = if calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            json!({"id": "msg_mock", "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": stop, "usage": {"input_tokens": 1, "output_tokens": 1}})
        }
        Api::Responses => {
            let mut output = Vec::new();
            if !text.is_empty() {
                output.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}));
            }
            for c in &calls {
                output.push(json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}));
            }
            json!({"id": "resp_mock", "status": "completed", "model": model, "output": output,
                "usage": {"input_tokens": 1, "output_tokens": 1}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(mock: &MockLlm, path: &str, body: Value) -> Value {
        let client = reqwest::Client::new();
        let response = client
            .post(format!("http://{}{path}", mock.addr()))
            .json(&body)
            .send()
            .await
            .expect("sent");
        response.json().await.expect("json")
    }

    #[tokio::test]
    async fn non_streaming_replies_in_every_api_format_and_requests_are_recorded() {
        let calls = || MockReply::tool_call("c1", "read_file", json!({"path": "a"}));
        let mock = MockLlm::start(vec![
            MockReply::text(&["Hel", "lo"]),
            calls(),
            calls(),
            calls(),
        ])
        .await
        .expect("mock");
        let chat = post(
            &mock,
            "/v1/chat/completions",
            json!({"model": "m", "stream": false}),
        )
        .await;
        assert_eq!(chat["choices"][0]["message"]["content"], "Hello");
        let chat_tool = post(&mock, "/v1/chat/completions", json!({"model": "m"})).await;
        assert_eq!(
            chat_tool["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "read_file"
        );
        let messages = post(&mock, "/v1/messages", json!({"model": "m"})).await;
        assert_eq!(messages["stop_reason"], "tool_use");
        assert_eq!(messages["content"][0]["input"], json!({"path": "a"}));
        let responses = post(&mock, "/v1/responses", json!({"model": "m"})).await;
        assert_eq!(responses["output"][0]["type"], "function_call");
        let recorded = mock.requests();
        assert_eq!(recorded.len(), 4);
        assert_eq!(recorded[2].path, "/v1/messages");
        assert!(recorded.iter().all(|r| r.completed));
        let exhausted = post(&mock, "/v1/chat/completions", json!({"model": "x"})).await;
        assert!(
            exhausted["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no script step expects")),
            "{exhausted}"
        );
        assert_eq!(exhausted["error"]["request"]["model"], "x");
        assert_eq!(
            mock.take_problems().len(),
            1,
            "recorded, and taken so the test passes"
        );
    }

    /// A script sets response headers on answers of every API, streamed or not, and on
    /// errors beside their own; a delay and headers wrap each other in any order.
    #[tokio::test]
    async fn scripted_headers_and_statuses_reach_the_client() {
        let limits = [
            ("x-ratelimit-remaining-requests", "1"),
            ("retry-after", "2"),
        ];
        let refusal = MockReply::Error {
            status: 429,
            body: json!({"error": {"message": "slow down"}}).to_string(),
            headers: vec![("x-own".into(), "kept".into())],
        };
        let mock = MockLlm::start(vec![
            MockReply::text(&["a"]).with_headers(&limits),
            MockReply::text(&["b"]).with_headers(&limits),
            MockReply::Delayed {
                delay_ms: 1,
                reply: Box::new(MockReply::text(&["c"]).with_headers(&limits)),
            },
            MockReply::text(&["d"]).with_headers(&limits),
            refusal.with_headers(&limits),
        ])
        .await
        .expect("mock");
        let client = reqwest::Client::new();
        let asks = [
            ("/v1/chat/completions", true),
            ("/v1/messages", true),
            ("/v1/responses", true),
            ("/v1/chat/completions", false),
        ];
        for (path, stream) in asks {
            let response = client
                .post(format!("http://{}{path}", mock.addr()))
                .json(&json!({"model": "m", "stream": stream}))
                .send()
                .await
                .expect("sent");
            assert_eq!(response.status(), 200, "{path}");
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            assert_eq!(
                header("x-ratelimit-remaining-requests").as_deref(),
                Some("1")
            );
            assert_eq!(header("retry-after").as_deref(), Some("2"), "{path}");
            let _ = response.bytes().await;
        }
        let refused = client
            .post(format!("http://{}/v1/messages", mock.addr()))
            .json(&json!({"model": "m", "stream": true}))
            .send()
            .await
            .expect("sent");
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()["retry-after"], "2");
        assert_eq!(refused.headers()["x-own"], "kept");
        // Scripts sent over the control endpoint take headers too.
        let wrapped: MockReply = serde_json::from_value(json!({"type": "with_headers",
            "headers": [["retry-after", "1"]], "reply": {"type": "text", "chunks": ["x"]}}))
        .expect("a script step");
        assert!(matches!(wrapped, MockReply::WithHeaders { .. }));
    }

    #[tokio::test]
    async fn a_request_with_broken_tool_pairing_is_refused_and_recorded() {
        let mock = MockLlm::start(vec![MockReply::text(&["never sent"])])
            .await
            .expect("mock");
        let broken = json!({"model": "m", "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
            {"role": "user", "content": "the result is missing"},
        ]});
        let answer = post(&mock, "/v1/chat/completions", broken).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("\"c1\" has no result"), "{answer}");
        let problems = mock.take_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        // The scripted reply was not used up by the broken request.
        assert_eq!(lock(&mock.state.script).len(), 1);
    }

    #[tokio::test]
    async fn scripts_left_by_a_conversation_cut_short_are_taken_whole() {
        let mock = MockLlm::start(vec![MockReply::text(&["left over"])])
            .await
            .expect("mock");
        mock.script_for_model("side", vec![MockReply::text(&["side reply"])]);
        mock.script_for_prompt("[marked]", vec![MockReply::text(&["marked reply"])]);
        assert_eq!(mock.take_scripts().len(), 3);
        assert!(mock.take_scripts().is_empty());
        // The next request finds an empty script: refused, not answered with the old reply.
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "q"}]});
        let answer = post(&mock, "/v1/chat/completions", body).await;
        assert!(!answer.to_string().contains("left over"), "{answer}");
        mock.take_problems();
    }
}
