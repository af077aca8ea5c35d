//! `talaria-chat --attach` on a session of a `talaria serve` that a WebSocket client opened:
//! as an observer it shows the session so far, then the rest live, who is attached, and the
//! server's refusal of its prompt (with `/control` to type); as controller it prompts and
//! answers a permission question, is told when another client answered first (and who),
//! loses control and takes it back, cancels its turn; a socket that drops mid-answer is taken
//! back and the answer comes out whole, each word once; one whose connection is gone says the
//! connection is lost; over TLS it trusts the certificates `SSL_CERT_FILE` names.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use talaria_harness::MockReply;
use talaria_harness::binary::workspace_bin;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::serve_support::*;
use crate::support::*;

/// A running `talaria-chat --attach`: its stdin, and what it printed so far.
struct AttachedChat {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// The readers of stdout and stderr, done at their end.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

fn collect(
    mut from: impl AsyncRead + Unpin + Send + 'static,
) -> (Arc<Mutex<String>>, tokio::task::JoinHandle<()>) {
    let into = Arc::new(Mutex::new(String::new()));
    let sink = into.clone();
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut text) = sink.lock() {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    });
    (into, reader)
}

impl AttachedChat {
    /// `talaria-chat --attach LINK ARGS…` with `env`'s home.
    fn start(env: &TestEnv, link: &str, args: &[&str]) -> Self {
        Self::start_with(env, link, args, &[])
    }

    /// The same, with `extra` in its environment.
    fn start_with(env: &TestEnv, link: &str, args: &[&str], extra: &[(&str, &str)]) -> Self {
        let mut child = tokio::process::Command::new(workspace_bin("talaria-chat", "talaria-chat"))
            .arg("--attach")
            .arg(link)
            .args(args)
            .current_dir(env.workspace.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.env())
            .envs(extra.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("talaria-chat");
        let (stdout, out_read) = collect(child.stdout.take().expect("stdout"));
        let (stderr, err_read) = collect(child.stderr.take().expect("stderr"));
        Self {
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
            readers: vec![out_read, err_read],
        }
    }

    async fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("typed");
    }

    fn stdout(&self) -> String {
        self.stdout.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Waits until stderr (from byte `from`) holds `text`; its length then.
    async fn told(&self, from: usize, text: &str) -> usize {
        let waited = tokio::time::timeout(WAIT, async {
            loop {
                let said = self.stderr();
                if said.get(from..).is_some_and(|s| s.contains(text)) {
                    return said.len();
                }
                away(20).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "talaria-chat never said {text:?}; stderr:\n{}\nstdout:\n{}",
                self.stderr(),
                self.stdout()
            )
        })
    }

    /// Waits until stdout holds `text`.
    async fn printed(&self, text: &str) {
        let waited = tokio::time::timeout(WAIT, async {
            while !self.stdout().contains(text) {
                away(20).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "talaria-chat never printed {text:?}; stdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
    }

    /// Leaves with `/detach`: it exits 0.
    async fn detach(mut self) -> String {
        self.type_line("/detach").await;
        let status = self.exited().await;
        assert!(status.success(), "{status}; stderr:\n{}", self.stderr());
        self.stderr()
    }

    /// Waits for the chat to exit and for what it printed to be read whole.
    async fn exited(&mut self) -> std::process::ExitStatus {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("exits in time")
            .expect("status");
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(WAIT, reader).await;
        }
        status
    }
}

fn slow_answer(words: &[String], delay_ms: u64) -> MockReply {
    MockReply::Text {
        chunks: words.to_vec(),
        reasoning: Vec::new(),
        delay_ms,
        usage: None,
        finish_reason: None,
    }
}

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// A WebSocket client named `editor` with a new session in `env`'s workspace.
async fn editor(served: &Served, env: &TestEnv) -> (Socket, String) {
    let mut socket = Socket::open(served, "").await.expect("opened");
    socket
        .call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "editor", "version": "1"}}),
        )
        .await;
    let opened = socket
        .call(
            1,
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await;
    let session = opened["result"]["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    (socket, session)
}

/// The words of an answer (the chat breaks its line where a notice comes between them).
fn answer_words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

/// The web client's link to `session`.
fn link(served: &Served, session: &str) -> String {
    format!(
        "http://{}/#token={}&session={session}",
        served.addr, served.token
    )
}

/// The roster in a message, if it is one.
fn roster(m: &Value) -> &Value {
    &m["params"]["update"]["_meta"]["talaria/attachment"]
}

fn names_in(roster: &Value) -> Vec<String> {
    roster["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn an_attached_chat_observes_the_answer_so_far_then_live_and_is_refused_a_prompt() {
    let all = words(150);
    let env = TestEnv::new(vec![slow_answer(&all, 15)]).await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = editor(&served, &env).await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(&session, "count")}))
        .await;
    editor
        .until(|m| m["params"]["update"]["content"]["text"] == "w30 ")
        .await;
    let mut chat = AttachedChat::start(&env, &link(&served, &session), &[]);
    // The editor is told the chat attached.
    editor
        .until(|m| names_in(roster(m)).contains(&"talaria-chat".to_string()))
        .await;
    // The answer so far, then the rest live: every word once, in order.
    editor
        .until(|m| m["id"] == 7 && m.get("method").is_none())
        .await;
    chat.told(0, "the turn editor prompted ended: end_turn")
        .await;
    assert_eq!(answer_words(&chat.stdout()), answer_words(&all.concat()));
    let said = chat.stderr();
    assert!(said.contains("> count"), "the prompt is shown: {said}");
    assert!(
        said.contains("attached: editor [control], talaria-chat (you)"),
        "who is attached: {said}"
    );
    assert!(said.contains("observing"), "{said}");
    // An observer's prompt is refused by the server, which the chat shows with what to type.
    let from = said.len();
    chat.type_line("my turn?").await;
    chat.told(from, "must take control first").await;
    chat.told(from, "/control").await;
    assert_eq!(
        env.mock.requests().len(),
        1,
        "the refused prompt reached no model"
    );
    let left = chat.detach().await;
    assert!(left.contains("detached"), "{left}");
    // The editor sees it leave.
    editor
        .until(|m| roster(m).is_object() && !names_in(roster(m)).contains(&"talaria-chat".into()))
        .await;
}

#[tokio::test]
async fn an_attached_chat_takes_control_prompts_answers_and_hears_who_answered_first() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "one.txt", "content": "one\n"}),
        ),
        MockReply::text(&["wrote one"]),
        MockReply::tool_call(
            "w2",
            "write_file",
            json!({"path": "two.txt", "content": "two\n"}),
        ),
        MockReply::text(&["wrote two"]),
        slow_answer(&words(300), 20),
    ])
    .await;
    let served = start(&env, &[]).await;
    let (mut editor, session) = editor(&served, &env).await;
    // A socket address, the session and the token on the command line.
    let socket = format!("ws://{}/acp", served.addr);
    let mut chat = AttachedChat::start(
        &env,
        &socket,
        &["--control", "--session", &session, "--token", &served.token],
    );
    chat.told(0, "in control").await;
    let took = editor
        .until(|m| {
            roster(m)["clients"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["name"] == "talaria-chat"))
                && roster(m)["controller"] != roster(m)["clients"][0]["clientId"]
        })
        .await;
    let chat_id = roster(&took)["controller"].clone();
    // The chat prompts; the question goes to both; the chat answers first.
    let from = chat.stderr().len();
    chat.type_line("write one").await;
    let asked = editor
        .until(|m| m["method"] == "session/request_permission")
        .await;
    chat.told(from, "? Allow").await;
    chat.type_line("y").await;
    let resolved = editor
        .until(|m| m["params"]["update"]["_meta"]["talaria/permissionResolved"].is_object())
        .await;
    let by = &resolved["params"]["update"]["_meta"]["talaria/permissionResolved"]["by"];
    assert_eq!(by["clientId"], chat_id, "{resolved}");
    assert_eq!(by["name"], "talaria-chat");
    assert!(
        editor
            .messages
            .iter()
            .any(|m| m["method"] == "$/cancel_request" && m["params"]["requestId"] == asked["id"]),
        "the editor's question is withdrawn"
    );
    chat.printed("wrote one").await;
    chat.told(from, "answered by you").await;
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("one.txt")).expect("written"),
        "one\n"
    );
    // Next time the editor answers first: the chat is told who did.
    let from = chat.stderr().len();
    chat.type_line("write two").await;
    let asked = editor
        .until(|m| m["method"] == "session/request_permission")
        .await;
    chat.told(from, "? Allow").await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
        .await;
    chat.told(from, "answered by another client").await;
    chat.told(from, "answered by editor: allow_once").await;
    chat.printed("wrote two").await;
    // The editor takes control back: the chat is told, and its prompt is refused.
    let from = chat.stderr().len();
    let back = editor
        .call(
            9,
            "_session/attach",
            json!({"sessionId": session, "role": "controller"}),
        )
        .await;
    assert_eq!(back["result"]["role"], "controller", "{back}");
    chat.told(from, "you no longer have control").await;
    chat.type_line("mine again?").await;
    chat.told(from, "must take control first").await;
    // `/control` takes it again.
    let from = chat.stderr().len();
    chat.type_line("/control").await;
    chat.told(from, "(you have control)").await;
    editor.until(|m| roster(m)["controller"] == chat_id).await;
    // It cancels its turn.
    let from = chat.stderr().len();
    chat.type_line("a long one").await;
    chat.printed("w5 ").await;
    chat.type_line("/cancel").await;
    chat.told(from, "(cancelled)").await;
    editor
        .until(|m| m["params"]["update"]["_meta"]["talaria/turn"]["stopReason"] == "cancelled")
        .await;
    assert!(!chat.stdout().contains("w299"), "cut short");
    chat.detach().await;
    assert_eq!(
        env.mock.requests().len(),
        5,
        "the refused prompt reached no model"
    );
}

/// A TCP relay to a server whose sockets can be cut, as a network drops them, and which can
/// be pointed at another server (the `Host` of each upgrade is rewritten to the server's,
/// which checks it).
struct Relay {
    addr: String,
    cut: tokio::sync::watch::Sender<u32>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    upstream: Arc<Mutex<String>>,
}

impl Relay {
    async fn start(server: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bound");
        let addr = listener.local_addr().expect("addr").to_string();
        let (cut, cuts) = tokio::sync::watch::channel(0);
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let upstream = Arc::new(Mutex::new(server.to_string()));
        let (to, own, count) = (upstream.clone(), addr.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let server = to.lock().map(|s| s.clone()).unwrap_or_default();
                let (own, mut cuts) = (own.clone(), cuts.clone());
                cuts.mark_unchanged();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = relay(client, &server, &own) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Self {
            addr,
            cut,
            accepted,
            upstream,
        }
    }

    /// Sockets opened from now on go to `server`.
    fn point_to(&self, server: &str) {
        if let Ok(mut upstream) = self.upstream.lock() {
            *upstream = server.to_string();
        }
    }

    /// Cuts every socket open now.
    fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

async fn relay(mut client: tokio::net::TcpStream, server: &str, own: &str) {
    let Ok(mut upstream) = tokio::net::TcpStream::connect(server).await else {
        return;
    };
    // The upgrade's head, with the server's Host.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head =
        String::from_utf8_lossy(&head).replace(&format!("Host: {own}"), &format!("Host: {server}"));
    if upstream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

#[tokio::test]
async fn an_attached_chat_whose_socket_drops_mid_answer_comes_back_with_every_word_once() {
    let all = words(200);
    let env = TestEnv::new(vec![slow_answer(&all, 10)]).await;
    let served = start(&env, &[]).await;
    let relay = Relay::start(&served.addr).await;
    let (mut editor, session) = editor(&served, &env).await;
    // No token in the link: the chat reads the server's token file.
    let link = format!("http://{}/#session={session}", relay.addr);
    let chat = AttachedChat::start(&env, &link, &[]);
    chat.told(0, "observing").await;
    editor
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt(&session, "count")}))
        .await;
    chat.printed("w40 ").await;
    relay.cut_all();
    chat.told(0, "the connection dropped").await;
    chat.told(0, "the connection is back").await;
    editor
        .until(|m| m["id"] == 7 && m.get("method").is_none())
        .await;
    chat.told(0, "the turn editor prompted ended").await;
    assert_eq!(
        answer_words(&chat.stdout()),
        answer_words(&all.concat()),
        "every word once, in order"
    );
    assert!(
        relay.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "it came back on a new socket"
    );
    chat.detach().await;
}

#[tokio::test]
async fn an_attached_chat_whose_connection_is_gone_says_it_is_lost() {
    let env = TestEnv::new(vec![]).await;
    let served = start(&env, &[]).await;
    // A second server on the same home: it does not know the chat's connection.
    let other = start(&env, &[]).await;
    let relay = Relay::start(&served.addr).await;
    let (_editor, session) = editor(&served, &env).await;
    let link = format!("http://{}/#session={session}", relay.addr);
    let mut chat = AttachedChat::start(&env, &link, &[]);
    chat.told(0, "observing").await;
    relay.point_to(&other.addr);
    relay.cut_all();
    chat.told(0, "the connection is lost").await;
    let status = chat.exited().await;
    assert!(!status.success(), "{status}");
    let said = chat.stderr();
    assert!(
        said.contains("no longer has this connection") && said.contains("attach again"),
        "{said}"
    );
}

#[tokio::test]
async fn an_attached_chat_reaches_a_server_over_tls_it_trusts() {
    let env = TestEnv::new(vec![MockReply::text(&["over TLS"])]).await;
    let certs = tempfile::tempdir().expect("dir");
    let (cert, key) = crate::serve::self_signed(certs.path());
    let served = start(&env, &["--tls-cert", &cert, "--tls-key", &key]).await;
    // The editor over HTTPS, trusting the server's certificate.
    let pem = std::fs::read(&cert).expect("cert");
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut editor = HttpClient {
        http,
        url: format!("https://{}/acp", served.addr),
        token: served.token.clone(),
        connection: None,
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "editor", "version": "1"}}});
    let response = editor.send(&init, None).await;
    assert_eq!(response.status(), 200);
    editor.connection = response
        .headers()
        .get("acp-connection-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut stream = editor.open(None, None).await.expect("the stream");
    let new = json!({"cwd": env.workspace.path(), "mcpServers": []});
    editor
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new}))
        .await;
    let opened = stream.until(|e| e.message["id"] == 1).await;
    let session = opened.last().expect("the answer").message["result"]["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    editor
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&session, "hello")}))
        .await;
    stream.until(|e| e.message["id"] == 2).await;
    // The chat over wss://, trusting the certificate by SSL_CERT_FILE: the session so far.
    let link = format!(
        "https://{}/#token={}&session={session}",
        served.addr, served.token
    );
    let chat = AttachedChat::start_with(&env, &link, &[], &[("SSL_CERT_FILE", &cert)]);
    chat.printed("over TLS").await;
    chat.told(0, "over wss://").await;
    chat.detach().await;
    // Without trusting it, the chat says it cannot connect.
    let mut untrusting = AttachedChat::start(&env, &link, &[]);
    let status = untrusting.exited().await;
    assert_eq!(status.code(), Some(2), "{}", untrusting.stderr());
    assert!(
        untrusting.stderr().contains("cannot connect to wss://"),
        "{}",
        untrusting.stderr()
    );
}

/// Following from a second process a session the first runs, the chat is told when it is
/// deleted there, once; then a prompt and `/control` are refused by the chat itself, and
/// nothing reaches the model.
#[tokio::test]
async fn an_attached_chat_following_a_session_deleted_where_it_ran_says_so_and_sends_nothing() {
    let env = TestEnv::new(vec![MockReply::text(&["first answer"])]).await;
    let running = start(&env, &[]).await;
    let other = start(&env, &[]).await;
    let (mut editor, session) = editor(&running, &env).await;
    let first = editor
        .call(2, "session/prompt", prompt(&session, "first"))
        .await;
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");
    let mut chat = AttachedChat::start(&env, &link(&other, &session), &[]);
    chat.printed("first answer").await;
    let deleted = editor
        .call(3, "session/delete", json!({"sessionId": session}))
        .await;
    assert!(deleted.get("error").is_none(), "{deleted}");
    let from = chat
        .told(0, "this session was deleted in the process that ran it")
        .await;
    chat.type_line("are you there?").await;
    let from = chat
        .told(from, "(this session was deleted: nothing is sent")
        .await;
    chat.type_line("/control").await;
    chat.told(
        from,
        "(this session was deleted: there is no control to take)",
    )
    .await;
    let said = chat.stderr();
    assert_eq!(said.matches("it is followed no more").count(), 1, "{said}");
    assert_eq!(
        env.mock.requests().len(),
        1,
        "only the editor's prompt reached the model"
    );
    chat.detach().await;
}
