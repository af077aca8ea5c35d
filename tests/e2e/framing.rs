//! Content-Length framing end to end: the agent answers in the framing the client used.

use talaria_harness::{MockReply, WireFraming};

use crate::support::*;

#[tokio::test]
async fn content_length_framing_works_end_to_end() {
    let env = TestEnv::new(vec![MockReply::text(&["framed ", "reply"])]).await;
    let mut agent = env.spawn_with(WireFraming::ContentLength).await;
    let session = agent
        .start_session(env.workspace.path())
        .await
        .expect("session");
    let (response, updates) = prompt(&mut agent, &session, "hi").await;
    assert_eq!(stop_reason(&response), "end_turn");
    assert_eq!(
        chunks(&updates, "agent_message_chunk"),
        ["framed ", "reply"]
    );
    assert_clean_stdout(&agent);
}
