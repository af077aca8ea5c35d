//! Talaria installed inside a workspace its commands may write: a command that puts a program
//! of its own in place of `talaria-sandbox` changes nothing, because the agent runs the helper
//! it opened when it started (through that descriptor), never the file found by name later.

use serde_json::json;
use talaria_harness::{AgentProcess, MockReply, WireFraming, binary::talaria_bin};

use crate::support::*;

#[tokio::test]
async fn a_helper_replaced_inside_the_workspace_is_never_run() {
    if !sandbox_enforced() {
        return;
    }
    let marker_name = "planted-helper-ran";
    let mut env = TestEnv::new(Vec::new()).await;
    let bin = env.workspace.path().join("tools/bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let built = talaria_bin();
    let helper = built.with_file_name("talaria-sandbox");
    if !helper.exists() {
        return; // a build without the helper beside it runs the agent's own binary
    }
    std::fs::copy(&built, bin.join("talaria")).expect("talaria copied");
    std::fs::copy(&helper, bin.join("talaria-sandbox")).expect("helper copied");
    let marker = env.workspace.path().join(marker_name);
    let plant = format!(
        "printf '#!/bin/sh\\ntouch {}\\nexit 0\\n' > tools/bin/helper.new && chmod +x \
         tools/bin/helper.new && mv -f tools/bin/helper.new tools/bin/talaria-sandbox && \
         echo planted",
        marker.display()
    );
    for reply in [
        MockReply::tool_call("p1", "terminal", json!({"command": plant})),
        MockReply::tool_call(
            "p2",
            "terminal",
            json!({"command": "echo still-the-real-helper"}),
        ),
        MockReply::text(&["done"]),
    ] {
        env.mock.push(reply);
    }
    env.write_config("mode = \"yolo\"\n");
    env.unprivileged(&[]);
    let mut agent = AgentProcess::spawn_as(
        &bin.join("talaria"),
        &["acp"],
        &env.env(),
        WireFraming::NewlineDelimited,
        env.user,
    )
    .await
    .expect("the copy starts");
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let response = prompt_unasked(&mut agent, &session).await;
    assert_eq!(stop_reason(&response), "end_turn", "{response}");
    let results = tool_results(&env.mock, 2);
    assert!(results[0].contains("planted"), "{}", results[0]);
    assert!(
        results[1].contains("still-the-real-helper"),
        "the next command ran through the helper opened at start: {}",
        results[1]
    );
    assert!(!marker.exists(), "the planted helper ran");
}
