//! `trust/apply` (the ACP workspace-trust draft): the client applies the user's decision
//! about a folder it was shown in a session's `_meta.workspaceTrust` — `trust_cwd` and
//! `trust_repo` remembered, `decline` remembered, `trust_session` for this process. A
//! decision that is not available now is refused (`invalid_params`). A running session is
//! not reloaded: it is told that a new session loads what the folder holds.

use serde_json::{Value, json};
use talaria_protocol::acp::{self, RequestId, SessionNotification};
use talaria_protocol::errors;

use super::session_errors::config_error;
use super::state::{Agent, LiveSession, Reply, session_not_found};
use super::updates;

/// The draft's method.
pub(super) const APPLY_METHOD: &str = "trust/apply";

/// What `trust/apply` asks.
struct ApplyTrust {
    cwd: std::path::PathBuf,
    decision: talaria_engine::TrustDecision,
    session: Option<String>,
}

fn parse(params: &Value) -> Result<ApplyTrust, acp::Error> {
    let bad = |why: &str| errors::invalid_params(format!("{APPLY_METHOD}: {why}"));
    let cwd = params["cwd"]
        .as_str()
        .filter(|c| std::path::Path::new(c).is_absolute())
        .ok_or_else(|| bad("cwd must be an absolute path"))?;
    let decision = params["decision"]
        .as_str()
        .and_then(talaria_engine::TrustDecision::named)
        .ok_or_else(|| bad("decision must be trust_repo, trust_cwd, trust_session or decline"))?;
    let session = match params.get("sessionId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        Some(_) => return Err(bad("sessionId must be a non-empty string")),
    };
    if decision == talaria_engine::TrustDecision::TrustSession && session.is_none() {
        return Err(bad("trust_session needs a sessionId"));
    }
    Ok(ApplyTrust {
        cwd: cwd.into(),
        decision,
        session,
    })
}

/// A decision applies only to a folder this client was shown a decision for: the working
/// directory of a session this connection opened (the one named, when one is; a client
/// attached to another's session cannot decide for it). A client cannot trust any other
/// folder (`/`, a file, a folder no session showed) by naming it. Answers the paths that
/// session's `workspaceTrust` showed as left out, and its assessment (the files as shown).
fn shown_here(agent: &Agent, asked: &ApplyTrust) -> Result<Shown, acp::Error> {
    let opened = |live: &&LiveSession| live.opened_here && live.cwd == asked.cwd;
    let shown = match &asked.session {
        Some(session) => {
            let Some(live) = agent.sessions.get(session) else {
                return Err(session_not_found(&acp::SessionId::new(session.as_str())));
            };
            Some(live).filter(opened)
        }
        None => agent.sessions.values().find(opened),
    };
    let Some(live) = shown else {
        return Err(errors::invalid_params(format!(
            "{APPLY_METHOD}: {} is not the working directory of {}; a client applies a \
             decision only for a folder a session it opened showed it",
            asked.cwd.display(),
            match &asked.session {
                Some(session) => format!("session {session}"),
                None => "a session this connection opened".to_string(),
            }
        )));
    };
    let assessed = live.trust.clone();
    let paths = &live
        .meta
        .get("workspaceTrust")
        .and_then(|t| t.get("details"))
        .and_then(|d| d.get("ignoredPaths"))
        .and_then(Value::as_array);
    let paths = paths
        .map(|paths| {
            paths
                .iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Shown { paths, assessed })
}

/// What a session showed its client of its folder: the paths left out, and the files as
/// they were read then.
struct Shown {
    paths: Vec<String>,
    assessed: std::sync::Arc<talaria_engine::TrustAssessment>,
}

/// Refuses a decision on a folder whose files are not what the session showed: a path it
/// did not list, or a file (an `AGENTS.md`, the project configuration, a skill folder) whose
/// content changed since.
fn as_shown(
    asked: &ApplyTrust,
    shown: &Shown,
    now: &talaria_engine::TrustAssessment,
) -> Result<(), acp::Error> {
    if !now.same_place_as(&shown.assessed) {
        return Err(errors::invalid_params(format!(
            "{APPLY_METHOD}: {} is not the folder the session showed (a link on its way now \
             leads elsewhere, or the folder was replaced); start a new session there to see it \
             before deciding",
            asked.cwd.display()
        )));
    }
    let mut unshown: Vec<String> = now
        .left_out()
        .iter()
        .map(|p| p.display().to_string())
        .filter(|path| !shown.paths.contains(path))
        .collect();
    unshown.extend(
        now.instructions
            .iter()
            .filter(|file| {
                !shown
                    .assessed
                    .instructions
                    .iter()
                    .any(|was| was.name == file.name && was.sha256 == file.sha256)
            })
            .map(|file| format!("{} (changed)", file.path.display())),
    );
    if unshown.is_empty() {
        return Ok(());
    }
    unshown.dedup();
    Err(errors::invalid_params(format!(
        "{APPLY_METHOD}: {} holds files the session did not show as they are now ({}); start \
         a new session to see them before deciding",
        asked.cwd.display(),
        unshown.join(", ")
    )))
}

/// `trust/apply`: checked here, applied off the loop.
pub(super) fn apply_trust(agent: &mut Agent, id: RequestId, params: &Value) -> Option<Reply> {
    let asked = match parse(params) {
        Ok(asked) => asked,
        Err(e) => return Some(Err(e)),
    };
    let shown = match shown_here(agent, &asked) {
        Ok(shown) => shown,
        Err(e) => return Some(Err(e)),
    };
    let slow = async move {
        let applied = tokio::task::spawn_blocking(move || {
            let config = talaria_engine::Config::load().map_err(config_error)?;
            let places = std::sync::Arc::new(talaria_files::Unguarded);
            let mut assessment = talaria_engine::assess_trust(&config.home, &asked.cwd, places);
            // The decision is for what the client was shown: a file planted or changed since
            // (a hook, a skill, an instruction) is not trusted with it. What is recorded is
            // this read, checked equal to what was shown.
            as_shown(&asked, &shown, &assessment)?;
            assessment
                .decide(&config.home, asked.decision)
                .map_err(|e| errors::invalid_params(format!("{APPLY_METHOD}: {e}")))?;
            // The running session is not reloaded: the folder stays trusted for the
            // sessions this process starts next.
            if asked.decision == talaria_engine::TrustDecision::TrustSession {
                talaria_engine::trust_for_process(&assessment);
            }
            Ok((asked.session, assessment.status))
        })
        .await;
        applied.unwrap_or_else(|e| {
            Err(errors::internal_error(format!(
                "applying trust failed: {e}"
            )))
        })
    };
    agent.defer(id, APPLY_METHOD, slow, |agent, (session, status)| {
        Box::pin(async move { trust_applied(agent, session, status) })
    });
    None
}

/// The answer, and a word to the session the decision came from.
fn trust_applied(
    agent: &mut Agent,
    session: Option<String>,
    status: talaria_engine::TrustStatus,
) -> Reply {
    if let Some(session) = session
        && status.is_trusted()
    {
        agent.outbox.push(SessionNotification::new(
            acp::SessionId::new(session),
            updates::notice_update(
                talaria_engine::NoticeLevel::Info,
                "The folder is trusted now: a new session loads its instructions, skills, \
                     configuration and hooks (this one keeps what it started with)."
                    .into(),
                agent.client_caps.notices,
            ),
        ));
    }
    Ok(json!({"workspaceTrust": {"status": status.as_str()}}))
}
