//! Opening one socket to a `talaria serve`: TCP (TLS for `wss://`, against the web's root
//! certificates and those of the PEM file `SSL_CERT_FILE` names), the upgrade with `Authorization: Bearer TOKEN` (naming the connection to
//! take back, and the cursor to resume after), and the connection's first frame.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// The byte stream under a socket: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An open socket.
pub type Socket = WebSocketStream<Box<dyn Io>>;

/// Why a socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The server answered the upgrade with this status (and body).
    #[error("the server answered {0}: {1}")]
    Status(u16, String),
    /// The server could not be reached, or the upgrade failed on the way.
    #[error("{0}")]
    Network(String),
}

/// How long one attempt may take.
const OPEN_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Opens a socket to `url`; `back` names the connection to take back and the cursor of the
/// last message received. The socket, and the connection's id from its first frame.
pub async fn open(
    url: &url::Url,
    token: &str,
    back: Option<(&str, Option<&str>)>,
) -> Result<(Socket, String), Refusal> {
    tokio::time::timeout(OPEN_WITHIN, open_now(url, token, back))
        .await
        .unwrap_or_else(|_| Err(Refusal::Network("the server did not answer in time".into())))
}

async fn open_now(
    url: &url::Url,
    token: &str,
    back: Option<(&str, Option<&str>)>,
) -> Result<(Socket, String), Refusal> {
    let mut target = url.clone();
    if let Some((connection, after)) = back {
        let mut query = target.query_pairs_mut();
        query.append_pair("connection", connection);
        if let Some(after) = after {
            query.append_pair("after", after);
        }
    }
    let mut request = target
        .as_str()
        .into_client_request()
        .map_err(|e| Refusal::Network(e.to_string()))?;
    let bearer = format!("Bearer {token}")
        .parse()
        .map_err(|_| Refusal::Network("the token is not a header value".into()))?;
    request.headers_mut().insert("authorization", bearer);
    let stream = byte_stream(url).await?;
    // The server sends each message as one frame, however large (a loaded session's replay).
    let mut config = WebSocketConfig::default();
    config.max_frame_size = None;
    config.max_message_size = Some(256 << 20);
    let (mut socket, _) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(config))
            .await
            .map_err(|e| match e {
                WsError::Http(response) => {
                    let body = response.body().as_deref().unwrap_or_default();
                    let body = String::from_utf8_lossy(body).trim().to_string();
                    Refusal::Status(response.status().as_u16(), body)
                }
                other => Refusal::Network(other.to_string()),
            })?;
    let connection = first_frame(&mut socket).await?;
    Ok((socket, connection))
}

/// The connection's id, from `_talaria/connection`, the first frame.
async fn first_frame(socket: &mut Socket) -> Result<String, Refusal> {
    loop {
        let frame = socket
            .next()
            .await
            .ok_or_else(|| Refusal::Network("the socket ended at once".into()))?
            .map_err(|e| Refusal::Network(e.to_string()))?;
        let Message::Text(text) = frame else { continue };
        let hello: Value = serde_json::from_str(&text)
            .map_err(|_| Refusal::Network(format!("a first frame that is not JSON: {text}")))?;
        return hello["params"]["connectionId"]
            .as_str()
            .filter(|_| hello["method"] == "_talaria/connection")
            .map(str::to_string)
            .ok_or_else(|| {
                Refusal::Network(format!("not a talaria serve (its first frame: {text})"))
            });
    }
}

/// TCP to the URL's host and port, with TLS for `wss://`.
async fn byte_stream(url: &url::Url) -> Result<Box<dyn Io>, Refusal> {
    let host = url
        .host_str()
        .ok_or_else(|| Refusal::Network(format!("{url} names no host")))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| Refusal::Network(format!("cannot reach {host}:{port}: {e}")))?;
    if url.scheme() != "wss" {
        return Ok(Box::new(tcp));
    }
    let roots = roots().await?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Refusal::Network(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| Refusal::Network(format!("{host}: {e}")))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| Refusal::Network(format!("TLS with {host}: {e}")))?;
    Ok(Box::new(tls))
}

/// The certificates a server's may chain to: the web's roots, and those in the PEM file
/// `SSL_CERT_FILE` names (a server's own, self-signed one).
async fn roots() -> Result<rustls::RootCertStore, Refusal> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots =
        rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let Some(path) = std::env::var_os("SSL_CERT_FILE") else {
        return Ok(roots);
    };
    let shown = std::path::Path::new(&path).display().to_string();
    let pem = tokio::fs::read(&path)
        .await
        .map_err(|e| Refusal::Network(format!("SSL_CERT_FILE {shown}: {e}")))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| Refusal::Network(format!("SSL_CERT_FILE {shown}: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| Refusal::Network(format!("SSL_CERT_FILE {shown}: {e}")))?;
    }
    Ok(roots)
}
