//! The crash suite's `talaria serve` reconnection: a WebSocket client loads a session and
//! prompts; while the answer streams its socket drops and it comes back (`?connection=ID&
//! after=N`, the messages it got), and reads on to the answer. The server is killed (or the
//! step faulted) at each point this passes; then a process on the same home must show every
//! answer the client got — once, in order: what a resume lost or repeated shows as an answer
//! that is not the record's.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use talaria_harness::MockReply;
use tokio::io::AsyncBufReadExt;
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::crash::{Cut, Landed, SuiteOptions, Variant, at_pass_only, fresh_home};
use crate::home::{Faults, Home};
use crate::invariants::{Expected, Problems, check_after_restart};
use crate::ledger::Ledger;
use crate::operations::{Operation, Prepared};
use crate::points::{Pass, passes_from, read_trace};

const WAIT: Duration = Duration::from_secs(20);
/// The chunks of the answer that streams across the reconnection.
const CHUNKS: usize = 24;

/// A running `talaria serve`.
struct Served {
    child: tokio::process::Child,
    addr: String,
    token: String,
}

async fn serve(home: &Home, faults: &Faults) -> anyhow::Result<Served> {
    let mut child = tokio::process::Command::new(crate::agent_bin::failpoints_bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(home.env(faults))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let line = tokio::time::timeout(WAIT, tokio::io::BufReader::new(stdout).lines().next_line())
        .await??
        .ok_or_else(|| anyhow::anyhow!("talaria serve said nothing"))?;
    let addr = line
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .ok_or_else(|| anyhow::anyhow!("no address in {line:?}"))?
        .to_string();
    let token = std::fs::read_to_string(home.talaria_home().join("serve.token"))?
        .trim()
        .to_string();
    Ok(Served { child, addr, token })
}

/// A WebSocket client of one connection, keeping what it sent and got.
struct Socket {
    socket: Option<WebSocketStream<TcpStream>>,
    connection: String,
    /// The agent's messages got (what `after` counts).
    got: u64,
    transcript: Vec<Value>,
    ledger: Ledger,
    next_id: i64,
}

async fn open(served: &Served, query: &str) -> anyhow::Result<WebSocketStream<TcpStream>> {
    let stream = TcpStream::connect(&served.addr).await?;
    let mut request = format!("ws://{}/acp{query}", served.addr).into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {}", served.token).parse()?);
    let (socket, _) = tokio_tungstenite::client_async(request, stream).await?;
    Ok(socket)
}

impl Socket {
    async fn connect(served: &Served) -> anyhow::Result<Socket> {
        let mut socket = Socket {
            socket: Some(open(served, "").await?),
            connection: String::new(),
            got: 0,
            transcript: Vec::new(),
            ledger: Ledger::default(),
            next_id: 1,
        };
        socket.hello().await?;
        Ok(socket)
    }

    /// Reads the connection's notice, the first frame of every socket.
    async fn hello(&mut self) -> anyhow::Result<()> {
        let socket = self
            .socket
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no socket"))?;
        let frame = tokio::time::timeout(WAIT, socket.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the socket closed"))??;
        let message: Value = serde_json::from_str(frame.to_text()?)?;
        anyhow::ensure!(
            message["method"] == "_talaria/connection",
            "the first frame: {message}"
        );
        self.connection = message["params"]["connectionId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok(())
    }

    /// Drops the socket and takes the connection back, saying what it got.
    async fn reconnect(&mut self, served: &Served) -> anyhow::Result<()> {
        drop(self.socket.take());
        let query = format!("?connection={}&after={}", self.connection, self.got);
        self.socket = Some(open(served, &query).await?);
        self.hello().await
    }

    async fn send(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.ledger.sent(id, method, &params);
        let socket = self
            .socket
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no socket"))?;
        socket.send(Message::text(message.to_string())).await?;
        Ok(id)
    }

    /// The next message of the agent (the connection's own notice noted, not counted).
    async fn next(&mut self) -> anyhow::Result<Value> {
        loop {
            let socket = self
                .socket
                .as_mut()
                .ok_or_else(|| anyhow::anyhow!("no socket"))?;
            let frame = tokio::time::timeout(WAIT, socket.next())
                .await?
                .ok_or_else(|| anyhow::anyhow!("the socket closed"))??;
            let Message::Text(text) = frame else {
                if let Message::Close(_) = frame {
                    anyhow::bail!("the socket closed");
                }
                continue;
            };
            let message: Value = serde_json::from_str(text.as_str())?;
            self.got += 1;
            self.transcript.push(message.clone());
            return Ok(message);
        }
    }

    async fn response(&mut self, id: i64) -> anyhow::Result<Value> {
        loop {
            let message = self.next().await?;
            if message["id"] == id && message.get("method").is_none() {
                return Ok(message);
            }
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.send(method, params).await?;
        self.response(id).await
    }
}

/// The operation: load, then a prompt whose answer streams across a reconnection.
async fn reconnect_mid_answer(
    served: &Served,
    home: &Home,
    prepared: &Prepared,
    socket: &mut Socket,
    begun: &mut Option<usize>,
    trace: &std::path::Path,
) -> anyhow::Result<()> {
    socket
        .request("initialize", json!({"protocolVersion": 1}))
        .await?;
    let params = json!({"sessionId": prepared.main, "cwd": home.workspace(), "mcpServers": []});
    let loaded = socket.request("session/load", params).await?;
    anyhow::ensure!(loaded.get("result").is_some(), "load: {loaded}");
    let chunks: Vec<String> = (0..CHUNKS).map(|i| format!("<{i}>")).collect();
    home.script([MockReply::Text {
        chunks,
        reasoning: Vec::new(),
        delay_ms: 15,
        usage: None,
        finish_reason: None,
    }]);
    *begun = Some(read_trace(trace).len());
    let prompt =
        json!({"sessionId": prepared.main, "prompt": [{"type": "text", "text": "stream it"}]});
    let id = socket.send("session/prompt", prompt).await?;
    let mut seen = 0;
    while seen < CHUNKS / 3 {
        let message = socket.next().await?;
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            seen += 1;
        }
    }
    socket.reconnect(served).await?;
    let answer = socket.response(id).await?;
    anyhow::ensure!(
        answer["result"]["stopReason"] == "end_turn",
        "prompt: {answer}"
    );
    Ok(())
}

/// The reconnection run whole with a trace: the passes after the prompt began.
pub async fn traced(options: &SuiteOptions) -> anyhow::Result<Vec<Pass>> {
    let home = fresh_home(options).await?;
    let prepared = Operation::PromptWithTools.prepare(&home).await?;
    let trace = home.scratch("trace");
    let faults = Faults {
        trace: Some(trace.clone()),
        ..Faults::default()
    };
    let mut served = serve(&home, &faults).await?;
    let mut socket = Socket::connect(&served).await?;
    let mut begun = None;
    reconnect_mid_answer(&served, &home, &prepared, &mut socket, &mut begun, &trace).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let _ = served.child.kill().await;
    Ok(passes_from(&read_trace(&trace), begun.unwrap_or_default()))
}

/// The reconnection cut at `pass`; then a process on the same home checks.
pub async fn cut_at(options: &SuiteOptions, pass: Pass) -> anyhow::Result<Cut> {
    let mut home = fresh_home(options).await?;
    let prepared = Operation::PromptWithTools.prepare(&home).await?;
    let trace = home.scratch("trace");
    let mut faults = Faults {
        trace: Some(trace.clone()),
        ..Faults::default()
    };
    match options.variant {
        Variant::Refuse => faults.failpoints = Some(at_pass_only(&pass, "return")),
        Variant::Stall => faults.failpoints = Some(at_pass_only(&pass, crate::crash::STALL)),
        _ => faults.crash_at = Some(pass.clone()),
    }
    let mut served = serve(&home, &faults).await?;
    let mut socket = Socket::connect(&served).await?;
    let mut begun = None;
    let _ = reconnect_mid_answer(&served, &home, &prepared, &mut socket, &mut begun, &trace).await;
    let died = tokio::time::timeout(Duration::from_millis(1500), served.child.wait())
        .await
        .is_ok();
    let landed = if died || options.variant != Variant::Kill {
        Landed::AtThePoint
    } else {
        Landed::NotReached
    };
    stop(&mut served).await;
    drop(socket.socket.take());
    home.mock.take_scripts();
    let mut ledger = socket.ledger.clone();
    ledger.read(&socket.transcript);
    let mut facts = prepared.facts.clone();
    facts.extend(ledger.facts);
    let expected = Expected {
        facts,
        bystanders: &prepared.bystanders,
        replays: Vec::new(),
    };
    let problems: Problems = check_after_restart(&mut home, &expected).await;
    let kept: Option<PathBuf> = (!problems.is_empty()).then(|| {
        let _ = std::fs::write(
            home.scratch("client.jsonl"),
            socket
                .transcript
                .iter()
                .map(|m| format!("{m}\n"))
                .collect::<String>(),
        );
        home.keep()
    });
    Ok((landed, problems, kept))
}

/// Ends the server: SIGTERM (a clean stop), SIGKILL after 5 s.
async fn stop(served: &mut Served) {
    if let Some(pid) = served.child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(5), served.child.wait())
        .await
        .is_err()
    {
        let _ = served.child.kill().await;
    }
}
