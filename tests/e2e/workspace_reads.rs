//! Every read Talaria makes of the workspace on the session's behalf goes through the one
//! way to the user's files: a command plants links where Talaria reads without a tool call
//! — the project's instructions (`AGENTS.md` to `~/.aws/credentials`, `CLAUDE.md` by a
//! relative link), a skill's `SKILL.md` swapped after the scan, a hard link to a credential
//! under a subfolder that a checkpoint (and so a rewind) would keep — and a file tool aimed at another
//! process's environment in `/proc`. Nothing of the secrets reaches the model.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const AWS_SECRET: &str = "aws_secret_access_key = AWS-SECRET-5150";

/// A home with an AWS credential store, in `yolo` (commands and edits unasked).
fn home_with_credentials(env: &TestEnv) {
    let aws = env.home.path().join(".aws");
    std::fs::create_dir_all(&aws).expect("aws");
    std::fs::write(
        aws.join("credentials"),
        format!("[default]\n{AWS_SECRET}\n"),
    )
    .expect("aws");
    env.write_config("mode = \"yolo\"\n");
}

fn answer_questions() -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    choose("allow_once")
}

#[tokio::test]
async fn instruction_files_a_command_made_links_are_not_read_into_the_prompt() {
    let env = TestEnv::new(Vec::new()).await;
    home_with_credentials(&env);
    env.trust_workspace();
    let credentials = env.home.path().join(".aws/credentials");
    let relative = pathdiff(env.workspace.path(), &credentials);
    env.mock.push(MockReply::tool_call(
        "plant",
        "terminal",
        json!({"command": format!(
            "ln -s {} AGENTS.md && ln -s {relative} CLAUDE.md && echo planted",
            credentials.display()
        )}),
    ));
    env.mock.push(MockReply::text(&["planted"]));
    env.mock.push(MockReply::text(&["second"]));
    let (mut agent, session) = env.session().await;
    // Naming a credential in a command asks in every mode: allowed, as a user might.
    let asked = agent
        .start_request("session/prompt", text_prompt(&session, "plant"))
        .await
        .expect("prompt");
    let answer = agent
        .drive(
            asked,
            std::time::Duration::from_secs(60),
            answer_questions(),
        )
        .await
        .expect("answer");
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    assert!(env.workspace.path().join("AGENTS.md").is_symlink());
    let second = agent
        .request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session");
    let second = second["result"]["sessionId"]
        .as_str()
        .expect("id")
        .to_string();
    let (answer, _) = prompt(&mut agent, &second, "hi").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let sent = everything_sent(&env.mock);
    assert!(
        !sent.contains("AWS-SECRET-5150"),
        "the secret reached the model"
    );
    let system = env.mock.requests().last().expect("request").body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(system.contains("AGENTS.md: not read"), "{system}");
    assert!(system.contains("CLAUDE.md: not read"), "{system}");
    assert_clean_stdout(&agent);
}

/// `to` as a path relative to `from`.
fn pathdiff(from: &std::path::Path, to: &std::path::Path) -> String {
    let from = from.canonicalize().expect("from");
    let to = to.canonicalize().expect("to");
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = from.components().count() - common;
    let mut out: Vec<String> = vec!["..".into(); ups];
    out.extend(
        to.components()
            .skip(common)
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    out.join("/")
}

const SKILL: &str = "---\nname: peek\ndescription: Look at things\n---\nLook closely.\n";

#[tokio::test]
async fn a_skill_a_background_command_swaps_for_a_link_is_never_shown() {
    let env = TestEnv::new(Vec::new()).await;
    home_with_credentials(&env);
    let skill = env.workspace.path().join(".agents/skills/peek");
    std::fs::create_dir_all(&skill).expect("skill");
    std::fs::write(skill.join("SKILL.md"), SKILL).expect("skill");
    env.trust_workspace();
    let credentials = env.home.path().join(".aws/credentials");
    // A background loop swaps the file for a link, again and again, while the agent reads.
    env.mock.push(MockReply::tool_call(
        "swap",
        "terminal",
        json!({"command": format!(
            "cd .agents/skills/peek && cp SKILL.md keep.md && (for i in $(seq 1 2000); do \
             ln -sfn {} SKILL.md; cp keep.md new.md; mv -f new.md SKILL.md; done) \
             >/dev/null 2>&1 & sleep 0.3; echo swapping",
            credentials.display()
        )}),
    ));
    let views: Vec<(String, &str, Value)> = (0..40)
        .map(|i| (format!("v{i}"), "skill_view", json!({"name": "peek"})))
        .collect();
    let borrowed: Vec<(&str, &str, Value)> = views
        .iter()
        .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
        .collect();
    env.mock.push(batch(&borrowed));
    env.mock.push(MockReply::tool_call(
        "f",
        "skill_view",
        json!({"name": "peek", "file_path": "references/../SKILL.md"}),
    ));
    env.mock.push(MockReply::text(&["done"]));
    let (mut agent, session) = env.session().await;
    let response = agent
        .start_request("session/prompt", text_prompt(&session, "look"))
        .await
        .expect("prompt");
    let answer = agent
        .drive(
            response,
            std::time::Duration::from_secs(60),
            answer_questions(),
        )
        .await
        .expect("answer");
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let sent = everything_sent(&env.mock);
    assert!(
        !sent.contains("AWS-SECRET-5150"),
        "the secret reached the model"
    );
}

#[tokio::test]
async fn a_hard_link_to_a_credential_under_a_subfolder_is_never_checkpointed() {
    if !sandbox_enforced() {
        return;
    }
    let env = TestEnv::new(Vec::new()).await;
    home_with_credentials(&env);
    let credentials = env.home.path().join(".aws/credentials");
    let deep = env.workspace.path().join("src/deep");
    std::fs::create_dir_all(&deep).expect("deep");
    // Linked before the session (a dotfiles tool, or a command of an earlier one).
    std::fs::hard_link(&credentials, deep.join("notes.txt")).expect("link");
    env.mock.push(MockReply::tool_call(
        "w",
        "write_file",
        json!({"path": "src/deep/notes.txt", "content": "new\n"}),
    ));
    env.mock.push(MockReply::text(&["written"]));
    let (mut agent, session) = env.session().await;
    let asked = agent
        .start_request("session/prompt", text_prompt(&session, "write"))
        .await
        .expect("prompt");
    let answer = agent
        .drive(
            asked,
            std::time::Duration::from_secs(60),
            answer_questions(),
        )
        .await
        .expect("answer");
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    assert!(
        std::fs::read_to_string(&credentials).is_ok_and(|t| t.contains("AWS-SECRET-5150")),
        "the credential itself is untouched"
    );
    let blobs = env.home.path().join("talaria/checkpoints/blobs");
    let mut kept = Vec::new();
    for entry in std::fs::read_dir(&blobs).into_iter().flatten().flatten() {
        kept.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    assert!(
        kept.iter().all(|blob| !blob.contains("AWS-SECRET-5150")),
        "the credential was kept in the checkpoints"
    );
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn another_processs_environment_in_proc_is_not_read() {
    let env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"yolo\"\n");
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .env("PROC_SECRET", "PROC-SECRET-6161")
        .spawn()
        .expect("sleep");
    let pid = child.id();
    env.mock.push(batch(&[
        (
            "e",
            "read_file",
            json!({"path": format!("/proc/{pid}/environ")}),
        ),
        (
            "c",
            "read_file",
            json!({"path": format!("/proc/{pid}/cmdline")}),
        ),
        (
            "s",
            "search_files",
            json!({"pattern": "PROC-SECRET", "path": format!("/proc/{pid}")}),
        ),
        ("m", "read_file", json!({"path": "/proc/meminfo"})),
    ]));
    env.mock.push(MockReply::text(&["read"]));
    let (mut agent, session) = env.session().await;
    let response = agent
        .start_request("session/prompt", text_prompt(&session, "read"))
        .await
        .expect("prompt");
    let answer = agent
        .drive(
            response,
            std::time::Duration::from_secs(60),
            answer_questions(),
        )
        .await
        .expect("answer");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let results = tool_results(&env.mock, 1);
    let sent = everything_sent(&env.mock);
    assert!(!sent.contains("PROC-SECRET-6161"), "{results:?}");
    assert!(
        !sent.contains("sleep\\u0000") && !sent.contains("sleep\u{0}60"),
        "{results:?}"
    );
    assert!(
        sent.contains("MemTotal"),
        "the machine's own files are read: {results:?}"
    );
    assert!(
        results
            .first()
            .is_some_and(|r| r.contains("hidden by the sandbox")),
        "another process's environment is refused as hidden, not read: {results:?}"
    );
}
