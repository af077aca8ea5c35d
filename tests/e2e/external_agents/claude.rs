//! A real peer: `@agentclientprotocol/claude-agent-acp` from npm (pinned in
//! `tests/e2e/peers/claude-agent-acp`, installed with `npm ci` into the test target's
//! folder), which starts Claude Code's own binary (the npm platform package), pointed at the
//! scripted mock's Anthropic Messages API (`ANTHROPIC_BASE_URL`). It runs its own tools
//! (this version serves no file tool through its client's `fs/*`): its write lands on disk
//! directly, and the `delegate_task` call's checkpoint lets `/rewind files` take it back.
//! `TALARIA_E2E_NO_NPM=1` leaves it out on a machine without npm or its registry.

use std::path::{Path, PathBuf};

use serde_json::json;
use talaria_harness::{MockReply, MockToolCall};

use super::{delegating_to, delegation_result};
use crate::support::*;

/// The adapter's entry script, installed from the pinned lock when it is not yet (or an
/// older lock was); `None` when the run leaves npm out.
async fn claude_agent_acp() -> Option<PathBuf> {
    if std::env::var_os("TALARIA_E2E_NO_NPM").is_some() {
        eprintln!("TALARIA_E2E_NO_NPM: the real claude-agent-acp is left out");
        return None;
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/peers/claude-agent-acp");
    let place = Path::new(env!("CARGO_TARGET_TMPDIR")).join("peers/claude-agent-acp");
    let entry = place.join("node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js");
    let installed = tokio::task::spawn_blocking(move || {
        let lock = std::fs::read(source.join("package-lock.json")).expect("the pinned lock");
        if entry.exists() && std::fs::read(place.join("package-lock.json")).ok() == Some(lock) {
            return entry;
        }
        std::fs::create_dir_all(&place).expect("its folder");
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(source.join(file), place.join(file)).expect("copied");
        }
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&place)
            .status()
            .expect("npm runs (TALARIA_E2E_NO_NPM=1 leaves this test out)");
        assert!(
            status.success(),
            "npm ci of the pinned claude-agent-acp: {status}"
        );
        entry
    });
    Some(installed.await.expect("installed"))
}

/// Where `program` is on the PATH.
fn on_path(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{program} is on the PATH"))
}

#[tokio::test]
async fn the_real_claude_agent_acp_takes_a_task_its_answer_and_write_come_back() {
    let Some(entry) = claude_agent_acp().await else {
        return;
    };
    let env = TestEnv::new(delegating_to("claude")).await;
    let hello = env.workspace.path().join("hello.txt");
    let write = json!({"file_path": hello, "content": "hello from claude\n"});
    env.mock.script_for_model(
        "claude-mock",
        vec![
            MockReply::ToolCalls {
                calls: vec![MockToolCall {
                    id: "toolu_w1".into(),
                    name: "Write".into(),
                    arguments: write.to_string(),
                }],
                text: None,
                fragment_chars: None,
                usage: None,
                delay_ms: 0,
            },
            MockReply::text(&["I wrote hello.txt."]),
            MockReply::text(&["(a spare answer)"]),
            MockReply::text(&["(a spare answer)"]),
        ],
    );
    // Its side calls (the session's title) on the small model.
    env.mock.script_for_model(
        "claude-mock-small",
        vec![
            MockReply::text(&["Hello file"]),
            MockReply::text(&["(spare)"]),
        ],
    );
    let claude_home = env.home.path().join("claude-home");
    std::fs::create_dir_all(claude_home.join(".claude")).expect("its home");
    std::fs::write(
        claude_home.join(".claude/settings.json"),
        r#"{"permissions": {"defaultMode": "acceptEdits"}}"#,
    )
    .expect("its settings");
    let api = env.mock.base_url().trim_end_matches("/v1").to_string();
    env.write_config(&format!(
        "[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [agents.claude]\ncommand = \"{}\"\nargs = [\"{}\"]\ntools = \"own\"\n\
         env = {{ HOME = \"{}\", ANTHROPIC_BASE_URL = \"{api}\", ANTHROPIC_API_KEY = \"sk-ant-test\", \
         ANTHROPIC_MODEL = \"claude-mock\", ANTHROPIC_SMALL_FAST_MODEL = \"claude-mock-small\", \
         ANTHROPIC_DEFAULT_HAIKU_MODEL = \"claude-mock-small\", \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
        on_path("node").display(),
        entry.display(),
        claude_home.display()
    ));
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hand it over").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let result = delegation_result(&env);
    assert!(
        result.contains("Report from claude:\nI wrote hello.txt."),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(&hello).expect("claude wrote it"),
        "hello from claude\n"
    );
    let asked = env.mock.requests();
    assert!(
        asked
            .iter()
            .any(|r| r.path.ends_with("/messages") && r.body["model"] == "claude-mock"),
        "claude asked the mock's Anthropic API"
    );
    let (rewound, _) = prompt(&mut agent, &session, "/rewind files").await;
    assert_eq!(stop_reason(&rewound), "end_turn", "{rewound}");
    assert!(!hello.exists(), "the rewind took claude's write back");
}
