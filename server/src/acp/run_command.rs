//! `_talaria/run_command`: a command the client runs in a session's workspace, in the same
//! sandbox and clean environment as the session's own commands (its `terminal` tool), outside
//! any turn and never shown to the model: a batch's `setup` and `check`, a frontend's "run
//! the tests" button. Request `{sessionId, command, timeoutMs?}`; answered `{exitCode,
//! signal, output, elidedBytes, timedOut}`. Cancelling the request kills the command.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use talaria_protocol::acp::{self, RequestId};
use talaria_protocol::errors;
use talaria_tools::{CommandRunner, CommandSpec, LocalRunner};
use tokio_util::sync::CancellationToken;

use super::state::{Agent, Reply, session_not_found};

/// The method's name on the wire.
pub(super) const METHOD: &str = "_talaria/run_command";

/// Without `timeoutMs`: ten minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Output beyond this is elided from the middle.
const MOST_OUTPUT_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RunCommandRequest {
    session_id: acp::SessionId,
    command: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

pub(super) fn run_command(
    agent: &mut Agent,
    id: RequestId,
    cancel: CancellationToken,
    params: &serde_json::value::RawValue,
) -> Option<Reply> {
    let params: RunCommandRequest = match serde_json::from_str(params.get()) {
        Ok(params) => params,
        Err(e) => return Some(Err(errors::invalid_params(format!("{METHOD}: {e}")))),
    };
    if params.command.trim().is_empty() {
        return Some(Err(errors::invalid_params(format!(
            "{METHOD}: command is empty"
        ))));
    }
    let Some(session) = agent.sessions.get(params.session_id.0.as_ref()) else {
        return Some(Err(session_not_found(&params.session_id)));
    };
    let spec = CommandSpec {
        local: session.shell.local(&params.command, true),
        command: params.command,
        cwd: session.cwd.clone(),
        timeout: params
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis),
        max_output_bytes: MOST_OUTPUT_BYTES,
        elsewhere: None,
    };
    let slow = async move {
        let ended = LocalRunner
            .run(spec, &cancel, None)
            .await
            .map_err(|e| errors::internal_error(format!("{METHOD}: {e}")))?;
        Ok(json!({
            "exitCode": ended.exit_code,
            "signal": ended.signal,
            "output": ended.output,
            "elidedBytes": ended.elided_bytes,
            "timedOut": ended.timed_out,
        }))
    };
    agent.defer(id, METHOD, slow, |_, answer| {
        Box::pin(async move { Ok(answer) })
    });
    None
}
