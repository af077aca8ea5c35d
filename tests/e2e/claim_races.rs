//! Two processes opening one closed session at the same instant: exactly one wins, and the
//! other is told the session is in use and where, every time — never a time-out nothing
//! waited for.

use std::time::Instant;

use serde_json::json;

use crate::support::*;

const RACES: usize = 100;

#[tokio::test]
async fn every_loser_of_a_hundred_claim_races_is_told_in_use() {
    let env = TestEnv::new(Vec::new()).await;
    let session = {
        let (mut agent, session) = env.session().await;
        agent.close_stdin();
        agent.wait_exit(WAIT).await.expect("exits");
        session
    };
    let load = json!({"sessionId": session, "cwd": env.workspace.path(), "mcpServers": []});
    let mut reasons = Vec::new();
    for race in 0..RACES {
        let (mut a, mut b) = (initialized(&env).await, initialized(&env).await);
        let started = Instant::now();
        let (first, second) = (
            a.start_request("session/load", load.clone())
                .await
                .expect("load a"),
            b.start_request("session/load", load.clone())
                .await
                .expect("load b"),
        );
        let (ra, rb) = tokio::join!(a.wait_response(first, WAIT), b.wait_response(second, WAIT));
        let answers = [ra.expect("a answered"), rb.expect("b answered")];
        let won = answers.iter().filter(|r| r.get("result").is_some()).count();
        assert_eq!(won, 1, "race {race}: exactly one wins: {answers:?}");
        let lost = answers
            .iter()
            .find(|r| r.get("error").is_some())
            .expect("a loser");
        let message = lost["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("open in another Talaria process") && message.contains("pid"),
            "race {race} (after {:?}): the loser is told where the session is open: {lost}",
            started.elapsed()
        );
        reasons.push(message.to_string());
        kill_now(&a);
        kill_now(&b);
        let _ = a.wait_exit(WAIT).await;
        let _ = b.wait_exit(WAIT).await;
    }
    assert_eq!(reasons.len(), RACES);
}
