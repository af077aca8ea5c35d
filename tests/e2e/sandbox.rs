//! The OS sandbox over stdio, against the real kernel: in `yolo`, commands the parser lets
//! through still cannot write outside the workspace, read keys or Talaria's settings, or see
//! the provider's key; a shell fed text through `process write` is confined too; Talaria's own
//! settings are never edited, directly or through a link, in any mode; a denial in `ask`
//! offers to run that one command outside the sandbox, once.
//!
//! The agent runs as an unprivileged user when the tests run as root (as in CI), so what it
//! may not do is stopped by the sandbox and not by missing rights. These tests fail where the
//! machine offers no sandbox, unless `TALARIA_ALLOW_NO_SANDBOX=1` says that is expected.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const KEY_TEXT: &str = "SANDBOX-TEST-PRIVATE-KEY-7781";
const AWS_TEXT: &str = "SANDBOX-TEST-AWS-SECRET-9043";
const CONFIG_MARKER: &str = "CONFIG-MARKER-5521";

type Answer = Box<dyn FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)>>;

fn never_asked() -> Answer {
    Box::new(|method, params| panic!("the agent asked the client for {method}: {params}"))
}

fn select(option: &str) -> Value {
    json!({"outcome": {"outcome": "selected", "optionId": option}})
}

/// Runs one prompt to its end; returns the response.
async fn run(agent: &mut talaria_harness::AgentProcess, session: &str, answer: Answer) -> Value {
    let id = agent
        .start_request("session/prompt", text_prompt(session, "go"))
        .await
        .expect("prompt");
    let response = agent.drive(id, WAIT, answer).await.expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    response
}

/// An outside directory the agent's user could write to, were it not for the sandbox.
fn outside_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("outside dir")
}

#[tokio::test]
async fn in_yolo_commands_the_parser_allows_still_cannot_write_outside_the_workspace() {
    if !sandbox_enforced() {
        return;
    }
    let outside = outside_dir();
    let target = outside.path().join("made-by-agent");
    let sibling = format!("sibling-made-by-agent-{}", std::process::id());
    let mut env = TestEnv::new(vec![
        batch(&[
            (
                "w1",
                "terminal",
                json!({"command": format!("touch {}", target.display())}),
            ),
            (
                "w2",
                "terminal",
                json!({"command": "echo planted > ~/planted.txt"}),
            ),
            (
                "w3",
                "terminal",
                json!({"command": format!("mkdir ../{sibling}")}),
            ),
            (
                "w4",
                "terminal",
                json!({"command": "touch inside.txt && echo made-inside"}),
            ),
            (
                "w5",
                "terminal",
                json!({"command": "t=$(mktemp) && echo scratch > \"$t\" && cat \"$t\""}),
            ),
        ]),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    run(&mut agent, &session, never_asked()).await;
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 5, "{results:#?}");
    assert!(
        !results[4].contains("TALARIA_SANDBOX_SPEC"),
        "the helper's environment: {}",
        results[4]
    );
    for result in &results[..3] {
        assert!(
            result.contains("The OS sandbox refused writing /tmp"),
            "{result}"
        );
    }
    assert!(
        results[0].contains(&target.display().to_string()),
        "{}",
        results[0]
    );
    assert!(!target.exists());
    assert!(!env.home.path().join("planted.txt").exists());
    assert!(!env.workspace.path().join("..").join(&sibling).exists());
    // Inside the workspace and the private temporary directory, commands work as always.
    assert!(results[3].contains("made-inside"), "{}", results[3]);
    assert!(env.workspace.path().join("inside.txt").exists());
    assert!(results[4].contains("scratch"), "{}", results[4]);
}

#[tokio::test]
async fn in_yolo_keys_and_settings_read_by_dynamic_commands_never_reach_the_model() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![
        batch(&[
            (
                "r1",
                "terminal",
                json!({"command": "for f in ~/.[s]sh/*; do cat \"$f\"; done"}),
            ),
            ("r2", "terminal", json!({"command": "awk 1 ~/.a?s/cred*"})),
            (
                "r3",
                "terminal",
                json!({"command": "grep -r SANDBOX-TEST ~ 2>&1 | head -n 20"}),
            ),
            (
                "r4",
                "terminal",
                json!({"command": "d=$(ls -d ~/tal*); tail -n 5 \"$d/config.toml\""}),
            ),
            (
                "r5",
                "terminal",
                json!({"command": "cat /proc/$PPID/environ | tr '\\0' '\\n'"}),
            ),
        ]),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config(&format!("mode = \"yolo\"\n# {CONFIG_MARKER}\n"));
    let home = env.home.path();
    for (dir, file, text) in [
        (".ssh", "id_ed25519", KEY_TEXT),
        (".aws", "credentials", AWS_TEXT),
    ] {
        std::fs::create_dir_all(home.join(dir)).expect("mkdir");
        std::fs::write(home.join(dir).join(file), text).expect("secret");
    }
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    run(&mut agent, &session, never_asked()).await;
    let sent = everything_sent(&env.mock);
    for secret in [KEY_TEXT, AWS_TEXT, CONFIG_MARKER, "test-key"] {
        assert!(!sent.contains(secret), "{secret} reached the model");
    }
    let results = tool_results(&env.mock, 1);
    assert_eq!(results.len(), 5, "{results:#?}");
    assert!(
        !results[4].contains("TALARIA_SANDBOX_SPEC"),
        "the helper's environment: {}",
        results[4]
    );
    for result in &results[..4] {
        assert!(
            result.contains("Permission denied") && result.contains("hidden from commands"),
            "{result}"
        );
    }
}

#[tokio::test]
async fn commands_start_with_a_clean_environment() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![
        MockReply::tool_call(
            "e",
            "terminal",
            json!({"command": "env | sort; echo PARENT:; tr '\\0' ' ' < /proc/$PPID/cmdline"}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.extra_env.extend([
        ("DEPLOY_TOKEN".to_string(), "tok-secret-1".to_string()),
        ("DB_PASSWORD".to_string(), "pw-secret-2".to_string()),
        ("PLAIN_SETTING".to_string(), "visible-1".to_string()),
        ("KEPT_TOKEN".to_string(), "kept-3".to_string()),
    ]);
    env.write_config(
        "mode = \"yolo\"\n[shell_environment]\nkeep = [\"KEPT_TOKEN\"]\n\
         set = { CONFIG_SET = \"from-config\" }\n",
    );
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    run(&mut agent, &session, never_asked()).await;
    let listing = &tool_results(&env.mock, 1)[0];
    for hidden in [
        "test-key",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "TALARIA_HOME",
        "tok-secret-1",
        "pw-secret-2",
        "TALARIA_SANDBOX_SPEC",
    ] {
        assert!(!listing.contains(hidden), "{hidden} in:\n{listing}");
    }
    // The helper above the command (the supervisor, or the namespace's init) carries no
    // policy on its command line, which every local user can read.
    let parent = listing.split("PARENT:").nth(1).unwrap_or_default();
    assert!(parent.contains("__sandbox"), "{listing}");
    for plumbing in ["writable", "hidden", "private_tmp"] {
        assert!(!parent.contains(plumbing), "{plumbing} in {parent}");
    }
    for shown in [
        "PLAIN_SETTING=visible-1",
        "KEPT_TOKEN=kept-3",
        "CONFIG_SET=from-config",
        "TMPDIR=",
    ] {
        assert!(listing.contains(shown), "{shown} missing in:\n{listing}");
    }
}

#[tokio::test]
async fn a_background_shell_fed_text_cannot_write_outside_either() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(vec![
        MockReply::tool_call(
            "b1",
            "terminal",
            json!({"command": "bash", "background": true}),
        ),
        MockReply::tool_call(
            "b2",
            "process",
            json!({"action": "write", "id": "proc_1", "data": "touch $HOME/typed-escape; echo typed-$?; exit\n"}),
        ),
        MockReply::tool_call(
            "b3",
            "process",
            json!({"action": "wait", "id": "proc_1", "timeout": 15}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    run(&mut agent, &session, never_asked()).await;
    let waited = tool_results(&env.mock, 3).pop().unwrap_or_default();
    assert!(waited.contains("typed-1"), "{waited}");
    assert!(!env.home.path().join("typed-escape").exists());
}

#[tokio::test]
async fn talarias_own_settings_are_never_edited_in_any_mode() {
    if !sandbox_enforced() {
        return;
    }
    for mode in ["ask", "accept-edits", "yolo"] {
        let mut env = TestEnv::new(vec![
            batch(&[
                (
                    "c1",
                    "write_file",
                    json!({"path": "~/talaria/config.toml", "content": "mode = \"yolo\"\n"}),
                ),
                (
                    "c2",
                    "patch",
                    json!({"path": "settings-link", "old_string": "mode", "new_string": "ask_for_credential_reads = false\nmode"}),
                ),
                (
                    "c3",
                    "write_file",
                    json!({"path": "rules-link", "content": "{}"}),
                ),
            ]),
            MockReply::text(&["done"]),
        ])
        .await;
        let talaria_home = env.home.path().join("talaria");
        let config = format!("mode = \"{mode}\"\n# {CONFIG_MARKER}\n");
        env.write_config(&config);
        std::fs::write(talaria_home.join("permissions.json"), "{\"projects\": {}}").expect("rules");
        let ws = env.workspace.path();
        std::os::unix::fs::symlink(talaria_home.join("config.toml"), ws.join("settings-link"))
            .expect("link");
        std::os::unix::fs::symlink(talaria_home.join("permissions.json"), ws.join("rules-link"))
            .expect("link");
        env.unprivileged(&[]);
        let (mut agent, session) = env.session().await;
        run(&mut agent, &session, never_asked()).await;
        let results = tool_results(&env.mock, 1);
        assert_eq!(results.len(), 3, "{mode}: {results:#?}");
        for result in &results {
            assert!(
                result.contains("Refused by the safety floor") && result.contains("Talaria's own"),
                "{mode}: {result}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(talaria_home.join("config.toml")).expect("config"),
            config,
            "{mode}"
        );
        assert!(
            !everything_sent(&env.mock).contains(CONFIG_MARKER),
            "{mode}"
        );
        let shown: String = agent.transcript.iter().map(Value::to_string).collect();
        assert!(
            !shown.contains(CONFIG_MARKER),
            "{mode}: the client saw the config"
        );
    }
}

#[tokio::test]
async fn a_denial_in_ask_offers_one_run_outside_the_sandbox_and_never_remembers_it() {
    if !sandbox_enforced() {
        return;
    }
    let outside = outside_dir();
    let target = outside.path().join("escalated");
    let command = format!("touch {}", target.display());
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("e1", "terminal", json!({"command": command})),
        MockReply::text(&["first"]),
        MockReply::tool_call("e2", "terminal", json!({"command": command})),
        MockReply::text(&["second"]),
    ])
    .await;
    env.write_config("mode = \"ask\"\n");
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    // First: allowed, refused by the sandbox, then let out once by the user.
    let mut asked = Vec::new();
    let mut answers = vec![select("allow_once"), select("run_unsandboxed_once")].into_iter();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = log.clone();
    run(
        &mut agent,
        &session,
        Box::new(move |method, params| {
            assert_eq!(method, "session/request_permission");
            seen.lock().expect("log").push(params.clone());
            Ok(answers.next())
        }),
    )
    .await;
    asked.extend(log.lock().expect("log").drain(..));
    assert_eq!(asked.len(), 2, "{asked:#?}");
    let escalation = &asked[1];
    let options: Vec<&str> = escalation["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert_eq!(options, ["run_unsandboxed_once", "reject_once"]);
    assert_eq!(escalation["toolCall"]["toolCallId"], "e1");
    assert!(target.exists(), "the one escalated run created the file");
    std::fs::remove_file(&target).expect("remove");
    // Second, identical: asked again, and declined this time.
    let mut answers = vec![select("allow_once"), select("reject_once")].into_iter();
    let seen = log.clone();
    run(
        &mut agent,
        &session,
        Box::new(move |method, params| {
            assert_eq!(method, "session/request_permission");
            seen.lock().expect("log").push(params.clone());
            Ok(answers.next())
        }),
    )
    .await;
    let asked_again: Vec<Value> = log.lock().expect("log").drain(..).collect();
    assert_eq!(asked_again.len(), 2, "{asked_again:#?}");
    assert!(asked_again[1].to_string().contains("run_unsandboxed_once"));
    assert!(!target.exists());
    let result = tool_results(&env.mock, 3).pop().unwrap_or_default();
    assert!(
        result.contains("The OS sandbox refused writing"),
        "{result}"
    );
}

#[tokio::test]
async fn file_tools_judge_the_real_file_behind_links_and_hard_links() {
    let mut env = TestEnv::new(vec![
        batch(&[
            ("l1", "read_file", json!({"path": "link-to-key"})),
            ("l2", "read_file", json!({"path": "notes-copy.txt"})),
            ("l3", "search_files", json!({"pattern": "SANDBOX-TEST"})),
            ("l4", "read_file", json!({"path": ".env-production"})),
        ]),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"ask\"\n");
    let ssh = env.home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).expect("mkdir");
    std::fs::write(ssh.join("id_ed25519"), KEY_TEXT).expect("key");
    let ws = env.workspace.path();
    std::os::unix::fs::symlink(ssh.join("id_ed25519"), ws.join("link-to-key")).expect("link");
    // A hard link under an innocent name (the key's own folder is on the same file system).
    std::fs::write(env.home.path().join("deploy-key"), AWS_TEXT).expect("key");
    std::fs::hard_link(
        env.home.path().join("deploy-key"),
        ws.join("notes-copy.txt"),
    )
    .expect("hard link");
    std::fs::write(ws.join(".env-production"), "API_TOKEN=SANDBOX-TEST-ENV").expect("env");
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    run(
        &mut agent,
        &session,
        Box::new(move |method, params| {
            assert_eq!(method, "session/request_permission");
            seen.lock()
                .expect("asked")
                .push(params["toolCall"]["toolCallId"].clone());
            Ok(Some(select("reject_once")))
        }),
    )
    .await;
    let asked: Vec<Value> = asked.lock().expect("asked").clone();
    assert_eq!(asked, [json!("l1"), json!("l2"), json!("l4")]);
    let sent = everything_sent(&env.mock);
    for secret in [KEY_TEXT, AWS_TEXT, "SANDBOX-TEST-ENV"] {
        assert!(!sent.contains(secret), "{secret} reached the model");
    }
}

/// Answers every question: a run let out of the sandbox's walls when offered, else allowed
/// once; each question's options are kept in `asked`.
fn let_out_when_offered(asked: std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>) -> Answer {
    Box::new(move |method, params| {
        assert_eq!(method, "session/request_permission");
        let options: Vec<String> = params["options"]
            .as_array()
            .expect("options")
            .iter()
            .filter_map(|o| o["optionId"].as_str().map(String::from))
            .collect();
        let choice = if options.iter().any(|o| o == "run_unsandboxed_once") {
            "run_unsandboxed_once"
        } else {
            "allow_once"
        };
        asked.lock().expect("asked").push(options);
        Ok(Some(select(choice)))
    })
}

/// One turn that runs each of `commands` as a terminal call (ids `<prefix><i>`), then ends.
fn one_turn_of_commands(prefix: &str, commands: &[String]) -> Vec<MockReply> {
    let mut script: Vec<MockReply> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            MockReply::tool_call(&format!("{prefix}{i}"), "terminal", json!({"command": c}))
        })
        .collect();
    script.push(MockReply::text(&["done"]));
    script
}

/// Whether any question offered a run outside the sandbox.
fn offered_a_run_outside(asked: &std::sync::Mutex<Vec<Vec<String>>>) -> bool {
    asked
        .lock()
        .expect("asked")
        .iter()
        .any(|options| options.iter().any(|id| id == "run_unsandboxed_once"))
}

#[tokio::test]
async fn a_printed_refusal_never_offers_a_run_outside_the_sandbox() {
    if !sandbox_enforced() {
        return;
    }
    let outside = outside_dir();
    let at = |name: &str| outside.path().join(name).display().to_string();
    // Each prints what a refused program would, and fails; none was refused anything.
    let tricks = [
        format!(
            "echo \"cp: cannot create regular file '{}': Permission denied\"; exit 1",
            at("a")
        ),
        format!(
            "echo \"touch: cannot touch '{}': Read-only file system\" >&2; exit 1",
            at("b")
        ),
        format!(
            "printf 'mkdir: cannot create directory %s: Operation not permitted\\n' \"'{}'\"; exit 1",
            at("c")
        ),
        "echo 'curl: (6) Could not resolve host: example.com'; exit 6".to_string(),
        format!(
            "touch inside.txt; echo \"bash: {}: Permission denied\"; exit 1",
            at("d")
        ),
        format!(
            "python3 -c \"import sys; sys.exit('PermissionError: [Errno 13] Permission denied: {}')\"",
            at("e")
        ),
    ];
    let mut env = TestEnv::new(one_turn_of_commands("p", &tricks)).await;
    env.write_config("mode = \"ask\"\n");
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    run(&mut agent, &session, let_out_when_offered(asked.clone())).await;
    assert!(
        !offered_a_run_outside(&asked),
        "{:?}",
        asked.lock().expect("asked")
    );
    for name in ["a", "b", "c", "d", "e"] {
        assert!(!outside.path().join(name).exists());
    }
}

#[tokio::test]
async fn a_run_let_out_of_the_walls_still_cannot_read_a_key_and_a_refused_key_offers_nothing() {
    if !sandbox_enforced() {
        return;
    }
    let outside = outside_dir();
    let target = outside.path().join("lifted");
    // A real refused write, offered; the run let out then tries for the key too.
    let trick = format!("touch {}; cat ~/.ssh/id_ed25519; exit 1", target.display());
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("t1", "terminal", json!({"command": trick})),
        MockReply::text(&["first"]),
        MockReply::tool_call(
            "t2",
            "terminal",
            json!({"command": "cat ~/.ssh/id_ed25519"}),
        ),
        MockReply::text(&["second"]),
    ])
    .await;
    let ssh = env.home.path().join(".ssh");
    std::fs::create_dir_all(&ssh).expect("ssh dir");
    std::fs::write(ssh.join("id_ed25519"), KEY_TEXT).expect("key");
    env.write_config("mode = \"ask\"\n");
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    run(&mut agent, &session, let_out_when_offered(asked.clone())).await;
    assert!(
        offered_a_run_outside(&asked),
        "the refused write was offered: {:?}",
        asked.lock().expect("asked")
    );
    assert!(
        target.exists(),
        "the run let out wrote outside the workspace"
    );
    asked.lock().expect("asked").clear();
    run(&mut agent, &session, let_out_when_offered(asked.clone())).await;
    assert!(
        !offered_a_run_outside(&asked),
        "a hidden key's refusal offers no run outside: {:?}",
        asked.lock().expect("asked")
    );
    assert!(
        !everything_sent(&env.mock).contains(KEY_TEXT),
        "the key reached the model"
    );
    let result = tool_results(&env.mock, 3).pop().unwrap_or_default();
    assert!(result.contains("hidden"), "{result}");
}

#[tokio::test]
async fn every_kind_of_refused_write_and_the_network_offer_a_run_outside() {
    if !sandbox_enforced() {
        return;
    }
    let outside = outside_dir();
    std::fs::write(outside.path().join("existing"), "keep").expect("existing");
    let out = outside.path().display().to_string();
    let commands = [
        format!("echo x > {out}/redirected"),
        format!("mkdir {out}/folder"),
        format!("rm -f {out}/existing"),
        format!("ln -s /tmp {out}/link"),
        format!("touch inside.txt && mv inside.txt {out}/moved"),
        format!("/usr/bin/python3 -c \"open('{out}/py', 'w')\""),
        format!("cd {out} && touch relative"),
        "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9), 2)\""
            .to_string(),
    ];
    let mut env = TestEnv::new(one_turn_of_commands("w", &commands)).await;
    env.write_config("mode = \"ask\"\n[sandbox]\nnetwork = false\n");
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    let offered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = offered.clone();
    run(
        &mut agent,
        &session,
        Box::new(move |method, params| {
            assert_eq!(method, "session/request_permission");
            let escalation = params.to_string().contains("run_unsandboxed_once");
            if escalation {
                let id = params["toolCall"]["toolCallId"]
                    .as_str()
                    .unwrap_or_default();
                seen.lock().expect("offered").push(id.to_string());
                return Ok(Some(select("reject_once")));
            }
            Ok(Some(select("allow_once")))
        }),
    )
    .await;
    let offered = offered.lock().expect("offered").clone();
    let expected: Vec<String> = (0..commands.len()).map(|i| format!("w{i}")).collect();
    assert_eq!(offered, expected);
    assert!(outside.path().join("existing").exists());
    let results = tool_results(&env.mock, commands.len());
    assert!(
        results.iter().any(|r| r.contains("the network is off")),
        "{results:#?}"
    );
}
