//! What a local model server's context window decides about a session, for a session that
//! starts before the server has answered: the session answers `session/new` at once and its
//! actor takes these before it reads its first op (so only a prompt that comes before the
//! answer waits for it).

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use talaria_tools::Registry;

/// The parts of a session's settings a server's window decides.
pub struct WindowSizing {
    /// The window the session's budgets are sized for.
    pub context_window: u64,
    /// The server serves one request at a time.
    pub single_slot: bool,
    /// Subagents through `delegate_task` (a small window's core toolsets leave it out).
    pub subagents: Option<usize>,
    /// The stable instructions for the session's toolsets (a new record's first entry).
    pub system_prompt: String,
    /// The session's tools, narrowed to its toolsets.
    pub registry: Registry,
}

/// A [`WindowSizing`] on its way.
pub struct PendingSizing(BoxFuture<'static, WindowSizing>);

impl PendingSizing {
    pub fn new(sizing: impl Future<Output = WindowSizing> + Send + 'static) -> Self {
        Self(sizing.boxed())
    }

    pub(crate) async fn arrived(self) -> WindowSizing {
        self.0.await
    }
}

impl std::fmt::Debug for PendingSizing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingSizing")
    }
}
