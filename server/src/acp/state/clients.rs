//! The clients of the wire room's sessions: what a client said it can do (`ClientCaps`), a
//! connection as one of a session's attached clients (`Member`), and a client following a
//! session of another process (`Followed`). A child of the leaf `state.rs`: it imports
//! nothing of the wire room.

use serde_json::Value;
use talaria_engine::Delegation;
use talaria_protocol::Peer;
use talaria_protocol::acp;
use talaria_record::EntryId;

use crate::sessions::ClientAbilities;

/// What the client said it can do, from `initialize`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientCaps {
    pub read_text_file: bool,
    pub write_text_file: bool,
    pub terminal: bool,
    /// The client shows `notice` updates.
    pub notices: bool,
    /// The client shows `compaction_update`s.
    pub compaction: bool,
    /// The client shows forms (`elicitation/create` in form mode).
    pub elicitation_form: bool,
    /// The client sends the user to an address (`elicitation/create` in URL mode).
    pub elicitation_url: bool,
    /// The client shows subagents as sessions of their own.
    pub subagents: bool,
    /// The client takes plan operations (`plan_update`, `plan_removed`).
    pub plans: bool,
    /// The client shows boolean config options.
    pub booleans: bool,
    /// The client takes `quota_update`s (the quotas draft's opt-in, read from `initialize`
    /// as it came: see `quota::wants_quota`).
    pub quota: bool,
    /// The checkpoints the client intercepts (the tool-interception draft's opt-in, read
    /// from `initialize` as it came: see `interception::wanted`).
    pub interception: talaria_engine::Interception,
}

impl ClientCaps {
    /// What the engine hands to the client.
    pub fn delegation(self) -> Delegation {
        Delegation {
            read_files: self.read_text_file,
            write_files: self.write_text_file,
            terminal: self.terminal,
            interception: self.interception,
        }
    }

    pub fn from_initialize(caps: &acp::ClientCapabilities) -> Self {
        Self {
            read_text_file: caps.fs.read_text_file,
            write_text_file: caps.fs.write_text_file,
            terminal: caps.terminal,
            notices: caps.session.as_ref().is_some_and(|s| s.notices.is_some()),
            compaction: caps
                .session
                .as_ref()
                .is_some_and(|s| s.compaction.is_some()),
            elicitation_form: caps.elicitation.as_ref().is_some_and(|e| e.form.is_some()),
            elicitation_url: caps.elicitation.as_ref().is_some_and(|e| e.url.is_some()),
            subagents: caps.subagents.is_some(),
            plans: caps.plan.is_some(),
            booleans: caps
                .session
                .as_ref()
                .and_then(|s| s.config_options.as_ref())
                .is_some_and(|c| c.boolean.is_some()),
            quota: false,
            interception: talaria_engine::Interception::default(),
        }
    }
}

impl ClientCaps {
    /// What a session's assembly needs to know of the client.
    pub fn abilities(self) -> ClientAbilities {
        ClientAbilities {
            forms: self.elicitation_form,
            delegation: self.delegation(),
            subagents: self.subagents,
        }
    }
}

/// A connection of this process, as the clients attached to a session know it.
pub type MemberId = u64;

/// A number no other connection of this process has.
pub fn next_member_id() -> MemberId {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A client attached to a session: where its messages go and what it can show.
#[derive(Clone)]
pub struct Member {
    pub id: MemberId,
    pub name: Option<String>,
    pub peer: Peer,
    pub caps: ClientCaps,
    /// Set when a session this client followed turned out deleted: its connection forgets
    /// what ended at its next request (the agent's `followings_ended`).
    pub followings_ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Member {
    /// How the others are told of it: `{clientId, name?}`.
    pub fn described(&self) -> Value {
        let mut said = serde_json::json!({"clientId": format!("client-{}", self.id)});
        if let Some(name) = &self.name {
            said["name"] = name.clone().into();
        }
        said
    }
}

/// A client following a session another process runs (`follow.rs`): dropped, the following
/// stops.
pub struct Followed {
    pub _stop: tokio_util::sync::DropGuard,
    /// Counted among the session's followers in this process while it lives.
    pub _counted: crate::sessions::ClientMark,
    pub catch_up: tokio_util::sync::CancellationToken,
    pub caught_up: tokio::sync::oneshot::Receiver<Option<EntryId>>,
    /// Set once the session turned out deleted and the client was told: the following is
    /// over, and this client forgets it (`follow::forget_deleted`).
    pub ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Followed {
    /// Whether the followed session was deleted (and the client told).
    pub fn has_ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Shows the rest of the record (read once more) and stops: the last entry the client
    /// has then seen, for what it is shown next to go on from.
    pub async fn finish(self) -> Option<EntryId> {
        self.catch_up.cancel();
        self.caught_up.await.ok().flatten()
    }
}
