//! Fifth red team of issue 68's hooks and workspace trust, against the fixes of the fourth: a
//! confined `PreToolUse` hook that fails puts its call to the user (in yolo mode, against
//! another hook's allow, in a subagent, with a client that cannot answer), a guard's own
//! exit 127 blocks, a confined `UserPromptSubmit` guard that fails; `trust/apply` on the
//! folder as shown (`trust_repo` after the repository root moved, a folder replaced, a skill
//! folder past the byte budget, a folder mounted over, one that appeared after the session);
//! the typed text of a `process` write and another ACP agent's write under a failing confined
//! guard; an unknown key in a hook entry (the user's, a project's,
//! Claude Code's own `statusMessage`). Each ignored test fails on a hole of the current code.

use serde_json::{Value, json};
use talaria_harness::{AgentProcess, MockReply};

use crate::red_three::{id_of, new_session_in};
use crate::red_trust::executable;
use crate::support::*;
use crate::workspace_trust::{agent_with, system_prompt_seen};

/// One `write_file` of `a.txt`, then done.
fn one_write() -> Vec<MockReply> {
    vec![
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "a.txt", "content": "draft\n"}),
        ),
        MockReply::text(&["done"]),
    ]
}

/// A session in the workspace that sees one `write_file`, every permission question
/// answered `reject_once`: whether `a.txt` was written, and what the model was told.
async fn write_rejecting(env: &TestEnv) -> (bool, String) {
    let mut agent = agent_with(env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let response = prompt_choosing(&mut agent, &id_of(&created), "write it", "reject_once").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_clean_stdout(&agent);
    let written = env.workspace.path().join("a.txt").exists();
    (written, tool_results(&env.mock, 1).join("\n"))
}

/// What a hook says to allow a call without a question.
const ALLOW_JSON: &str =
    r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#;

// ---------------------------------------------------------------------------------------
// A confined PreToolUse hook that fails: the call is put to the user, whatever the mode.

/// A trusted project's own guard (always confined) that fails (exit 1) in yolo mode, where
/// nothing is asked otherwise: the write is put to the user, who declines it.
#[tokio::test]
async fn red_five_a_projects_failing_guard_asks_even_in_yolo() {
    let env = TestEnv::new(one_write()).await;
    env.write_config("mode = \"yolo\"\n");
    let dir = env.workspace.path().join(".talaria");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("config.toml"),
        "[[hooks.PreToolUse]]\nmatcher = \"Write\"\ncommand = \"echo broke >&2; exit 1\"\n",
    )
    .expect("project config");
    env.trust_workspace();
    let (written, told) = write_rejecting(&env).await;
    assert!(
        !written,
        "the failing project guard let the write run unasked: {told}"
    );
    assert!(told.contains("declined"), "not put to the user: {told}");
}

/// The user's `sandbox = true` guard that fails, then another hook that allows the call (in
/// the default mode, where a write asks and an allow would spare the question): the allow
/// does not outweigh the failure's question.
#[tokio::test]
async fn red_five_a_confined_failure_is_not_outweighed_by_another_hooks_allow() {
    let env = TestEnv::new(one_write()).await;
    let bin = env.home.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let allow = executable(
        &bin.join("allow.sh"),
        &format!("#!/bin/sh\ncat >/dev/null\necho '{ALLOW_JSON}'\n"),
    );
    env.write_config(&format!(
        "[[hooks.PreToolUse]]\nmatcher = \"Write\"\nsandbox = true\ncommand = \"exit 1\"\n\
         [[hooks.PreToolUse]]\nmatcher = \"Write\"\ncommand = \"{allow}\"\n"
    ));
    env.trust_workspace();
    let (written, told) = write_rejecting(&env).await;
    assert!(
        !written,
        "the other hook's allow spared the question: {told}"
    );
    assert!(told.contains("declined"), "not put to the user: {told}");
}

/// The same confined failure with a client that errs on every permission question: the call
/// does not run (the question could not be asked).
#[tokio::test]
async fn red_five_a_confined_failure_with_a_client_that_cannot_answer_does_not_run() {
    let env = TestEnv::new(one_write()).await;
    env.write_config(
        "mode = \"yolo\"\n[[hooks.PreToolUse]]\nmatcher = \"Write\"\nsandbox = true\n\
         command = \"exit 1\"\n",
    );
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&id_of(&created), "write it"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, |method, _| {
            Err((-32603, format!("{method}: this client cannot answer")))
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let told = tool_results(&env.mock, 1).join("\n");
    assert!(
        !env.workspace.path().join("a.txt").exists(),
        "the write ran although nobody could be asked: {told}"
    );
    assert_clean_stdout(&agent);
}

/// A subagent's write under the user's failing `sandbox = true` guard, the parent in yolo
/// mode: the child's call is put to the user on the parent's session, who declines it.
#[tokio::test]
async fn red_five_a_subagents_call_under_a_failing_confined_guard_asks() {
    let env = TestEnv::new(delegating_to_a_subagent("write a.txt")).await;
    env.write_config(&format!(
        "mode = \"yolo\"\n[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [auxiliary.subagent]\nmodel = \"{CHILD_MODEL}\"\n\
         [[hooks.PreToolUse]]\nmatcher = \"Write\"\nsandbox = true\ncommand = \"exit 1\"\n"
    ));
    env.mock.script_for_model(CHILD_MODEL, one_write());
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let response = prompt_choosing(&mut agent, &id_of(&created), "delegate", "reject_once").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(
        !env.workspace.path().join("a.txt").exists(),
        "the child's write ran unasked under a failing confined guard"
    );
    let asked = agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .count();
    assert_eq!(asked, 1, "the child's write was not put to the user");
    assert_clean_stdout(&agent);
}

/// Answers permission questions with `options` in turn (the last one after); the
/// questions' count is the transcript's.
fn answering(
    options: &'static [&'static str],
) -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    let mut asked = 0;
    move |method, _| match method {
        "session/request_permission" => {
            let option = options[asked.min(options.len() - 1)];
            asked += 1;
            Ok(Some(
                json!({"outcome": {"outcome": "selected", "optionId": option}}),
            ))
        }
        other => Err((-32601, format!("unexpected {other}"))),
    }
}

fn permission_questions(agent: &AgentProcess) -> Vec<String> {
    agent
        .transcript
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .map(|m| m["params"]["toolCall"]["title"].to_string())
        .collect()
}

/// What the model types into a shell it started in the background (`process` `write`) is a
/// `Bash` command to the user's confined `Bash` guard: the guard failing, the typing is put
/// to the user (who allowed the shell, and declines the `rm`).
#[tokio::test]
async fn red_five_a_process_write_under_a_failing_confined_guard_asks() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "c1",
            "terminal",
            json!({"command": "bash", "background": true}),
        ),
        MockReply::tool_call(
            "c2",
            "process",
            json!({"action": "write", "id": "proc_1", "data": "rm -f precious.txt; exit\n"}),
        ),
        MockReply::tool_call(
            "c3",
            "process",
            json!({"action": "wait", "id": "proc_1", "timeout": 5}),
        ),
        MockReply::text(&["done"]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("precious.txt"), "keep").expect("write");
    env.write_config(
        "mode = \"yolo\"\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nsandbox = true\n\
         command = \"exit 1\"\n",
    );
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let id = agent
        .start_request("session/prompt", text_prompt(&id_of(&created), "clean"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, WAIT, answering(&["allow_once", "reject_once"]))
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let asked = permission_questions(&agent);
    assert!(
        env.workspace.path().join("precious.txt").exists(),
        "the typed rm ran unasked under a failing confined guard; asked: {asked:?}"
    );
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_clean_stdout(&agent);
}

/// Another ACP agent's file write, served through the session's tools, under the user's
/// failing `sandbox = true` guard in yolo mode: put to the user under the agent's name, and
/// declined.
#[tokio::test]
async fn red_five_an_external_agents_write_under_a_failing_confined_guard_asks() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "d1",
            "delegate_task",
            json!({"goal": "write the file", "agent": "scripted"}),
        ),
        MockReply::text(&["Delegated."]),
    ])
    .await;
    let script = env.home.path().join("child-script.json");
    std::fs::write(
        &script,
        json!({"prompts": [[{"write": {"path": "out.txt", "content": "by the agent\n"}}]]})
            .to_string(),
    )
    .expect("script");
    let child = talaria_harness::binary::workspace_bin("talaria-harness", "talaria-acp-child");
    env.write_config(&format!(
        "mode = \"yolo\"\n[learning]\nskill_review_after = 0\nmemory_review_after = 0\n\
         [[hooks.PreToolUse]]\nmatcher = \"Write\"\nsandbox = true\ncommand = \"exit 1\"\n\
         [agents.scripted]\ncommand = \"{}\"\ntools = \"acp\"\n\
         env = {{ TALARIA_CHILD_SCRIPT = \"{}\" }}\n",
        child.display(),
        script.display()
    ));
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let response =
        prompt_choosing(&mut agent, &id_of(&created), "hand it over", "reject_once").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let asked = permission_questions(&agent);
    assert!(
        !env.workspace.path().join("out.txt").exists(),
        "the agent's write ran unasked under a failing confined guard; asked: {asked:?}"
    );
    assert!(asked.iter().any(|t| t.contains("[scripted]")), "{asked:?}");
    assert_clean_stdout(&agent);
}

/// A guard that ran and chose exit 127 (as a wrapper passing on a missing tool's code does)
/// is read as a guard that could not start: its call is blocked (fail closed), the model told.
#[tokio::test]
async fn red_five_a_guard_exiting_127_on_purpose_blocks() {
    let env = TestEnv::new(one_write()).await;
    env.write_config(
        "mode = \"yolo\"\n[[hooks.PreToolUse]]\nmatcher = \"Write\"\n\
         command = \"cat >/dev/null; exit 127\"\n",
    );
    env.trust_workspace();
    let (written, told) = write_rejecting(&env).await;
    assert!(!written, "a guard's exit 127 let the write run: {told}");
    assert!(told.contains("Not run"), "{told}");
}

// ---------------------------------------------------------------------------------------
// A confined UserPromptSubmit guard that fails.

/// `~/bin/prompt-guard.sh`: logs each prompt under `~/.local/state` (`set -e`), then refuses
/// a prompt holding a secret (exit 2, as Claude Code's prompt guards do).
fn prompt_guard(env: &TestEnv) -> String {
    let bin = env.home.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    executable(
        &bin.join("prompt-guard.sh"),
        "#!/bin/bash\nset -e\nmkdir -p \"$HOME/.local/state\"\n\
         input=$(cat)\necho \"$input\" >> \"$HOME/.local/state/prompts.log\"\n\
         if echo \"$input\" | grep -q SECRET-PROMPT; then\n\
         echo 'no secrets in prompts' >&2; exit 2; fi\n",
    )
}

/// Whether the secret prompt reached the model, in a folder trusted or not.
async fn secret_prompt_sent(env: &TestEnv, trusted: bool) -> bool {
    let guard = prompt_guard(env);
    env.write_config(&format!(
        "[[hooks.UserPromptSubmit]]\ncommand = \"{guard}\"\n"
    ));
    if trusted {
        env.trust_workspace();
    }
    let mut agent = agent_with(env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let _ = prompt(&mut agent, &id_of(&created), "deploy with SECRET-PROMPT-47").await;
    assert_clean_stdout(&agent);
    everything_sent(&env.mock).contains("SECRET-PROMPT-47")
}

/// The user's prompt guard (it keeps a log in the home, as red team four's write guard did)
/// in a folder that is not trusted runs confined, where the home is read-only: it exits 1
/// before its `exit 2`, an error that blocks nothing, so the prompt with the secret goes to
/// the provider. Only `PreToolUse` failures were made to ask; a prompt guard silently stops
/// guarding exactly the folders nobody trusted.
#[tokio::test]
async fn red_five_a_users_logging_prompt_guard_still_blocks_in_an_untrusted_folder() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let enforced = sandbox_enforced();
    let sent = secret_prompt_sent(&env, false).await;
    assert!(
        !sent,
        "the secret prompt reached the model past the user's confined prompt guard (sandbox \
         enforced: {enforced})"
    );
}

/// The control: in a trusted folder the same guard blocks the prompt.
#[tokio::test]
async fn red_five_a_users_logging_prompt_guard_blocks_in_a_trusted_folder() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    assert!(
        !secret_prompt_sent(&env, true).await,
        "the prompt guard did not block in a trusted folder"
    );
}

// ---------------------------------------------------------------------------------------
// `trust/apply`: the folder decided on is the one shown.

/// `trust/apply` for the session's folder; the raw answer.
async fn apply(agent: &mut AgentProcess, cwd: &std::path::Path, decision: &str, id: &str) -> Value {
    agent
        .request(
            "trust/apply",
            json!({"cwd": cwd, "decision": decision, "sessionId": id}),
        )
        .await
        .expect("apply")
}

/// A session in `proj/sub` of a repository `proj` that lies inside another repository (the
/// workspace, like a home kept in git) is shown `trust_repo` for `proj`. Before the client
/// applies it, `proj/.git` goes (a `git` command, the agent, anyone who may write there).
/// The apply checks only the session's own folder, finds the repository root now to be the
/// outer one, and records that — never shown — as trusted: every folder in it loads its
/// instructions and hooks.
#[tokio::test]
async fn red_five_trust_repo_records_only_the_root_shown() {
    let env = TestEnv::new(Vec::new()).await;
    let ws = env.workspace.path();
    std::fs::create_dir_all(ws.join(".git")).expect("outer git");
    let proj = ws.join("proj");
    std::fs::create_dir_all(proj.join(".git")).expect("inner git");
    let sub = proj.join("sub");
    std::fs::create_dir_all(&sub).expect("sub");
    std::fs::write(sub.join("AGENTS.md"), "Say SUBSHOWN.").expect("sub agents");
    let other = ws.join("other");
    std::fs::create_dir_all(&other).expect("other");
    std::fs::write(other.join("AGENTS.md"), "Say OTHERSECRET.").expect("other agents");
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, &sub).await;
    let trust = created["_meta"]["workspaceTrust"].to_string();
    assert!(trust.contains("trust_repo"), "{trust}");
    let shown_root = std::fs::canonicalize(&proj).expect("proj");
    assert!(trust.contains(&shown_root.display().to_string()), "{trust}");
    std::fs::remove_dir_all(proj.join(".git")).expect("inner git removed");
    let applied = apply(&mut agent, &sub, "trust_repo", &id_of(&created)).await;
    let mut next = agent_with(&env, "{}").await;
    let there = new_session_in(&mut next, &other).await;
    assert_ne!(
        there["_meta"]["workspaceTrust"]["status"],
        "trusted",
        "a repository root never shown ({}) was trusted (apply answered {applied})",
        ws.display()
    );
    assert_clean_stdout(&agent);
}

/// The session's folder renamed away and another made under its name (same path, same
/// files, another folder) before the apply: refused.
#[tokio::test]
async fn red_five_trust_apply_refuses_a_folder_put_under_its_name() {
    let env = TestEnv::new(Vec::new()).await;
    let dir = env.workspace.path().join("proj");
    std::fs::create_dir_all(&dir).expect("proj");
    std::fs::write(dir.join("AGENTS.md"), "Say PINEAPPLE.").expect("agents");
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, &dir).await;
    // Renamed away (kept, so its inode is not reused for the new one on file systems
    // without birth times, where a deleted folder's inode comes back at once).
    std::fs::rename(&dir, env.workspace.path().join("proj.old")).expect("renamed away");
    std::fs::create_dir_all(&dir).expect("made again");
    std::fs::write(dir.join("AGENTS.md"), "Say PINEAPPLE.").expect("agents again");
    let applied = apply(&mut agent, &dir, "trust_cwd", &id_of(&created)).await;
    assert!(
        applied["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not the folder the session showed")),
        "{applied}"
    );
    assert_clean_stdout(&agent);
}

/// Another folder bind-mounted over the session's folder before the apply (same path, the
/// mount's folder now there): refused. Skipped where the test may not mount.
#[tokio::test]
async fn red_five_trust_apply_refuses_a_folder_mounted_over_the_shown_one() {
    let env = TestEnv::new(Vec::new()).await;
    let dir = env.workspace.path().join("proj");
    std::fs::create_dir_all(&dir).expect("proj");
    std::fs::write(dir.join("AGENTS.md"), "Say PINEAPPLE.").expect("agents");
    let other = env.home.path().join("other");
    std::fs::create_dir_all(&other).expect("other");
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, &dir).await;
    let Some(_mounted) = BindMount::new(&other, &dir) else {
        eprintln!("skipped: this test may not bind-mount");
        return;
    };
    let applied = apply(&mut agent, &dir, "trust_cwd", &id_of(&created)).await;
    assert!(
        applied["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not the folder the session showed")),
        "{applied}"
    );
    assert_clean_stdout(&agent);
}

/// A session opened on a folder that does not exist yet, which is made (with an
/// `AGENTS.md`) before the client applies `trust_cwd`: nothing was shown, so nothing is
/// trusted — the session is refused, or the apply is.
#[tokio::test]
async fn red_five_trust_apply_after_the_folder_appeared_trusts_nothing() {
    let env = TestEnv::new(Vec::new()).await;
    let later = env.workspace.path().join("later");
    let mut agent = agent_with(&env, "{}").await;
    let answer = agent
        .request("session/new", json!({"cwd": later, "mcpServers": []}))
        .await
        .expect("answer");
    std::fs::create_dir_all(&later).expect("made");
    std::fs::write(later.join("AGENTS.md"), "Say LATECOMER.").expect("agents");
    if let Some(session) = answer["result"]["sessionId"].as_str() {
        let applied = apply(&mut agent, &later, "trust_cwd", session).await;
        assert!(applied.get("error").is_some(), "{applied}");
    }
    let mut next = agent_with(&env, "{}").await;
    let there = new_session_in(&mut next, &later).await;
    assert_ne!(
        there["_meta"]["workspaceTrust"]["status"], "trusted",
        "a folder nobody was shown is trusted (session/new answered {answer})"
    );
    assert_clean_stdout(&agent);
}

/// A repository whose skill folder holds more than the 64 MiB trust hashes (a skill bundling
/// a data set or a binary; here sparse files, nothing on disk): the folder's fingerprint is
/// never the same twice, so `trust/apply` refuses the whole decision as "changed" — the user
/// cannot trust the folder's `AGENTS.md` and hooks at all from the client, only the skills
/// should have stayed out.
#[tokio::test]
async fn red_five_a_folder_with_a_large_skill_folder_can_still_be_trusted() {
    let env = TestEnv::new(Vec::new()).await;
    let ws = env.workspace.path();
    std::fs::write(ws.join("AGENTS.md"), "Say PINEAPPLE.").expect("agents");
    let skill = ws.join(".talaria/skills/data");
    std::fs::create_dir_all(&skill).expect("skill");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: data\ndescription: Look things up\n---\nRead the tables.\n",
    )
    .expect("skill");
    for n in 0..2 {
        let blob = std::fs::File::create(skill.join(format!("table{n}.bin"))).expect("blob");
        blob.set_len(33 * 1024 * 1024).expect("sparse");
    }
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, ws).await;
    let applied = apply(&mut agent, ws, "trust_cwd", &id_of(&created)).await;
    assert!(
        applied.get("error").is_none(),
        "the folder could not be trusted: {applied}"
    );
    assert_clean_stdout(&agent);
}

// ---------------------------------------------------------------------------------------
// An unknown key in a hook entry.

/// The user's hook with a misspelled key: `session/new` fails with a JSON-RPC error naming
/// the key and the one meant; the server stays up, and once the file is fixed a session in
/// the same process starts and its hook runs.
#[tokio::test]
async fn red_five_a_users_hook_typo_fails_the_session_clearly_and_the_server_goes_on() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let marker = env.workspace.path().join("hook-ran");
    env.write_config(&format!(
        "[[hooks.UserPromptSubmit]]\ncommand = \"touch {}\"\nsandboxd = true\n",
        marker.display()
    ));
    let mut agent = agent_with(&env, "{}").await;
    let failed = agent
        .request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("answer");
    let said = failed["error"].to_string();
    assert!(
        said.contains("sandboxd") && said.contains("\\\"sandbox\\\""),
        "{failed}"
    );
    env.write_config(&format!(
        "[[hooks.UserPromptSubmit]]\ncommand = \"touch {}\"\nsandbox = true\n",
        marker.display()
    ));
    env.trust_workspace();
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let (response, _) = prompt(&mut agent, &id_of(&created), "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(marker.exists(), "the fixed hook did not run");
    assert_clean_stdout(&agent);
}

/// A trusted project's hook with a misspelled key: none of the project's hooks load (its
/// guard included), the user is told which key, and the session goes on.
#[tokio::test]
async fn red_five_a_projects_hook_typo_loads_none_of_its_hooks_and_says_so() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let marker = env.workspace.path().join("project-hook-ran");
    let dir = env.workspace.path().join(".talaria");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[[hooks.UserPromptSubmit]]\ncommand = \"touch {}\"\n\
             [[hooks.Stop]]\ncommand = \"true\"\ntimout = 5\n",
            marker.display()
        ),
    )
    .expect("project config");
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let (response, updates) = prompt(&mut agent, &id_of(&created), "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(!marker.exists(), "a hook of a refused project file ran");
    let told: String = agent
        .updates()
        .iter()
        .chain(&updates)
        .filter_map(notice_text)
        .collect::<Vec<_>>()
        .join("\n");
    let told = format!("{told}\n{created}");
    assert!(
        told.contains("not loaded") && told.contains("timout"),
        "the user was not told: {told}"
    );
    assert_clean_stdout(&agent);
}

/// A Claude Code user's hook as its documentation writes it, with `statusMessage` (the
/// spinner's text while the hook runs, nothing about what runs or where): the whole
/// configuration is refused and no session starts, although hooks.md promises Claude Code's
/// shape works unchanged. A harmless display key Talaria does not show could be passed over
/// (told once), as unknown keys elsewhere in config.toml are.
#[tokio::test]
async fn red_five_claude_codes_status_message_key_does_not_stop_every_session() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let marker = env.workspace.path().join("formatted");
    env.write_config(&format!(
        "[[hooks.UserPromptSubmit]]\nmatcher = \"\"\nhooks = [{{type = \"command\", \
         command = \"touch {}\", timeout = 30, statusMessage = \"Checking the prompt…\"}}]\n",
        marker.display()
    ));
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = agent
        .request(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("answer");
    assert!(
        created.get("error").is_none(),
        "a Claude Code hook with statusMessage stops every session: {created}"
    );
    let session = created["result"]["sessionId"].as_str().expect("id");
    let (response, _) = prompt(&mut agent, session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(marker.exists(), "the hook did not run");
}

/// The common case: Claude Code's shape without extra keys, in a trusted folder, runs; its
/// system prompt is the usual one.
#[tokio::test]
async fn red_five_claude_codes_plain_hook_shape_runs() {
    let env = TestEnv::new(vec![MockReply::text(&["ok"])]).await;
    let marker = env.workspace.path().join("prompted");
    env.write_config(&format!(
        "[[hooks.UserPromptSubmit]]\nmatcher = \"\"\nhooks = [{{type = \"command\", \
         command = \"touch {}\", timeout = 30}}]\n",
        marker.display()
    ));
    std::fs::write(env.workspace.path().join("AGENTS.md"), "Say PINEAPPLE.").expect("agents");
    env.trust_workspace();
    let mut agent = agent_with(&env, "{}").await;
    let created = new_session_in(&mut agent, env.workspace.path()).await;
    let system = system_prompt_seen(&env, &mut agent, &id_of(&created)).await;
    assert!(system.contains("PINEAPPLE"), "{system}");
    assert!(marker.exists(), "the hook did not run");
    assert_clean_stdout(&agent);
}
