//! An agent in a `talaria serve`, reached over its WebSocket profile (docs/http.md): one ACP
//! message per text frame, `Authorization: Bearer TOKEN`, the connection's id from the first
//! frame (`_talaria/connection`). A socket that drops is taken back within the server's
//! reconnect window (`?connection=ID&after=CURSOR`, the cursor of the last message received),
//! so the client gets exactly what it missed; when that cannot be done the link says why and
//! ends. What the link does is told to the client as local notifications, [`LINK_STATE`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use talaria_util::lock;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::AgentProcess;
use crate::websocket_open::{Refusal, Socket, open};

/// The method of the local notification that says what the link does: `params.state` is
/// `"reconnecting"`, `"resumed"` or `"lost"`, `params.detail` says why. It never crosses the
/// wire.
pub const LINK_STATE: &str = "$/talaria/link";

/// How long a dropped socket is tried again before the link is given up.
const RECONNECT_FOR: Duration = Duration::from_secs(120);
/// How often the socket is pinged; one silent for three times this is taken as dropped.
const PING_EVERY: Duration = Duration::from_secs(15);

impl AgentProcess {
    /// Connects to the `talaria serve` WebSocket at `url` (`ws://HOST:PORT/acp` or `wss://…`)
    /// with `token`; the connection's first frame is read before this returns.
    pub async fn connect_websocket(url: &str, token: &str) -> anyhow::Result<Self> {
        let url = url::Url::parse(url)?;
        let (socket, connection) = open(&url, token, None)
            .await
            .map_err(|refused| anyhow::anyhow!("cannot connect to {url}: {refused}"))?;
        let (to_client, incoming) = mpsc::unbounded_channel();
        let (outgoing, from_client) = mpsc::unbounded_channel();
        let log = Arc::new(Mutex::new(String::new()));
        let link = Link {
            url,
            token: token.to_string(),
            connection,
            cursor: None,
            to_client,
            log: log.clone(),
        };
        let task = tokio::spawn(link.run(socket, from_client));
        Ok(Self::over_socket(task, incoming, outgoing, log))
    }
}

/// The link's state: where to come back, and from which point.
struct Link {
    url: url::Url,
    token: String,
    connection: String,
    /// The cursor of the last message passed on.
    cursor: Option<String>,
    to_client: mpsc::UnboundedSender<Value>,
    log: Arc<Mutex<String>>,
}

/// Why serving a socket stopped.
enum Stopped {
    /// The client is done (it closed its side, or stopped reading).
    ClientDone,
    /// The socket dropped.
    Dropped(String),
}

/// Why a dropped connection could not be taken back.
#[derive(Debug, thiserror::Error)]
enum Lost {
    #[error(
        "the server no longer has this connection (it ended, or the server restarted): attach again"
    )]
    Gone,
    #[error("what was missed is no longer kept (410); attach again to see the session: {0}")]
    NotKept(String),
    #[error("{0}")]
    Refused(String),
    #[error("no way back within {RECONNECT_FOR:?}: {0}")]
    NoWayBack(String),
}

impl Link {
    async fn run(mut self, mut socket: Socket, mut from_client: mpsc::UnboundedReceiver<String>) {
        let mut unsent = VecDeque::new();
        loop {
            match self.serve(&mut socket, &mut from_client, &mut unsent).await {
                Stopped::ClientDone => {
                    let normal = CloseFrame {
                        code: CloseCode::Normal,
                        reason: "the client is done".into(),
                    };
                    let _ = socket.close(Some(normal)).await;
                    return;
                }
                Stopped::Dropped(why) => {
                    self.tell("reconnecting", &format!("the connection dropped ({why})"));
                    match self.reconnect().await {
                        Ok(again) => {
                            socket = again;
                            self.tell("resumed", "the connection is back; nothing was missed");
                        }
                        Err(why) => {
                            self.tell("lost", &format!("the connection is lost: {why}"));
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Passes messages both ways until the socket drops or the client is done; a message
    /// that could not be sent waits in `unsent` for the next socket.
    async fn serve(
        &mut self,
        socket: &mut Socket,
        from_client: &mut mpsc::UnboundedReceiver<String>,
        unsent: &mut VecDeque<String>,
    ) -> Stopped {
        while let Some(text) = unsent.pop_front() {
            if let Err(e) = socket.send(Message::text(text.clone())).await {
                unsent.push_front(text);
                return Stopped::Dropped(e.to_string());
            }
        }
        let mut heard = Instant::now();
        let mut ticker = tokio::time::interval(PING_EVERY);
        loop {
            tokio::select! {
                frame = socket.next() => {
                    heard = Instant::now();
                    match frame {
                        Some(Ok(Message::Text(text))) => {
                            if !self.pass_on(&text) {
                                return Stopped::ClientDone;
                            }
                        }
                        Some(Ok(Message::Close(frame))) => {
                            let why = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                            return Stopped::Dropped(format!("closed by the server: {why}"));
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Stopped::Dropped(e.to_string()),
                        None => return Stopped::Dropped("the socket ended".into()),
                    }
                }
                text = from_client.recv() => {
                    let Some(text) = text else { return Stopped::ClientDone };
                    if let Err(e) = socket.send(Message::text(text.clone())).await {
                        unsent.push_back(text);
                        return Stopped::Dropped(e.to_string());
                    }
                }
                _ = ticker.tick() => {
                    if heard.elapsed() > PING_EVERY * 3 {
                        return Stopped::Dropped("no word from the server".into());
                    }
                    let _ = socket.send(Message::Ping(Vec::new().into())).await;
                }
            }
        }
    }

    /// Passes one frame on to the client (noting its cursor); false when the client is gone.
    fn pass_on(&mut self, text: &str) -> bool {
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            self.note(&format!("a frame that is not JSON: {text}"));
            return true;
        };
        if message["method"] == "_talaria/connection" {
            return true;
        }
        if let Some(cursor) = cursor_of(&message) {
            self.cursor = Some(cursor);
        }
        self.to_client.send(message).is_ok()
    }

    /// Takes the connection back from after the last cursor, trying again (with a growing
    /// pause) while the server cannot be reached, for [`RECONNECT_FOR`].
    async fn reconnect(&mut self) -> Result<Socket, Lost> {
        let deadline = Instant::now() + RECONNECT_FOR;
        let mut pause = Duration::from_millis(100);
        loop {
            let back = (self.connection.as_str(), self.cursor.as_deref());
            match open(&self.url, &self.token, Some(back)).await {
                Ok((socket, _)) => return Ok(socket),
                Err(Refusal::Status(404, _)) => return Err(Lost::Gone),
                Err(Refusal::Status(410, body)) => return Err(Lost::NotKept(body)),
                Err(refused @ Refusal::Status(401 | 403, _)) => {
                    return Err(Lost::Refused(refused.to_string()));
                }
                Err(refused) if Instant::now() + pause > deadline => {
                    return Err(Lost::NoWayBack(refused.to_string()));
                }
                Err(refused) => self.note(&format!("not back yet: {refused}")),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(3));
        }
    }

    /// Tells the client what the link does (and keeps it in the log).
    fn tell(&self, state: &str, detail: &str) {
        self.note(detail);
        let notice = json!({"jsonrpc": "2.0", "method": LINK_STATE, "params": {"state": state, "detail": detail}});
        let _ = self.to_client.send(notice);
    }

    fn note(&self, line: &str) {
        let mut log = lock(&self.log);
        log.push_str(line);
        log.push('\n');
    }
}

/// The cursor a message carries (`_meta["acp/cursor"]` of its params, result or error data).
pub fn cursor_of(message: &Value) -> Option<String> {
    [
        &message["params"],
        &message["result"],
        &message["error"]["data"],
    ]
    .into_iter()
    .find_map(|holder| holder["_meta"]["acp/cursor"].as_str())
    .map(str::to_string)
}
