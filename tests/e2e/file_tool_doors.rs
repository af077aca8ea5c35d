//! The file tools against links into what the sandbox hides that are not credentials by
//! name — another session's private temporary folder, a `[sandbox] hidden` folder — planted
//! by a sandboxed command: `search_files` aimed at the link (contents and names), `read_file`
//! through a folder link and a file link, a search from the root past the links, and a
//! background command flipping the link while the tools read. Nothing hidden reaches the
//! model or the client. And the approval around the file tools: in `yolo` an edit outside
//! the workspace asks (as docs/security.md says); a `write_file` of the content a file
//! already holds is not asked about.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

/// Made by the other session's command (whose text does not hold it).
const OTHER_SECRET: &str = "OTHER-SESSION-8812";
const NOTE_SECRET: &str = "HIDDEN-NOTE-3391";

fn refuse_questions() -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    |method, params| match method {
        "session/request_permission" => Ok(Some(
            json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}),
        )),
        _ => panic!("the agent asked the client for {method}: {params}"),
    }
}

/// The calls that aim the file tools at the planted links.
fn aimed_calls(tag: &str) -> MockReply {
    let calls = [
        (
            "s1",
            "search_files",
            json!({"pattern": "SECRET|SCRATCH|NOTE", "path": "peek"}),
        ),
        (
            "s2",
            "search_files",
            json!({"pattern": "*", "path": "peek", "target": "files"}),
        ),
        (
            "s3",
            "search_files",
            json!({"pattern": "NOTE", "path": "peek2"}),
        ),
        (
            "s4",
            "search_files",
            json!({"pattern": "*", "path": "peek2", "target": "files"}),
        ),
        ("r1", "read_file", json!({"path": "peek/scratch.txt"})),
        ("r2", "read_file", json!({"path": "diary.txt"})),
        ("r3", "read_file", json!({"path": "peek2/diary.txt"})),
        (
            "s5",
            "search_files",
            json!({"pattern": "SECRET|SCRATCH|NOTE|visible"}),
        ),
        (
            "s6",
            "search_files",
            json!({"pattern": "*.txt", "target": "files"}),
        ),
    ];
    let named: Vec<(String, &str, Value)> = calls
        .iter()
        .map(|(id, tool, args)| (format!("{tag}-{id}"), *tool, args.clone()))
        .collect();
    let borrowed: Vec<(&str, &str, Value)> = named
        .iter()
        .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
        .collect();
    batch(&borrowed)
}

#[tokio::test]
async fn links_into_another_sessions_folder_or_a_hidden_place_show_nothing_of_them() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(Vec::new()).await;
    let home = env.home.path().to_path_buf();
    std::fs::create_dir_all(home.join("notes")).expect("notes");
    std::fs::write(home.join("notes/diary.txt"), format!("{NOTE_SECRET}\n")).expect("diary");
    env.write_config("mode = \"yolo\"\n[sandbox]\nhidden = [\"~/notes\"]\n");
    std::fs::write(env.workspace.path().join("visible.txt"), "visible\n").expect("visible");
    env.unprivileged(&[]);
    let mut agent = initialized(&env).await;
    let other_dir = tempfile::tempdir().expect("other workspace");
    give_to(other_dir.path(), NOBODY);
    let own = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let other = agent.start_session(other_dir.path()).await.expect("other");
    // The other session keeps something in its private temporary folder.
    env.mock.push(MockReply::tool_call(
        "o",
        "terminal",
        json!({"command": "printf 'OTHER-SESSION-%s\\n' \"$((4400+4412))\" > \"$TMPDIR/scratch.txt\" && printf '%s' \"$TMPDIR\""}),
    ));
    env.mock.push(MockReply::text(&["kept"]));
    let (answer, _) = prompt(&mut agent, &other, "keep a note").await;
    assert_eq!(stop_reason(&answer), "end_turn", "{answer}");
    let other_tmp = tool_results(&env.mock, 1)
        .last()
        .cloned()
        .expect("the folder's name");
    let other_tmp = other_tmp
        .lines()
        .find(|l| l.contains("talaria-"))
        .expect("a private folder")
        .trim()
        .to_string();
    let notes = home.join("notes").display().to_string();
    env.mock.push(MockReply::tool_call(
        "plant",
        "terminal",
        json!({"command": format!(
            "ln -s '{other_tmp}' peek && ln -s '{notes}' peek2 && ln -s '{notes}/diary.txt' diary.txt && ls -la"
        )}),
    ));
    env.mock.push(aimed_calls("a"));
    env.mock.push(MockReply::text(&["done"]));
    let id = agent
        .start_request("session/prompt", text_prompt(&own, "look"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, Duration::from_secs(60), refuse_questions())
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 4);
    assert_eq!(results.len(), 1 + 9, "{results:#?}");
    let sent = everything_sent(&env.mock);
    let seen = serde_json::to_string(&agent.transcript).unwrap_or_default();
    for secret in [OTHER_SECRET, NOTE_SECRET] {
        assert!(
            !sent.contains(secret),
            "{secret} reached the model: {results:#?}"
        );
        assert!(!seen.contains(secret), "{secret} reached the client");
    }
    assert!(
        !sent.contains("scratch.txt:"),
        "no name inside the other folder is listed"
    );
    // The search from the root still finds the workspace's own file.
    assert!(results[8].contains("visible.txt"), "{}", results[8]);
    for (index, result) in results[1..8].iter().enumerate() {
        assert!(
            result.contains("hid") || result.contains("through a link"),
            "call {index} names why: {result}"
        );
    }
}

#[tokio::test]
async fn a_link_flipped_while_the_file_tools_read_never_shows_the_other_sessions_folder() {
    if !sandbox_enforced() {
        return;
    }
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    let mut agent = initialized(&env).await;
    let other_dir = tempfile::tempdir().expect("other workspace");
    give_to(other_dir.path(), NOBODY);
    let own = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let other = agent.start_session(other_dir.path()).await.expect("other");
    env.mock.push(MockReply::tool_call(
        "o",
        "terminal",
        json!({"command": "printf 'OTHER-SESSION-%s\\n' \"$((4400+4412))\" > \"$TMPDIR/scratch.txt\" && printf '%s' \"$TMPDIR\""}),
    ));
    env.mock.push(MockReply::text(&["kept"]));
    prompt(&mut agent, &other, "keep a note").await;
    let other_tmp = tool_results(&env.mock, 1)
        .last()
        .and_then(|r| {
            r.lines()
                .find(|l| l.contains("talaria-"))
                .map(str::to_string)
        })
        .expect("a private folder");
    let swapper = format!(
        "mkdir -p real && printf 'plain\\n' > real/scratch.txt; \
         for i in $(seq 2000); do ln -sfn '{}' peek.new && mv -fT peek.new peek; \
         rm -f peek && ln -sfn real peek; done; echo swapped",
        other_tmp.trim()
    );
    std::fs::write(env.workspace.path().join("swap.sh"), swapper).expect("script");
    give_to(env.workspace.path(), NOBODY);
    env.mock.push(MockReply::tool_call(
        "bg",
        "terminal",
        json!({"command": "sh swap.sh", "background": true}),
    ));
    for round in 0..4 {
        let calls: Vec<(String, &str, Value)> = (0..8)
            .flat_map(|i| {
                [
                    (
                        format!("r{round}-{i}"),
                        "read_file",
                        json!({"path": "peek/scratch.txt"}),
                    ),
                    (
                        format!("s{round}-{i}"),
                        "search_files",
                        json!({"pattern": "SCRATCH|plain", "path": "peek"}),
                    ),
                    (
                        format!("f{round}-{i}"),
                        "search_files",
                        json!({"pattern": "*", "path": "peek", "target": "files"}),
                    ),
                ]
            })
            .collect();
        let borrowed: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
            .collect();
        env.mock.push(batch(&borrowed));
    }
    env.mock.push(MockReply::text(&["done"]));
    let id = agent
        .start_request("session/prompt", text_prompt(&own, "race"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, Duration::from_secs(180), refuse_questions())
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let sent = everything_sent(&env.mock);
    assert!(
        !sent.contains(OTHER_SECRET),
        "the other session's note reached the model"
    );
    let seen = serde_json::to_string(&agent.transcript).unwrap_or_default();
    assert!(!seen.contains(OTHER_SECRET), "the note reached the client");
    let results = tool_results(&env.mock, 7);
    let plain = results.iter().filter(|r| r.contains("plain")).count();
    eprintln!(
        "race: {plain} of {} calls read the real folder",
        results.len()
    );
}

#[tokio::test]
async fn in_yolo_an_edit_outside_the_workspace_asks_and_one_inside_does_not() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"yolo\"\n");
    let outside = env.home.path().join("notes.txt");
    std::fs::write(&outside, "mine\n").expect("notes");
    env.mock.push(batch(&[
        (
            "out",
            "write_file",
            json!({"path": outside.display().to_string(), "content": "agent's\n"}),
        ),
        (
            "in",
            "write_file",
            json!({"path": "inside.txt", "content": "agent's\n"}),
        ),
    ]));
    env.mock.push(MockReply::text(&["done"]));
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "write"))
        .await
        .expect("prompt");
    let mut asked = Vec::new();
    let response = agent
        .drive(id, WAIT, |method, params| {
            assert_eq!(method, "session/request_permission");
            asked.push(params.clone());
            Ok(Some(
                json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}),
            ))
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(asked.len(), 1, "only the edit outside asks: {asked:#?}");
    assert!(
        asked[0].to_string().contains("outside the workspace"),
        "{}",
        asked[0]
    );
    assert_eq!(std::fs::read_to_string(&outside).expect("notes"), "mine\n");
    assert_eq!(
        std::fs::read_to_string(env.workspace.path().join("inside.txt")).expect("inside"),
        "agent's\n"
    );
}

#[tokio::test]
async fn a_write_of_the_content_a_file_holds_is_not_asked_about_and_changes_nothing() {
    let mut env = TestEnv::new(Vec::new()).await;
    env.write_config("mode = \"ask\"\n");
    let file = env.workspace.path().join("same.txt");
    std::fs::write(&file, "same\n").expect("same");
    std::fs::write(env.workspace.path().join(".env"), "TOKEN=1\n").expect("env");
    env.mock.push(MockReply::tool_call(
        "w1",
        "write_file",
        json!({"path": "same.txt", "content": "same\n"}),
    ));
    env.mock.push(MockReply::tool_call(
        "w2",
        "write_file",
        json!({"path": "same.txt", "content": "different\n"}),
    ));
    // A secret's content is asked about whatever it holds: no oracle of what it holds.
    env.mock.push(MockReply::tool_call(
        "w3",
        "write_file",
        json!({"path": ".env", "content": "TOKEN=1\n"}),
    ));
    env.mock.push(MockReply::text(&["done"]));
    env.unprivileged(&[]);
    let before = std::fs::metadata(&file)
        .expect("meta")
        .modified()
        .expect("mtime");
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "write"))
        .await
        .expect("prompt");
    let mut asked = Vec::new();
    let response = agent
        .drive(id, WAIT, |_, params| {
            asked.push(
                params["toolCall"]["toolCallId"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
            Ok(Some(
                json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}),
            ))
        })
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    assert_eq!(
        asked,
        ["w2", "w3"],
        "the unchanged write is not asked about"
    );
    let results = tool_results(&env.mock, 3);
    assert!(results[0].contains("nothing changed"), "{}", results[0]);
    assert_eq!(std::fs::read_to_string(&file).expect("same"), "same\n");
    assert_eq!(
        std::fs::metadata(&file)
            .expect("meta")
            .modified()
            .expect("mtime"),
        before,
        "not even rewritten"
    );
}
