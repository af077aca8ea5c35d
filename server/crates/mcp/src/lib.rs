//! The MCP client: connects a session's MCP servers with the official `rmcp` SDK, offers
//! their tools as `mcp__<server>__<tool>`, their resources through `mcp_resources` and
//! `mcp_read_resource`, and their prompts as `/mcp:<server>:<prompt>` commands.
//!
//! Invariants:
//! - Servers start concurrently, each within its start-up budget; one that is slow or fails is
//!   reported and left out: the session works without it.
//! - A stdio server runs in a process group of its own, killed with the group when the
//!   session's hub is dropped (no orphans).
//! - A call cancelled by the turn is dropped, which sends MCP's cancellation notification.
//! - A server that dies is restarted with backoff; while it waits, its calls fail at once
//!   ("restarting"), never hang; every request is bounded by the server's tool timeout.
//! - MCP tools declare no approval need: the policy asks for them by default. Reading a
//!   resource asks too (its URI goes to the server); listing them does not.
//! - A server's questions (`elicitation/create`) reach the user only during one of its calls
//!   and only when the client shows forms; otherwise they are declined.
//! - An HTTP+SSE server may only name an endpoint on its own origin.

mod catalog;
mod connect;
mod elicit;
mod http;
mod hub;
mod naming;
pub mod oauth;
pub mod prompts;
pub mod resources;
mod server;
mod signing;
mod sse;
mod tool;

pub use catalog::template_matches;
pub use connect::{ServerConfig, Transport};
pub use hub::Hub;
pub use naming::tool_name;
pub use server::{McpCallError, Status};
pub use tool::McpTool;
