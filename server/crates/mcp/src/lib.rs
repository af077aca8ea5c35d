//! The MCP client: connects a session's MCP servers with the official `rmcp` SDK and offers
//! their tools as `mcp__<server>__<tool>`.
//!
//! Invariants:
//! - Servers start concurrently, each within its start-up budget; one that is slow or fails is
//!   reported and left out: the session works without it.
//! - A stdio server runs in a process group of its own, killed with the group when the
//!   session's hub is dropped (no orphans).
//! - A call cancelled by the turn is dropped, which sends MCP's cancellation notification.
//! - A server that dies is restarted once; after that its calls fail with a clear message.
//! - MCP tools declare no approval need: the policy asks for them by default.
//! - A server's questions (`elicitation/create`) reach the user only during one of its calls
//!   and only when the client shows forms; otherwise they are declined.

mod elicit;
mod http;
mod naming;
mod server;
mod tool;

pub use naming::tool_name;
pub use server::{Hub, McpCallError, ServerConfig, Status, Transport};
pub use tool::McpTool;
