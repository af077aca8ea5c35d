//! Hooks with Claude Code's contract: the user's commands block a call (the model reads why),
//! replace its input, format what it wrote, add to the system prompt; a hook that hangs is
//! ended, one that looks for the provider key finds none, a Claude Code script runs
//! unchanged, and a project's hooks run only once its folder is trusted.

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// A config with `hooks` (TOML) in yolo mode (no questions), the key in the file too.
fn config_with(env: &TestEnv, hooks: &str) {
    env.write_config(&format!(
        "mode = \"yolo\"\n[openai]\napi_key = \"sk-file-KEY-4242\"\n{hooks}"
    ));
}

/// A script file in the workspace's `.claude/hooks`, executable.
fn script(env: &TestEnv, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let dir = env.workspace.path().join(".claude/hooks");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

/// The finished card of call `id`, as text.
fn card(updates: &[Value], id: &str) -> String {
    card_state(updates, id).to_string()
}

#[tokio::test]
async fn a_pre_tool_use_hook_blocks_rm_and_the_model_reads_why() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "rm -f precious.txt"})),
        MockReply::text(&["understood"]),
    ])
    .await;
    std::fs::write(env.workspace.path().join("precious.txt"), "keep").expect("write");
    let guard = script(
        &env,
        "no-rm.sh",
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *'\"command\":\"rm '*) \
         echo 'rm is not allowed in this project; move files to trash/ instead' >&2; exit 2;; esac\n\
         exit 0\n",
    );
    config_with(
        &env,
        &format!("[[hooks.PreToolUse]]\nmatcher = \"terminal\"\ncommand = \"{guard}\"\n"),
    );
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "clean up").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(env.workspace.path().join("precious.txt").exists(), "rm ran");
    let read = tool_results(&env.mock, 1).join("\n");
    assert!(read.contains("rm is not allowed in this project"), "{read}");
    let shown = card(&updates, "c1");
    assert!(
        shown.contains("PreToolUse hook") && shown.contains("blocked"),
        "{shown}"
    );
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_hook_rewrites_a_path_and_a_post_hook_formats_the_written_file() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "notes.txt", "content": "draft   \nline two\t\n"}),
        ),
        MockReply::text(&["written"]),
    ])
    .await;
    std::fs::create_dir_all(env.workspace.path().join("drafts")).expect("mkdir");
    // Every write goes under drafts/; every written file loses its trailing blanks.
    let rewrite = script(
        &env,
        "to-drafts.sh",
        "#!/bin/sh\njq -c '. as $e | {hookSpecificOutput: {hookEventName: \"PreToolUse\", \
         permissionDecision: \"allow\", updatedInput: ($e.tool_input | .file_path = \
         ($e.cwd + \"/drafts/\" + (.file_path | split(\"/\") | last)) | del(.path))}}'\n",
    );
    let format = script(
        &env,
        "format.sh",
        "#!/bin/sh\nf=$(jq -r .tool_input.file_path)\nsed -i 's/[[:space:]]*$//' \"$f\"\n",
    );
    config_with(
        &env,
        &format!(
            "[[hooks.PreToolUse]]\nmatcher = \"Write\"\ncommand = \"{rewrite}\"\n\
             [[hooks.PostToolUse]]\nmatcher = \"Write|Edit\"\ncommand = \"{format}\"\n"
        ),
    );
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "write notes").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(!env.workspace.path().join("notes.txt").exists());
    let written = std::fs::read_to_string(env.workspace.path().join("drafts/notes.txt"))
        .expect("the rewritten path was written");
    assert_eq!(written, "draft\nline two\n");
    let shown = card(&updates, "w1");
    assert!(shown.contains("replaced its input"), "{shown}");
    assert!(shown.contains("PostToolUse hook"), "{shown}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_session_start_hooks_output_reaches_the_system_prompt() {
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    config_with(
        &env,
        "[[hooks.SessionStart]]\ncommand = \"echo 'Current sprint: PAPAYA-7'\"\n",
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let system = env.mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(system.contains("Current sprint: PAPAYA-7"), "{system}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_hook_that_hangs_is_ended_at_its_timeout_and_its_call_does_not_run() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "touch ran.txt"})),
        MockReply::text(&["ok"]),
    ])
    .await;
    config_with(
        &env,
        "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\ncommand = \"sleep 4242 & sleep 4243\"\ntimeout_s = 1\n",
    );
    let (mut agent, session) = env.session().await;
    let started = std::time::Instant::now();
    let (response, updates) = prompt(&mut agent, &session, "touch").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert!(
        !env.workspace.path().join("ran.txt").exists(),
        "fails closed"
    );
    let read = tool_results(&env.mock, 1).join("\n");
    assert!(read.contains("could not decide"), "{read}");
    assert!(
        card(&updates, "c1").contains("timeout"),
        "{}",
        card(&updates, "c1")
    );
    let told: Vec<String> = updates.iter().filter_map(notice_text).collect();
    assert!(told.iter().any(|t| t.contains("timeout")), "{told:?}");
    // Nothing it started is left running.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        tagged_processes("sleep 424").is_empty(),
        "{:?}",
        tagged_processes("sleep 424")
    );
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_hook_never_sees_the_provider_key() {
    if !sandbox_enforced() {
        return;
    }
    let env = TestEnv::new(vec![MockReply::text(&["hi"])]).await;
    let home = env.home.path().join("talaria");
    let leak = env.workspace.path().join("leak.txt");
    config_with(
        &env,
        &format!(
            "[[hooks.SessionStart]]\ncommand = \"{{ env; cat {}/config.toml; }} > {} 2>&1; true\"\n",
            home.display(),
            leak.display()
        ),
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let seen = std::fs::read_to_string(&leak).expect("the hook ran");
    assert!(seen.contains("CLAUDE_PROJECT_DIR="), "{seen}");
    assert!(!seen.contains("test-key"), "the variable's key: {seen}");
    assert!(!seen.contains("sk-file-KEY-4242"), "the file's key: {seen}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_claude_code_hook_script_runs_unchanged() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "git push --force"})),
        MockReply::tool_call("c2", "terminal", json!({"command": "echo fine"})),
        MockReply::text(&["done"]),
    ])
    .await;
    // As a team keeps it for Claude Code: in .claude/hooks, reading the event with jq, its
    // decision as JSON, registered in Claude Code's nested shape.
    script(
        &env,
        "guard.sh",
        r#"#!/usr/bin/env bash
set -euo pipefail
input=$(cat)
tool=$(echo "$input" | jq -r '.tool_name')
cmd=$(echo "$input" | jq -r '.tool_input.command // empty')
if [[ "$tool" == "Bash" && "$cmd" == *"--force"* ]]; then
  jq -n --arg r "Force-pushing is forbidden by team policy" \
    '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "deny", permissionDecisionReason: $r}}'
  exit 0
fi
exit 0
"#,
    );
    config_with(
        &env,
        "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n\
         hooks = [{type = \"command\", command = \"$CLAUDE_PROJECT_DIR/.claude/hooks/guard.sh\", timeout = 30}]\n",
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "push").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let first = tool_results(&env.mock, 1).join("\n");
    assert!(
        first.contains("Force-pushing is forbidden by team policy"),
        "{first}"
    );
    let second = tool_results(&env.mock, 2).join("\n");
    assert!(second.contains("fine"), "{second}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_project_hook_runs_only_once_the_folder_is_trusted() {
    let env = TestEnv::new(vec![MockReply::text(&["one"]), MockReply::text(&["two"])]).await;
    let project = env.workspace.path().join(".talaria");
    std::fs::create_dir_all(&project).expect("mkdir");
    std::fs::write(
        project.join("config.toml"),
        "[[hooks.SessionStart]]\ncommand = \"echo PROJECT-HOOK-RAN\"\n",
    )
    .expect("project config");
    let (mut agent, session) = env.session().await;
    prompt(&mut agent, &session, "hi").await;
    let system = env.mock.requests()[0].body["messages"][0]["content"].to_string();
    assert!(!system.contains("PROJECT-HOOK-RAN"), "{system}");
    let told: Vec<String> = agent.updates().iter().filter_map(notice_text).collect();
    assert!(
        told.iter().any(|t| t.contains(".talaria/config.toml")),
        "{told:?}"
    );
    env.trust_workspace();
    let second = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session");
    let second = second["sessionId"].as_str().expect("id").to_string();
    prompt(&mut agent, &second, "hi").await;
    let system = env.mock.requests()[1].body["messages"][0]["content"].to_string();
    assert!(system.contains("PROJECT-HOOK-RAN"), "{system}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_prompt_hook_blocks_or_adds_context_and_a_stop_hook_sends_the_turn_on() {
    let env = TestEnv::new(vec![
        MockReply::text(&["hi"]),
        MockReply::text(&["tests run"]),
    ])
    .await;
    let submit = script(
        &env,
        "submit.sh",
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *secret-project*) \
         echo 'prompts about secret-project stay out of the model' >&2; exit 2;; esac\n\
         echo 'Ticket: ABC-123'\n",
    );
    let stop = script(
        &env,
        "stop.sh",
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *'\"stop_hook_active\":false'*) \
         echo 'run the tests before you stop' >&2; exit 2;; esac\nexit 0\n",
    );
    config_with(
        &env,
        &format!(
            "[[hooks.UserPromptSubmit]]\ncommand = \"{submit}\"\n[[hooks.Stop]]\ncommand = \"{stop}\"\n"
        ),
    );
    let (mut agent, session) = env.session().await;
    let (blocked, _) = prompt(&mut agent, &session, "what about secret-project?").await;
    assert_eq!(stop_reason(&blocked), "refusal", "{blocked}");
    assert!(
        env.mock.requests().is_empty(),
        "the blocked prompt reached the model"
    );
    let told: Vec<String> = agent.updates().iter().filter_map(notice_text).collect();
    assert!(
        told.iter().any(|t| t.contains("stay out of the model")),
        "{told:?}"
    );
    let (answered, _) = prompt(&mut agent, &session, "hello").await;
    assert_eq!(stop_reason(&answered), "end_turn", "{answered}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2, "the Stop hook sent the turn on once");
    assert!(requests[0].body.to_string().contains("Ticket: ABC-123"));
    assert!(
        requests[1].body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m.to_string().contains("run the tests before you stop")),
        "{}",
        requests[1].body
    );
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn notification_and_session_end_hooks_run() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("c1", "terminal", json!({"command": "touch asked.txt"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let log = env.workspace.path().join("events.log");
    let append = format!(
        "jq -c '{{e: .hook_event_name, m: .message}}' >> {}",
        log.display()
    );
    env.write_config(&format!(
        "[[hooks.Notification]]\ncommand = \"{append}\"\n\
         [[hooks.SessionEnd]]\ncommand = \"{append}\"\n"
    ));
    let (mut agent, session) = env.session().await;
    let answer = prompt_allowing_once(&mut agent, &session, "touch it").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    let logged = std::fs::read_to_string(&log).expect("hooks ran");
    assert!(
        logged.contains("\"e\":\"Notification\"") && logged.contains("permission"),
        "{logged}"
    );
    assert!(logged.contains("\"e\":\"SessionEnd\""), "{logged}");
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn a_hooks_allow_spares_a_question_but_never_a_credential_read() {
    let env = TestEnv::new(vec![
        MockReply::tool_call("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
        MockReply::tool_call("r1", "read_file", json!({"path": "~/.aws/credentials"})),
        MockReply::text(&["done"]),
    ])
    .await;
    let aws = env.home.path().join(".aws");
    std::fs::create_dir_all(&aws).expect("aws");
    std::fs::write(
        aws.join("credentials"),
        "aws_secret_access_key = SECRET-77\n",
    )
    .expect("aws");
    // The default mode asks before a write; the hook allows everything.
    env.write_config(
        "[[hooks.PreToolUse]]\ncommand = \"echo '{\\\"hookSpecificOutput\\\": {\\\"permissionDecision\\\": \\\"allow\\\"}}'\"\n",
    );
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    let mut asked = Vec::new();
    let answer = agent
        .drive(id, WAIT, |method, params| {
            asked.push(params["toolCall"]["toolCallId"].to_string());
            assert_eq!(method, "session/request_permission");
            Ok(Some(
                json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}),
            ))
        })
        .await
        .expect("answer");
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    assert!(
        env.workspace.path().join("a.txt").exists(),
        "the allowed write ran"
    );
    assert_eq!(
        asked,
        vec!["\"r1\"".to_string()],
        "only the credential read asked"
    );
    assert!(!everything_sent(&env.mock).contains("SECRET-77"));
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn post_tool_use_runs_for_calls_that_ran_and_succeeded_failure_hooks_for_those_that_failed() {
    let env = TestEnv::new(vec![
        batch(&[
            ("ok", "read_file", json!({"path": "here.txt"})),
            ("failed", "read_file", json!({"path": "missing.txt"})),
            ("invalid", "read_file", json!({"no_path": 1})),
            (
                "blocked",
                "terminal",
                json!({"command": "touch blocked.txt"}),
            ),
            (
                "refused",
                "write_file",
                json!({"path": "w.txt", "content": "x"}),
            ),
        ]),
        MockReply::text(&["done"]),
    ])
    .await;
    let log = "jq -r '.hook_event_name + \\\" \\\" + .tool_use_id + \\\" \\\" + \
               ((.error // \\\"\\\") | test(\\\"missing\\\") | tostring)' \
               >> \\\"$CLAUDE_PROJECT_DIR/post.log\\\"";
    env.write_config(&format!(
        "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n\
         command = \"grep -q blocked && {{ echo no >&2; exit 2; }} || exit 0\"\n\
         [[hooks.PostToolUse]]\ncommand = \"{log}\"\n\
         [[hooks.PostToolUseFailure]]\ncommand = \"{log}\"\n"
    ));
    std::fs::write(env.workspace.path().join("here.txt"), "here\n").expect("write");
    let (mut agent, session) = env.session().await;
    let response = prompt_choosing(&mut agent, &session, "go", "reject_once").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let logged = std::fs::read_to_string(env.workspace.path().join("post.log")).expect("log");
    let mut lines: Vec<&str> = logged.lines().collect();
    lines.sort_unstable();
    // The refused write (the user), the blocked command (a hook) and the invalid read never
    // ran: no hook after them.
    assert_eq!(
        lines,
        ["PostToolUse ok false", "PostToolUseFailure failed true"],
        "{logged}"
    );
    assert_clean_stdout(&agent);
}

#[tokio::test]
async fn session_start_hooks_run_on_resume_and_load_with_source_resume() {
    let env = TestEnv::new(vec![
        MockReply::text(&["one"]),
        MockReply::text(&["two"]),
        MockReply::text(&["three"]),
    ])
    .await;
    config_with(
        &env,
        "[[hooks.SessionStart]]\n\
         command = \"jq -r .source >> \\\"$CLAUDE_PROJECT_DIR/sources.log\\\"; echo 'Sprint: KIWI-9'\"\n\
         [[hooks.SessionStart]]\nmatcher = \"startup\"\n\
         command = \"echo once >> \\\"$CLAUDE_PROJECT_DIR/startup.log\\\"\"\n",
    );
    let (mut agent, session) = env.session().await;
    let (response, _) = prompt(&mut agent, &session, "first").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    agent
        .call("session/close", json!({"sessionId": session}))
        .await
        .expect("close");
    agent
        .call("session/resume", load_params(&env, &session))
        .await
        .expect("resume");
    let (response, _) = prompt(&mut agent, &session, "second").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_clean_stdout(&agent);
    drop(agent);
    let mut agent = initialized(&env).await;
    agent
        .call("session/load", load_params(&env, &session))
        .await
        .expect("load");
    let (response, _) = prompt(&mut agent, &session, "third").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let sources =
        std::fs::read_to_string(env.workspace.path().join("sources.log")).expect("sources");
    assert_eq!(sources, "startup\nresume\nresume\n");
    let startups =
        std::fs::read_to_string(env.workspace.path().join("startup.log")).expect("startup");
    assert_eq!(startups, "once\n", "a startup matcher is not a resume");
    let requests = env.mock.requests();
    let system = |i: usize| requests[i].body["messages"][0]["content"].to_string();
    assert!(system(0).contains("Sprint: KIWI-9"), "{}", system(0));
    for i in [1, 2] {
        // The recorded system prompt stays as it was; the resume's context comes with the
        // next prompt (recorded with it).
        assert_eq!(system(i), system(0));
        let asked = last_user(&requests[i].body);
        assert!(
            asked.contains("as the session resumed]\nSprint: KIWI-9"),
            "{asked}"
        );
    }
    assert_clean_stdout(&agent);
}

/// Where the user's hooks run: with the user's rights in a trusted folder (a log in the home
/// is written), inside the session's sandbox in a folder that is not trusted and wherever a
/// hook asks for it (`sandbox = true`: the home is not written, the workspace is), and the
/// card says which.
#[tokio::test]
async fn the_users_hooks_run_with_the_users_rights_only_in_a_trusted_folder() {
    if !sandbox_enforced() {
        return;
    }
    let edit = |id: &str| {
        MockReply::tool_call(id, "write_file", json!({"path": "a.txt", "content": "x\n"}))
    };
    let env = TestEnv::new(vec![
        edit("u1"),
        MockReply::text(&["untrusted"]),
        edit("t1"),
        MockReply::text(&["trusted"]),
    ])
    .await;
    let home = env.home.path();
    let log = |name: &str| home.join(name).display().to_string();
    config_with(
        &env,
        &format!(
            "[[hooks.PostToolUse]]\nmatcher = \"Write\"\ncommand = \"echo ran >> {}\"\n\
             [[hooks.PostToolUse]]\nmatcher = \"Write\"\nsandbox = true\ncommand = \"echo ran >> {}; touch confined-ran\"\n",
            log("free.log"),
            log("confined.log")
        ),
    );
    let (mut agent, session) = env.session().await;
    let (response, updates) = prompt(&mut agent, &session, "edit").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert!(
        !home.join("free.log").exists(),
        "a hook ran unconfined in an untrusted folder"
    );
    assert!(
        card(&updates, "u1").contains("(in the sandbox)"),
        "{}",
        card(&updates, "u1")
    );
    env.trust_workspace();
    let second = agent
        .call(
            "session/new",
            json!({"cwd": env.workspace.path(), "mcpServers": []}),
        )
        .await
        .expect("session");
    let second = second["sessionId"].as_str().expect("id").to_string();
    let (response, _) = prompt(&mut agent, &second, "edit").await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let free =
        std::fs::read_to_string(home.join("free.log")).expect("the user's hook ran as the user");
    assert_eq!(free, "ran\n");
    assert!(
        !home.join("confined.log").exists(),
        "sandbox = true ran unconfined"
    );
    assert!(
        env.workspace.path().join("confined-ran").exists(),
        "the confined hook did not run"
    );
    assert_clean_stdout(&agent);
}

/// A prompt guard of the user's that never ran (its script missing: the shell's 127) or
/// timed out holds the prompt back, in a trusted folder too (where it is not confined).
#[tokio::test]
async fn a_prompt_guard_that_never_ran_or_timed_out_holds_the_prompt_back() {
    for guard in ["/nowhere/prompt-guard.sh", "sleep 5"] {
        let env = TestEnv::new(Vec::new()).await;
        config_with(
            &env,
            &format!("[[hooks.UserPromptSubmit]]\ncommand = \"{guard}\"\ntimeout_s = 1\n"),
        );
        env.trust_workspace();
        let (mut agent, session) = env.session().await;
        let (held, _) = prompt(&mut agent, &session, "a prompt").await;
        assert_eq!(stop_reason(&held), "refusal", "{guard}: {held}");
        assert!(
            env.mock.requests().is_empty(),
            "{guard}: the prompt reached the model"
        );
        assert_clean_stdout(&agent);
    }
}
