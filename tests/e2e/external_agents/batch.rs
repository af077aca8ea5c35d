//! `talaria batch` over two agents: a task's `agent` runs it on that agent (its prompt as
//! `/agent NAME TEXT`, inside Talaria's walls), the others on Talaria's own loop; the
//! results name the agent, the external agent's trajectory is built from its ACP updates and
//! requests, and `summary.md` compares the agents.

use serde_json::json;
use talaria_harness::MockReply;

use super::scripted_child;
use crate::batch::{batch_run, results, trajectory, write_lines};

#[tokio::test]
async fn a_batch_over_two_agents_runs_each_task_on_its_agent_and_compares_them() {
    let script = json!([[{"say": "Reading. "}, {"read": "notes.txt"},
        {"tool_call": "listed the files"}, {"say": "All is well."},
        {"usage": {"input": 120, "output": 30}}]]);
    let env = scripted_child(Vec::new(), script, "").await;
    env.mock
        .script_for_prompt("[own]", vec![MockReply::text(&["my own answer"])]);
    let data = env.home.path().join("data");
    let folder = data.join("folder");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join("notes.txt"), "the notes\n").expect("notes");
    let dataset = data.join("tasks.jsonl");
    write_lines(
        &dataset,
        &[
            json!({"id": "own", "prompt": "[own] say hi"}),
            json!({"id": "theirs", "prompt": "look at the notes", "agent": "scripted",
                   "workspace": "folder", "check": "test -f notes.txt"}),
        ],
    );
    let out = env.home.path().join("out");
    let (code, stderr) = batch_run(
        &env,
        &[
            dataset.to_str().expect("path"),
            "--out",
            out.to_str().expect("path"),
            "--quiet",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let results = results(&out);
    let theirs = &results["theirs"];
    assert_eq!(theirs["agent"], "scripted", "{theirs}");
    assert_eq!(theirs["verdict"], "pass", "{theirs}");
    assert_eq!(theirs["tokens_in"], 120, "{theirs}");
    assert_eq!(theirs["tokens_out"], 30, "{theirs}");
    assert!(results["own"].get("agent").is_none(), "{}", results["own"]);
    let trajectory = trajectory(&out, "theirs");
    assert_eq!(trajectory["model"], "agent:scripted", "{trajectory}");
    let messages = trajectory["messages"].to_string();
    for expected in [
        "look at the notes",
        "fs/read_text_file",
        "the notes",
        "listed the files",
        "All is well.",
    ] {
        assert!(messages.contains(expected), "{expected}: {messages}");
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary");
    assert!(summary.contains("## By agent"), "{summary}");
    assert!(
        summary.contains("| scripted | 1 | 1 | 0 |") && summary.contains("| talaria | 1 |"),
        "{summary}"
    );
}
