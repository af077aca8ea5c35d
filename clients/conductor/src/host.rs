//! What the child asks of its client, served by the caller: Talaria's file rules, sandbox,
//! checkpoints and approval live behind this trait, never in this crate.

use futures_util::future::BoxFuture;
use talaria_protocol::acp;

/// A host's answer to one request of the child.
pub type HostFuture<'a, T> = BoxFuture<'a, Result<T, acp::Error>>;

/// The client side of a child's connection. Every method answers one request of the child;
/// an error is sent back to the child as the JSON-RPC error it is.
pub trait ChildHost: Send + Sync {
    /// One of the child's session updates, in the order the child sent them.
    fn update<'a>(&'a self, update: acp::SessionNotification) -> BoxFuture<'a, ()>;

    fn read_text_file<'a>(
        &'a self,
        request: acp::ReadTextFileRequest,
    ) -> HostFuture<'a, acp::ReadTextFileResponse>;

    fn write_text_file<'a>(
        &'a self,
        request: acp::WriteTextFileRequest,
    ) -> HostFuture<'a, acp::WriteTextFileResponse>;

    fn request_permission<'a>(
        &'a self,
        request: acp::RequestPermissionRequest,
    ) -> HostFuture<'a, acp::RequestPermissionResponse>;

    fn create_terminal<'a>(
        &'a self,
        request: acp::CreateTerminalRequest,
    ) -> HostFuture<'a, acp::CreateTerminalResponse>;

    fn terminal_output<'a>(
        &'a self,
        request: acp::TerminalOutputRequest,
    ) -> HostFuture<'a, acp::TerminalOutputResponse>;

    fn wait_for_terminal_exit<'a>(
        &'a self,
        request: acp::WaitForTerminalExitRequest,
    ) -> HostFuture<'a, acp::WaitForTerminalExitResponse>;

    fn kill_terminal<'a>(
        &'a self,
        request: acp::KillTerminalRequest,
    ) -> HostFuture<'a, acp::KillTerminalResponse>;

    fn release_terminal<'a>(
        &'a self,
        request: acp::ReleaseTerminalRequest,
    ) -> HostFuture<'a, acp::ReleaseTerminalResponse>;

    /// A form the child asks its user to fill in (`elicitation/create`); a host that shows
    /// no forms does not advertise them, and refuses the method.
    fn create_elicitation<'a>(
        &'a self,
        request: acp::CreateElicitationRequest,
    ) -> HostFuture<'a, acp::CreateElicitationResponse> {
        let _ = request;
        Box::pin(async {
            Err(talaria_protocol::errors::method_not_found(
                "elicitation/create",
            ))
        })
    }

    /// The capabilities this host serves (sent in `initialize`): a host that serves no
    /// terminals says so, and the child runs its commands itself.
    fn capabilities(&self) -> acp::ClientCapabilities;
}
