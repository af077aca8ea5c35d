//! ACP wire types and a JSON-RPC 2.0 peer over any async byte stream.
//!
//! This crate knows nothing of the Talaria engine. It offers two things:
//! - [`acp`]: the official ACP schema types (`agent-client-protocol-schema`, pinned exactly),
//!   re-exported so that every crate uses the same version;
//! - [`Peer`] / [`connect`]: a bidirectional JSON-RPC 2.0 connection with request/response
//!   matching in both directions, notifications, `$/cancel_request`, size limits, and
//!   framing detected from the first bytes (newline-delimited JSON or `Content-Length` headers);
//!   [`connect_to_sink`] hands the outgoing messages whole to a transport that frames them
//!   itself.

pub mod errors;
pub mod framing;
pub mod message;
pub mod peer;
pub mod template;

pub use agent_client_protocol_schema as schema;
pub use agent_client_protocol_schema::ProtocolVersion;
pub use agent_client_protocol_schema::v1 as acp;
pub use framing::Framing;
pub use message::{IncomingMessage, IncomingRequest};
pub use peer::{
    Connection, MessageSink, NoRoom, Peer, PeerOptions, UnsentAnswer, connect, connect_to_sink,
};
pub use template::{NotificationTemplate, SerializedNotification};
