//! Clients of `talaria serve` for the end-to-end suites: the server started on a test's home
//! (its stderr kept), an HTTP profile client (POSTs, event streams read event by event and
//! dropped as a network would drop them), and a WebSocket client.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use talaria_harness::binary::talaria_bin;
use tokio::io::AsyncBufReadExt;
use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

/// A running `talaria serve`: its address (`127.0.0.1:PORT`), token and log.
pub struct Served {
    /// Killed with the test.
    _child: tokio::process::Child,
    pub addr: String,
    pub token: String,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Served {
    pub fn url(&self) -> String {
        format!("http://{}/acp", self.addr)
    }

    /// The server's process id (for a test that stops and continues it).
    pub fn pid(&self) -> u32 {
        self._child.id().expect("running")
    }

    /// What the server logged so far.
    pub fn logged(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// Starts `talaria serve` on loopback (port 0) with `args`.
pub async fn start(env: &TestEnv, args: &[&str]) -> Served {
    let mut command = tokio::process::Command::new(talaria_bin());
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_clear()
        .envs(env.env())
        .env("TALARIA_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("talaria serve");
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let into = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            if let Ok(mut log) = into.lock() {
                log.push_str(&line);
                log.push('\n');
            }
        }
    });
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("in time")
        .expect("read")
        .expect("a line");
    let addr = line
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the address")
        .to_string();
    let token = std::fs::read_to_string(env.home.path().join("talaria/serve.token"))
        .expect("token file")
        .trim()
        .to_string();
    Served {
        _child: child,
        addr,
        token,
        log,
    }
}

/// One server-sent event: its id (the cursor) and message.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<String>,
    pub message: Value,
}

/// An open event stream, read event by event; dropped, its socket closes at once.
pub struct Events {
    body: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The next event, within `WAIT`; `None` when the stream ends.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().to_string());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.strip_prefix(' ').unwrap_or(value));
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let message = serde_json::from_str(&data).expect("an event's data is JSON");
                return Some(Event { id, message });
            }
            let chunk = tokio::time::timeout(WAIT, self.body.chunk())
                .await
                .expect("an event in time")
                .ok()??;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads until `done` holds for an event read (which is returned with those before it).
    pub async fn until(&mut self, done: impl Fn(&Event) -> bool) -> Vec<Event> {
        let mut got = Vec::new();
        while let Some(event) = self.next().await {
            let stop = done(&event);
            got.push(event);
            if stop {
                return got;
            }
        }
        panic!("the stream ended before what was awaited: {got:?}");
    }
}

/// A client of the HTTP profile: one connection, by its id or by its address.
pub struct HttpClient {
    pub http: reqwest::Client,
    pub url: String,
    pub token: String,
    /// `Acp-Connection-Id`, once initialized (`None`: named by its address).
    pub connection: Option<String>,
}

impl HttpClient {
    /// Initialized on `served` (at `/acp/NAME` when `named`).
    pub async fn initialize(served: &Served, named: Option<&str>) -> (Self, Value) {
        let url = match named {
            Some(name) => format!("{}/{name}", served.url()),
            None => served.url(),
        };
        let mut client = Self {
            http: fresh_sockets(),
            url,
            token: served.token.clone(),
            connection: None,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        let response = client.send(&init, None).await;
        assert_eq!(response.status(), 200);
        let id = response
            .headers()
            .get("acp-connection-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if named.is_none() {
            client.connection = id;
        }
        let answer: Value = serde_json::from_str(&response.text().await.expect("text"))
            .expect("initialize's answer");
        (client, answer)
    }

    /// The status of an `initialize` (at `/acp/NAME` when `named`).
    pub async fn initialize_status(served: &Served, named: Option<&str>) -> u16 {
        let url = match named {
            Some(name) => format!("{}/{name}", served.url()),
            None => served.url(),
        };
        let client = Self {
            http: fresh_sockets(),
            url,
            token: served.token.clone(),
            connection: None,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
        client.send(&init, None).await.status().as_u16()
    }

    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .request(method, &self.url)
            .bearer_auth(&self.token);
        if let Some(id) = &self.connection {
            request = request.header("Acp-Connection-Id", id);
        }
        request
    }

    /// POSTs one message (naming `session` in `Acp-Session-Id` when given).
    pub async fn send(&self, message: &Value, session: Option<&str>) -> reqwest::Response {
        let mut request = self
            .request(reqwest::Method::POST)
            .header("Content-Type", "application/json")
            .body(message.to_string());
        if let Some(session) = session {
            request = request.header("Acp-Session-Id", session);
        }
        request.send().await.expect("POST answered")
    }

    /// POSTs one message and expects 202.
    pub async fn post(&self, message: Value) {
        let status = self.send(&message, None).await.status();
        assert_eq!(status, 202, "{message}");
    }

    /// Opens an event stream (a session's with `session`), from after `last` when given;
    /// the response when it is refused.
    pub async fn open(
        &self,
        session: Option<&str>,
        last: Option<&str>,
    ) -> Result<Events, reqwest::Response> {
        let mut request = self
            .request(reqwest::Method::GET)
            .header("Accept", "text/event-stream");
        if let Some(session) = session {
            request = request.header("Acp-Session-Id", session);
        }
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.expect("GET answered");
        if response.status() != 200 {
            return Err(response);
        }
        Ok(Events {
            body: response,
            buffer: String::new(),
        })
    }

    pub async fn delete(&self) -> u16 {
        self.request(reqwest::Method::DELETE)
            .send()
            .await
            .expect("DELETE answered")
            .status()
            .as_u16()
    }
}

/// An HTTP client that opens a socket per request: the server closes idle keep-alive
/// sockets after 10 s, and a request racing that close would fail for no fault of the server.
pub fn fresh_sockets() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

/// A WebSocket client: every message the agent sent, in order.
pub struct Socket {
    pub socket: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    pub connection: String,
    pub messages: Vec<Value>,
}

impl Socket {
    /// A socket to `served` at `/acp` with `query` (`?connection=…&after=…`, or empty).
    pub async fn open(served: &Served, query: &str) -> Result<Self, u16> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let stream = tokio::net::TcpStream::connect(&served.addr)
            .await
            .expect("connect");
        let mut request = format!("ws://{}/acp{query}", served.addr)
            .into_client_request()
            .expect("request");
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", served.token).parse().expect("header"),
        );
        // The server sends each message as one frame, however large (a loaded session's
        // answer may be tens of MiB).
        let mut config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default();
        config.max_frame_size = None;
        config.max_message_size = Some(256 << 20);
        let opened =
            tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await;
        let (mut socket, _) = match opened {
            Ok(opened) => opened,
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                return Err(response.status().as_u16());
            }
            Err(other) => panic!("upgrade failed: {other}"),
        };
        let hello = next_frame(&mut socket).await.expect("the hello");
        assert_eq!(hello["method"], "_talaria/connection");
        let connection = hello["params"]["connectionId"]
            .as_str()
            .expect("id")
            .to_string();
        Ok(Self {
            socket,
            connection,
            messages: Vec::new(),
        })
    }

    pub async fn send(&mut self, message: Value) {
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .expect("sent");
    }

    /// Reads until `done` holds for a message (kept in `messages`); that message.
    pub async fn until(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        loop {
            let message = next_frame(&mut self.socket)
                .await
                .unwrap_or_else(|| panic!("the socket ended; got {:?}", self.messages));
            self.messages.push(message.clone());
            if done(&message) {
                return message;
            }
        }
    }

    /// Sends a request and waits for its answer.
    pub async fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.until(|m| m["id"] == id && m.get("method").is_none())
            .await
    }

    /// Drops the socket as a network would: no close frame.
    pub fn drop_now(self) {
        drop(self.socket);
    }
}

async fn next_frame(
    socket: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> Option<Value> {
    loop {
        match tokio::time::timeout(WAIT, socket.next()).await.ok()?? {
            Ok(Message::Text(text)) => return Some(serde_json::from_str(&text).expect("JSON")),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// The cursor a message carries (`_meta["acp/cursor"]`).
pub fn cursor_of(message: &Value) -> Option<String> {
    [
        &message["params"],
        &message["result"],
        &message["error"]["data"],
    ]
    .into_iter()
    .find_map(|holder| holder["_meta"]["acp/cursor"].as_str())
    .map(str::to_string)
}

/// The text chunks of the agent's answer among `messages`.
pub fn answer_chunks(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .map(str::to_string)
        .collect()
}

/// `count` numbered words, `w0 ` … (what a scripted answer streams).
pub fn words(count: usize) -> Vec<String> {
    (0..count).map(|n| format!("w{n} ")).collect()
}

/// A little pause (a client away).
pub async fn away(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}
