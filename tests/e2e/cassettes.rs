//! Record once, replay forever: a session recorded against the scripted mock with
//! `--record` replays with `--replay` in another workspace and home, with no model — the same
//! updates reach the client — and a changed prompt fails the turn saying what changed.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const PLANTED_KEY: &str = "sk-planted-0123456789abcdefghij";

fn script() -> Vec<MockReply> {
    vec![
        MockReply::tool_call("r1", "read_file", json!({"path": "a.txt"})),
        MockReply::text(&["It says hello."]),
    ]
}

/// A workspace with `a.txt`, recording or replaying through `dir`.
async fn env_with(script: Vec<MockReply>, flag: &str, dir: &std::path::Path) -> TestEnv {
    let mut env = TestEnv::new(script).await;
    env.extra_env
        .push(("OPENAI_API_KEY".into(), PLANTED_KEY.into()));
    env.args = vec![flag.into(), dir.display().to_string()];
    std::fs::write(env.workspace.path().join("a.txt"), "hello\n").expect("a.txt");
    env
}

/// The updates as a client compares them: this run's paths and child sessions written as
/// placeholders; token
/// counts, which follow the length of this run's paths, written as `#`; and a running card's
/// interim progress, which depends on the pace, left out.
fn comparable(updates: &[Value], env: &TestEnv) -> Vec<String> {
    let workspace = env.workspace.path().display().to_string();
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .filter(|u| {
            !(u["sessionUpdate"] == "tool_call_update"
                && u.get("status").is_none()
                && u.get("title").is_none())
        })
        .map(|u| {
            // A subagent's session is this run's own, as the session is.
            let mut u = u.clone();
            if let Some(child) = u.pointer_mut("/rawOutput/subagent/sessionId") {
                *child = Value::from("<child session>");
            }
            let text = u.to_string().replace(&workspace, "<workspace>");
            let counted = matches!(
                u["sessionUpdate"].as_str(),
                Some("compaction_update" | "usage_update")
            );
            if counted {
                text.chars()
                    .map(|c| if c.is_ascii_digit() { '#' } else { c })
                    .collect()
            } else {
                text
            }
        })
        .collect()
}

async fn one_turn(env: &TestEnv, text: &str) -> (Value, Vec<Value>) {
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, text).await;
    let updates = agent.updates();
    agent.close_stdin();
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(status.success(), "{status:?}");
    (response, updates)
}

#[tokio::test]
async fn a_recorded_session_replays_the_same_updates_with_no_model() {
    let cassettes = tempfile::tempdir().expect("dir");
    let recording = env_with(script(), "--record", cassettes.path()).await;
    let (response, recorded) = one_turn(&recording, "What does a.txt say?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(recording.mock.requests().len(), 2);
    let file = cassettes.path().join("session-001.jsonl");
    let text = std::fs::read_to_string(&file).expect("a cassette per session");
    assert!(
        !text.contains(PLANTED_KEY),
        "a key never reaches a cassette"
    );
    let workspace = recording.workspace.path().display().to_string();
    assert!(!text.contains(&workspace), "paths are placeholders: {text}");
    assert!(text.contains("<cwd>"), "{text}");
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok())
    );
    // Replayed in another workspace and home, against a mock that answers nothing.
    let replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    let (response, replayed) = one_turn(&replaying, "What does a.txt say?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(replaying.mock.requests().is_empty(), "no model was called");
    let recorded = comparable(&recorded, &recording);
    assert!(
        recorded.iter().any(|u| u.contains("tool_call"))
            && recorded.iter().any(|u| u.contains("It says hello.")),
        "{recorded:?}"
    );
    assert_eq!(comparable(&replayed, &replaying), recorded);
}

#[tokio::test]
async fn a_changed_prompt_fails_the_turn_naming_the_message_that_changed() {
    let cassettes = tempfile::tempdir().expect("dir");
    let recording = env_with(script(), "--record", cassettes.path()).await;
    one_turn(&recording, "What does a.txt say?").await;
    let replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    let (response, _) = one_turn(&replaying, "What does b.txt say?").await;
    let error = response["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| response.to_string());
    assert!(
        error.contains("no recorded model call matches"),
        "{response}"
    );
    assert!(
        error.contains("b.txt") && error.contains("a.txt"),
        "{response}"
    );
    assert!(error.contains("message 1 (user)"), "{response}");
    assert!(replaying.mock.requests().is_empty());
}

#[tokio::test]
async fn a_replay_of_a_missing_or_newer_cassette_is_refused_at_start() {
    let cassettes = tempfile::tempdir().expect("dir");
    std::fs::write(
        cassettes.path().join("session-001.jsonl"),
        "{\"line\":\"header\",\"cassette\":9,\"talaria\":\"9.0.0\"}\n",
    )
    .expect("cassette");
    let env = env_with(Vec::new(), "--replay", cassettes.path()).await;
    let mut agent = env.spawn().await;
    let status = agent.wait_exit(WAIT).await.expect("exits");
    assert!(!status.success());
    // The log's last lines may still be on their way from the pipe.
    let told = |agent: &talaria_harness::AgentProcess| {
        agent.stderr().contains("version 9") && agent.stderr().contains("record it again")
    };
    for _ in 0..50 {
        if told(&agent) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(told(&agent), "{}", agent.stderr());
}

#[tokio::test]
async fn with_replay_tools_nothing_runs_and_the_client_sees_the_same() {
    let cassettes = tempfile::tempdir().expect("dir");
    let writes = || {
        vec![
            MockReply::tool_call(
                "w1",
                "write_file",
                json!({"path": "made.txt", "content": "made by the agent\n"}),
            ),
            MockReply::tool_call(
                "c1",
                "terminal",
                json!({"command": "touch made-by-a-command.txt"}),
            ),
            MockReply::text(&["Wrote made.txt."]),
        ]
    };
    let recording = env_with(writes(), "--record", cassettes.path()).await;
    recording.write_config("mode = \"yolo\"\n");
    let (_, recorded) = one_turn(&recording, "Write made.txt").await;
    assert!(recording.workspace.path().join("made.txt").is_file());
    assert!(
        recording
            .workspace
            .path()
            .join("made-by-a-command.txt")
            .is_file()
    );
    let text =
        std::fs::read_to_string(cassettes.path().join("session-001.jsonl")).expect("cassette");
    assert!(
        text.contains("\"line\":\"tool\""),
        "the tool call is on tape"
    );
    let mut replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    replaying.args.push("--replay-tools".into());
    replaying.write_config("mode = \"yolo\"\n");
    let (response, replayed) = one_turn(&replaying, "Write made.txt").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    for made in ["made.txt", "made-by-a-command.txt"] {
        assert!(
            !replaying.workspace.path().join(made).exists(),
            "--replay-tools ran the tool that makes {made}"
        );
    }
    assert_eq!(
        comparable(&replayed, &replaying),
        comparable(&recorded, &recording)
    );
}

#[tokio::test]
async fn keys_and_passwords_never_reach_a_cassette() {
    let cassettes = tempfile::tempdir().expect("dir");
    let password = "planted-pass-0042xyz";
    let env = env_with(
        vec![
            MockReply::tool_call("n1", "read_file", json!({"path": "notes.txt"})),
            MockReply::text(&["Read the notes."]),
        ],
        "--record",
        cassettes.path(),
    )
    .await;
    // A key in the environment (env_with), a key in the configuration, a password in a
    // tool's result.
    let config_key = "sk-config-planted-0123456789abcdef";
    env.write_config(
        "[[fallback]]\nprovider = \"openai\"\nmodel = \"backup\"\napi_key_env = \"BACKUP_KEY\"\n",
    );
    let mut env = env;
    env.extra_env.push(("BACKUP_KEY".into(), config_key.into()));
    std::fs::write(
        env.workspace.path().join("notes.txt"),
        format!(
            "database host: db.internal\npassword = {password}\nkeys in use {PLANTED_KEY} \
             {config_key}\n"
        ),
    )
    .expect("notes");
    let (response, _) = one_turn(&env, "What do the notes say?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let text =
        std::fs::read_to_string(cassettes.path().join("session-001.jsonl")).expect("cassette");
    // The model did read the notes: the request after the call carries them.
    assert!(text.contains("db.internal"), "{text}");
    for secret in [PLANTED_KEY, config_key, password] {
        assert!(!text.contains(secret), "{secret} reached the cassette");
    }
    assert!(text.contains("[REDACTED]"));
}

#[tokio::test]
async fn a_replay_at_the_recorded_pace_keeps_each_gap_between_deltas() {
    // A 2 s stream: ten deltas 200 ms apart.
    let cassettes = tempfile::tempdir().expect("dir");
    let slow = MockReply::Text {
        chunks: (0..10).map(|n| format!("word{n} ")).collect(),
        reasoning: Vec::new(),
        delay_ms: 200,
        usage: None,
        finish_reason: None,
    };
    let recording = env_with(vec![slow], "--record", cassettes.path()).await;
    let (mut agent, session) = recording.session().await;
    let seen_while_recording = delta_times(&mut agent, &session).await;
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let recorded = recorded_delta_gaps(&cassettes.path().join("session-001.jsonl"));
    assert_eq!(recorded.len(), 9, "{recorded:?}");
    let mut replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    replaying
        .args
        .extend(["--replay-timing".to_string(), "recorded".to_string()]);
    let (mut agent, session) = replaying.session().await;
    let replayed = gaps(&delta_times(&mut agent, &session).await);
    assert_eq!(replayed.len(), recorded.len(), "{replayed:?}");
    for (n, (replayed, recorded)) in replayed.iter().zip(&recorded).enumerate() {
        let ratio = replayed.as_secs_f64() / recorded.as_secs_f64();
        assert!(
            (0.8..=1.2).contains(&ratio),
            "gap {n}: recorded {recorded:?}, replayed {replayed:?}"
        );
    }
    // And the whole stream as the client saw it while recording.
    let total = |gaps: &[Duration]| gaps.iter().sum::<Duration>().as_secs_f64();
    let ratio = total(&replayed) / total(&gaps(&seen_while_recording));
    assert!((0.8..=1.2).contains(&ratio), "first to last: {ratio}");
}

/// The gaps between the text deltas of a cassette's first call, as it recorded them.
fn recorded_delta_gaps(cassette: &std::path::Path) -> Vec<Duration> {
    let text = std::fs::read_to_string(cassette).expect("cassette");
    let times: Vec<u64> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .take_while(|line| line["line"] != "end")
        .filter(|line| line["event"]["text_delta"].is_string())
        .filter_map(|line| line["after_ms"].as_u64())
        .collect();
    times
        .windows(2)
        .map(|pair| Duration::from_millis(pair[1] - pair[0]))
        .collect()
}

fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|pair| pair[1] - pair[0]).collect()
}

/// When each of the answer's deltas reached the client.
async fn delta_times(agent: &mut talaria_harness::AgentProcess, session: &str) -> Vec<Instant> {
    let id = agent
        .start_request("session/prompt", text_prompt(session, "Say ten words"))
        .await
        .expect("prompt");
    let mut times = Vec::new();
    loop {
        let message = tokio::time::timeout(WAIT, agent.next_message())
            .await
            .expect("in time")
            .expect("a message");
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            times.push(Instant::now());
        }
        if message["id"] == id {
            break;
        }
    }
    times
}

/// `session/new` asking to be recorded into `dir`.
async fn new_session_recorded_into(
    agent: &mut talaria_harness::AgentProcess,
    env: &TestEnv,
    dir: Value,
) -> anyhow::Result<Value> {
    agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": [],
                   "_meta": {"talaria": {"record": dir}}}),
        )
        .await
}

#[tokio::test]
async fn a_session_can_ask_to_be_recorded_and_the_configuration_can_record_them_all() {
    // Per session: `_meta.talaria.record` on `session/new`, no flag.
    let asked = tempfile::tempdir().expect("dir");
    let env = TestEnv::new(vec![MockReply::text(&["Recorded."])]).await;
    let mut agent = initialized(&env).await;
    let created = new_session_recorded_into(&mut agent, &env, json!(asked.path()))
        .await
        .expect("session/new");
    let session = created["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    let text = std::fs::read_to_string(asked.path().join("session-001.jsonl"))
        .expect("the session's cassette");
    assert!(text.contains("Recorded."), "{text}");
    // A relative directory is refused with a clear error.
    let mut agent = initialized(&env).await;
    let refused = new_session_recorded_into(&mut agent, &env, json!("relative/dir")).await;
    let refused = format!("{refused:?}");
    assert!(refused.contains("absolute"), "{refused}");
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    // For every session: `[record] dir`.
    let configured = tempfile::tempdir().expect("dir");
    let env = TestEnv::new(vec![MockReply::text(&["Also recorded."])]).await;
    env.write_config(&format!("[record]\ndir = {:?}\n", configured.path()));
    one_turn(&env, "hi").await;
    let text = std::fs::read_to_string(configured.path().join("session-001.jsonl"))
        .expect("the configured cassette");
    assert!(text.contains("Also recorded."), "{text}");
}

#[tokio::test]
async fn a_session_with_a_tool_call_a_permission_a_compaction_and_a_subagent_replays_the_same() {
    const CHILD: &str = "child-model";
    let cassettes = tempfile::tempdir().expect("dir");
    let mut script = vec![
        // A streamed tool call that asks permission.
        MockReply::ToolCalls {
            calls: vec![talaria_harness::MockToolCall {
                id: "w1".into(),
                name: "write_file".into(),
                arguments: json!({"path": "plan.md", "content": "# Plan\n"}).to_string(),
            }],
            text: Some("Writing the plan.".into()),
            fragment_chars: Some(7),
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["Wrote it."]),
        // A subagent.
        MockReply::ToolCalls {
            calls: vec![talaria_harness::MockToolCall {
                id: "d1".into(),
                name: "delegate_task".into(),
                arguments: json!({"goal": "check the plan"}).to_string(),
            }],
            text: None,
            fragment_chars: None,
            usage: None,
            delay_ms: 0,
        },
        MockReply::text(&["The child checked it."]),
    ];
    script.extend(
        (1..=5).map(|n| MockReply::text(&[&format!("Answer {n}: {}", "words ".repeat(200))])),
    );
    // The compaction's summary.
    script.push(MockReply::text(&["## Goal\nWrite and check the plan."]));
    let config = format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [auxiliary.subagent]\nmodel = \"{CHILD}\"\n"
    );
    let recording = env_with(script, "--record", cassettes.path()).await;
    recording.write_config(&config);
    recording
        .mock
        .script_for_model(CHILD, vec![MockReply::text(&["The plan is fine."])]);
    let recorded = full_session(&recording).await;
    let recorded = comparable(&recorded, &recording);
    // The mock the session was recorded against is stopped, and the replay is pointed at its
    // address: nothing answers there.
    let stopped = recording.mock.base_url();
    let mut replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    drop(recording);
    replaying
        .extra_env
        .push(("OPENAI_BASE_URL".into(), stopped.clone()));
    replaying.write_config(&config);
    let replayed = full_session(&replaying).await;
    assert!(replaying.mock.requests().is_empty(), "no model was called");
    let address = stopped
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "the recording's mock at {address} is stopped"
    );
    for kind in [
        "tool_call\"",
        "compaction_update",
        "The plan is fine.",
        "Writing the plan.",
    ] {
        assert!(
            recorded.iter().any(|u| u.contains(kind)),
            "{kind}: {recorded:#?}"
        );
    }
    assert_eq!(comparable(&replayed, &replaying), recorded);
}

/// The session the full test records and replays: a write the user allows, a delegation,
/// five more turns, then `/compact`.
async fn full_session(env: &TestEnv) -> Vec<Value> {
    let (mut agent, session, _) = env
        .session_with(json!({"session": {"compaction": {}}}))
        .await;
    let response = prompt_allowing_once(&mut agent, &session, "Write the plan").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let (response, _) = prompt(&mut agent, &session, "Have it checked").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    for n in 1..=5 {
        let (response, _) = prompt(&mut agent, &session, &format!("question {n}")).await;
        assert_eq!(stop_reason(&response), "end_turn", "{response}");
    }
    let (response, _) = prompt(&mut agent, &session, "/compact").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let updates = agent.updates();
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    updates
}

#[tokio::test]
async fn the_sessions_private_temporary_directory_is_a_placeholder() {
    let cassettes = tempfile::tempdir().expect("dir");
    let env = env_with(
        vec![
            MockReply::tool_call("t1", "terminal", json!({"command": "printenv TMPDIR"})),
            MockReply::text(&["That is the temporary directory."]),
        ],
        "--record",
        cassettes.path(),
    )
    .await;
    env.write_config("mode = \"yolo\"\n");
    let (response, updates) = one_turn(&env, "Where do temporary files go?").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let shown = serde_json::to_string(&updates).unwrap_or_default();
    if !shown.contains("/talaria-") {
        // No private directory here (no sandbox): nothing to hide.
        return;
    }
    let text =
        std::fs::read_to_string(cassettes.path().join("session-001.jsonl")).expect("cassette");
    assert!(
        !text.contains("/talaria-"),
        "a run's temporary path: {text}"
    );
    assert!(text.contains("<tmp>"), "{text}");
}

#[tokio::test]
async fn a_tool_result_that_differs_from_the_recording_is_reported_on_its_card_and_in_the_log() {
    let cassettes = tempfile::tempdir().expect("dir");
    let recording = env_with(script(), "--record", cassettes.path()).await;
    one_turn(&recording, "What does a.txt say?").await;
    // The fixture changed since the recording: the tool runs for real and reads the new text.
    let replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    std::fs::write(replaying.workspace.path().join("a.txt"), "goodbye\n").expect("a.txt");
    let (mut agent, session) = replaying.session().await;
    prompt(&mut agent, &session, "What does a.txt say?").await;
    agent.close_stdin();
    agent.wait_exit(WAIT).await.expect("exits");
    for _ in 0..50 {
        if agent.stderr().contains("differs from the recording") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let log = agent.stderr();
    assert!(log.contains("differs from the recording"), "{log}");
    assert!(log.contains("goodbye"), "the new result is named: {log}");
    // And on the call's card, which the client shows (the model does not see it).
    let told = agent
        .updates()
        .iter()
        .any(|u| u["toolCallId"] == "r1" && u.to_string().contains("differs from the recording"));
    assert!(told, "{:#?}", agent.updates());
}
