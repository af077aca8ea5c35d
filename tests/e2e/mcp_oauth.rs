//! Sign-in to remote MCP servers, end to end: the fixture over HTTP with `--oauth` is both
//! the MCP server and its authorization server (metadata, registration, PKCE, refresh,
//! revocation); the test plays the browser, following the address the agent sent.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::mcp::{prompt_allowing, session_with_servers_and};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const URL_CLIENT: &str = r#"{"elicitation": {"form": {}, "url": {}}}"#;

/// The fixture with sign-in, logging to `log`, its tokens living `ttl` seconds.
async fn oauth_fixture(log: &std::path::Path, ttl: u64) -> (tokio::process::Child, String) {
    let env = [
        ("MCP_FIXTURE_LOG", log.display().to_string()),
        ("MCP_FIXTURE_TOKEN_TTL", ttl.to_string()),
    ];
    let (server, url) = crate::mcp::http_fixture_with(&["--oauth"], &env).await;
    (server, url.trim().to_string())
}

fn web(url: &str) -> Vec<Value> {
    vec![json!({"type": "http", "name": "web", "url": url, "headers": []})]
}

/// Plays the browser: follows the sign-in address to the redirect; the final page's text.
async fn browse(url: &str) -> (u16, String) {
    let response = reqwest::get(url)
        .await
        .expect("the sign-in address answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

fn fixture_log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits for the agent's URL elicitation; returns its request.
async fn sign_in_request(agent: &mut talaria_harness::AgentProcess) -> Value {
    agent
        .wait_for(WAIT, |m| m["method"] == "elicitation/create")
        .await
        .expect("the agent asks the user to sign in")
}

/// A session of a client with URL elicitation that signs in to the fixture.
async fn signed_in_session(
    env: &TestEnv,
    url: &str,
) -> (talaria_harness::AgentProcess, String, Value) {
    let capabilities: Value = serde_json::from_str(URL_CLIENT).expect("json");
    let (mut agent, session, _) = session_with_servers_and(env, web(url), capabilities).await;
    let request = sign_in_request(&mut agent).await;
    agent
        .respond(&request["id"], json!({"action": "accept"}))
        .await
        .expect("accepted");
    let address = request["params"]["url"].as_str().expect("url").to_string();
    let (status, page) = browse(&address).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Signed in"), "{page}");
    let done = agent
        .wait_for(WAIT, |m| m["method"] == "elicitation/complete")
        .await
        .expect("the agent says the sign-in is over");
    assert_eq!(
        done["params"]["elicitationId"],
        request["params"]["elicitationId"]
    );
    (agent, session, request)
}

fn token_files(env: &TestEnv) -> Vec<std::path::PathBuf> {
    let dir = env.home.path().join("talaria/mcp-auth");
    std::fs::read_dir(&dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Every file under `dir` but the sign-in folder, read as text.
fn everything_but_tokens(dir: &std::path::Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.ends_with("mcp-auth") {
            continue;
        }
        if path.is_dir() {
            everything_but_tokens(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
}

#[tokio::test]
async fn a_server_that_asks_for_sign_in_is_signed_in_through_a_url_elicitation() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_server, url) = oauth_fixture(log.path(), 3600).await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "after sign-in"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let capabilities: Value = serde_json::from_str(URL_CLIENT).expect("json");
    let (mut agent, session, _) = session_with_servers_and(&env, web(&url), capabilities).await;
    agent
        .wait_for(WAIT, |m| {
            m["method"] == "session/update" && m.to_string().contains("needs sign-in")
        })
        .await
        .expect("the session says why the server's tools are missing");
    let request = sign_in_request(&mut agent).await;
    let params = &request["params"];
    assert_eq!(params["mode"], "url");
    assert_eq!(params["sessionId"], session);
    let address = params["url"].as_str().expect("url").to_string();
    let query: std::collections::HashMap<String, String> = reqwest::Url::parse(&address)
        .expect("an address")
        .query_pairs()
        .into_owned()
        .collect();
    assert!(
        address.starts_with(&url.replace("/mcp", "/auth/authorize")),
        "{address}"
    );
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["resource"], url);
    assert!(
        query["redirect_uri"].starts_with("http://127.0.0.1:"),
        "{query:?}"
    );
    // A forged answer at the redirect (another state) is refused and changes nothing.
    let forged = format!("{}?code=stolen&state=forged", query["redirect_uri"]);
    let (status, _) = browse(&forged).await;
    assert_eq!(status, 400);
    // While the user has not signed in, /mcp says so.
    let (_, listed) = prompt(&mut agent, &session, "/mcp").await;
    let report = chunks(&listed, "agent_message_chunk").concat();
    assert!(report.contains("web: waiting for sign-in"), "{report}");
    agent
        .respond(&request["id"], json!({"action": "accept"}))
        .await
        .expect("accepted");
    let (status, page) = browse(&address).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Signed in"), "{page}");
    let done = agent
        .wait_for(WAIT, |m| m["method"] == "elicitation/complete")
        .await
        .expect("complete");
    assert_eq!(done["params"]["elicitationId"], params["elicitationId"]);
    // The server's tools are offered from the next prompt, and work.
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    assert!(
        requests[0].body["tools"]
            .to_string()
            .contains("mcp__web__echo")
    );
    let told = requests[1].body["messages"].to_string();
    assert!(told.contains("echo: after sign-in"), "{told}");
    let steps = fixture_log(log.path());
    for step in [
        "oauth registered",
        "oauth authorized",
        "oauth granted authorization_code",
    ] {
        assert!(steps.contains(step), "{step} missing from {steps}");
    }
    // The tokens are kept for the user alone, and nowhere else: not in the records, the
    // logs or anything the client saw.
    let files = token_files(&env);
    assert_eq!(files.len(), 1, "{files:?}");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(files[0].parent().expect("dir")), 0o700);
    let kept: Value =
        serde_json::from_slice(&std::fs::read(&files[0]).expect("read")).expect("json");
    let token = kept["access_token"].as_str().expect("token").to_string();
    agent.close_stdin();
    let _ = agent.wait_exit(WAIT).await;
    let mut elsewhere = agent.stderr();
    everything_but_tokens(&env.home.path().join("talaria"), &mut elsewhere);
    elsewhere.push_str(&serde_json::to_string(&agent.transcript).expect("json"));
    for request in env.mock.requests() {
        elsewhere.push_str(&request.body.to_string());
    }
    assert!(!elsewhere.contains(&token), "the access token leaked");
    assert!(!elsewhere.contains(kept["refresh_token"].as_str().expect("refresh")));
}

#[tokio::test]
async fn a_kept_sign_in_serves_the_next_session_and_is_refreshed_when_due() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_server, url) = oauth_fixture(log.path(), 2).await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "refreshed"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let (mut first, _, _) = signed_in_session(&env, &url).await;
    first.close_stdin();
    let _ = first.wait_exit(WAIT).await;
    // The token has expired by the time the next process starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (mut agent, session, updates) = session_with_servers_and(
        &env,
        web(&url),
        serde_json::from_str(URL_CLIENT).expect("json"),
    )
    .await;
    assert!(
        !json!(updates).to_string().contains("needs sign-in"),
        "{updates:?}"
    );
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = env.mock.requests()[1].body["messages"].to_string();
    assert!(told.contains("echo: refreshed"), "{told}");
    assert!(fixture_log(log.path()).contains("oauth granted refresh_token"));
    let seen = json!(agent.transcript).to_string();
    assert!(
        !seen.contains("elicitation/create") && !seen.contains("needs sign-in"),
        "nobody was asked to sign in again: {seen}"
    );
}

#[tokio::test]
async fn a_revoked_sign_in_fails_the_call_clearly_and_asks_again() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_server, url) = oauth_fixture(log.path(), 3600).await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("r", "mcp__web__revoke", json!({})),
        MockReply::text(&["revoked"]),
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "too late"})),
        MockReply::text(&["it needs sign-in"]),
    ])
    .await;
    let (mut agent, session, _) = signed_in_session(&env, &url).await;
    let (response, _) = prompt_allowing(&mut agent, &session, "revoke").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = env.mock.requests()[3].body["messages"].to_string();
    assert!(told.contains("the MCP server web needs sign-in"), "{told}");
    assert!(fixture_log(log.path()).contains("oauth refresh refused"));
    // The user is asked again; declining is told, and the session goes on.
    let again = sign_in_request(&mut agent).await;
    agent
        .respond(&again["id"], json!({"action": "decline"}))
        .await
        .expect("declined");
    let notice = agent
        .wait_for(WAIT, |m| m.to_string().contains("declined to sign in"))
        .await
        .expect("the refusal is told");
    assert_eq!(notice["method"], "session/update");
    assert!(
        token_files(&env).is_empty(),
        "the refused sign-in is forgotten"
    );
}

#[tokio::test]
async fn a_client_without_url_elicitation_gets_the_address_in_a_notice() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_server, url) = oauth_fixture(log.path(), 3600).await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "noticed"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let (mut agent, session, _) = session_with_servers_and(&env, web(&url), json!({})).await;
    let notice = agent
        .wait_for(WAIT, |m| {
            m.to_string().contains("Open this address to sign in")
        })
        .await
        .expect("a notice with the address");
    let text = notice["params"]["update"]["content"]["text"]
        .as_str()
        .expect("text")
        .to_string();
    let address = text
        .split_whitespace()
        .find(|w| w.starts_with("http://") && w.contains("/auth/authorize"))
        .expect("the address")
        .to_string();
    let (status, _) = browse(&address).await;
    assert_eq!(status, 200);
    agent
        .wait_for(WAIT, |m| {
            m.to_string().contains("Signed in to the MCP server web")
        })
        .await
        .expect("the sign-in is told");
    let (response, _) = prompt_allowing(&mut agent, &session, "echo").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(
        env.mock.requests()[1].body["messages"]
            .to_string()
            .contains("echo: noticed")
    );
}

#[tokio::test]
async fn talaria_chat_prints_the_sign_in_address_and_the_tools_follow() {
    use tokio::io::AsyncWriteExt;
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_server, url) = oauth_fixture(log.path(), 3600).await;
    let env = TestEnv::new(vec![
        MockReply::tool_call("e", "mcp__web__echo", json!({"text": "from the terminal"})),
        MockReply::text(&["Echoed."]),
    ])
    .await;
    env.write_config(&format!("[mcp_servers.web]\nurl = \"{url}\"\n"));
    let mut child = crate::terminal_client::chat(&env, &["--approve", "once"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawned");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stderr = child.stderr.take().expect("stderr");
    let mut seen = String::new();
    let marker = "Open this address in your browser: ";
    read_until(&mut stderr, &mut seen, marker).await;
    let start = seen.find(marker).expect("marker") + marker.len();
    let address = seen[start..]
        .lines()
        .next()
        .expect("line")
        .trim()
        .to_string();
    let (status, _) = browse(&address).await;
    assert_eq!(status, 200);
    read_until(&mut stderr, &mut seen, "Signed in to the MCP server web").await;
    stdin.write_all(b"echo it\n").await.expect("prompt");
    drop(stdin);
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("in time")
        .expect("ran");
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Echoed.\n");
    let sent = env.mock.requests()[1].body["messages"].to_string();
    assert!(sent.contains("echo: from the terminal"), "{sent}");
}

/// Reads `stderr` into `seen` until a whole line holding `needle` has come.
async fn read_until(stderr: &mut tokio::process::ChildStderr, seen: &mut String, needle: &str) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let done = |seen: &String| {
        seen.find(needle)
            .is_some_and(|at| seen[at..].contains('\n'))
    };
    let read = tokio::time::timeout(WAIT, async {
        while !done(seen) {
            let n = stderr.read(&mut buf).await.expect("read");
            assert!(n > 0, "stderr closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    assert!(read.is_ok(), "{needle:?} never came: {seen}");
}
