//! `talaria doctor`: the configuration as the server reads it, the endpoint, credentials and
//! an optional test call, with a fix for each problem and a non-zero exit when there is one.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;

#[tokio::test]
async fn a_good_configuration_passes_every_check_without_showing_the_key() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    env.write_config("model = \"mock-model\"\n");
    let (ok, report) = doctor(&env, &["--call"]).await;
    assert!(ok, "{report}");
    for line in [
        "✓ config file",
        "✓ provider",
        "✓ credentials",
        "✓ endpoint",
        "serves mock-model",
        "✓ test call",
        "✓ context window",
        "64000 tokens (configured)",
        // The declared variables that override the file, by name only.
        "✓ environment",
        "TALARIA_MODEL (over model)",
        "TALARIA_CONTEXT_WINDOW (over context_window)",
        "OPENAI_BASE_URL (over openai.base_url)",
        "OPENAI_API_KEY (over openai.api_key)",
    ] {
        assert!(report.contains(line), "{line}: {report}");
    }
    assert!(!report.contains("test-key"), "the key is never printed");
    assert_eq!(env.mock.requests()[0].body["max_tokens"], 1);
}

#[tokio::test]
async fn the_test_call_shows_the_rate_limits_its_answer_stated() {
    let limits = [
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "45"),
        ("x-ratelimit-reset-requests", "6m0s"),
        ("x-ratelimit-limit-tokens", "150000"),
        ("x-ratelimit-remaining-tokens", "149990"),
        ("x-ratelimit-reset-tokens", "6ms"),
    ];
    let env = TestEnv::new(vec![MockReply::text(&["ok"]).with_headers(&limits)]).await;
    let (ok, report) = doctor(&env, &["--call"]).await;
    assert!(ok, "{report}");
    assert!(
        report.contains("✓ rate limits    requests: 45 of 60 left (25% used); resets in 6 min ("),
        "{report}"
    );
    assert!(
        report.contains("tokens: 149990 of 150000 left (0% used); resets now"),
        "{report}"
    );
    // Nearly used up: a warning.
    let low = [
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "2"),
    ];
    let env = TestEnv::new(vec![MockReply::text(&["ok"]).with_headers(&low)]).await;
    let (ok, report) = doctor(&env, &["--call"]).await;
    assert!(ok, "a warning is no problem: {report}");
    assert!(
        report.contains("! rate limits    requests: 2 of 50 left (96% used)"),
        "{report}"
    );
    // A refused call names the limit that refused it and the wait.
    let refused = MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "Rate limit reached for requests"}}).to_string(),
        headers: vec![("retry-after".into(), "30".into())],
    };
    let spent = [
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "30s"),
    ];
    let env = TestEnv::new(vec![refused.with_headers(&spent)]).await;
    let (ok, report) = doctor(&env, &["--call"]).await;
    assert!(!ok, "{report}");
    for line in [
        "✗ test call",
        "rate limit requests: 0 of 60 left (100% used); resets in 30 s",
        "rate limit retry after 30 s",
        "fix: try again later",
    ] {
        assert!(report.contains(line), "{line}: {report}");
    }
    // An endpoint that states none says so.
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let (_, report) = doctor(&env, &["--call"]).await;
    assert!(
        report.contains("✓ rate limits    none stated by the endpoint"),
        "{report}"
    );
}

#[tokio::test]
async fn the_context_window_a_local_server_reports_is_shown() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 4096}}));
    env.extra_env
        .push(("TALARIA_CONTEXT_WINDOW".into(), String::new()));
    let (ok, report) = doctor(&env, &[]).await;
    assert!(ok, "{report}");
    assert!(
        report.contains("4096 tokens (reported by llama.cpp /props)"),
        "{report}"
    );
}

#[tokio::test]
async fn a_broken_toml_file_names_its_line() {
    let env = TestEnv::new(vec![]).await;
    env.write_config("model = \"m\"\nmode = [unclosed\n");
    let (ok, report) = doctor(&env, &[]).await;
    assert!(!ok);
    assert!(
        report.contains("✗ config file") && report.contains("line 2"),
        "{report}"
    );
    assert!(report.contains("fix:"), "{report}");
}

#[tokio::test]
async fn a_refused_port_and_a_rejected_key_say_how_to_fix_them() {
    let mut refused = TestEnv::new(vec![]).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    refused.extra_env.push((
        "OPENAI_BASE_URL".into(),
        format!("http://127.0.0.1:{port}/v1"),
    ));
    let (ok, report) = doctor(&refused, &[]).await;
    assert!(!ok);
    assert!(report.contains("connection refused"), "{report}");

    let rejected = TestEnv::new(vec![MockReply::Error {
        status: 401,
        body: json!({"error": {"message": "Incorrect API key provided"}}).to_string(),
        headers: vec![],
    }])
    .await;
    let (ok, report) = doctor(&rejected, &["--call"]).await;
    assert!(!ok);
    assert!(
        report.contains("✗ test call") && report.contains("401"),
        "{report}"
    );
    assert!(
        report.contains("check OPENAI_API_KEY or api_key under [openai]"),
        "{report}"
    );
}

#[tokio::test]
async fn the_sandbox_is_reported_active_proven_by_a_command_or_off() {
    let mut env = TestEnv::new(Vec::new()).await;
    let (ok, report) = doctor(&env, &[]).await;
    assert!(ok, "{report}");
    if talaria_sandbox::availability().is_enforced() {
        assert!(report.contains("✓ sandbox"), "{report}");
        assert!(report.contains("active: Landlock"), "{report}");
    } else {
        assert!(report.contains("! sandbox        unavailable"), "{report}");
    }
    env.extra_env.push(("TALARIA_SANDBOX".into(), "off".into()));
    let (ok, report) = doctor(&env, &[]).await;
    assert!(ok, "{report}");
    assert!(report.contains("! sandbox        OFF"), "{report}");
}

#[tokio::test]
async fn a_llama_cpp_server_that_answers_to_any_model_name_is_not_an_error() {
    let mut env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    // llama-server names its one model after the file; the configuration says another name.
    env.extra_env
        .push(("TALARIA_MODEL".into(), "qwen2.5-coder".into()));
    env.mock
        .serve_props(json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}));
    let (ok, report) = doctor(&env, &["--call"]).await;
    assert!(ok, "{report}");
    assert!(report.contains("! endpoint"), "{report}");
    assert!(
        report.contains("answers to any model name") && report.contains("--alias qwen2.5-coder"),
        "{report}"
    );
    assert!(report.contains("✓ test call"), "{report}");
    // A server that is not llama.cpp and does not list the model: a problem.
    let mut other = TestEnv::new(Vec::new()).await;
    other
        .extra_env
        .push(("TALARIA_MODEL".into(), "qwen2.5-coder".into()));
    other.mock.serve_props(serde_json::Value::Null);
    let (ok, report) = doctor(&other, &[]).await;
    assert!(!ok, "{report}");
    assert!(report.contains("is not among its models"), "{report}");
}

#[tokio::test]
async fn an_unknown_host_is_one_clear_line_and_no_test_call() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.extra_env.push((
        "OPENAI_BASE_URL".into(),
        "http://localhots.invalid:8080/v1".into(),
    ));
    let started = std::time::Instant::now();
    let (ok, report) = doctor(&env, &["--call"]).await;
    assert!(!ok, "{report}");
    let problems: Vec<&str> = report.lines().filter(|l| l.starts_with('✗')).collect();
    assert_eq!(problems.len(), 1, "{report}");
    assert!(problems[0].contains("cannot find the host"), "{report}");
    assert!(report.contains("correct the host name"), "{report}");
    assert!(report.contains("! test call"), "{report}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn without_a_configuration_or_a_key_the_local_model_snippet_is_offered() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.api_key = None;
    env.extra_env
        .push(("OPENAI_BASE_URL".into(), "https://api.openai.com/v1".into()));
    let (ok, report) = doctor(&env, &[]).await;
    assert!(!ok, "{report}");
    assert!(report.contains("! config file"), "{report}");
    assert!(report.contains("OPENAI_API_KEY"), "{report}");
    for line in [
        "no key is needed",
        "[openai]",
        "base_url = \"http://127.0.0.1:8080/v1\"",
        "api_key = \"\"",
    ] {
        assert!(report.contains(line), "{line}: {report}");
    }
}

/// A server that lists its models at `/v1/models` only and answers 404 to every other path,
/// as real OpenAI-compatible servers do; its origin (`http://127.0.0.1:PORT`).
async fn strict_models_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                let read = socket.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..read]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, body) = if path == "/v1/models" {
                    ("200 OK", r#"{"data":[{"id":"mock-model"}]}"#)
                } else {
                    ("404 Not Found", r#"{"error":"not found"}"#)
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    origin
}

#[tokio::test]
async fn a_base_url_with_a_wrong_path_is_a_wrong_path_naming_the_one_that_answers() {
    let origin = strict_models_server().await;
    for wrong in ["v2", "api", "openai/v1"] {
        let mut env = TestEnv::new(vec![]).await;
        env.extra_env
            .push(("OPENAI_BASE_URL".into(), format!("{origin}/{wrong}")));
        let (ok, report) = doctor(&env, &[]).await;
        assert!(!ok, "{wrong}: {report}");
        assert!(
            report.contains("the address's path is wrong")
                && report.contains(&format!("{origin}/v1/models does")),
            "{wrong}: {report}"
        );
        assert!(
            report.contains(&format!("to {origin}/v1")),
            "{wrong}: the fix names the path that answered: {report}"
        );
        assert!(
            !report.contains("set model"),
            "{wrong}: not a wrong model: {report}"
        );
    }
}

#[tokio::test]
async fn the_providers_own_host_that_does_not_resolve_is_offline_not_a_wrong_name() {
    use std::net::ToSocketAddrs;
    if ("api.openai.com", 443).to_socket_addrs().is_ok() {
        return; // this machine resolves it: nothing offline to show
    }
    let mut env = TestEnv::new(vec![]).await;
    env.extra_env.retain(|(name, _)| name != "OPENAI_BASE_URL");
    env.extra_env
        .push(("OPENAI_BASE_URL".into(), "https://api.openai.com/v1".into()));
    let (ok, report) = doctor(&env, &[]).await;
    assert!(!ok, "{report}");
    assert!(report.contains("seems offline"), "{report}");
    assert!(!report.contains("correct the host name"), "{report}");
}
