//! `talaria serve`'s figures: time from start to the first answer, memory per idle
//! WebSocket connection, and agent time per streamed delta over WebSocket against the same
//! load over stdio.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use talaria_harness::{MockLlm, MockReply};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WAIT: Duration = Duration::from_secs(60);

/// A running `talaria serve` on a loopback port.
struct Served {
    child: tokio::process::Child,
    pid: u32,
    addr: String,
    token: String,
}

impl Served {
    async fn start(agent: &Path, vars: &[(String, String)]) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(agent)
            .args(["serve", "--listen", "127.0.0.1:0", "--max-sessions", "1000"])
            .env_clear()
            .envs(vars.iter().cloned())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().context("pid")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .context("serve printed nothing")??
            .context("serve closed its output")?;
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .context("no address in the first line")?
            .to_string();
        let token_path = line
            .rsplit_once("token in ")
            .map(|(_, path)| path.trim().to_string())
            .context("no token path in the first line")?;
        let token = std::fs::read_to_string(token_path)?.trim().to_string();
        Ok(Self {
            child,
            pid,
            addr,
            token,
        })
    }

    async fn connect(&self) -> anyhow::Result<WsClient> {
        let stream = TcpStream::connect(&self.addr).await?;
        let mut request = format!("ws://{}/acp", self.addr).into_client_request()?;
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {}", self.token).parse()?);
        let (socket, _) = tokio_tungstenite::client_async(request, stream).await?;
        let mut client = WsClient { socket, next_id: 1 };
        // The connection's hello comes first.
        client.next_text().await?;
        Ok(client)
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }
}

struct WsClient {
    socket: WebSocketStream<TcpStream>,
    next_id: i64,
}

impl WsClient {
    async fn next_text(&mut self) -> anyhow::Result<String> {
        loop {
            match tokio::time::timeout(WAIT, self.socket.next()).await {
                Err(_) => bail!("no message in {WAIT:?}"),
                Ok(None) => bail!("the socket closed"),
                Ok(Some(message)) => {
                    if let Message::Text(text) = message? {
                        return Ok(text.to_string());
                    }
                }
            }
        }
    }

    async fn send(&mut self, method: &str, params: Value) -> anyhow::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.socket.send(Message::text(message.to_string())).await?;
        Ok(id)
    }

    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.send(method, params).await?;
        loop {
            let text = self.next_text().await?;
            let value: Value = serde_json::from_str(&text)?;
            if value["id"] == id && value.get("method").is_none() {
                if let Some(error) = value.get("error") {
                    bail!("{method} failed: {error}");
                }
                return Ok(value["result"].clone());
            }
        }
    }

    async fn open_session(&mut self, cwd: &Path) -> anyhow::Result<String> {
        self.call("initialize", json!({"protocolVersion": 1}))
            .await?;
        let result = self
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await?;
        Ok(result["sessionId"]
            .as_str()
            .context("no session id")?
            .to_string())
    }

    /// Sends a prompt to each session and counts the answers' chunks (read as text, not
    /// parsed) until every answer has ended.
    async fn stream_prompts(&mut self, sessions: &[String]) -> anyhow::Result<usize> {
        for session in sessions {
            self.send("session/prompt", prompt_params(session)).await?;
        }
        let (mut chunks, mut ended) = (0, 0);
        while ended < sessions.len() {
            let text = self.next_text().await?;
            if text.contains("\"agent_message_chunk\"") {
                chunks += 1;
            } else if text.contains("\"stopReason\"") {
                ended += 1;
            }
        }
        Ok(chunks)
    }
}

fn prompt_params(session: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": "stream"}]})
}

fn answer(deltas: usize) -> MockReply {
    MockReply::Text {
        chunks: (0..deltas).map(|i| format!("tok{i} ")).collect(),
        reasoning: Vec::new(),
        delay_ms: 0,
        usage: None,
        finish_reason: None,
    }
}

/// From spawning `talaria serve` to the end of the first prompt's answer over WebSocket;
/// median and minimum in milliseconds.
pub async fn start_to_first_answer(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &Path,
    runs: usize,
) -> anyhow::Result<(f64, f64)> {
    let mut samples = Vec::new();
    for _ in 0..runs {
        mock.push(MockReply::text(&["hello"]));
        let started = Instant::now();
        let served = Served::start(agent, vars).await?;
        let mut client = served.connect().await?;
        let session = client.open_session(cwd).await?;
        client
            .call("session/prompt", prompt_params(&session))
            .await?;
        samples.push(crate::ms(started.elapsed()));
        served.stop().await?;
    }
    Ok(crate::median(&mut samples))
}

/// Memory per idle connection (initialized, no session), in KB: the server's resident set
/// before and after `count` more connections.
pub async fn idle_connection_kb(
    agent: &Path,
    vars: &[(String, String)],
    count: usize,
) -> anyhow::Result<f64> {
    let served = Served::start(agent, vars).await?;
    let mut warm = served.connect().await?;
    warm.call("initialize", json!({"protocolVersion": 1}))
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = resident_kib(served.pid)?;
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        let mut client = served.connect().await?;
        client
            .call("initialize", json!({"protocolVersion": 1}))
            .await?;
        clients.push(client);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = resident_kib(served.pid)?;
    drop(clients);
    served.stop().await?;
    Ok(after.saturating_sub(before) as f64 / count as f64)
}

fn resident_kib(pid: u32) -> anyhow::Result<u64> {
    crate::proc_kib(&format!("/proc/{pid}/status"), "VmRSS").context("no VmRSS")
}

/// Agent CPU time per delta and wall time for the whole load, with `sessions` answers of
/// `deltas` each streaming at once.
pub struct StreamingFigures {
    pub cpu_us_per_delta: f64,
    pub wall_ms: f64,
}

impl StreamingFigures {
    /// The median of each figure over several runs (zero for none).
    pub fn median(runs: Vec<Self>) -> Self {
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied().unwrap_or(0.0)
        };
        Self {
            cpu_us_per_delta: median(runs.iter().map(|r| r.cpu_us_per_delta).collect()),
            wall_ms: median(runs.iter().map(|r| r.wall_ms).collect()),
        }
    }
}

/// `sessions` sessions spread over `connections` connections, streaming at once over
/// WebSocket.
pub async fn streaming_over_websocket(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &Path,
    (connections, sessions): (usize, usize),
    deltas: usize,
) -> anyhow::Result<StreamingFigures> {
    let served = Served::start(agent, vars).await?;
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut client = served.connect().await?;
        client
            .call("initialize", json!({"protocolVersion": 1}))
            .await?;
        clients.push((client, Vec::new()));
    }
    for n in 0..sessions {
        let (client, ids) = &mut clients[n % connections];
        let result = client
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await?;
        ids.push(
            result["sessionId"]
                .as_str()
                .context("no session id")?
                .to_string(),
        );
    }
    for _ in 0..sessions {
        mock.push(answer(deltas));
    }
    let cpu_before = crate::cpu_ms(served.pid).context("no CPU time")?;
    let started = Instant::now();
    let tasks = clients
        .into_iter()
        .map(|(mut client, ids)| tokio::spawn(async move { client.stream_prompts(&ids).await }));
    let counts = futures_util::future::join_all(tasks).await;
    let wall_ms = crate::ms(started.elapsed());
    let cpu_after = crate::cpu_ms(served.pid).context("no CPU time")?;
    let mut total = 0;
    for count in counts {
        total += count??;
    }
    if total != sessions * deltas {
        bail!("expected {} chunks, got {total}", sessions * deltas);
    }
    served.stop().await?;
    Ok(StreamingFigures {
        cpu_us_per_delta: (cpu_after - cpu_before) * 1000.0 / (sessions * deltas) as f64,
        wall_ms,
    })
}

/// The same load over one agent's stdio: `sessions` sessions prompted at once.
pub async fn streaming_over_stdio(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &Path,
    sessions: usize,
    deltas: usize,
) -> anyhow::Result<StreamingFigures> {
    let crate::RawAgent {
        mut child,
        pid,
        mut stdin,
        mut lines,
    } = crate::RawAgent::spawn(agent, vars)?;
    let line = |value: Value| format!("{value}\n");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    stdin.write_all(line(init).as_bytes()).await?;
    let mut ids = Vec::new();
    for id in 1..=sessions {
        let new = json!({"jsonrpc": "2.0", "id": id, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}});
        stdin.write_all(line(new).as_bytes()).await?;
    }
    while ids.len() < sessions {
        let text = lines.next_line().await?.context("agent closed")?;
        let value: Value = serde_json::from_str(&text)?;
        if let Some(session) = value["result"]["sessionId"].as_str() {
            ids.push(session.to_string());
        }
    }
    for _ in 0..sessions {
        mock.push(answer(deltas));
    }
    let cpu_before = crate::cpu_ms(pid).context("no CPU time")?;
    let started = Instant::now();
    for (n, session) in ids.iter().enumerate() {
        let prompt = json!({"jsonrpc": "2.0", "id": 1000 + n, "method": "session/prompt", "params": prompt_params(session)});
        stdin.write_all(line(prompt).as_bytes()).await?;
    }
    let (mut chunks, mut ended) = (0usize, 0usize);
    while ended < sessions {
        let text = lines
            .next_line()
            .await?
            .context("agent closed mid-stream")?;
        if text.contains("\"agent_message_chunk\"") {
            chunks += 1;
        } else if text.contains("\"stopReason\"") {
            ended += 1;
        }
    }
    let wall_ms = crate::ms(started.elapsed());
    let cpu_after = crate::cpu_ms(pid).context("no CPU time")?;
    if chunks != sessions * deltas {
        bail!("expected {} chunks, got {chunks}", sessions * deltas);
    }
    drop(stdin);
    child.wait().await?;
    Ok(StreamingFigures {
        cpu_us_per_delta: (cpu_after - cpu_before) * 1000.0 / (sessions * deltas) as f64,
        wall_ms,
    })
}

/// Delivery to the clients attached to one streaming session (`_session/attach`): how far
/// behind the first observer the last one gets each delta, and the server's memory per
/// observer (its connection included).
pub struct FanoutFigures {
    /// The median over the deltas of (last observer's arrival − first observer's), ms.
    pub p50_spread_ms: f64,
    /// The 99th percentile of the same, ms.
    pub p99_spread_ms: f64,
    pub kb_per_observer: f64,
}

/// A session whose answer streams `deltas` deltas 1 ms apart, with `observers` clients
/// attached (each on a connection of its own) besides the one that prompts.
pub async fn attach_fanout(
    agent: &Path,
    mock: &MockLlm,
    vars: &[(String, String)],
    cwd: &Path,
    observers: usize,
    deltas: usize,
) -> anyhow::Result<FanoutFigures> {
    let served = Served::start(agent, vars).await?;
    let mut controller = served.connect().await?;
    let session = controller.open_session(cwd).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = resident_kib(served.pid)?;
    let mut watchers = Vec::with_capacity(observers);
    for _ in 0..observers {
        let mut client = served.connect().await?;
        client
            .call("initialize", json!({"protocolVersion": 1}))
            .await?;
        client
            .call(
                "_session/attach",
                json!({"sessionId": session, "role": "observer"}),
            )
            .await?;
        watchers.push(client);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = resident_kib(served.pid)?;
    mock.push(MockReply::Text {
        chunks: (0..deltas).map(|i| format!("tok{i} ")).collect(),
        reasoning: Vec::new(),
        delay_ms: 1,
        usage: None,
        finish_reason: None,
    });
    let readers: Vec<_> = watchers
        .into_iter()
        .map(|mut client| {
            tokio::spawn(async move {
                let mut arrivals = Vec::new();
                loop {
                    let text = client.next_text().await?;
                    if text.contains("\"agent_message_chunk\"") {
                        arrivals.push(Instant::now());
                    } else if text.contains("talaria/turn") && text.contains("\"idle\"") {
                        return anyhow::Ok(arrivals);
                    }
                }
            })
        })
        .collect();
    controller
        .call("session/prompt", prompt_params(&session))
        .await?;
    let mut arrivals = Vec::with_capacity(observers);
    for reader in futures_util::future::join_all(readers).await {
        let got = reader??;
        if got.len() != deltas {
            bail!("an observer got {} of {deltas} deltas", got.len());
        }
        arrivals.push(got);
    }
    served.stop().await?;
    let mut spreads: Vec<f64> = (0..deltas)
        .map(|n| {
            let times = arrivals.iter().map(|a| a[n]);
            let first = times.clone().min();
            let last = times.max();
            match (first, last) {
                (Some(first), Some(last)) => crate::ms(last - first),
                _ => 0.0,
            }
        })
        .collect();
    spreads.sort_by(f64::total_cmp);
    let at = |q: f64| spreads[((spreads.len() - 1) as f64 * q) as usize];
    Ok(FanoutFigures {
        p50_spread_ms: at(0.5),
        p99_spread_ms: at(0.99),
        kb_per_observer: after.saturating_sub(before) as f64 / observers as f64,
    })
}
