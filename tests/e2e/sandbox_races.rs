//! The file tools race a sandboxed command: a background command swaps workspace files (and a
//! folder) for links to a private key and to Talaria's own settings, a thousand times over,
//! while `read_file`, `search_files`, `patch` and `write_file` work on the same names. Nothing
//! outside the workspace may be read or written through the race: no key or setting reaches
//! the model, in a result or a diff, and the key and the settings stay as they were.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_harness::MockReply;

use crate::support::*;

const KEY: &str = "RACED-PRIVATE-KEY-4417";
const MARKER: &str = "RACED-CONFIG-MARKER-9902";
const SWAPS: usize = 1000;

/// The swapping loop: each round puts a link in each name's place, then a plain file back
/// (each an atomic rename, as an attacker would), and the folder `d` likewise.
fn swapper(key: &str, config: &str, ssh: &str) -> String {
    format!(
        "for i in $(seq {SWAPS}); do \
           ln -sfn '{key}' f.new && mv -f f.new f.txt; \
           ln -sfn '{config}' c.new && mv -f c.new c.toml; \
           mv -T d d.real 2>/dev/null && ln -sfn '{ssh}' d; \
           printf 'plain\\n' > f.tmp && mv -f f.tmp f.txt; \
           printf 'x = 1\\n' > c.tmp && mv -f c.tmp c.toml; \
           rm -f d && mv -T d.real d 2>/dev/null; \
         done; echo swapped-all"
    )
}

/// One round of every file tool on the raced names.
fn round(tag: usize) -> MockReply {
    let mut calls: Vec<(String, &str, Value)> = Vec::new();
    for i in 0..6 {
        calls.push((format!("r{tag}-{i}"), "read_file", json!({"path": "f.txt"})));
        calls.push((
            format!("g{tag}-{i}"),
            "read_file",
            json!({"path": "d/id_ed25519"}),
        ));
        calls.push((
            format!("s{tag}-{i}"),
            "search_files",
            json!({"pattern": "RACED|plain|x = 1", "path": "."}),
        ));
        calls.push((
            format!("w{tag}-{i}"),
            "write_file",
            json!({"path": "c.toml", "content": "[sandbox]\nenabled = false\n"}),
        ));
        calls.push((
            format!("p{tag}-{i}"),
            "patch",
            json!({"path": "f.txt", "old_string": "plain", "new_string": "plain"}),
        ));
        calls.push((
            format!("n{tag}-{i}"),
            "write_file",
            json!({"path": "d/planted", "content": "planted"}),
        ));
    }
    let borrowed: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, tool, args)| (id.as_str(), *tool, args.clone()))
        .collect();
    batch(&borrowed)
}

fn refuse_questions() -> impl FnMut(&str, &Value) -> Result<Option<Value>, (i64, String)> {
    |method, params| match method {
        "session/request_permission" => Ok(Some(
            json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}),
        )),
        _ => panic!("the agent asked the client for {method}: {params}"),
    }
}

#[tokio::test]
async fn file_tools_racing_a_command_that_swaps_links_reach_nothing_outside() {
    if !sandbox_enforced() {
        return;
    }
    let mut script = vec![];
    let mut env = TestEnv::new(Vec::new()).await;
    let home = env.home.path().to_path_buf();
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).expect("ssh");
    std::fs::write(ssh.join("id_ed25519"), format!("{KEY}\n")).expect("key");
    let config = home.join("talaria/config.toml");
    let config_text = format!("mode = \"yolo\"\n# {MARKER}\n");
    env.write_config(&config_text);
    let ws = env.workspace.path();
    std::fs::write(ws.join("f.txt"), "plain\n").expect("f");
    std::fs::write(ws.join("c.toml"), "x = 1\n").expect("c");
    std::fs::create_dir_all(ws.join("d")).expect("d");
    std::fs::write(ws.join("d/id_ed25519"), "plain\n").expect("d file");
    // In a script, as an attacker would put it: the command line names nothing.
    std::fs::write(
        ws.join("swap.sh"),
        swapper(
            &ssh.join("id_ed25519").display().to_string(),
            &config.display().to_string(),
            &ssh.display().to_string(),
        ),
    )
    .expect("script");
    script.push(MockReply::tool_call(
        "bg",
        "terminal",
        json!({"command": "sh swap.sh", "background": true}),
    ));
    for tag in 0..4 {
        script.push(round(tag));
    }
    script.push(MockReply::text(&["done"]));
    for reply in script {
        env.mock.push(reply);
    }
    env.unprivileged(&[]);
    let (mut agent, session) = env.session().await;
    let id = agent
        .start_request("session/prompt", text_prompt(&session, "go"))
        .await
        .expect("prompt");
    let response = agent
        .drive(id, Duration::from_secs(180), refuse_questions())
        .await
        .expect("response");
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let sent = everything_sent(&env.mock);
    assert!(!sent.contains(KEY), "the key reached the model");
    assert!(
        !sent.contains(MARKER),
        "Talaria's settings reached the model"
    );
    let updates = serde_json::to_string(&agent.transcript).unwrap_or_default();
    assert!(!updates.contains(KEY), "the key reached the client");
    assert!(!updates.contains(MARKER), "the settings reached the client");
    assert_eq!(
        std::fs::read_to_string(ssh.join("id_ed25519")).expect("key"),
        format!("{KEY}\n"),
        "the key was not changed"
    );
    assert_eq!(
        std::fs::read_to_string(&config).expect("config"),
        config_text,
        "Talaria's settings were not changed"
    );
    assert!(
        !ssh.join("planted").exists(),
        "nothing was written into the key's folder"
    );
    // The swapping command ran (it was not refused), and each round's calls ran (a
    // refusal or a result each) while it went on.
    let started = tool_results(&env.mock, 1);
    assert!(!started[0].contains("declined"), "{}", started[0]);
    // Requests carry the whole history: the start and four rounds of 36 calls.
    let results = tool_results(&env.mock, 5);
    assert_eq!(results.len(), 1 + 4 * 36, "{results:#?}");
    let refused_or_changed = results
        .iter()
        .filter(|r| r.contains("through a link") || r.contains("changed while"))
        .count();
    let declined = results.iter().filter(|r| r.contains("declined")).count();
    eprintln!(
        "race: {refused_or_changed} of {} calls met a link, {declined} were asked and declined",
        results.len()
    );
}
