//! `talaria-chat --attach` falling behind a session of a real `talaria serve`: it observes a
//! session another client runs and stops reading (its process is stopped) while the session
//! pours out; the server detaches it. Running again, it says it fell behind, attaches again
//! (`_session/attach`: the other client sees it back) and prints only what it had not
//! printed, so each part of the session shows once. The server is `$TALARIA_BIN` (as
//! tests/run-all.sh sets it), else the workspace's debug build.

// A test crate: a failed set-up step is a failed test (`expect_used` is for production code).
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use talaria_harness::binary::talaria_bin;
use talaria_harness::{AgentProcess, MockLlm, MockReply};

const FILLER_CHUNKS: usize = 3000;
const WAIT: Duration = Duration::from_secs(60);

fn text(chunks: &[&str], reasoning: Vec<String>, delay_ms: u64) -> MockReply {
    MockReply::Text {
        chunks: chunks.iter().map(|c| c.to_string()).collect(),
        reasoning,
        delay_ms,
        usage: None,
        finish_reason: None,
    }
}

/// About 24 MB of numbered thinking: more than a connection holds unread.
fn filler() -> Vec<String> {
    let words = "lorem ipsum ".repeat(680);
    (0..FILLER_CHUNKS)
        .map(|n| format!("<{n}> {words}"))
        .collect()
}

/// A child process, killed when the test ends however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `talaria serve` with a home of its own, `mock` as its model, letting a client leave
/// little unread: the process, its address (`127.0.0.1:PORT`) and its token.
fn serve(home: &Path, mock: &MockLlm) -> (Running, String, String) {
    let mut child = Command::new(talaria_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--max-unread-bytes",
            "1024",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TALARIA_HOME", home.join("talaria"))
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("OPENAI_API_KEY", "chat-key")
        .env("TALARIA_MODEL", "mock-model")
        .env("TALARIA_LOG", "warn")
        .env("TALARIA_TITLES", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("talaria serve starts");
    let stdout = child.stdout.take().expect("its stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("it says where it listens");
    let address = line
        .split("listening on ")
        .nth(1)
        .and_then(|url| url.split_whitespace().next())
        .and_then(|url| url.strip_prefix("http://"))
        .and_then(|url| url.split('/').next())
        .expect("an address")
        .to_string();
    let token = std::fs::read_to_string(home.join("talaria/serve.token")).expect("the token");
    (Running(child), address, token.trim().to_string())
}

/// What a child printed on one of its outputs, as it comes.
fn kept(mut from: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let into = Arc::new(Mutex::new(String::new()));
    let sink = into.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut text = sink.lock().expect("the kept output");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    into
}

fn read(output: &Arc<Mutex<String>>) -> String {
    output.lock().expect("the kept output").clone()
}

/// Waits until `check` holds of `output`.
async fn until(output: &Arc<Mutex<String>>, what: &str, check: impl Fn(&str) -> bool) {
    let start = Instant::now();
    while !check(&output.lock().expect("the kept output")) {
        assert!(start.elapsed() < WAIT, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `talaria-chat --attach LINK`: the process, its input, its stdout and stderr.
fn chat(home: &Path, link: &str) -> (Running, ChildStdin, Arc<Mutex<String>>, Arc<Mutex<String>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_talaria-chat"))
        .args(["--attach", link])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TALARIA_HOME", home.join("talaria"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("talaria-chat starts");
    let stdin = child.stdin.take().expect("its stdin");
    let stdout = kept(child.stdout.take().expect("its stdout"));
    let stderr = kept(child.stderr.take().expect("its stderr"));
    (Running(child), stdin, stdout, stderr)
}

fn signal(child: &Running, signal: Signal) {
    let pid = i32::try_from(child.0.id()).expect("a pid");
    kill(Pid::from_raw(pid), signal).expect("signalled");
}

/// The other client: initialized over the server's WebSocket.
async fn other_client(address: &str, token: &str) -> AgentProcess {
    let mut other = AgentProcess::connect_websocket(&format!("ws://{address}/acp"), token)
        .await
        .expect("the other client connects");
    let init = json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "other", "version": "1"}});
    other
        .request("initialize", init)
        .await
        .expect("initialized");
    other
}

/// How many clients the last roster the other client was told names.
fn attached(other: &AgentProcess) -> usize {
    other
        .updates()
        .iter()
        .rev()
        .find_map(|u| {
            u["_meta"]["talaria/attachment"]["clients"]
                .as_array()
                .map(Vec::len)
        })
        .unwrap_or(0)
}

/// Reads the other client's messages until it was told `count` clients are attached.
async fn until_attached(other: &mut AgentProcess, count: usize) {
    let start = Instant::now();
    while attached(other) != count {
        assert!(start.elapsed() < WAIT, "never told {count} attached");
        let _ = other
            .wait_for(Duration::from_millis(200), |m: &Value| {
                m["params"]["update"]["_meta"]["talaria/attachment"].is_object()
            })
            .await;
    }
}

/// How many times each numbered chunk of thinking (`<N>`) was printed.
fn numbered(text: &str) -> HashMap<usize, usize> {
    let mut seen = HashMap::new();
    for piece in text.split('<').skip(1) {
        let digits: String = piece.chars().take_while(char::is_ascii_digit).collect();
        if let (Ok(n), true) = (digits.parse(), piece[digits.len()..].starts_with('>')) {
            *seen.entry(n).or_insert(0) += 1;
        }
    }
    seen
}

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_that_fell_behind_says_so_attaches_again_and_prints_each_part_once() {
    let mock = MockLlm::start(vec![
        text(&["Before ", "the fall."], Vec::new(), 0),
        text(&["After ", "the fall."], filler(), 0),
    ])
    .await
    .expect("the mock LLM");
    let home = tempfile::tempdir().expect("a home");
    let (_server, address, token) = serve(home.path(), &mock);
    let mut other = other_client(&address, &token).await;
    let new = json!({"cwd": home.path(), "mcpServers": []});
    let session = other.request("session/new", new).await.expect("a session");
    let session = session["result"]["sessionId"]
        .as_str()
        .expect("its id")
        .to_string();
    other
        .request("session/prompt", prompt(&session, "one"))
        .await
        .expect("answered");

    let link = format!("http://{address}/#token={token}&session={session}");
    let (mut child, mut stdin, stdout, stderr) = chat(home.path(), &link);
    until(&stdout, "the session so far", |s| {
        s.contains("Before the fall.")
    })
    .await;
    until(&stderr, "the banner", |s| s.contains("observing")).await;
    until_attached(&mut other, 2).await;

    // The terminal stops reading while the session pours out: the server detaches it.
    signal(&child, Signal::SIGSTOP);
    let answer = other
        .request("session/prompt", prompt(&session, "two"))
        .await;
    assert_eq!(
        answer.expect("answered")["result"]["stopReason"],
        "end_turn"
    );
    until_attached(&mut other, 1).await;
    signal(&child, Signal::SIGCONT);

    until(&stderr, "the terminal caught up", |s| {
        s.contains("(caught up")
    })
    .await;
    until_attached(&mut other, 2).await;
    stdin.write_all(b"/quit\n").expect("typed");
    let quit = child.0.wait().expect("talaria-chat exits");
    let (printed, said) = (read(&stdout), read(&stderr));
    let behind = said
        .matches("this terminal fell behind the session")
        .count();
    assert_eq!(
        behind,
        1,
        "told once: {}",
        said.chars().take(2000).collect::<String>()
    );
    assert!(
        quit.success(),
        "{}",
        said.chars().rev().take(2000).collect::<String>()
    );
    // Each part of the session once: the prompts, the answers, every chunk of thinking.
    assert_eq!(printed.matches("Before the fall.").count(), 1, "{printed}");
    assert_eq!(printed.matches("After the fall.").count(), 1, "{printed}");
    assert_eq!(said.matches("> one\n").count(), 1);
    assert_eq!(said.matches("> two\n").count(), 1);
    let thinking = numbered(&said);
    assert_eq!(
        thinking.len(),
        FILLER_CHUNKS,
        "every chunk of thinking printed"
    );
    assert!(thinking.values().all(|&times| times == 1), "each once");
}
