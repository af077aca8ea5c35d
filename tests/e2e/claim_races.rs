//! Two processes opening one closed session at the same instant: exactly one wins, and the
//! other is told the session is in use and where, every time — never a time-out nothing
//! waited for, and never "locked by another process" — however loaded the machine is (four
//! busy loops run beside the races).

use std::time::Instant;

use serde_json::json;

use crate::support::*;

const RACES: usize = 100;
/// Busy loops beside the races, as on a loaded machine.
const BUSY_LOOPS: usize = 4;

/// Threads spinning until dropped.
struct BusyLoops {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    loops: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoops {
    fn start(count: usize) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let loops = (0..count)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut spun = 0_u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        spun = std::hint::black_box(spun.wrapping_add(1));
                    }
                })
            })
            .collect();
        Self { stop, loops }
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for spinning in self.loops.drain(..) {
            let _ = spinning.join();
        }
    }
}

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
    let _busy = BusyLoops::start(BUSY_LOOPS);
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
            message.contains("open in another Talaria process")
                && message.contains("pid")
                && !message.contains("locked by another process"),
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
