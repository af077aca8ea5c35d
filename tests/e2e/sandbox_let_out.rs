//! A run the user lets out of the sandbox's walls ("Run once outside the sandbox") writes
//! where the user can — new files in the home, in `~/.cache` and in `~/.config`, beside the
//! credential stores there — and still reads no hidden place. Without the namespaces layer
//! Landlock cannot hide a place in a folder a command may add to, so there the run cannot
//! add to a folder that holds one (said in docs/security.md); that is what this suite then
//! checks. And the clean environment: secrets known by their names and by their shapes never
//! reach a command.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

fn select(option: &str) -> Value {
    json!({"outcome": {"outcome": "selected", "optionId": option}})
}

fn namespaces_off() -> bool {
    std::env::var("TALARIA_SANDBOX_NAMESPACES").as_deref() == Ok("off")
}

/// The new places the let-out run makes, beside stores that hold secrets.
const MADE: [&str; 5] = [
    "newfile",
    ".cache/newtool/state",
    ".config/newtool/settings.toml",
    ".local/share/newtool/data",
    ".newdotfile",
];

#[tokio::test]
async fn a_run_let_out_makes_files_in_the_home_cache_and_config_and_reads_no_secret() {
    if !sandbox_enforced() {
        return;
    }
    let outside = tempfile::tempdir().expect("outside");
    let writes: Vec<String> = MADE
        .iter()
        .map(|place| format!("mkdir -p \"$(dirname ~/{place})\" && echo made > ~/{place}"))
        .collect();
    // A refused write outside the workspace offers the run outside; the same command then
    // makes the new places and tries the secrets beside them.
    let command = format!(
        "touch {}/lifted; {}; cat ~/.git-credentials ~/.ssh/id_ed25519 \
         ~/.cache/huggingface/token ~/.config/gh/hosts.yml ~/.local/share/keyrings/login.keyring \
         ~/talaria/config.toml 2>&1; [ -e {}/lifted ]",
        outside.path().display(),
        writes.join("; "),
        outside.path().display()
    );
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("l1", "terminal", json!({"command": command})),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"ask\"\n# SECRET-talaria-config\n");
    let home = env.home.path().to_path_buf();
    for (place, text) in [
        (".git-credentials", "https://dev:SECRET-git@github.com\n"),
        (".ssh/id_ed25519", "SECRET-key\n"),
        (".cache/huggingface/token", "SECRET-hf\n"),
        (".cache/pip/http/x", "cached\n"),
        (".config/gh/hosts.yml", "oauth_token: SECRET-gh\n"),
        (".config/other/settings", "plain\n"),
        (".local/share/keyrings/login.keyring", "SECRET-keyring\n"),
    ] {
        let path = home.join(place);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    env.unprivileged(&[outside.path()]);
    let (mut agent, session) = env.session().await;
    let offered = std::sync::Arc::new(std::sync::Mutex::new(false));
    let seen = offered.clone();
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, move |method, params| {
            assert_eq!(method, "session/request_permission");
            if params.to_string().contains("run_unsandboxed_once") {
                *seen.lock().expect("offered") = true;
                return Ok(Some(select("run_unsandboxed_once")));
            }
            Ok(Some(select("allow_once")))
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(
        *offered.lock().expect("offered"),
        "the refused write offered a run outside"
    );
    assert!(
        outside.path().join("lifted").exists(),
        "the run let out wrote outside"
    );
    let sent = everything_sent(&env.mock);
    assert!(!sent.contains("SECRET-"), "a secret reached the model");
    for place in MADE {
        let made = home.join(place).exists();
        if namespaces_off() {
            // Each of these folders holds a hidden place: Landlock alone cannot let a command
            // add to it and still hide it.
            assert!(!made, "~/{place}");
        } else {
            assert!(made, "the run let out made ~/{place}");
        }
    }
}

#[tokio::test]
async fn secrets_by_name_or_by_shape_never_reach_a_command() {
    if !sandbox_enforced() {
        return;
    }
    let secrets = [
        ("BW_SESSION", "bw-unlocked-SECRET-1"),
        ("OP_SESSION_my", "op-SECRET-2"),
        ("MYSQL_PWD", "SECRET-3"),
        ("SSHPASS", "SECRET-4"),
        ("BORG_PASSPHRASE", "SECRET-5"),
        ("DEPLOY_HOOK", "ghp_SECRET6R2d2C3poR2d2C3poR2d2C3poR2d2"),
        ("UPSTREAM", "https://hooks.example.com/x?token=SECRET-7"),
        (
            "SESSION_BLOB",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJTRUNSRVQtOCJ9.SECRET8xwRJSMeKKF2QT4fwpMeJf36P",
        ),
        (
            "SIGNING",
            "-----BEGIN PRIVATE KEY-----\nSECRET-9\n-----END PRIVATE KEY-----",
        ),
        ("STORAGE", "AccountName=x;AccountKey=SECRET-10==;"),
        ("CI_RANDOM", "q8Xz3LmN0vB7cR2tY5wE9uI1oP4aS6dFSECRET11"),
    ];
    let mut env = TestEnv::new(vec![
        MockReply::tool_call("e1", "terminal", json!({"command": "env; echo env-done"})),
        MockReply::text(&["done"]),
    ])
    .await;
    env.write_config("mode = \"yolo\"\n");
    for (name, value) in secrets {
        env.extra_env.push((name.into(), value.into()));
    }
    for (name, value) in [
        ("GIT_COMMIT", "3a7bd3e2360a3d29eea436fcfb7e44c735d117c4"),
        ("BUILD_ID", "550e8400-e29b-41d4-a716-446655440000"),
        ("PLAIN_SETTING", "hello-plain"),
    ] {
        env.extra_env.push((name.into(), value.into()));
    }
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let output = tool_results(&env.mock, 1).pop().unwrap_or_default();
    assert!(output.contains("env-done"), "{output}");
    for (name, _) in secrets {
        assert!(!output.contains(&format!("{name}=")), "{name}: {output}");
    }
    assert!(!output.contains("SECRET"), "{output}");
    for kept in [
        "GIT_COMMIT=3a7bd3e2360a3d29eea436fcfb7e44c735d117c4",
        "BUILD_ID=550e8400-e29b-41d4-a716-446655440000",
        "PLAIN_SETTING=hello-plain",
    ] {
        assert!(output.contains(kept), "{kept}: {output}");
    }
}
