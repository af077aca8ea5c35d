//! The agent's own endpoints are out of its commands' reach: a sandboxed command cannot read
//! a `talaria serve` token, wherever it lies (`TALARIA_HOME`, another `TALARIA_HOME`, a
//! `--token-file` in the home or in a folder commands may read), nor connect to a server's
//! listener at any address of the machine (`127.0.0.1`, `localhost`, `0.0.0.0`, IPv4 in
//! IPv6, the machine's own address) — not the server that runs the command, not another
//! one — even holding the token. The attack this closes: a command reads the token, connects
//! over loopback, opens a session whose workspace is the home and has it append to
//! `~/.bashrc`. Run with and without the namespaces layer.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use talaria_harness::MockReply;
use talaria_harness::binary::talaria_bin;
use tokio::io::AsyncBufReadExt;
use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

/// A running `talaria serve` as the agent's user: where it listens and its token.
struct Server {
    _child: tokio::process::Child,
    port: u16,
    token: String,
    token_file: std::path::PathBuf,
}

/// Starts `talaria serve` with `env`'s environment, `TALARIA_HOME` set to `talaria_home`,
/// listening on `listen`, with `args`; its token is read from `token_file`.
async fn serve(
    env: &TestEnv,
    talaria_home: &std::path::Path,
    listen: &str,
    args: &[&str],
    token_file: std::path::PathBuf,
) -> Server {
    let mut command = tokio::process::Command::new(talaria_bin());
    command
        .args(["serve", "--listen", listen])
        .args(args)
        .env_clear()
        .envs(env.env())
        .env("TALARIA_HOME", talaria_home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some((uid, gid)) = env.user {
        command.uid(uid).gid(gid);
    }
    let mut child = command.spawn().expect("talaria serve");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("in time")
        .expect("read")
        .expect("a line");
    let port = line
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .expect("the port");
    let token = std::fs::read_to_string(&token_file)
        .expect("token file")
        .trim()
        .to_string();
    Server {
        _child: child,
        port,
        token,
        token_file,
    }
}

/// A token file made by its user (`--token-file`), readable by that user alone.
fn token_file_at(path: &std::path::Path, user: Option<(u32, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).expect("folder");
    }
    std::fs::write(
        path,
        "4f1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff0\n",
    )
    .expect("token");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if let Some(user) = user {
        give_to(path, user);
    }
}

/// This machine's address on its first interface beside loopback, if it has one.
fn outward_address() -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("203.0.113.9:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback()).then(|| ip.to_string())
}

/// The attack, as a script: read each token file; with the token it was handed (as if it
/// had leaked), connect to each address, `initialize` and open a session in the home.
/// Prints one line per attempt.
const ATTACK: &str = r#"
import json, os, socket, sys
plan = json.load(open("plan.json"))
for path in plan["tokens"]:
    try:
        print("READ", path, open(path).read().strip())
    except Exception as e:
        print("UNREADABLE", path, type(e).__name__)
def call(host, port, token, body, session=None):
    s = socket.create_connection((host, port), 3)
    payload = json.dumps(body).encode()
    head = "POST /acp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n" % (port, token)
    if session:
        head += "Acp-Connection-Id: %s\r\n" % session
    head += "Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(payload)
    s.sendall(head.encode() + payload)
    answer = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        answer += chunk
        if b"\r\n\r\n" in answer:
            break
    return answer.decode(errors="replace")
for target in plan["targets"]:
    host, port, token = target
    try:
        answer = call(host, port, token, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        status = answer.split(" ")[1] if " " in answer else "?"
        ids = [l.split(":", 1)[1].strip() for l in answer.split("\r\n") if l.lower().startswith("acp-connection-id:")]
        if ids:
            call(host, port, token, {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": os.environ["HOME"], "mcpServers": []}}, ids[0])
            print("SESSION-OPENED", host, port)
        print("CONNECTED", host, port, status)
    except Exception as e:
        print("REFUSED", host, port, type(e).__name__, getattr(e, "errno", ""))
print("ATTACK-DONE")
"#;

/// Writes the attack and its plan into `workspace`: the token files to read, and the
/// `(host, port, token)` to reach.
fn plant_attack(
    workspace: &std::path::Path,
    tokens: &[&std::path::Path],
    targets: &[(String, u16, String)],
) {
    std::fs::write(workspace.join("attack.py"), ATTACK).expect("attack");
    let plan = json!({"tokens": tokens, "targets": targets});
    std::fs::write(workspace.join("plan.json"), plan.to_string()).expect("plan");
}

/// The attack's output: nothing read, nothing reached.
fn assert_repelled(output: &str, tokens: &[&Server]) {
    assert!(output.contains("ATTACK-DONE"), "{output}");
    for server in tokens {
        assert!(
            !output.contains(&server.token),
            "{} was read: {output}",
            server.token_file.display()
        );
    }
    assert!(!output.contains("READ "), "{output}");
    assert!(!output.contains("CONNECTED"), "{output}");
    assert!(!output.contains("SESSION-OPENED"), "{output}");
    assert!(output.contains("REFUSED"), "{output}");
}

/// The addresses of this machine a command could reach `server` at.
fn every_address(server: &Server, bound_everywhere: bool) -> Vec<(String, u16, String)> {
    let mut hosts = vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "0.0.0.0".to_string(),
        "::ffff:127.0.0.1".to_string(),
    ];
    if bound_everywhere && let Some(outward) = outward_address() {
        hosts.push(outward);
    }
    hosts
        .into_iter()
        .map(|host| (host, server.port, server.token.clone()))
        .collect()
}

#[tokio::test]
async fn no_servers_token_or_listener_is_within_reach_of_another_sessions_commands() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![
        MockReply::tool_call(
            "a1",
            "terminal",
            json!({"command": "/usr/bin/python3 attack.py"}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let home = env.home.path().to_path_buf();
    // Three servers of the same user: one with its token in a TALARIA_HOME of its own, one
    // with `--token-file` in the home, one with `--token-file` in a folder commands may read,
    // listening on every address.
    let readable = tempfile::tempdir().expect("readable folder");
    let in_home = home.join("serve-token");
    let in_open_folder = readable.path().join("tokens/serve.token");
    let other_talaria = home.join("other-talaria");
    std::fs::create_dir_all(&other_talaria).expect("mkdir");
    env.unprivileged(&[readable.path()]);
    token_file_at(&in_home, env.user);
    token_file_at(&in_open_folder, env.user);
    let talaria_home = home.join("talaria");
    let own_home = serve(
        &env,
        &other_talaria,
        "127.0.0.1:0",
        &[],
        other_talaria.join("serve.token"),
    )
    .await;
    let home_file = serve(
        &env,
        &talaria_home,
        "127.0.0.1:0",
        &["--token-file", &in_home.display().to_string()],
        in_home.clone(),
    )
    .await;
    let open_file = serve(
        &env,
        &talaria_home,
        "0.0.0.0:0",
        &[
            "--token-file",
            &in_open_folder.display().to_string(),
            "--insecure-no-tls",
        ],
        in_open_folder.clone(),
    )
    .await;
    let mut targets = every_address(&own_home, false);
    targets.extend(every_address(&home_file, false));
    targets.extend(every_address(&open_file, true));
    plant_attack(
        env.workspace.path(),
        &[&own_home.token_file, &in_home, &in_open_folder],
        &targets,
    );
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert_repelled(&output, &[&own_home, &home_file, &open_file]);
    // Each server still serves its own clients.
    for server in [&own_home, &home_file, &open_file] {
        let answered = initialize(server.port, &server.token).await;
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    }
}

/// `initialize` over a plain POST from the test (outside any sandbox): the raw answer.
async fn initialize(port: u16, token: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#;
    let request = format!(
        "POST /acp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut answer))
        .await
        .expect("in time")
        .expect("read");
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

/// A WebSocket session on `server` in `cwd`: sends `initialize`, `session/new` and one
/// prompt, and waits for the prompt's answer (the agent asks nothing in `yolo`).
async fn prompt_over_websocket(server: &Server, cwd: &std::path::Path) -> Value {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    let request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://127.0.0.1:{}/acp", server.port),
    )
    .map(|mut r| {
        r.headers_mut().insert(
            "authorization",
            format!("Bearer {}", server.token).parse().expect("header"),
        );
        r
    })
    .expect("request");
    let (mut socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("upgraded");
    let mut answers = std::collections::HashMap::new();
    let send = |id: u64, method: &str, params: Value| {
        Message::text(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        )
    };
    socket
        .send(send(0, "initialize", json!({"protocolVersion": 1})))
        .await
        .expect("initialize");
    socket
        .send(send(
            1,
            "session/new",
            json!({"cwd": cwd, "mcpServers": []}),
        ))
        .await
        .expect("session/new");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !answers.contains_key(&2) {
        let next = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the prompt is answered in time");
        let Some(Ok(Message::Text(text))) = next else {
            continue;
        };
        let message: Value = serde_json::from_str(&text).expect("json");
        if message.get("method").is_some() && message.get("id").is_some() {
            panic!("the agent asked the client: {message}");
        }
        if let Some(id) = message["id"].as_u64() {
            if id == 1 {
                let session = message["result"]["sessionId"]
                    .as_str()
                    .expect("sessionId")
                    .to_string();
                socket
                    .send(send(
                        2,
                        "session/prompt",
                        json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
                    ))
                    .await
                    .expect("prompt");
            }
            answers.insert(id, message);
        }
    }
    answers.remove(&2).unwrap_or_default()
}

#[tokio::test]
async fn the_server_running_a_command_is_out_of_its_reach_even_with_the_token() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![
        MockReply::tool_call(
            "a1",
            "terminal",
            json!({"command": "/usr/bin/python3 attack.py; cat ~/.bashrc"}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    let home = env.home.path().to_path_buf();
    std::fs::write(home.join(".bashrc"), "# the user's own\n").expect("bashrc");
    let token_path = home.join("tokens/serve.token");
    env.unprivileged(&[]);
    token_file_at(&token_path, env.user);
    let server = serve(
        &env,
        &home.join("talaria"),
        "127.0.0.1:0",
        &["--token-file", &token_path.display().to_string()],
        token_path.clone(),
    )
    .await;
    plant_attack(
        env.workspace.path(),
        &[&token_path],
        &every_address(&server, false),
    );
    env.unprivileged(&[]);
    let answer = prompt_over_websocket(&server, env.workspace.path()).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert_repelled(&output, &[&server]);
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).expect("bashrc"),
        "# the user's own\n"
    );
}
