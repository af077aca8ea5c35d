//! The protocol edge: the only place that knows ACP. It turns requests into engine ops and
//! engine events into `session/update` notifications and prompt responses. This module holds
//! the agent's state; each job has its own module: `dispatch` (the loop and method routing),
//! `launch` and `lifecycle` (session starts, loads, lists, forks), `prompt`, `settings`,
//! `commands` (slash commands), `client_bridge` (requests to the client), `forwarder`.
//!
//! Invariants:
//! - The dispatch loop never waits on a turn: `session/prompt` is queued and answered later by
//!   the session's forwarder, after every update of that turn has been sent.
//! - A panic while handling one request is answered with `-32603`; the loop goes on.
//! - At end of input every request read before it is answered (the slow parts still running
//!   are waited for, within a deadline), then every session is cancelled and `serve` returns
//!   once output is flushed.

mod capabilities;
mod cassettes;
mod client_bridge;
mod client_prompt;
mod commands;
mod compaction;
mod dispatch;
mod fork;
mod forwarder;
mod launch;
mod lifecycle;
mod logout;
mod mcp;
mod mcp_sign_in;
mod plan_updates;
mod process_shared;
mod prompt;
mod prompt_input;
mod providers;
mod quota;
mod replay;
mod rewind;
mod run_command;
mod server_window;
mod session_options;
mod settings;
mod shutdown;
mod skills;
mod steering;
mod updates;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use talaria_engine::{ModelRouter, SessionHandle};
use talaria_protocol::acp::{self, SessionNotification};
use talaria_protocol::{Peer, errors};
use tokio::sync::mpsc;

pub use cassettes::CassetteOptions;
use dispatch::{Deferred, StartContext};
pub use dispatch::{prepare_process, serve, serve_connection, serve_connection_on_streams};
use launch::{Launch, Launched, Ready, config_error, load_config, ready_session};
pub use process_shared::ProcessShared;
use prompt::request_of;
pub use server_window::local_server_report;
pub use shutdown::ConnectionStop;

struct LiveSession {
    handle: SessionHandle,
    /// The session's one writer of `session/update`s (its forwarder).
    updates: mpsc::UnboundedSender<forwarder::EdgeUpdates>,
    images_allowed: bool,
    /// Models offered for switching.
    models: Vec<String>,
    /// The client shows boolean config options.
    booleans: bool,
    /// What session responses say under `_meta`.
    meta: acp::Meta,
    /// How its commands start (sandbox, environment), and where: for `_talaria/run_command`.
    shell: Arc<talaria_tools::Shell>,
    cwd: std::path::PathBuf,
}

impl LiveSession {
    /// Hands updates to the session's writer; the receiver fires once they are queued for
    /// output (so a response sent after it follows them), or is dropped with the writer.
    fn write_soon(&self, updates: forwarder::EdgePayload) -> tokio::sync::oneshot::Receiver<()> {
        let (written, queued) = tokio::sync::oneshot::channel();
        let _ = self.updates.send(forwarder::EdgeUpdates {
            updates,
            written: Some(written),
        });
        queued
    }

    /// Hands an update to the session's writer, to follow whatever it writes now.
    fn write_later(&self, update: acp::SessionUpdate) {
        let _ = self.updates.send(forwarder::EdgeUpdates {
            updates: forwarder::EdgePayload::Updates(vec![update]),
            written: None,
        });
    }

    /// What a response about this session says now (its current mode and model).
    fn launched(&self) -> Launched {
        let (mode, model) = (self.handle.mode(), self.handle.model());
        Launched {
            modes: session_options::mode_state(mode),
            options: session_options::config_options(&session_options::OptionsNow {
                mode,
                model: &model,
                models: &self.models,
                effort: self.handle.effort(),
                booleans: self.booleans,
            }),
            meta: self.meta.clone(),
        }
    }
}

/// The model router (providers, key pools, fallbacks) and the configuration it was built
/// from; rebuilt when the configuration changes, shared by sessions otherwise (so key
/// cooldowns apply across sessions).
struct RouterCache {
    fingerprint: String,
    router: Arc<ModelRouter>,
}

struct Agent {
    peer: Peer,
    client_caps: client_bridge::ClientCaps,
    /// Configuration warnings were logged and shown (once per process).
    config_warned: bool,
    /// Notifications to send after the current request's answer.
    outbox: Vec<SessionNotification>,
    /// What to start after the current request's answer (and its notifications) is sent.
    after_answer: Vec<Box<dyn FnOnce() + Send>>,
    sessions: HashMap<String, LiveSession>,
    router: Option<RouterCache>,
    registry: talaria_tools::Registry,
    /// The session store's journal, started by `initialize` (or the first session that needs
    /// it); it opens the store in the background, again and again until it opens.
    store: Option<talaria_engine::Journal>,
    /// What this connection shares with the process's others (routers, window probes).
    shared: process_shared::ProcessShared,
    /// `--record` / `--replay`: sessions' model calls recorded or served from cassettes.
    cassettes: cassettes::Cassettes,
    /// Where requests whose slow part ran off the loop come back to be finished.
    deferred: mpsc::UnboundedSender<Deferred>,
    /// The requests whose slow part is running (answered when it comes back; at end of
    /// input, waited for).
    running_deferred: Vec<(acp::RequestId, String)>,
    /// Set by a request whose answer must follow updates still going out (a load's replay):
    /// fires once they are queued for output. The answer waits for it off the loop.
    answer_after: Option<tokio::sync::oneshot::Receiver<()>>,
    /// `logout` was answered and no `authenticate` since: sessions do not start.
    logged_out: bool,
    /// Endpoints the client set or disabled (`providers/*`), for sessions started after.
    client_providers: providers::ClientProviders,
    /// The sessions' rate-limit snapshots, for `quota/read`.
    quotas: Arc<quota::QuotaBoard>,
}

type Reply = Result<Value, acp::Error>;

fn to_value<T: serde::Serialize>(value: T) -> Reply {
    serde_json::to_value(value).map_err(|e| errors::internal_error(format!("serializing: {e}")))
}

fn session_not_found(id: &acp::SessionId) -> acp::Error {
    acp::Error::new(
        acp::ErrorCode::ResourceNotFound.into(),
        format!("Session not found: {id}"),
    )
}
