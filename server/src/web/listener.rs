//! Accepting sockets: at most so many at once (a flood is closed at the door), TLS when
//! configured, each served by hyper (HTTP/1.1 with upgrades, headers within a deadline).

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::service::handle;
use super::shared::Server;

/// How long a client has to send a request's headers, or finish a TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// Accepts sockets until `stop`.
pub async fn accept(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    server: Arc<Server>,
    most_sockets: usize,
    stop: CancellationToken,
) {
    let sockets = Arc::new(Semaphore::new(most_sockets));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors, say: wait a little rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = sockets.clone().try_acquire_owned() else {
            tracing::warn!("refusing a socket: {most_sockets} are open already");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (tls, server) = (tls.clone(), server.clone());
        tokio::spawn(async move {
            let io: Box<dyn Socket> = match tls {
                None => Box::new(stream),
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(secured)) => Box::new(secured),
                        _ => return,
                    }
                }
            };
            let service =
                hyper::service::service_fn(move |request| handle(server.clone(), request));
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE)
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades()
                .await;
            if let Err(error) = served {
                tracing::debug!("a socket ended: {error}");
            }
            drop(permit);
        });
    }
}
