//! `talaria serve`'s doors, end to end: the real binary listening on loopback, probed with
//! raw HTTP requests and WebSocket upgrades. Each kind of refusal in several variants, each
//! answered with its status, and a proper connection still served after every one.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use talaria_harness::binary::talaria_bin;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

/// A running `talaria serve`: its address (`127.0.0.1:PORT`) and token.
struct Served {
    /// Killed with the test.
    _child: tokio::process::Child,
    addr: String,
    token: String,
}

async fn serve(env: &TestEnv, args: &[&str]) -> Served {
    serve_at(env, "127.0.0.1:0", args).await
}

async fn serve_at(env: &TestEnv, listen: &str, args: &[&str]) -> Served {
    let mut child = tokio::process::Command::new(talaria_bin())
        .args(["serve", "--listen", listen])
        .args(args)
        .env_clear()
        .envs(env.env())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("talaria serve");
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
    }
}

/// Sends `request` (a whole HTTP/1.1 request) and returns the status and the rest.
async fn raw(addr: &str, request: &str) -> (u16, String) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = socket.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

const INIT: &str =
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#;

fn post(host: &str, extra: &str, body: &str) -> String {
    format!(
        "POST /acp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn upgrade(host: &str, extra: &str) -> String {
    format!(
        "GET /acp HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    )
}

/// A proper `initialize` still gets its connection.
async fn still_serves(served: &Served) {
    let auth = format!("Authorization: Bearer {}\r\n", served.token);
    let (status, answer) = raw(&served.addr, &post(&served.addr, &auth, INIT)).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("acp-connection-id:"),
        "{answer}"
    );
}

#[tokio::test]
async fn requests_without_the_token_or_with_another_are_refused_with_401() {
    let env = TestEnv::new(vec![]).await;
    let served = serve(&env, &[]).await;
    let host = served.addr.clone();
    let t = served.token.clone();
    let no_token = [
        post(&host, "", INIT),
        format!(
            "GET /acp HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nAcp-Connection-Id: x\r\nConnection: close\r\n\r\n"
        ),
        format!(
            "DELETE /acp HTTP/1.1\r\nHost: {host}\r\nAcp-Connection-Id: x\r\nConnection: close\r\n\r\n"
        ),
        upgrade(&host, ""),
        upgrade(&host, "Sec-WebSocket-Protocol: acp\r\n"),
        post(&host, "Authorization: Basic dXNlcjpwYXNz\r\n", INIT),
    ];
    for request in &no_token {
        let (status, answer) = raw(&served.addr, request).await;
        assert_eq!(status, 401, "{request}\n{answer}");
        assert!(
            answer.contains("WWW-Authenticate: Bearer")
                || answer.contains("www-authenticate: Bearer"),
            "{answer}"
        );
    }
    let mut flipped = t.clone().into_bytes();
    flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
    let wrong = [
        String::from_utf8(flipped).expect("ascii"),
        t[..t.len() - 1].to_string(),
        format!("{t}x"),
        t.to_ascii_lowercase(),
        "short".to_string(),
        "x".repeat(4096),
    ];
    for token in &wrong {
        if *token == t {
            continue;
        }
        let (status, answer) = raw(
            &served.addr,
            &post(&host, &format!("Authorization: Bearer {token}\r\n"), INIT),
        )
        .await;
        assert_eq!(status, 401, "{token}: {answer}");
        let (status, _) = raw(
            &served.addr,
            &upgrade(
                &host,
                &format!("Sec-WebSocket-Protocol: acp, bearer.{token}\r\n"),
            ),
        )
        .await;
        assert_eq!(status, 401, "{token} as a subprotocol");
    }
    // The right token, in the header or as a subprotocol, gets through.
    let (status, answer) = raw(
        &served.addr,
        &upgrade(
            &host,
            &format!("Sec-WebSocket-Protocol: acp, bearer.{t}\r\n"),
        ),
    )
    .await;
    assert_eq!(status, 101, "{answer}");
    assert!(
        answer.contains("sec-websocket-protocol: acp"),
        "only `acp` is echoed: {answer}"
    );
    assert!(!answer.contains(&t), "the token is never echoed");
    still_serves(&served).await;
}

#[tokio::test]
async fn foreign_origins_and_rebinding_hosts_are_refused_with_403() {
    let env = TestEnv::new(vec![]).await;
    let served = serve(&env, &["--allow-origin", "https://app.example"]).await;
    let (host, port) = (
        served.addr.clone(),
        served.addr.rsplit(':').next().expect("port").to_string(),
    );
    let auth = format!("Authorization: Bearer {}\r\n", served.token);
    let origins = [
        "https://evil.example".to_string(),
        "null".into(),
        "http://127.0.0.1:1".into(),
        format!("http://localhost.evil.example:{port}"),
        format!("http://127.0.0.1:{port}.evil.example"),
        "https://app.example.evil".into(),
    ];
    for origin in &origins {
        let (status, answer) = raw(
            &served.addr,
            &post(&host, &format!("{auth}Origin: {origin}\r\n"), INIT),
        )
        .await;
        assert_eq!(status, 403, "{origin}: {answer}");
        assert!(
            !answer
                .to_ascii_lowercase()
                .contains("access-control-allow-origin"),
            "{answer}"
        );
    }
    // The server's own origin and an allowed one pass, the allowed one named, never `*`.
    for origin in [
        format!("http://{host}"),
        format!("http://localhost:{port}"),
        "https://app.example".into(),
    ] {
        let (status, answer) = raw(
            &served.addr,
            &post(&host, &format!("{auth}Origin: {origin}\r\n"), INIT),
        )
        .await;
        assert_eq!(status, 200, "{origin}: {answer}");
        assert!(
            answer.contains(&format!("access-control-allow-origin: {origin}")),
            "{answer}"
        );
    }
    let hosts = [
        format!("evil.example:{port}"),
        "evil.example".into(),
        "127.0.0.1".into(),
        "127.0.0.1:1".into(),
        format!("localhost.attacker.test:{port}"),
        format!("[::1]:{port}"),
    ];
    for bad in &hosts {
        let (status, answer) = raw(&served.addr, &post(bad, &auth, INIT)).await;
        assert_eq!(status, 403, "{bad}: {answer}");
        let (status, _) = raw(
            &served.addr,
            &format!("GET / HTTP/1.1\r\nHost: {bad}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 403, "the web client too, for {bad}");
    }
    let (status, _) = raw(&served.addr, "GET /acp HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 400, "no Host at all");
    still_serves(&served).await;
}

#[tokio::test]
async fn a_non_loopback_address_needs_tls_or_says_it_goes_without() {
    let env = TestEnv::new(vec![]).await;
    for address in [
        "0.0.0.0:0",
        "[::]:0",
        "10.1.2.3:0",
        "192.168.0.1:0",
        "8.8.8.8:0",
    ] {
        let output = tokio::process::Command::new(talaria_bin())
            .args(["serve", "--listen", address])
            .env_clear()
            .envs(env.env())
            .output()
            .await
            .expect("ran");
        assert_eq!(output.status.code(), Some(2), "{address}");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains("is not a loopback address") && said.contains("--tls-cert"),
            "{address}: {said}"
        );
        assert!(output.stdout.is_empty(), "nothing listened for {address}");
    }
    for bad in ["example.com:80", "127.0.0.1", "*:80"] {
        let output = tokio::process::Command::new(talaria_bin())
            .args(["serve", "--listen", bad])
            .env_clear()
            .envs(env.env())
            .output()
            .await
            .expect("ran");
        assert_eq!(output.status.code(), Some(2), "{bad}");
    }
    let output = tokio::process::Command::new(talaria_bin())
        .args(["serve", "--allow-origin", "*"])
        .env_clear()
        .envs(env.env())
        .output()
        .await
        .expect("ran");
    assert_eq!(
        output.status.code(),
        Some(2),
        "a wildcard origin is refused"
    );
    // Said out loud, it serves.
    let mut insecure = tokio::process::Command::new(talaria_bin())
        .args(["serve", "--listen", "0.0.0.0:0", "--insecure-no-tls"])
        .env_clear()
        .envs(env.env())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawned");
    let mut lines = tokio::io::BufReader::new(insecure.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("in time")
        .expect("read");
    assert!(line.is_some_and(|l| l.contains("listening on http://0.0.0.0:")));
}

#[tokio::test]
async fn oversized_messages_and_a_flood_of_connections_are_refused_and_nothing_else_is_harmed() {
    let env = TestEnv::new(vec![]).await;
    let served = serve(
        &env,
        &["--max-message-bytes", "4096", "--max-connections", "3"],
    )
    .await;
    let host = served.addr.clone();
    let auth = format!("Authorization: Bearer {}\r\n", served.token);
    for size in [5_000, 64 * 1024, 1 << 20] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"pad":"{}"}}}}"#,
            "x".repeat(size)
        );
        let (status, answer) = raw(&served.addr, &post(&host, &auth, &body)).await;
        assert_eq!(status, 413, "{size}: {answer}");
    }
    let chunked = format!(
        "POST /acp HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2000\r\n{}\r\n0\r\n\r\n",
        "x".repeat(0x2000)
    );
    assert_eq!(
        raw(&served.addr, &chunked).await.0,
        413,
        "without a length too"
    );
    for (body, status) in [("not json", 400), ("[1,2]", 400), ("42", 400)] {
        assert_eq!(
            raw(&served.addr, &post(&host, &auth, body)).await.0,
            status,
            "{body}"
        );
    }
    // Over a WebSocket: a frame over the limit closes the socket with 1009.
    let stream = tokio::net::TcpStream::connect(&served.addr)
        .await
        .expect("connect");
    let request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://{host}/acp"),
    )
    .map(|mut r| {
        r.headers_mut().insert(
            "authorization",
            format!("Bearer {}", served.token).parse().expect("header"),
        );
        r
    })
    .expect("request");
    let (mut socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .expect("upgraded");
    socket
        .send(Message::text("y".repeat(10_000)))
        .await
        .expect("sent");
    let mut closed_with = None;
    while let Ok(Some(message)) = tokio::time::timeout(WAIT, socket.next()).await {
        if let Ok(Message::Close(frame)) = message {
            closed_with = frame.map(|f| u16::from(f.code));
            break;
        }
    }
    assert_eq!(closed_with, Some(1009));
    // Three connections at most: the fourth is told to come back later; one deleted makes room.
    let mut ids = Vec::new();
    let mut refused = 0;
    for _ in 0..6 {
        let (status, answer) = raw(&served.addr, &post(&host, &auth, INIT)).await;
        match status {
            200 => ids.push(
                answer
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("acp-connection-id: ")
                            .map(str::to_string)
                    })
                    .expect("id"),
            ),
            503 => refused += 1,
            other => panic!("{other}: {answer}"),
        }
    }
    // The WebSocket above may still hold its place until its agent ends.
    assert!(
        ids.len() <= 3 && refused >= 3,
        "{} served, {refused} refused",
        ids.len()
    );
    let delete = format!(
        "DELETE /acp HTTP/1.1\r\nHost: {host}\r\n{auth}Acp-Connection-Id: {}\r\nConnection: close\r\n\r\n",
        ids[0]
    );
    assert_eq!(raw(&served.addr, &delete).await.0, 202);
    let mut served_again = false;
    for _ in 0..50 {
        if raw(&served.addr, &post(&host, &auth, INIT)).await.0 == 200 {
            served_again = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served_again, "a deleted connection makes room");
}

/// A self-signed certificate for 127.0.0.1 and `agent.test` (made with openssl): the
/// certificate's and the key's paths.
pub(crate) fn self_signed(dir: &std::path::Path) -> (String, String) {
    let cert = dir.join("cert.pem").display().to_string();
    let key = dir.join("key.pem").display().to_string();
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-keyout", &key, "-out", &cert, "-subj", "/CN=agent.test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:agent.test"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .output()
        .expect("openssl (installed by tests/run-all.sh)");
    assert!(made.status.success(), "{made:?}");
    (cert, key)
}

/// `initialize` over HTTPS through `client`; the status and the answer's text.
async fn initialize_over(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut request = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(INIT);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("an HTTPS answer");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn over_tls_the_server_speaks_only_https_still_asks_for_the_token_and_checks_the_host() {
    let env = TestEnv::new(vec![]).await;
    let certs = tempfile::tempdir().expect("dir");
    let (cert, key) = self_signed(certs.path());
    let pem = std::fs::read(&cert).expect("cert");
    let trusting = || {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
    };
    let tls = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
    let mut args = tls.to_vec();
    args.extend(["--allow-host", "agent.test"]);
    let served = serve(&env, &args).await;
    let port = served.addr.rsplit(':').next().expect("port");
    let by_name = trusting()
        .resolve("agent.test", served.addr.parse().expect("addr"))
        .build()
        .expect("client");
    let url = format!("https://agent.test:{port}/acp");
    let (status, answer) = initialize_over(&by_name, &url, Some(&served.token)).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"talaria\""), "{answer}");
    let (status, _) = initialize_over(&by_name, &url, None).await;
    assert_eq!(status, 401, "TLS does not stand in for the token");
    let by_address = trusting().build().expect("client");
    let url = format!("https://{}/acp", served.addr);
    assert_eq!(
        initialize_over(&by_address, &url, Some(&served.token))
            .await
            .0,
        200
    );
    // A client that does not trust the certificate gets no answer at all.
    let untrusting = reqwest::Client::new();
    assert!(untrusting.post(&url).body(INIT).send().await.is_err());
    // Plain HTTP to the TLS port is not answered in HTTP (nothing leaks in clear).
    let auth = format!("Authorization: Bearer {}\r\n", served.token);
    let (status, plain) = raw(&served.addr, &post(&served.addr, &auth, INIT)).await;
    assert_eq!(status, 0, "{plain}");
    assert!(!plain.contains("talaria"), "{plain}");
    assert_eq!(
        initialize_over(&by_address, &url, Some(&served.token))
            .await
            .0,
        200,
        "still serving"
    );

    // On every address, with TLS: any IP literal of the port is this server; a name that
    // was not allowed is refused as rebinding.
    let everywhere = serve_at(&env, "0.0.0.0:0", &tls).await;
    let port = everywhere.addr.rsplit(':').next().expect("port");
    let url = format!("https://127.0.0.1:{port}/acp");
    assert_eq!(
        initialize_over(&by_address, &url, Some(&everywhere.token))
            .await
            .0,
        200
    );
    let rebound = trusting()
        .resolve(
            "agent.test",
            format!("127.0.0.1:{port}").parse().expect("addr"),
        )
        .build()
        .expect("client");
    let url = format!("https://agent.test:{port}/acp");
    assert_eq!(
        initialize_over(&rebound, &url, Some(&everywhere.token))
            .await
            .0,
        403
    );
}
