//! `talaria serve`: ACP over the network, for browser frontends and remote services — the
//! second transport at the edge, beside stdio. One endpoint, `/acp`, with both profiles of
//! the transport RFD (WebSocket, and POST + server-sent events); each connection is a whole
//! agent over the same dispatch as stdio, so the engine never knows where a session came
//! from.
//!
//! Invariants:
//! - Loopback only, unless `--listen` names another address and TLS is given (or
//!   `--insecure-no-tls` says so out loud).
//! - Every request passes `Host` (the listen address), `Origin` (the server's own or
//!   allowed, never a wildcard) and, on `/acp`, the bearer token (constant-time) first.
//! - A dropped transport never ends a turn: the agent's messages wait for the client to come
//!   back within the reconnect window (past 16 MiB unread the agent waits for room; a client
//!   that takes nothing for a minute then is cut); a slow reader holds up only itself.
//! - A stream resumes exactly or says it cannot: every message carries its cursor, what was
//!   sent is kept for the connection's life within a bound, and a point that is gone is
//!   answered 410 with the turn's state, never a stream with a gap (docs/http.md).
//! - A start that cannot listen changes nothing; one beside a running server keeps its token.
//! - Messages, connections, sockets and sessions per connection are bounded.

mod connection;
mod cursor;
mod guard;
mod http;
mod listener;
mod outbound;
mod rpc_id;
mod service;
mod shared;
mod stream_log;
mod tls;
mod token;
mod turn_state;
mod web_client;
mod websocket;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use connection::{Limits, Registry};
use shared::Server;

/// `talaria serve`'s options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where to listen: an IP address and port (port 0 picks one); `localhost:PORT` is
    /// 127.0.0.1. Another address than loopback needs TLS or --insecure-no-tls.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8765")]
    listen: String,
    /// The TLS certificate chain (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve a non-loopback address without TLS: the token and every message cross the
    /// network unencrypted, readable and changeable by anyone on the way.
    #[arg(long, conflicts_with = "tls_cert")]
    insecure_no_tls: bool,
    /// Read the bearer token from this file (readable only by you) instead of generating
    /// one into $TALARIA_HOME/serve.token.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Also accept browser requests from this origin (e.g. https://app.example); repeat for
    /// more. No wildcard.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Also accept this host name in requests' `Host` (the name clients reach the server
    /// by, e.g. the TLS certificate's); repeat for more. Without it only the listen address
    /// (and on loopback `localhost`; on 0.0.0.0 or :: any IP address) is accepted, so DNS
    /// rebinding is refused.
    #[arg(long, value_name = "NAME")]
    allow_host: Vec<String>,
    /// Print the reference web client's address (with the token) to open in a browser.
    #[arg(long)]
    open: bool,
    /// The most connections at once.
    #[arg(long, value_name = "N", default_value_t = 2048)]
    max_connections: usize,
    /// The most sessions one connection may have open.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_sessions: usize,
    /// The largest message taken, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    max_message_bytes: usize,
    /// The most a client may leave unread on its connection, in bytes, before the agent's
    /// output waits for it (a client observing a session another controls is detached
    /// instead, and told so).
    #[arg(long, value_name = "BYTES", default_value_t = outbound::MOST_WAITING)]
    max_unread_bytes: usize,
    /// How long a connection whose client went away is kept for it to come back, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    reconnect_window: u64,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("--listen {0:?} is not ADDR:PORT (an IP address, or localhost, and a port)")]
    Address(String),
    #[error(
        "--listen {0} is not a loopback address: give --tls-cert and --tls-key, or \
         --insecure-no-tls to send the token and every message unencrypted over the network"
    )]
    NeedsTls(SocketAddr),
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    #[error("{0}")]
    Token(#[from] token::TokenError),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "--allow-origin {0:?} is not an origin (scheme://host[:port]), and wildcards are never allowed"
    )]
    Origin(String),
}

fn parse_listen(text: &str) -> Result<SocketAddr, StartError> {
    let text = text.trim();
    let local = text
        .strip_prefix("localhost:")
        .map(|port| format!("127.0.0.1:{port}"));
    local
        .as_deref()
        .unwrap_or(text)
        .parse()
        .map_err(|_| StartError::Address(text.to_string()))
}

fn check_origins(origins: &[String]) -> Result<(), StartError> {
    for origin in origins {
        let parsed = url::Url::parse(origin).ok();
        let is_origin = parsed.as_ref().is_some_and(|url| {
            matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some()
                && url.path() == "/"
                && url.query().is_none()
                && !origin.contains('*')
        });
        if !is_origin {
            return Err(StartError::Origin(origin.clone()));
        }
    }
    Ok(())
}

/// Runs the server until a stop signal; the process's exit code.
pub async fn serve(args: ServeArgs, home: PathBuf) -> std::process::ExitCode {
    // The connections' dispatch loops are not `Send`: they run on this task set.
    let agents = tokio::task::LocalSet::new();
    match agents.run_until(start(args, home)).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("talaria serve: {error}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn start(args: ServeArgs, home: PathBuf) -> Result<(), StartError> {
    let address = parse_listen(&args.listen)?;
    check_origins(&args.allow_origin)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
        _ => None,
    };
    if !address.ip().is_loopback() && tls.is_none() {
        if !args.insecure_no_tls {
            return Err(StartError::NeedsTls(address));
        }
        tracing::warn!(
            "serving {address} without TLS: the token and every message cross the network unencrypted"
        );
    }
    // Bound first: a start that cannot listen changes nothing, the token file least of all.
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| StartError::Listen { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Listen { address, source })?;
    let (token, token_path, _token_hold) = server_token(args.token_file.clone(), &home).await?;
    // Out of every sandboxed command's reach, this process's and any other Talaria
    // process's: the token file, wherever it lies, and the listener.
    let _endpoints = keep_from_commands(bound, &token_path).await;
    announce(
        bound,
        tls.is_some(),
        &token_path,
        args.open.then_some(&token),
    );
    let stop = CancellationToken::new();
    let limits = Limits {
        connections: args.max_connections.max(1),
        sessions_per_connection: args.max_sessions.max(1),
        message_bytes: args.max_message_bytes.max(1024),
        unread_bytes: args.max_unread_bytes.max(1024),
        reconnect_window: Duration::from_secs(args.reconnect_window),
    };
    let (registry, mut starts) = Registry::new(limits, stop.clone());
    tokio::task::spawn_local(async move {
        while let Some(start) = starts.recv().await {
            tokio::task::spawn_local(start.run());
        }
    });
    let server = Arc::new(Server {
        guard: guard::Guard::new(
            bound,
            tls.is_some(),
            (&args.allow_origin, &args.allow_host),
            token,
        )
        .telling_where(&token_path),
        registry: registry.clone(),
    });
    crate::acp::prepare_process();
    let most_sockets = limits.connections.saturating_mul(2).saturating_add(64);
    let accepting = tokio::spawn(listener::accept(
        listener,
        tls,
        server,
        most_sockets,
        stop.clone(),
    ));
    wait_for_stop().await;
    stop.cancel();
    let _ = accepting.await;
    // Every connection's agent ends its turns and saves its sessions (each within the
    // agent's own stop budget).
    let _ = tokio::time::timeout(Duration::from_secs(5), registry.all_ended()).await;
    Ok(())
}

/// The token: `--token-file`'s, or `$TALARIA_HOME/serve.token`'s (a running server's kept,
/// else a new one) with this server's hold on it. Files and a lock that may wait for another
/// start: off the runtime's thread.
async fn server_token(
    token_file: Option<PathBuf>,
    home: &std::path::Path,
) -> Result<(token::Token, PathBuf, Option<token::Held>), StartError> {
    let interrupted = |e: tokio::task::JoinError| token::TokenError::Interrupted(e.to_string());
    if let Some(path) = token_file {
        let read = path.clone();
        let token = tokio::task::spawn_blocking(move || token::Token::read_from(&read))
            .await
            .map_err(interrupted)??;
        return Ok((token, path, None));
    }
    let path = home.join("serve.token");
    let at = path.clone();
    let (token, held) = tokio::task::spawn_blocking(move || token::keep_or_generate(&at))
        .await
        .map_err(interrupted)??;
    if !held.fresh {
        tracing::info!(
            "another talaria serve on this home uses the token in {}: keeping it",
            path.display()
        );
    }
    Ok((token, path, Some(held)))
}

/// Tells the sandbox this server's listener and token file (registered until the returned
/// value is dropped, when the server stops).
async fn keep_from_commands(
    bound: SocketAddr,
    token_path: &std::path::Path,
) -> Option<talaria_sandbox::endpoints::Registration> {
    let token_path = token_path.to_path_buf();
    let registration = tokio::task::spawn_blocking(move || {
        let token = token_path.canonicalize().unwrap_or(token_path);
        talaria_sandbox::endpoints::register(&[bound], &token)
    })
    .await
    .ok()?;
    if let Some(why) = registration.unshared() {
        tracing::warn!(
            "other Talaria processes' commands will not know this server's endpoints ({why}); \
             its token's secrecy keeps them out"
        );
    }
    Some(registration)
}

/// The first line of stdout: where the server listens and where its token is; with
/// `--open`, the web client's address carrying the token.
fn announce(
    bound: SocketAddr,
    tls: bool,
    token_path: &std::path::Path,
    open: Option<&token::Token>,
) {
    use std::io::Write;
    let scheme = if tls { "https" } else { "http" };
    let ws = if tls { "wss" } else { "ws" };
    let mut said = format!(
        "talaria serve: listening on {scheme}://{bound}/acp ({ws}://{bound}/acp); token in {}\n",
        token_path.display()
    );
    if let Some(token) = open {
        said.push_str(&format!(
            "web client: {scheme}://{bound}/#token={}\n",
            token.text()
        ));
    }
    let mut stdout = std::io::stdout();
    let _ = stdout
        .write_all(said.as_bytes())
        .and_then(|()| stdout.flush());
}

/// SIGTERM, SIGINT or SIGHUP; a second one exits at once.
async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::warn!("stop signals cannot be handled; serving until killed");
        return std::future::pending().await;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup.recv() => "SIGHUP",
    };
    tracing::info!("{name} received; ending the connections and saving their sessions");
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        tracing::warn!("a second stop signal: exiting now");
        std::process::exit(130);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_are_ip_and_port_and_origins_are_origins() {
        assert_eq!(
            parse_listen("localhost:0").expect("addr").to_string(),
            "127.0.0.1:0"
        );
        assert!(parse_listen("[::1]:9").expect("v6").ip().is_loopback());
        assert!(parse_listen("example.com:80").is_err());
        assert!(parse_listen("127.0.0.1").is_err());
        assert!(
            check_origins(&["https://app.example".into(), "http://localhost:3000".into()]).is_ok()
        );
        for bad in [
            "*",
            "https://*.example",
            "https://app.example/path",
            "app.example",
            "file:///x",
            "null",
        ] {
            assert!(check_origins(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
