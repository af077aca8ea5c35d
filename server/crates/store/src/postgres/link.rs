//! One connection to the PostgreSQL server that comes back after the server does: a lost
//! connection is dropped, and the next use connects again, no sooner than a backoff that
//! doubles from half a second to 30 s while the server stays away. A call before then fails
//! at once (`Unreachable`), so callers that retry (the journal) do not wait on it.

use std::time::{Duration, Instant};

use postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::options::PgOptions;
use crate::StoreError;

const FIRST_DELAY: Duration = Duration::from_millis(500);
const LONGEST_DELAY: Duration = Duration::from_secs(30);

/// The server gives up on a claims connection whose host stopped answering after about
/// 5 + 2 × 3 s of silence (or 10 s of unacknowledged data), so a crashed host's claims end
/// within seconds instead of after the operating system's two hours.
const CLAIMS_KEEPALIVE: &str = "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; \
     SET tcp_keepalives_count = 3; SET tcp_user_timeout = 10000";

/// What a connection is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    Data,
    /// Holds advisory locks: the server must notice soon when its host is gone.
    Claims,
}

/// How to open a connection.
pub(super) struct Connector {
    pub(super) options: PgOptions,
    pub(super) tls: MakeRustlsConnect,
}

impl Connector {
    pub(super) fn connect(&self, purpose: Purpose) -> Result<Client, StoreError> {
        let failed = |e: postgres::Error| StoreError::Open {
            path: self.options.label.clone(),
            detail: super::describe(&e),
        };
        let mut client = self
            .options
            .driver
            .connect(self.tls.clone())
            .map_err(failed)?;
        if purpose == Purpose::Claims {
            client.batch_execute(CLAIMS_KEEPALIVE).map_err(failed)?;
        }
        Ok(client)
    }
}

/// What using a link found.
pub(super) enum Fresh {
    /// The connection was there.
    Same,
    /// It had been lost and is connected again.
    Reconnected,
}

/// A connection, or when to try again.
pub(super) struct Link {
    purpose: Purpose,
    client: Option<Client>,
    /// The next connect is not tried before this.
    retry_at: Option<Instant>,
    delay: Duration,
    /// Why the last connect failed.
    why: String,
}

impl Link {
    pub(super) fn new(purpose: Purpose, client: Client) -> Self {
        Self {
            purpose,
            client: Some(client),
            retry_at: None,
            delay: FIRST_DELAY,
            why: String::new(),
        }
    }

    /// The connection, connected again when it was lost (and the backoff allows).
    pub(super) fn client(
        &mut self,
        connector: &Connector,
    ) -> Result<(&mut Client, Fresh), StoreError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.lose("the connection closed");
        }
        let mut fresh = Fresh::Same;
        if self.client.is_none() {
            if let Some(at) = self.retry_at
                && Instant::now() < at
            {
                return Err(StoreError::Unreachable(format!(
                    "{}: {}; trying again in {} ms",
                    connector.options.label,
                    self.why,
                    at.saturating_duration_since(Instant::now()).as_millis()
                )));
            }
            match connector.connect(self.purpose) {
                Ok(client) => {
                    tracing::info!(database = %connector.options.label, "connected again");
                    self.client = Some(client);
                    self.retry_at = None;
                    self.delay = FIRST_DELAY;
                    fresh = Fresh::Reconnected;
                }
                Err(error) => {
                    self.why = error.to_string();
                    self.retry_at = Some(Instant::now() + self.delay);
                    self.delay = (self.delay * 2).min(LONGEST_DELAY);
                    return Err(StoreError::Unreachable(self.why.clone()));
                }
            }
        }
        match self.client.as_mut() {
            Some(client) => Ok((client, fresh)),
            None => Err(StoreError::Unreachable(self.why.clone())),
        }
    }

    /// The connection, taken out (to be closed elsewhere).
    pub(super) fn take_client(&mut self) -> Option<Client> {
        self.client.take()
    }

    /// Drops the connection after a call found the server unreachable, to be connected
    /// again on the next use.
    pub(super) fn closed(&mut self) {
        self.lose("the server stopped answering");
    }

    fn lose(&mut self, why: &str) {
        if self.client.take().is_some() {
            tracing::warn!("the session database connection was lost: {why}");
            self.why = why.to_string();
            self.retry_at = None;
        }
    }

    /// Whether the connection answers within `timeout` (dropped when it does not).
    pub(super) fn check(&mut self, timeout: Duration) -> bool {
        let alive = self
            .client
            .as_mut()
            .is_some_and(|client| client.is_valid(timeout).is_ok());
        if !alive {
            self.lose("the connection did not answer");
        }
        alive
    }
}
