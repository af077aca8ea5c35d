//! A running child's client side: each of its requests and updates goes to the delegation
//! whose child session it names (one child may serve several delegations of its session,
//! each on a session of its own), and the cost it reports per session is kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use talaria_conductor::{ChildHost, HostFuture};
use talaria_protocol::acp;

use super::host::HostOnAcp;

/// The delegations of one child, by the child's session id.
#[derive(Default)]
pub(super) struct Routes {
    open: Mutex<HashMap<String, Arc<HostOnAcp>>>,
    /// The last cumulative cost (US dollars) each session of the child reported.
    costs: Mutex<HashMap<String, f64>>,
}

impl Routes {
    /// Sends `session`'s requests and updates to `host` until [`Routes::close`]; the cost
    /// the session had reported so far (the delegation's starts from there).
    pub(super) fn open(&self, session: &str, host: Arc<HostOnAcp>) -> f64 {
        talaria_util::lock(&self.open).insert(session.to_string(), host);
        self.cost(session)
    }

    pub(super) fn close(&self, session: &str) {
        talaria_util::lock(&self.open).remove(session);
    }

    /// The cumulative cost `session` reported last.
    pub(super) fn cost(&self, session: &str) -> f64 {
        talaria_util::lock(&self.costs)
            .get(session)
            .copied()
            .unwrap_or(0.0)
    }

    fn host(&self, session: &acp::SessionId) -> Result<Arc<HostOnAcp>, acp::Error> {
        talaria_util::lock(&self.open)
            .get(&*session.0)
            .cloned()
            .ok_or_else(|| {
                acp::Error::new(
                    -32000,
                    format!("no task of Talaria's runs on session {}", session.0),
                )
            })
    }

    fn note_cost(&self, notification: &acp::SessionNotification) {
        if let acp::SessionUpdate::UsageUpdate(usage) = &notification.update
            && let Some(cost) = &usage.cost
            && cost.currency.eq_ignore_ascii_case("USD")
            && cost.amount.is_finite()
        {
            let session = notification.session_id.0.to_string();
            talaria_util::lock(&self.costs).insert(session, cost.amount);
        }
    }
}

/// Asks the delegation of `$request`'s session with `$method`.
macro_rules! routed {
    ($self:ident, $request:ident, $method:ident) => {{
        let host = $self.host(&$request.session_id);
        async move { host?.$method($request).await }.boxed()
    }};
}

impl ChildHost for Routes {
    fn update<'a>(&'a self, update: acp::SessionNotification) -> BoxFuture<'a, ()> {
        self.note_cost(&update);
        match self.host(&update.session_id) {
            Ok(host) => async move { host.update(update).await }.boxed(),
            Err(_) => async {}.boxed(),
        }
    }

    fn read_text_file<'a>(
        &'a self,
        request: acp::ReadTextFileRequest,
    ) -> HostFuture<'a, acp::ReadTextFileResponse> {
        routed!(self, request, read_text_file)
    }

    fn write_text_file<'a>(
        &'a self,
        request: acp::WriteTextFileRequest,
    ) -> HostFuture<'a, acp::WriteTextFileResponse> {
        routed!(self, request, write_text_file)
    }

    fn request_permission<'a>(
        &'a self,
        request: acp::RequestPermissionRequest,
    ) -> HostFuture<'a, acp::RequestPermissionResponse> {
        routed!(self, request, request_permission)
    }

    fn create_terminal<'a>(
        &'a self,
        request: acp::CreateTerminalRequest,
    ) -> HostFuture<'a, acp::CreateTerminalResponse> {
        routed!(self, request, create_terminal)
    }

    fn terminal_output<'a>(
        &'a self,
        request: acp::TerminalOutputRequest,
    ) -> HostFuture<'a, acp::TerminalOutputResponse> {
        routed!(self, request, terminal_output)
    }

    fn wait_for_terminal_exit<'a>(
        &'a self,
        request: acp::WaitForTerminalExitRequest,
    ) -> HostFuture<'a, acp::WaitForTerminalExitResponse> {
        routed!(self, request, wait_for_terminal_exit)
    }

    fn kill_terminal<'a>(
        &'a self,
        request: acp::KillTerminalRequest,
    ) -> HostFuture<'a, acp::KillTerminalResponse> {
        routed!(self, request, kill_terminal)
    }

    fn release_terminal<'a>(
        &'a self,
        request: acp::ReleaseTerminalRequest,
    ) -> HostFuture<'a, acp::ReleaseTerminalResponse> {
        routed!(self, request, release_terminal)
    }

    fn create_elicitation<'a>(
        &'a self,
        request: acp::CreateElicitationRequest,
    ) -> HostFuture<'a, acp::CreateElicitationResponse> {
        let host = match super::host::form_session(&request) {
            Some(session) => self.host(session),
            None => Err(talaria_protocol::errors::invalid_params(
                "elicitation/create: only a form tied to one of the agent's sessions is \
                 shown to the user",
            )),
        };
        async move { host?.create_elicitation(request).await }.boxed()
    }

    fn capabilities(&self) -> acp::ClientCapabilities {
        super::host::capabilities()
    }
}
