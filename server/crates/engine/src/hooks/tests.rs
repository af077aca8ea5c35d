//! Declarations, matchers and answers read as Claude Code's contract says.

use super::*;

fn hooks(text: &str) -> Result<Hooks, HookConfigError> {
    let table: toml::Table = text.parse().expect("toml");
    Hooks::from_toml(table["hooks"].as_table().expect("hooks"), HookOrigin::User)
}

#[test]
fn matchers_take_talarias_names_and_claude_codes() {
    let set = hooks(
        "[[hooks.PreToolUse]]\nmatcher = \"Bash|write_file\"\ncommand = \"a\"\ntimeout_s = 5\n\
         [[hooks.PreToolUse]]\nmatcher = \"Edit\"\ncommand = \"b\"\n\
         [[hooks.PostToolUse]]\ncommand = \"c\"\n\
         [[hooks.SessionStart]]\nmatcher = \"startup\"\nhooks = [{type = \"command\", command = \"d\", timeout = 3}]\n",
    )
    .expect("hooks");
    let names = |event, tool| -> Vec<String> {
        set.for_event(event, tool)
            .map(|h| h.command.clone())
            .collect()
    };
    assert_eq!(names(HookEvent::PreToolUse, Some("terminal")), ["a"]);
    assert_eq!(names(HookEvent::PreToolUse, Some("write_file")), ["a"]);
    assert_eq!(names(HookEvent::PreToolUse, Some("patch")), ["b"]);
    // A whole-name match: `Bash` is not `Bashful`, `Edit` not `read_file`.
    assert!(names(HookEvent::PreToolUse, Some("read_file")).is_empty());
    assert_eq!(names(HookEvent::PostToolUse, Some("anything")), ["c"]);
    assert_eq!(names(HookEvent::SessionStart, Some("startup")), ["d"]);
    // A SessionStart matcher is on the source, as in Claude Code.
    assert!(names(HookEvent::SessionStart, Some("resume")).is_empty());
    let timeout = |command: &str| {
        set.hooks
            .iter()
            .find(|h| h.command == command)
            .map(|h| h.timeout)
    };
    assert_eq!(timeout("a"), Some(Duration::from_secs(5)));
    assert_eq!(timeout("b"), Some(DEFAULT_TIMEOUT));
    assert_eq!(timeout("d"), Some(Duration::from_secs(3)));
}

#[test]
fn bad_declarations_are_named() {
    for (text, says) in [
        ("[[hooks.PreToolUze]]\ncommand = \"a\"\n", "unknown event"),
        (
            "[[hooks.PreToolUse]]\nmatcher = \"(\"\ncommand = \"a\"\n",
            "regular expression",
        ),
        ("[[hooks.Stop]]\ncommand = \"\"\n", "command"),
        (
            "[[hooks.Stop]]\ncommand = \"a\"\ntimeout_s = 0\n",
            "timeout_s",
        ),
        (
            "[[hooks.Stop]]\nhooks = [{type = \"prompt\", command = \"a\"}]\n",
            "not supported",
        ),
    ] {
        let error = hooks(text).expect_err(text).to_string();
        assert!(error.contains(says), "{text}: {error}");
    }
}

fn ran(code: i32, stdout: &str, stderr: &str) -> HookRun {
    HookRun {
        exit_code: Some(code),
        stdout: stdout.into(),
        stderr: stderr.into(),
        ..HookRun::default()
    }
}

#[test]
fn answers_follow_the_exit_code_then_the_json() {
    let blocked = HookAnswer::of(&ran(2, "{\"decision\":\"approve\"}", "no rm here\n"), false);
    assert_eq!(blocked.blocked.as_deref(), Some("no rm here"));
    assert_eq!(blocked.decision, None, "stdout is not read on exit 2");
    let other = HookAnswer::of(&ran(1, "", "jq: not found"), false);
    assert!(other.blocked.is_none() && other.error.unwrap().contains("jq: not found"));
    let json = HookAnswer::of(
        &ran(
            0,
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not today","updatedInput":{"path":"b"}},"systemMessage":"hi"}"#,
            "",
        ),
        false,
    );
    assert_eq!(json.decision, Some(Decision::Deny));
    assert_eq!(json.blocked.as_deref(), Some("not today"));
    assert_eq!(json.updated_input, Some(serde_json::json!({"path": "b"})));
    assert_eq!(json.system_message.as_deref(), Some("hi"));
    let legacy = HookAnswer::of(&ran(0, r#"{"decision":"block","reason":"r"}"#, ""), false);
    assert_eq!(legacy.blocked.as_deref(), Some("r"));
    let plain = HookAnswer::of(&ran(0, "branch: main\n", ""), true);
    assert_eq!(plain.context.as_deref(), Some("branch: main"));
    assert!(
        HookAnswer::of(&ran(0, "branch: main\n", ""), false)
            .context
            .is_none()
    );
    let timed_out = HookAnswer::of(
        &HookRun {
            timed_out: true,
            ..HookRun::default()
        },
        false,
    );
    assert!(timed_out.error.unwrap().contains("timeout"));
}

#[tokio::test]
async fn a_hook_reads_its_event_and_a_hanging_one_is_ended_at_its_timeout() {
    let dir = tempfile::tempdir().expect("dir");
    let shell = talaria_tools::Shell::default();
    let set = hooks(
        "[[hooks.Stop]]\ncommand = \"cat; echo; echo err >&2; exit 3\"\n\
         [[hooks.Stop]]\ncommand = \"sleep 30 & sleep 30\"\ntimeout_s = 1\n",
    )
    .expect("hooks");
    let payload = serde_json::json!({"hook_event_name": "Stop"});
    let echoed = run_hook(&set.hooks[0], &payload, dir.path(), &shell).await;
    assert_eq!(echoed.exit_code, Some(3));
    assert!(
        echoed.stdout.contains("\"hook_event_name\":\"Stop\""),
        "{echoed:?}"
    );
    assert_eq!(echoed.stderr.trim(), "err");
    let started = std::time::Instant::now();
    let hung = run_hook(&set.hooks[1], &payload, dir.path(), &shell).await;
    assert!(hung.timed_out, "{hung:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn only_what_a_process_call_types_is_a_bash_command() {
    let typed = serde_json::json!({"action": "write", "id": "proc_1", "data": "rm -rf /\n"});
    assert_eq!(claude_names_of_call("process", &typed), ["Bash"]);
    // Any other action of `process` is none of Claude Code's tools.
    let listed = serde_json::json!({"action": "list"});
    assert!(claude_names_of_call("process", &listed).is_empty());
    // Another tool with the same arguments keeps its own names.
    assert_eq!(claude_names_of_call("write_file", &typed), ["Write"]);
    assert!(claude_names_of_call("memory", &typed).is_empty());
}

#[test]
fn a_hook_runs_in_the_sandbox_when_it_asks_is_a_projects_or_its_folder_is_untrusted() {
    let set = hooks(
        "[[hooks.Stop]]\ncommand = \"free\"\n\
         [[hooks.Stop]]\nsandbox = true\ncommand = \"asked\"\n\
         [[hooks.PreToolUse]]\nmatcher = \"Bash\"\nsandbox = true\nhooks = [{type = \"command\", command = \"inner\"}]\n",
    )
    .expect("hooks");
    let by_command = |command: &str| {
        set.hooks
            .iter()
            .find(|h| h.command == command)
            .expect("declared")
            .clone()
    };
    assert!(!by_command("free").confined);
    assert!(by_command("asked").confined && by_command("inner").confined);
    assert!(by_command("asked").shown().ends_with("(in the sandbox)"));
    assert!(!by_command("free").shown().contains("sandbox"));
    // In a folder that is not trusted, every one of them.
    assert!(set.clone().confined().hooks.iter().all(|h| h.confined));
    // A project's always.
    let table: toml::Table = "[[hooks.Stop]]\ncommand = \"p\"\n".parse().expect("toml");
    let project = Hooks::from_toml(
        table["hooks"].as_table().expect("hooks"),
        HookOrigin::Project("/w/.talaria/config.toml".into()),
    )
    .expect("hooks");
    assert!(project.hooks[0].confined);
    let wrong = hooks("[[hooks.Stop]]\nsandbox = \"yes\"\ncommand = \"x\"\n");
    assert!(wrong.is_err_and(|e| e.why.contains("sandbox must be true or false")));
}

#[test]
fn a_misspelled_key_of_a_hook_is_refused_with_the_key_it_meant() {
    let wrong = hooks("[[hooks.Stop]]\nsandboxed = true\ncommand = \"x\"\n");
    assert!(
        wrong
            .as_ref()
            .is_err_and(|e| e.why.contains("\"sandboxed\"") && e.why.contains("\"sandbox\"")),
        "{wrong:?}"
    );
    let inner =
        hooks("[[hooks.Stop]]\nhooks = [{type = \"command\", command = \"x\", timout = 3}]\n");
    assert!(inner.is_err_and(|e| e.why.contains("\"timout\"")));
    assert!(hooks("[[hooks.Stop]]\ncommand = \"x\"\ntimeout_s = 3\nsandbox = false\n").is_ok());
    // Claude Code's display text is known; a prompt hook is refused for its type.
    assert!(hooks("[[hooks.Stop]]\nhooks = [{type = \"command\", command = \"x\", statusMessage = \"Checking\"}]\n").is_ok());
    let prompt = hooks("[[hooks.Stop]]\nhooks = [{type = \"prompt\", prompt = \"Is it done?\"}]\n");
    assert!(prompt.is_err_and(|e| e.why.contains("type \"prompt\" is not supported")));
}

#[test]
fn hooks_differing_only_in_where_they_run_are_not_the_same() {
    let free = hooks("[[hooks.Stop]]\ncommand = \"x\"\n").expect("hooks");
    let again = hooks("[[hooks.Stop]]\ncommand = \"x\"\n").expect("hooks");
    let confined = hooks("[[hooks.Stop]]\ncommand = \"x\"\nsandbox = true\n").expect("hooks");
    assert_eq!(free, again);
    assert_ne!(free, confined);
    assert_eq!(free.clone().confined(), confined);
    let other = hooks("[[hooks.Stop]]\ncommand = \"y\"\n").expect("hooks");
    assert_ne!(free, other);
}

#[test]
fn a_timeout_must_be_a_positive_number_of_seconds() {
    for wrong in ["0", "-3", "\"soon\""] {
        let set = hooks(&format!(
            "[[hooks.Stop]]\ncommand = \"x\"\ntimeout_s = {wrong}\n"
        ));
        assert!(
            set.is_err_and(|e| e.why.contains("positive number of seconds")),
            "{wrong}"
        );
    }
    let set = hooks("[[hooks.Stop]]\nhooks = [{command = \"x\", timeout = 2.5}]\n").expect("ok");
    assert_eq!(set.hooks[0].timeout, Duration::from_secs(2));
    let set = hooks("[[hooks.Stop]]\ncommand = \"x\"\n").expect("ok");
    assert_eq!(set.hooks[0].timeout, DEFAULT_TIMEOUT);
}
