//! Record once, replay forever: a session recorded against the scripted mock with
//! `--record` replays with `--replay` in another workspace and home, with no model — the same
//! updates reach the client — and a changed prompt fails the turn saying what changed.

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

/// The updates as a client compares them: this run's paths written as placeholders.
fn comparable(updates: &[Value], env: &TestEnv) -> Vec<String> {
    let workspace = env.workspace.path().display().to_string();
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .map(|u| u.to_string().replace(&workspace, "<workspace>"))
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
            MockReply::text(&["Wrote made.txt."]),
        ]
    };
    let recording = env_with(writes(), "--record", cassettes.path()).await;
    recording.write_config("mode = \"accept-edits\"\n");
    let (_, recorded) = one_turn(&recording, "Write made.txt").await;
    assert!(recording.workspace.path().join("made.txt").is_file());
    let text =
        std::fs::read_to_string(cassettes.path().join("session-001.jsonl")).expect("cassette");
    assert!(
        text.contains("\"line\":\"tool\""),
        "the tool call is on tape"
    );
    let mut replaying = env_with(Vec::new(), "--replay", cassettes.path()).await;
    replaying.args.push("--replay-tools".into());
    replaying.write_config("mode = \"accept-edits\"\n");
    let (response, replayed) = one_turn(&replaying, "Write made.txt").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(
        !replaying.workspace.path().join("made.txt").exists(),
        "--replay-tools ran the tool"
    );
    assert_eq!(
        comparable(&replayed, &replaying),
        comparable(&recorded, &recording)
    );
}
