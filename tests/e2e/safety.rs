//! Command safety and secret reads over stdio: the floor in every mode without a question,
//! "always allow" scoped to programs (never keywords), dynamic commands asking even in yolo,
//! credential reads asking in every mode with nothing reaching the model when rejected.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const KEY_TEXT: &str = "PRIVATE-KEY-MATERIAL-1234";
const CONFIG_TEXT: &str = "CONFIG-SECRET-MARKER";
const ENV_TEXT: &str = "API_TOKEN=sk-env-secret";

type Answer = Box<dyn FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)>>;

fn answer(option: &'static str) -> Answer {
    Box::new(move |method, _| match method {
        "session/request_permission" => Ok(Some(
            json!({"outcome": {"outcome": "selected", "optionId": option}}),
        )),
        other => Err((-32601, format!("unexpected {other}"))),
    })
}

fn never_asked() -> Answer {
    Box::new(|method, params| panic!("the agent asked the client for {method}: {params}"))
}

/// Runs one prompt and returns the tool results the model got back in the next request.
async fn run(
    env: &TestEnv,
    agent: &mut talaria_harness::AgentProcess,
    session: &str,
    answerer: Answer,
) -> Vec<String> {
    let before = env.mock.requests().len();
    let id = agent
        .start_request("session/prompt", text_prompt(session, "go"))
        .await
        .expect("prompt");
    let response = agent.drive(id, WAIT, answerer).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let requests = env.mock.requests();
    let tool_results = |index: usize| -> Vec<String> {
        requests[index].body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let earlier = tool_results(before).len();
    tool_results(before + 1).split_off(earlier)
}

fn permission_asks(agent: &talaria_harness::AgentProcess) -> Vec<Value> {
    agent
        .agent_requests()
        .into_iter()
        .filter(|(method, _)| method == "session/request_permission")
        .map(|(_, params)| params)
        .collect()
}

const FLOOR: &[&str] = &[
    "if true; then rm -rf ~; fi",
    "for x in 1; do rm -rf /; done",
    "{ rm -rf /; }",
    "f() { rm -rf /; }; f",
    "until false; do rm -rf /; done",
    "if rm -rf /; then :; fi",
    "! rm -rf /",
    "echo / | xargs rm -rf",
    "rm -rf /.",
];

#[tokio::test]
async fn floor_commands_fail_with_the_floor_message_in_every_mode_without_a_question() {
    for mode in ["read-only", "ask", "accept-edits", "yolo"] {
        let calls: Vec<(String, &str, Value)> = FLOOR
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("f{i}"), "terminal", json!({"command": c})))
            .collect();
        let borrowed: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
            .collect();
        let mut env = TestEnv::new(vec![batch(&borrowed), MockReply::text(&["ok"])]).await;
        env.write_config(&format!("mode = \"{mode}\"\n"));
        env.unprivileged(&[]);
        let (mut agent, session) = env.session().await;
        let results = run(&env, &mut agent, &session, never_asked()).await;
        assert_eq!(results.len(), FLOOR.len(), "{mode}");
        for (command, result) in FLOOR.iter().zip(&results) {
            assert!(
                result.contains("Refused by the safety floor"),
                "{mode}: {command}: {result}"
            );
        }
        let failed = agent
            .updates()
            .into_iter()
            .filter(|u| u["status"] == "failed")
            .count();
        assert_eq!(failed, FLOOR.len(), "{mode}");
        assert!(permission_asks(&agent).is_empty(), "{mode}");
    }
}

#[tokio::test]
async fn always_allowing_one_loop_does_not_approve_a_loop_running_another_program() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "l1",
            "terminal",
            json!({"command": "for i in 1 2; do echo $i; done"}),
        ),
        MockReply::text(&["looped"]),
        MockReply::tool_call(
            "l2",
            "terminal",
            json!({"command": "for i in 1 2; do echo again $i; done"}),
        ),
        MockReply::text(&["looped again"]),
        MockReply::tool_call(
            "l3",
            "terminal",
            json!({"command": "for i in 1 2; do touch made-$i; done"}),
        ),
        MockReply::text(&["declined"]),
    ])
    .await;
    let (mut agent, session) = env.session().await;
    let results = run(&env, &mut agent, &session, answer("allow_always")).await;
    assert!(results[0].contains("Exit code: 0"), "{results:?}");
    assert_eq!(permission_asks(&agent).len(), 1);
    // The same program in another loop: remembered.
    let results = run(&env, &mut agent, &session, never_asked()).await;
    assert!(results[0].contains("again 2"), "{results:?}");
    // Another program in a loop: asked again, and rejected, so nothing runs.
    let results = run(&env, &mut agent, &session, answer("reject_once")).await;
    assert!(results[0].contains("declined"), "{results:?}");
    let asks = permission_asks(&agent);
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert_eq!(asks[1]["toolCall"]["toolCallId"], "l3");
    assert!(!env.workspace.path().join("made-1").exists());
    let rules = std::fs::read_to_string(env.home.path().join("talaria/permissions.json"))
        .expect("rules saved");
    assert!(rules.contains("command:echo"), "{rules}");
    for keyword in ["command:for", "command:do", "command:done"] {
        assert!(!rules.contains(keyword), "{rules}");
    }
}

#[tokio::test]
async fn a_dynamic_command_asks_in_yolo_and_can_never_be_remembered() {
    let mut env = TestEnv::new(vec![
        batch(&[
            (
                "d1",
                "terminal",
                json!({"command": "r=touch; $r made-by-variable"}),
            ),
            (
                "d2",
                "terminal",
                json!({"command": "echo 'touch made-by-pipe' | sh"}),
            ),
            (
                "d3",
                "terminal",
                json!({"command": "eval \"$(echo touch made-by-eval)\""}),
            ),
        ]),
        MockReply::text(&["refused"]),
        MockReply::tool_call(
            "d4",
            "terminal",
            json!({"command": "r=touch; $r made-unasked"}),
        ),
        MockReply::text(&["no client answer"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let results = run(&env, &mut agent, &session, answer("reject_once")).await;
    assert_eq!(results.len(), 3);
    for result in &results {
        assert!(result.contains("declined"), "{result}");
    }
    let asks = permission_asks(&agent);
    assert_eq!(asks.len(), 3, "{asks:?}");
    for ask in &asks {
        let options: Vec<&str> = ask["options"]
            .as_array()
            .expect("options")
            .iter()
            .filter_map(|o| o["kind"].as_str())
            .collect();
        assert_eq!(options, ["allow_once", "reject_once"], "{ask}");
    }
    for file in ["made-by-variable", "made-by-pipe", "made-by-eval"] {
        assert!(!env.workspace.path().join(file).exists(), "{file}");
    }
    // A client that cannot answer: the call is refused with the reason, nothing runs.
    let results = run(
        &env,
        &mut agent,
        &session,
        Box::new(|_, _| Err((-32603, "no UI to ask".into()))),
    )
    .await;
    assert!(
        results[0].contains("could not be asked") && results[0].contains("did not run"),
        "{results:?}"
    );
    assert!(!env.workspace.path().join("made-unasked").exists());
}

/// A home with a private key, a Talaria config and a workspace `.env`.
fn plant_secrets(env: &TestEnv, mode: &str) {
    let ssh = env.home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).expect("mkdir");
    std::fs::write(ssh.join("id_rsa"), format!("{KEY_TEXT}\n")).expect("key");
    env.write_config(&format!("# {CONFIG_TEXT}\nmode = \"{mode}\"\n"));
    std::fs::write(env.workspace.path().join(".env"), format!("{ENV_TEXT}\n")).expect("env");
    std::fs::write(
        env.workspace.path().join("prod.env"),
        format!("{ENV_TEXT}\n"),
    )
    .expect("env");
    std::fs::write(env.workspace.path().join("notes.txt"), "plain notes\n").expect("notes");
}

fn secret_reads(env: &TestEnv) -> MockReply {
    let home = env.home.path();
    batch(&[
        ("k1", "read_file", json!({"path": home.join(".ssh/id_rsa")})),
        (
            "k2",
            "read_file",
            json!({"path": home.join("talaria/config.toml")}),
        ),
        (
            "k3",
            "search_files",
            json!({"pattern": "PRIVATE-KEY", "path": home.join(".ssh")}),
        ),
        ("k4", "terminal", json!({"command": "cat ~/.ssh/id_rsa"})),
    ])
}

#[tokio::test]
async fn credential_reads_ask_in_every_mode_and_nothing_reaches_the_model_when_rejected() {
    for mode in ["read-only", "ask", "accept-edits", "yolo"] {
        let env = TestEnv::new(vec![]).await;
        let mut env = TestEnv {
            mock: talaria_harness::MockLlm::start(vec![
                secret_reads(&env),
                MockReply::text(&["rejected"]),
            ])
            .await
            .expect("mock"),
            ..env
        };
        plant_secrets(&env, mode);
        env.unprivileged(&[]);
        let (mut agent, session) = env.session().await;
        let results = run(&env, &mut agent, &session, answer("reject_once")).await;
        let asked: Vec<String> = permission_asks(&agent)
            .iter()
            .map(|a| {
                a["toolCall"]["toolCallId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        // In read-only mode the command is refused outright; every read asks.
        let expected: &[&str] = if mode == "read-only" {
            &["k1", "k2", "k3"]
        } else {
            &["k1", "k2", "k3", "k4"]
        };
        assert_eq!(asked, expected, "{mode}");
        for result in &results {
            assert!(
                result.contains("declined") || result.contains("read-only mode"),
                "{mode}: {result}"
            );
        }
        for request in env.mock.requests() {
            let body = request.body.to_string();
            assert!(
                !body.contains(KEY_TEXT),
                "{mode}: the key reached the model"
            );
            assert!(
                !body.contains(CONFIG_TEXT),
                "{mode}: the config reached the model"
            );
        }
    }
}

#[tokio::test]
async fn searches_skip_secrets_env_files_ask_and_workspace_reads_run_unasked() {
    let env = TestEnv::new(vec![]).await;
    let home = env.home.path().to_path_buf();
    let mut env = TestEnv {
        mock: talaria_harness::MockLlm::start(vec![
            batch(&[
                ("r1", "read_file", json!({"path": "notes.txt"})),
                (
                    "r2",
                    "search_files",
                    json!({"pattern": "secret|MATERIAL|notes"}),
                ),
            ]),
            MockReply::text(&["read"]),
            MockReply::tool_call("e1", "read_file", json!({"path": ".env"})),
            MockReply::text(&["env declined"]),
            MockReply::tool_call(
                "h1",
                "search_files",
                json!({"pattern": "MATERIAL", "path": home}),
            ),
            MockReply::text(&["home searched"]),
        ])
        .await
        .expect("mock"),
        ..env
    };
    plant_secrets(&env, "ask");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    // Workspace reads and searches run without a question; the `.env` is not searched.
    let results = run(&env, &mut agent, &session, never_asked()).await;
    assert!(results[0].contains("plain notes"), "{results:?}");
    assert!(!results[1].contains("sk-env-secret"), "{results:?}");
    assert!(results[1].contains("may hold secrets"), "{results:?}");
    // Reading the `.env` itself asks in `ask` mode.
    let results = run(&env, &mut agent, &session, answer("reject_once")).await;
    assert!(results[0].contains("declined"), "{results:?}");
    assert_eq!(permission_asks(&agent).len(), 1);
    // Searching the home folder asks (outside the workspace); allowed, it still skips the key.
    let results = run(&env, &mut agent, &session, answer("allow_once")).await;
    assert!(!results[0].contains(KEY_TEXT), "{results:?}");
    assert_eq!(permission_asks(&agent).len(), 2);
    for request in env.mock.requests() {
        let body = request.body.to_string();
        assert!(!body.contains(KEY_TEXT) && !body.contains("sk-env-secret"));
    }
}
