//! `talaria-mcp-fixture`: a small MCP server for tests, over stdio (newline-delimited
//! JSON-RPC) or, with `--http`, over streamable HTTP on 127.0.0.1 (it prints its URL first).
//!
//! Tools: `echo {text}` (text back), `picture {}` (a text and an image), `fail {}` (`isError`),
//! `slow {}` (answers after 30 s unless cancelled), `crash {}` (the process exits), `ask {}`
//! (over stdio: asks the client for a colour with `elicitation/create` and reports the
//! answer, or answers at once that it could not ask when the client has no elicitation). With
//! `--hang` it never answers `initialize`; with `--exit` it exits at once. Its pid (over stdio)
//! and every message it receives are appended to the file named by `MCP_FIXTURE_LOG`, when
//! set. Over HTTP, `forget {}` drops the session (its later requests get 404); with `--oauth`
//! it wants sign-in (see `mcp_fixture_oauth.rs`), and `revoke {}` voids every token. With `--offers` it also has resources, a template, subscriptions and a prompt (see
//! `mcp_fixture_offers.rs`), and a `weird {}` tool that writes a line that is not JSON before
//! answering with a content type nobody knows.

#[path = "../mcp_fixture_oauth.rs"]
mod oauth;
#[path = "../mcp_fixture_offers.rs"]
mod offers;

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Started with `--offers`.
static OFFERS: AtomicBool = AtomicBool::new(false);
/// Started with `--oauth` (over HTTP): requests need a token (see `mcp_fixture_oauth.rs`).
static OAUTH: AtomicBool = AtomicBool::new(false);
/// Serving over HTTP (`--http`): the `forget` tool is listed.
static HTTP: AtomicBool = AtomicBool::new(false);
/// Over HTTP: the session the fixture knows now (`forget {}` starts a new one, so requests
/// of the old one are answered 404, as a server that dropped a session answers).
static HTTP_SESSION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

use serde_json::{Value, json};

fn send(message: &Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{message}");
    let _ = stdout.flush();
}

fn log(message: &str) {
    if let Some(path) = std::env::var_os("MCP_FIXTURE_LOG")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(file, "{message}");
    }
}

fn tools() -> Value {
    let object = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required});
    let mut tools = json!({"tools": [
        {"name": "echo", "description": "Echo the text back.", "inputSchema": object(json!({"text": {"type": "string", "maxLength": 40}}), json!(["text"])),
         "annotations": {"readOnlyHint": true}},
        {"name": "picture", "description": "A caption and a picture.", "inputSchema": object(json!({}), json!([]))},
        {"name": "fail", "description": "Always fails.", "inputSchema": object(json!({}), json!([]))},
        {"name": "slow", "description": "Takes 30 seconds.", "inputSchema": object(json!({}), json!([]))},
        {"name": "crash", "description": "Exits the server.", "inputSchema": object(json!({}), json!([]))},
        {"name": "ask", "description": "Asks the user for a colour.", "inputSchema": object(json!({}), json!([]))}
    ]});
    if OFFERS.load(Ordering::Relaxed)
        && let Some(list) = tools["tools"].as_array_mut()
    {
        list.push(json!({"name": "weird", "description": "Garbles a line, then answers oddly.", "inputSchema": object(json!({}), json!([]))}));
        list.push(json!({"name": "add", "description": "Adds a resource.", "inputSchema": object(json!({}), json!([]))}));
    }
    if let Some(list) = tools["tools"].as_array_mut() {
        if HTTP.load(Ordering::Relaxed) {
            list.push(json!({"name": "forget", "description": "Drops the HTTP session.", "inputSchema": object(json!({}), json!([]))}));
        }
        if OAUTH.load(Ordering::Relaxed) {
            list.push(json!({"name": "revoke", "description": "Revokes every token.", "inputSchema": object(json!({}), json!([]))}));
        }
    }
    tools
}

fn call(name: &str, args: &Value) -> Value {
    match name {
        "echo" => {
            json!({"content": [{"type": "text", "text": format!("echo: {}", args["text"].as_str().unwrap_or(""))}]})
        }
        "picture" => json!({"content": [
            {"type": "text", "text": "a red dot"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
        ]}),
        "weird" => {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "this line is not JSON-RPC {{");
            let _ = stdout.flush();
            json!({"content": [{"type": "text", "text": "odd:"}, {"type": "hologram", "data": "x"}]})
        }
        "add" => offers::add(),
        "revoke" => oauth::revoke_all(),
        "forget" => {
            HTTP_SESSION.fetch_add(1, Ordering::SeqCst);
            json!({"content": [{"type": "text", "text": "forgot the session"}]})
        }
        "fail" => {
            json!({"content": [{"type": "text", "text": "the fixture refuses"}], "isError": true})
        }
        _ => {
            json!({"content": [{"type": "text", "text": format!("unknown tool {name}")}], "isError": true})
        }
    }
}

/// The answer to one message (`None` for notifications and the slow tool, which answers
/// from a thread over stdio).
fn respond(message: &Value, hang: bool) -> Option<Value> {
    let id = message.get("id").cloned()?;
    let method = message["method"].as_str().unwrap_or("");
    let result = match method {
        "initialize" if hang => {
            std::thread::sleep(std::time::Duration::from_secs(3600));
            return None;
        }
        "initialize" => {
            let asked = message["params"]["protocolVersion"]
                .as_str()
                .unwrap_or("2025-06-18");
            let version = if asked > "2025-11-25" {
                "2025-11-25"
            } else {
                asked
            };
            json!({"protocolVersion": version, "capabilities": offers::capabilities(OFFERS.load(Ordering::Relaxed)),
                   "serverInfo": {"name": "talaria-mcp-fixture", "version": "1.0.0"}})
        }
        "ping" => json!({}),
        _ if OFFERS.load(Ordering::Relaxed)
            && let Some(answer) = offers::respond(&id, method, &message["params"]) =>
        {
            return Some(answer);
        }
        "tools/list" => tools(),
        "tools/call" => {
            let name = message["params"]["name"].as_str().unwrap_or("");
            match name {
                "crash" => std::process::exit(1),
                "slow" => {
                    // Answers later, from a thread: cancellations are still read (and logged).
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_secs(30));
                        send(
                            &json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "done slowly"}]}}),
                        );
                    });
                    return None;
                }
                _ => call(name, &message["params"]["arguments"]),
            }
        }
        _ => {
            return Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {method}")}}),
            );
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--exit") {
        eprintln!("fixture: exiting at once");
        std::process::exit(3);
    }
    if args.iter().any(|a| a == "--http") {
        OAUTH.store(args.iter().any(|a| a == "--oauth"), Ordering::Relaxed);
        HTTP.store(true, Ordering::Relaxed);
        serve_http();
        return;
    }
    let hang = args.iter().any(|a| a == "--hang");
    OFFERS.store(args.iter().any(|a| a == "--offers"), Ordering::Relaxed);
    log(&format!("pid {}", std::process::id()));
    let mut elicitation = false;
    // The `ask` calls waiting for the client's answer, by the id of the question sent.
    let mut asking: Vec<(String, Value)> = Vec::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        log(&line);
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message["method"] == "initialize" {
            elicitation = message["params"]["capabilities"]["elicitation"].is_object();
        }
        if message.get("method").is_none() {
            answer_asked(&message, &mut asking);
            continue;
        }
        if message["method"] == "tools/call" && message["params"]["name"] == "ask" {
            if elicitation {
                let question = format!("ask-{}", asking.len());
                send(
                    &json!({"jsonrpc": "2.0", "id": question, "method": "elicitation/create", "params": {
                        "mode": "form",
                        "message": "Which colour?",
                        "requestedSchema": {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
                    }}),
                );
                asking.push((question, message["id"].clone()));
            } else {
                send(
                    &json!({"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "cannot ask: no elicitation"}], "isError": true}}),
                );
            }
            continue;
        }
        if let Some(answer) = respond(&message, hang) {
            send(&answer);
        }
    }
}

/// Answers the `ask` call whose question the client answered.
fn answer_asked(response: &Value, asking: &mut Vec<(String, Value)>) {
    let Some(index) = asking
        .iter()
        .position(|(question, _)| response["id"] == json!(question))
    else {
        return;
    };
    let (_, call) = asking.remove(index);
    let result = &response["result"];
    let text = match result["action"].as_str() {
        Some("accept") => format!("the user chose {}", result["content"]["colour"]),
        Some(action) => format!("the user did not answer: {action}"),
        None => format!("the question failed: {response}"),
    };
    send(
        &json!({"jsonrpc": "2.0", "id": call, "result": {"content": [{"type": "text", "text": text}]}}),
    );
}

/// One HTTP request of the MCP endpoint.
async fn answer_http(
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::{BodyExt, Full};
    use hyper::{Method, Response, StatusCode};

    let method = request.method().clone();
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let reply = |status: StatusCode, body: String| {
        let mut response = Response::new(Full::new(bytes::Bytes::from(body)));
        *response.status_mut() = status;
        response
    };
    if OAUTH.load(Ordering::Relaxed) {
        let text = String::from_utf8_lossy(&body);
        let answer = oauth::route(method.as_str(), &path, &text)
            .map(Err)
            .unwrap_or_else(|| oauth::check(authorization.as_deref()));
        if let Err((status, headers, body)) = answer {
            let mut response = reply(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                body,
            );
            for (name, value) in headers {
                if let Ok(value) = hyper::header::HeaderValue::from_str(&value) {
                    response.headers_mut().insert(name, value);
                }
            }
            return Ok(response);
        }
    }
    if method == Method::GET {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, String::new()));
    }
    if method == Method::DELETE {
        return Ok(reply(StatusCode::OK, String::new()));
    }
    let text = String::from_utf8_lossy(&body).to_string();
    log(&text);
    let Ok(message) = serde_json::from_str::<Value>(&text) else {
        return Ok(reply(StatusCode::BAD_REQUEST, String::new()));
    };
    let current = format!("fixture-session-{}", HTTP_SESSION.load(Ordering::SeqCst));
    if message["method"] != "initialize" && session.is_some_and(|s| s != current) {
        return Ok(reply(StatusCode::NOT_FOUND, String::new()));
    }
    match respond(&message, false) {
        None => Ok(reply(StatusCode::ACCEPTED, String::new())),
        Some(answer) => {
            let mut response = reply(StatusCode::OK, answer.to_string());
            response.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("application/json"),
            );
            if let Ok(value) = hyper::header::HeaderValue::from_str(&current) {
                response.headers_mut().insert("mcp-session-id", value);
            }
            Ok(response)
        }
    }
}

/// Streamable HTTP: POST carries one message (a notification is accepted with 202; a
/// request is answered with JSON), GET has no event stream (405), DELETE ends the session.
fn serve_http() {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fixture: no runtime: {e}");
            return;
        }
    };
    runtime.block_on(async {
        let Ok(listener) = tokio::net::TcpListener::bind("127.0.0.1:0").await else {
            eprintln!("fixture: cannot listen");
            return;
        };
        let Ok(addr) = listener.local_addr() else {
            return;
        };
        let _ = oauth::ORIGIN.set(format!("http://{addr}"));
        {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "http://{addr}/mcp");
            let _ = stdout.flush();
        }
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer_http);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}
