//! Claims across hosts: a session-level advisory lock per open session, held on the claims
//! connection (a dead process's locks end with its connection), plus a `claims` row naming
//! the holder for the in-use error. A claims connection that was lost is connected again and
//! its claims taken again; one another process took meanwhile is recorded as lost.

use std::time::{Duration, Instant};

use postgres::Client;

use super::{CLAIMS_CHECK_EVERY, PgStore, lock};
use crate::{StoreError, now_ms};

/// A claim's advisory-lock key: the session id, hashed by the server.
const CLAIM_KEY: &str = "hashtextextended('talaria-session:' || $1, 0)";

/// Who holds `session_id` now, as its claim row says.
fn holder_of(client: &mut Client, session_id: &str) -> String {
    client
        .query_opt(
            "SELECT holder FROM claims WHERE session_id = $1",
            &[&session_id],
        )
        .ok()
        .flatten()
        .map_or_else(|| "another process".into(), |row| row.get(0))
}

/// Takes the lock and writes the holder row; `Err(InUse)` when another process has it.
fn take(client: &mut Client, session_id: &str, holder: &str) -> Result<(), StoreError> {
    let won: bool = client
        .query_one(
            &format!("SELECT pg_try_advisory_lock({CLAIM_KEY})"),
            &[&session_id],
        )?
        .get(0);
    if !won {
        return Err(StoreError::InUse {
            session: session_id.to_string(),
            holder: holder_of(client, session_id),
        });
    }
    client.execute(
        "INSERT INTO claims (session_id, holder, since) VALUES ($1, $2, $3)
         ON CONFLICT (session_id) DO UPDATE SET holder = $2, since = $3",
        &[&session_id, &holder, &now_ms()],
    )?;
    Ok(())
}

impl PgStore {
    pub(super) fn claim_session(&self, session_id: &str) -> Result<(), StoreError> {
        let mut held = lock(&self.held);
        if held.contains(session_id) && !lock(&self.lost).contains_key(session_id) {
            return Ok(());
        }
        let mut link = lock(&self.claims);
        let (client, fresh) = link.client(&self.connector)?;
        if matches!(fresh, super::link::Fresh::Reconnected) {
            self.take_again(client, &held);
        }
        talaria_util::failpoint::step("claim::take::before");
        match take(client, session_id, &self.holder) {
            Ok(()) => {
                talaria_util::failpoint::step("claim::take::after");
                held.insert(session_id.to_string());
                lock(&self.lost).remove(session_id);
                Ok(())
            }
            Err(error) => {
                if matches!(error, StoreError::Unreachable(_)) {
                    link.closed();
                }
                Err(error)
            }
        }
    }

    pub(super) fn release_session(&self, session_id: &str) -> Result<(), StoreError> {
        lock(&self.lost).remove(session_id);
        let mut held = lock(&self.held);
        if !held.remove(session_id) {
            return Ok(());
        }
        talaria_util::failpoint::step("claim::release::before");
        let mut link = lock(&self.claims);
        let (client, fresh) = link.client(&self.connector)?;
        if matches!(fresh, super::link::Fresh::Reconnected) {
            // The lock went with the old connection; only the row is left to remove.
            self.take_again(client, &held);
        } else {
            client.query_one(
                &format!("SELECT pg_advisory_unlock({CLAIM_KEY})"),
                &[&session_id],
            )?;
        }
        client.execute(
            "DELETE FROM claims WHERE session_id = $1 AND holder = $2",
            &[&session_id, &self.holder],
        )?;
        talaria_util::failpoint::step("claim::release::after");
        Ok(())
    }

    /// Makes sure the claims connection still holds this process's claims: checked when
    /// `now` (a data connection came back) or every few seconds of writing; when it was
    /// lost, it is connected again and the claims taken again.
    pub(super) fn keep_claims(&self, now: bool) {
        let held = lock(&self.held);
        if held.is_empty() {
            return;
        }
        {
            let mut checked = lock(&self.claims_checked);
            if !now && checked.elapsed() < CLAIMS_CHECK_EVERY {
                return;
            }
            *checked = Instant::now();
        }
        let mut link = lock(&self.claims);
        if link.check(Duration::from_secs(2)) {
            return;
        }
        match link.client(&self.connector) {
            Ok((client, _)) => self.take_again(client, &held),
            Err(error) => tracing::warn!("the claims connection is away: {error}"),
        }
    }

    /// Takes every held claim again on a new claims connection; those another process took
    /// are lost (writes to them are refused).
    fn take_again(&self, client: &mut Client, held: &std::collections::HashSet<String>) {
        for session_id in held {
            match take(client, session_id, &self.holder) {
                Ok(()) => {
                    lock(&self.lost).remove(session_id);
                }
                Err(StoreError::InUse { holder, .. }) => {
                    tracing::error!(
                        session = %session_id,
                        "the session was taken by {holder} while the database was away; \
                         this process no longer writes it"
                    );
                    lock(&self.lost).insert(session_id.clone(), holder);
                }
                Err(error) => {
                    tracing::warn!(session = %session_id, "taking the claim again failed: {error}");
                }
            }
        }
    }
}
