//! The harness's record-then-replay workflow, as a harness would use it: a scenario recorded
//! against the mock LLM, then replayed with no model, in a fresh workspace.

use std::path::Path;

use futures_util::FutureExt;
use talaria_harness::cassette::{Tape, run};
use talaria_harness::{AgentProcess, MockLlm, MockReply, binary::talaria_bin};

/// The scenario: one session, one question about a file.
fn ask_about_a_file<'a>(
    agent: &'a mut AgentProcess,
    workspace: &'a Path,
) -> futures_util::future::BoxFuture<'a, anyhow::Result<()>> {
    async move {
        let created = agent
            .call(
                "session/new",
                serde_json::json!({"cwd": workspace, "mcpServers": []}),
            )
            .await?;
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let answer = agent
            .call(
                "session/prompt",
                serde_json::json!({"sessionId": session,
                    "prompt": [{"type": "text", "text": "What does notes.txt say?"}]}),
            )
            .await?;
        anyhow::ensure!(answer["stopReason"] == "end_turn", "{answer}");
        Ok(())
    }
    .boxed()
}

/// A private home and workspace, as a harness's fixture would be.
type Fixture = (tempfile::TempDir, tempfile::TempDir, Vec<(String, String)>);

fn fixture(model_url: &str) -> anyhow::Result<Fixture> {
    let home = tempfile::tempdir()?;
    let workspace = tempfile::tempdir()?;
    std::fs::write(workspace.path().join("notes.txt"), "Ship on Friday.\n")?;
    let env = vec![
        ("HOME".into(), home.path().display().to_string()),
        (
            "TALARIA_HOME".into(),
            home.path().join("talaria").display().to_string(),
        ),
        ("OPENAI_BASE_URL".into(), model_url.into()),
        (
            "OPENAI_API_KEY".into(),
            "sk-harness-example-0123456789".into(),
        ),
        ("TALARIA_MODEL".into(), "mock-model".into()),
        ("TALARIA_CONTEXT_WINDOW".into(), "64000".into()),
        ("TALARIA_TITLES".into(), "off".into()),
    ];
    Ok((home, workspace, env))
}

#[tokio::test]
async fn a_recorded_scenario_replays_with_no_model_and_the_client_sees_the_same()
-> anyhow::Result<()> {
    let cassettes = tempfile::tempdir()?;
    let bin = talaria_bin();
    // Record against the mock.
    let mock = MockLlm::start(vec![
        MockReply::tool_call("n1", "read_file", serde_json::json!({"path": "notes.txt"})),
        MockReply::text(&["The notes say: ship on Friday."]),
    ])
    .await?;
    let (_home, workspace, env) = fixture(&mock.base_url())?;
    let recorded = run(
        &bin,
        &Tape::Record(cassettes.path().to_path_buf()),
        &env,
        workspace.path(),
        ask_about_a_file,
    )
    .await?;
    assert_eq!(mock.requests().len(), 2);
    // Replay with no model: nothing listens at the address any more.
    let (_home, workspace, env) = fixture("http://127.0.0.1:9/v1")?;
    let replayed = run(
        &bin,
        &Tape::replay(cassettes.path()),
        &env,
        workspace.path(),
        ask_about_a_file,
    )
    .await?;
    assert!(
        recorded
            .iter()
            .any(|m| m.to_string().contains("ship on Friday")),
        "{recorded:?}"
    );
    assert_eq!(replayed, recorded);
    Ok(())
}
