//! The loopback redirect listener of one sign-in: `http://127.0.0.1:<random port>/callback`,
//! which takes the authorization server's answer when its `state` is the one sent, and
//! nothing else.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use tokio::sync::oneshot;

use super::OAuthError;

/// What came back to the redirect address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callback {
    Code(String),
    /// The authorization server refused (`error`, `error_description`).
    Refused(String),
}

/// A listener waiting for one callback.
pub struct Redirect {
    pub uri: String,
    answer: oneshot::Receiver<Callback>,
    task: tokio::task::JoinHandle<()>,
}

type Answer = Arc<Mutex<Option<oneshot::Sender<Callback>>>>;

impl Redirect {
    /// Listens on a random loopback port for the answer to `state`.
    pub async fn listen(state: String) -> Result<Self, OAuthError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| OAuthError::Redirect(format!("cannot listen on 127.0.0.1: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| OAuthError::Redirect(e.to_string()))?
            .port();
        let (sender, answer) = oneshot::channel();
        let sender: Answer = Arc::new(Mutex::new(Some(sender)));
        let state = Arc::new(state);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (sender, state) = (sender.clone(), state.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        answer_request(request, state.clone(), sender.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            uri: format!("http://127.0.0.1:{port}/callback"),
            answer,
            task,
        })
    }

    /// The callback, when it comes.
    pub async fn wait(mut self) -> Result<Callback, OAuthError> {
        let result = (&mut self.answer).await;
        result.map_err(|_| OAuthError::Redirect("the redirect listener stopped".into()))
    }
}

impl Drop for Redirect {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn page(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let body = format!("<!doctype html><meta charset=utf-8><title>Talaria</title><p>{text}</p>");
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn answer_request(
    request: Request<hyper::body::Incoming>,
    state: Arc<String>,
    sender: Answer,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() != "/callback" || request.method() != hyper::Method::GET {
        return Ok(page(StatusCode::NOT_FOUND, "Nothing here."));
    }
    let query = request.uri().query().unwrap_or("");
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let value = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let given_state = value("state").unwrap_or_default();
    if !constant_time_eq(given_state.as_bytes(), state.as_bytes()) {
        return Ok(page(
            StatusCode::BAD_REQUEST,
            "This sign-in answer is not the one Talaria is waiting for.",
        ));
    }
    let callback = match (value("code"), value("error")) {
        (_, Some(error)) => Callback::Refused(match value("error_description") {
            Some(description) => format!("{error}: {description}"),
            None => error,
        }),
        (Some(code), None) => Callback::Code(code),
        (None, None) => {
            return Ok(page(StatusCode::BAD_REQUEST, "The answer has no code."));
        }
    };
    let refused = matches!(callback, Callback::Refused(_));
    let Some(sender) = talaria_util::lock(&sender).take() else {
        return Ok(page(StatusCode::GONE, "This sign-in is already over."));
    };
    let _ = sender.send(callback);
    Ok(if refused {
        page(
            StatusCode::OK,
            "Sign-in was refused. You can close this tab.",
        )
    } else {
        page(
            StatusCode::OK,
            "Signed in. You can close this tab and go back to your editor.",
        )
    })
}
