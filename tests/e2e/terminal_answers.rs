//! What `talaria-chat` shows and takes in a pseudo-terminal: the agent's own question and
//! choices (a plan's hand-over), answered by a key press without Enter; the `/rewind` list in
//! the record's order after a steer, and what a rewind took back; a short line naming
//! `talaria setup` when nothing is configured; an unknown `/command` told, never sent; the
//! answer's Markdown styled on the terminal (read through a terminal emulator) and plain
//! when piped.

use serde_json::json;
use talaria_harness::MockReply;

use crate::support::*;
use crate::terminal_pty::{COLUMNS, Pty, ROWS};

/// The screen a terminal shows after everything the chat wrote.
fn screen_of(pty: &Pty) -> vt100::Screen {
    let mut parser = vt100::Parser::new(ROWS, COLUMNS, 0);
    parser.process(pty.text().as_bytes());
    parser.screen().clone()
}

/// The screen's rows as text.
fn rows_of(screen: &vt100::Screen) -> Vec<String> {
    screen.rows(0, COLUMNS).collect()
}

/// The (row, column) where `needle` starts on the screen.
fn find(screen: &vt100::Screen, needle: &str) -> (u16, u16) {
    rows_of(screen)
        .iter()
        .enumerate()
        .find_map(|(row, text)| {
            let at = text.find(needle)?;
            let column = text[..at].chars().count();
            Some((u16::try_from(row).ok()?, u16::try_from(column).ok()?))
        })
        .unwrap_or_else(|| panic!("{needle:?} is not on the screen:\n{}", screen.contents()))
}

#[tokio::test]
async fn a_plans_question_offers_the_agents_own_choices_and_a_key_answers_it_without_enter() {
    let env = TestEnv::new(vec![
        MockReply::text(&["Plan: write notes.txt with 'done'."]),
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "notes.txt", "content": "done\n"}),
        ),
        MockReply::text(&["Implemented."]),
    ])
    .await;
    let mut pty = Pty::spawn_with(env.workspace.path(), &env.env(), &["--mode", "plan"]);
    pty.wait_for("> ").await;
    pty.type_keys("write the notes\r");
    pty.wait_for(
        "? Implement this plan? [y] Implement (ask before edits and commands), \
         [a] Implement (accept edits), [n] Keep planning (Enter): ",
    )
    .await;
    assert!(!pty.text().contains("Allow Implement"), "{}", pty.text());
    // A key that names no choice is ignored; one that does answers at once.
    pty.type_keys("x");
    pty.type_keys("a");
    pty.wait_for("Implemented.").await;
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("notes.txt")).expect("written"),
        "done\n",
        "the plan was implemented accepting edits"
    );
    assert!(
        !pty.text().contains("? Allow"),
        "accepted edits ask nothing more: {}",
        pty.text()
    );
}

#[tokio::test]
async fn y_and_n_at_a_permission_question_answer_on_the_key_press() {
    let env = TestEnv::new(vec![
        MockReply::tool_call(
            "w1",
            "write_file",
            json!({"path": "yes.txt", "content": "y\n"}),
        ),
        MockReply::tool_call(
            "w2",
            "write_file",
            json!({"path": "no.txt", "content": "n\n"}),
        ),
        MockReply::text(&["Both asked."]),
    ])
    .await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    pty.type_keys("write two files\r");
    pty.wait_for_after("Allow Write yes.txt?", ": ").await;
    pty.type_keys("y");
    pty.wait_for_after("Allow Write no.txt?", ": ").await;
    pty.type_keys("n");
    pty.wait_for("Both asked.").await;
    assert!(env.workspace.path().join("yes.txt").exists());
    assert!(!env.workspace.path().join("no.txt").exists());
}

#[tokio::test]
async fn the_rewind_list_keeps_the_records_order_after_a_steer_and_a_rewind_says_what_went_back() {
    let env = TestEnv::new(vec![
        MockReply::Hang {
            chunks: vec!["slow start".into()],
        },
        MockReply::tool_call(
            "w",
            "write_file",
            json!({"path": "notes.txt", "content": "tabs\n"}),
        ),
        MockReply::text(&["steered answer"]),
        MockReply::text(&["after the rewind"]),
    ])
    .await;
    let dir = env.workspace.path();
    let mut pty = Pty::spawn_with(dir, &env.env(), &["--mode", "yolo"]);
    pty.wait_for("> ").await;
    pty.type_keys("first question\r");
    pty.wait_for("slow start").await;
    pty.type_keys("use tabs\r");
    pty.wait_for("» steered: use tabs").await;
    pty.wait_for("steered answer").await;
    pty.wait_for_after("steered answer", "> ").await;
    assert!(dir.join("notes.txt").exists());
    pty.type_keys("/rewind\r");
    pty.wait_for("(/rewind N").await;
    let text = pty.text();
    let listing = &text[text.rfind("steered answer").unwrap_or(0)..];
    let prompt = listing.find("2  first question");
    let steer = listing.find("1  use tabs");
    assert!(
        prompt.is_some() && steer.is_some() && prompt < steer,
        "the prompt, then the steer that entered its turn: {listing}"
    );
    pty.wait_for_after("(/rewind N", "> ").await;
    pty.type_keys("/rewind 1 files\r");
    pty.wait_for("(rewound: the prompt \"use tabs\" went back)")
        .await;
    pty.wait_for("files put back: 1 (notes.txt)").await;
    assert!(
        !dir.join("notes.txt").exists(),
        "the steer's edit went back"
    );
    pty.wait_for_after("files put back", "> ").await;
    pty.type_keys("next\r");
    pty.wait_for("after the rewind").await;
    let sent = env.mock.requests().last().expect("a request").body["messages"].to_string();
    assert!(sent.contains("first question"), "the prompt stays: {sent}");
    assert!(!sent.contains("use tabs"), "the steer went back: {sent}");
}

#[tokio::test]
async fn with_nothing_configured_a_short_line_says_run_talaria_setup() {
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let vars = [("HOME".to_string(), home.path().display().to_string())];
    let pty = Pty::spawn_with(workspace.path(), &vars, &[]);
    pty.wait_for("could not start a session").await;
    let seen = pty.seen.clone();
    assert_eq!(pty.exit_code().await, Some(2));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let screen = seen.text();
    let said = &screen[screen.find("talaria-chat:").expect("said")..];
    assert!(said.contains("no model is set up yet"), "{said}");
    assert!(said.contains("talaria setup` in a terminal"), "{said}");
    assert!(!said.contains("Editors"), "not the editors' text: {said}");
    assert!(!said.contains("talaria-config"), "{said}");
    let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() <= 2, "{said}");
    assert!(said.trim().chars().count() <= 300, "short: {said}");
}

#[tokio::test]
async fn an_unknown_command_is_told_with_the_known_ones_and_never_reaches_the_model() {
    let env = TestEnv::new(vec![MockReply::text(&["about the hosts file"])]).await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    // The agent's commands are known once it has listed them.
    pty.type_keys("/he\t\r");
    pty.wait_for_after("The agent's commands:", "/compact")
        .await;
    pty.type_keys("/plna write the notes\r");
    pty.wait_for("unknown command /plna").await;
    pty.wait_for_after("unknown command /plna", "/plan").await;
    pty.wait_for_after("unknown command /plna", "/rewind").await;
    assert!(env.mock.requests().is_empty(), "nothing reached the model");
    // A line whose first word is a path is a prompt.
    pty.wait_for_after("unknown command /plna", "> ").await;
    pty.type_keys("/etc/hosts looks wrong\r");
    pty.wait_for("about the hosts file").await;
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0]
            .body
            .to_string()
            .contains("/etc/hosts looks wrong")
    );
}

#[tokio::test]
async fn the_answers_markdown_is_styled_on_a_terminal_and_plain_when_piped() {
    let chunks = [
        "# Plan\n",
        "Use **bo",
        "ld** and `code`.\n",
        "- first\n- second\n",
        "```\nlet **x** = 1;\n```\n",
        "done",
    ];
    let env = TestEnv::new(vec![MockReply::text(&chunks), MockReply::text(&chunks)]).await;
    let mut pty = Pty::spawn(&env);
    pty.wait_for("> ").await;
    pty.type_keys("show me\r");
    pty.wait_for("done").await;
    pty.wait_for_after("done", "> ").await;
    let screen = screen_of(&pty);
    let shown = screen.contents();
    for line in [
        "Use bold and code.",
        "• first",
        "• second",
        "let **x** = 1;",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }
    assert!(!shown.contains("# Plan"), "{shown}");
    assert!(!shown.contains("**bold**"), "{shown}");
    let (row, column) = find(&screen, "Plan");
    let title = screen.cell(row, column).expect("cell");
    assert!(title.bold() && title.underline(), "a heading is bold");
    let (row, column) = find(&screen, "bold and");
    assert!(screen.cell(row, column).expect("cell").bold());
    let (row, column) = find(&screen, "and code");
    assert!(!screen.cell(row, column).expect("cell").bold(), "bold ends");
    // Piped, the answer is the model's text as it is.
    let output = tokio::time::timeout(
        WAIT,
        crate::terminal_client::chat(&env, &["-p", "show me"]).output(),
    )
    .await
    .expect("in time")
    .expect("ran");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{}\n", chunks.concat())
    );
}
