//! What each step of a plan does to the world. A step's own failures (a refused request, a
//! process that died under it) are part of the simulation, not problems: the invariants
//! checked after it are.

use std::time::Duration;

use serde_json::json;
use talaria_harness::MockReply;

use super::plan::{Step, TurnKind};
use super::world::{Session, World};
use crate::client::prompt_params;
use crate::home::Faults;
use crate::operations::point;
use crate::points::Pass;

/// Runs `step` (number `n` of the plan); a problem it saw itself (a stop that hung).
pub async fn run(world: &mut World, n: usize, step: Step) -> Option<String> {
    let done = match step {
        Step::NewSession { slot } => new_session(world, slot).await,
        Step::Prompt {
            slot,
            session,
            turn,
        } => prompt(world, n, slot, session, turn).await,
        Step::Steer { slot, session } => steer_or_cancel(world, n, slot, session, true).await,
        Step::Cancel { slot, session } => steer_or_cancel(world, n, slot, session, false).await,
        Step::Fork { slot, session } => fork(world, slot, session).await,
        Step::Close { slot, session } => close(world, slot, session).await,
        Step::Delete { slot, session } => delete(world, slot, session).await,
        Step::Rewind {
            slot,
            session,
            files,
        } => rewind(world, slot, session, files).await,
        Step::Compact { slot, session } => compact(world, n, slot, session).await,
        Step::Stop { slot } => return world.stop(slot).await,
        Step::Kill { slot } => {
            world.kill(slot).await;
            Ok(())
        }
        Step::CrashAt { slot, point, nth } => {
            let problem = world.stop(slot).await;
            world.next_faults[usize::from(slot)] = Faults {
                crash_at: Some(Pass {
                    name: point.to_string(),
                    nth: u64::from(nth),
                }),
                ..Faults::default()
            };
            // It may die at once (a point its start passes): the next step starts another.
            if let Err(e) = world.proc(slot).await {
                world
                    .log
                    .push(format!("  (the process did not start: {e})"));
            }
            return problem;
        }
        Step::Refuse {
            slot,
            point,
            nth,
            times,
        } => {
            let problem = world.stop(slot).await;
            let name = point;
            let before = nth.saturating_sub(1);
            world.next_faults[usize::from(slot)] = Faults {
                failpoints: Some(format!("{name}={before}*off->{times}*return")),
                ..Faults::default()
            };
            if let Err(e) = world.proc(slot).await {
                world
                    .log
                    .push(format!("  (the process did not start: {e})"));
            }
            return problem;
        }
        Step::HoldStore { steps } => {
            if steps == 0 {
                world.held = None;
            } else if world.held.is_none() {
                world.held = crate::stalls::hold_write_lock(&world.home.sqlite_path());
            }
            world.held_for = usize::from(steps) + 1;
            Ok(())
        }
    };
    if let Err(e) = done {
        world.log.push(format!("  ({e:#})"));
    }
    None
}

async fn new_session(world: &mut World, slot: u8) -> anyhow::Result<()> {
    let cwd = world
        .home
        .workspace()
        .join(format!("s{}", world.sessions.len()));
    std::fs::create_dir_all(&cwd)?;
    let id = world.proc(slot).await?.new_session(&cwd).await?;
    world.sessions.push(Session {
        id,
        cwd,
        holder: Some(slot),
        last_process: world.process_number(slot),
        deleted: false,
        turns: Vec::new(),
    });
    Ok(())
}

/// The session a step names, open in a process: its index and slot.
async fn opened(world: &mut World, slot: u8, session: u8) -> anyhow::Result<(usize, u8)> {
    let Some(at) = world.session(session) else {
        anyhow::bail!("no session yet");
    };
    let slot = world.open(at, slot).await?;
    Ok((at, slot))
}

async fn prompt(
    world: &mut World,
    n: usize,
    slot: u8,
    session: u8,
    turn: TurnKind,
) -> anyhow::Result<()> {
    let (at, slot) = opened(world, slot, session).await?;
    world.script_turn(turn, &format!("answer of step {n}"), "notes.txt");
    let id = world.sessions[at].id.clone();
    let text = format!("question of step {n}");
    let client = world.proc(slot).await?;
    let from = client.agent.transcript.len();
    let answer = client.prompt(&id, &text).await?;
    let streamed = client.agent.transcript[from..].to_vec();
    world.note_turn(at, &text, &answer, &streamed);
    Ok(())
}

async fn steer_or_cancel(
    world: &mut World,
    n: usize,
    slot: u8,
    session: u8,
    steer: bool,
) -> anyhow::Result<()> {
    let (at, slot) = opened(world, slot, session).await?;
    let first = format!("the start of step {n}");
    world.home.script([MockReply::Hang {
        chunks: vec![first.clone()],
    }]);
    if steer {
        world
            .home
            .script([MockReply::text(&[&format!("steered answer of step {n}")])]);
    }
    let id = world.sessions[at].id.clone();
    let text = format!("question of step {n}");
    let client = world.proc(slot).await?;
    let from = client.agent.transcript.len();
    let request = client
        .start("session/prompt", prompt_params(&id, &text))
        .await?;
    client.streamed(&id, &first).await?;
    if steer {
        let steered = format!("steer of step {n}");
        client
            .request("_session/steering", prompt_params(&id, &steered))
            .await?;
    } else {
        client
            .notify("session/cancel", json!({"sessionId": id}))
            .await?;
    }
    let answer = client.finish(request).await?;
    let streamed = client.agent.transcript[from..].to_vec();
    world.note_turn(at, &text, &answer, &streamed);
    Ok(())
}

async fn fork(world: &mut World, slot: u8, session: u8) -> anyhow::Result<()> {
    let (at, slot) = opened(world, slot, session).await?;
    let parent = world.sessions[at].clone();
    let params = json!({"sessionId": parent.id, "cwd": parent.cwd, "mcpServers": []});
    let answer = world
        .proc(slot)
        .await?
        .request("session/fork", params)
        .await?;
    let Some(id) = answer["result"]["sessionId"].as_str() else {
        anyhow::bail!("fork refused: {answer}");
    };
    world.sessions.push(Session {
        id: id.to_string(),
        holder: Some(slot),
        last_process: world.process_number(slot),
        ..parent
    });
    Ok(())
}

async fn close(world: &mut World, slot: u8, session: u8) -> anyhow::Result<()> {
    let (at, slot) = opened(world, slot, session).await?;
    let id = world.sessions[at].id.clone();
    let answer = world
        .proc(slot)
        .await?
        .request("session/close", json!({"sessionId": id}))
        .await?;
    if answer.get("result").is_some() {
        world.sessions[at].holder = None;
    }
    Ok(())
}

async fn delete(world: &mut World, slot: u8, session: u8) -> anyhow::Result<()> {
    let Some(at) = world.session(session) else {
        anyhow::bail!("no session yet");
    };
    // Deleted where it is open (else from `slot`).
    let slot = world.sessions[at]
        .holder
        .filter(|h| world.slots[usize::from(*h)].is_some())
        .unwrap_or(slot);
    let id = world.sessions[at].id.clone();
    let answer = world
        .proc(slot)
        .await?
        .request("session/delete", json!({"sessionId": id}))
        .await?;
    if answer.get("result").is_some() {
        world.sessions[at].deleted = true;
        world.sessions[at].holder = None;
    }
    Ok(())
}

async fn rewind(world: &mut World, slot: u8, session: u8, files: bool) -> anyhow::Result<()> {
    let (at, slot) = opened(world, slot, session).await?;
    let turns = world.sessions[at].turns.clone();
    let Some(last) = turns.last() else {
        anyhow::bail!("nothing to rewind");
    };
    let mut params = json!({
        "sessionId": world.sessions[at].id,
        "beforeMessage": point(&last.user_id, &last.user_text),
        "restoreFiles": files,
    });
    if let Some((id, text)) = turns
        .len()
        .checked_sub(2)
        .and_then(|i| turns[i].answer.clone())
    {
        params["resumeAtMessage"] = point(&id, &text);
    }
    let answer = world
        .proc(slot)
        .await?
        .request("_session/rewind", params)
        .await?;
    if answer["result"]["rewound"] == true {
        world.sessions[at].turns.pop();
    }
    Ok(())
}

async fn compact(world: &mut World, n: usize, slot: u8, session: u8) -> anyhow::Result<()> {
    let (at, slot) = opened(world, slot, session).await?;
    world.home.mock.script_for_model(
        "summary-model",
        vec![MockReply::text(&[&format!(
            "## Goal\nThe summary of step {n}."
        )])],
    );
    let id = world.sessions[at].id.clone();
    let client = world.proc(slot).await?;
    client.prompt(&id, "/compact").await?;
    // The summary's request may still be on its way: a moment for it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}
