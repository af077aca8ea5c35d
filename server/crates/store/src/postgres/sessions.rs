//! [`SessionStore`] on PostgreSQL: each call runs on a pooled connection (`PgStore::with`);
//! writes are fenced by the session's claim.

use postgres::Client;
use talaria_record::{Entry, EntryId, Transcript};

use super::{PgStore, SESSION_COLUMNS, entries_of, entry_key, meta_of, tokens};
use crate::{
    Basis, Check, EncodedEntry, ListPage, MetaUpdate, Refusal, SearchHit, SessionAppend,
    SessionMeta, SessionStore, StoreError, now_ms,
};

/// Bodies larger than this reach the server through `COPY`, a piece at a time: as a
/// statement's parameter a body is encoded whole into one message buffer, which grows to up
/// to twice its size while it fills (a 50 MB answer then peaked at 213 MB, not 114).
const STREAMED_BODY: usize = 1 << 20;
/// The piece of a streamed body escaped and sent at once.
const STREAMED_PIECE: usize = 64 << 10;

const UPSERT_CONFLICT: &str = "ON CONFLICT (session_id, entry_id) DO UPDATE
         SET at_ms = excluded.at_ms, kind = excluded.kind, body = excluded.body,
             search_text = excluded.search_text";

/// Upserts one large entry: its body copied into a temporary table (`COPY`, in pieces), then
/// moved into `entries` by the server.
fn upsert_streamed(
    tx: &mut postgres::Transaction<'_>,
    session_id: &str,
    entry: &EncodedEntry,
    body: &str,
    search_text: Option<&str>,
) -> Result<(), StoreError> {
    tx.batch_execute(
        "CREATE TEMP TABLE IF NOT EXISTS talaria_incoming_body (body TEXT NOT NULL)
         ON COMMIT DELETE ROWS;
         DELETE FROM talaria_incoming_body;",
    )?;
    let mut copy = tx.copy_in("COPY talaria_incoming_body (body) FROM STDIN")?;
    write_copy_text(&mut copy, body)
        .map_err(|e| StoreError::Unreachable(format!("sending an entry to the database: {e}")))?;
    copy.finish()?;
    tx.execute(
        &format!(
            "INSERT INTO entries (session_id, entry_id, at_ms, kind, body, search_text)
             SELECT $1, $2, $3, $4, body, $5 FROM talaria_incoming_body {UPSERT_CONFLICT}"
        ),
        &[
            &session_id,
            &entry_key(entry.id),
            &entry.at_ms,
            &entry.kind,
            &search_text,
        ],
    )?;
    Ok(())
}

/// `text` as one row of `COPY`'s text format (backslash, newline, carriage return and tab
/// escaped), written a piece at a time.
fn write_copy_text(out: &mut impl std::io::Write, text: &str) -> std::io::Result<()> {
    let mut piece = Vec::with_capacity(STREAMED_PIECE + STREAMED_PIECE / 8);
    for &byte in text.as_bytes() {
        match byte {
            b'\\' => piece.extend_from_slice(b"\\\\"),
            b'\n' => piece.extend_from_slice(b"\\n"),
            b'\r' => piece.extend_from_slice(b"\\r"),
            b'\t' => piece.extend_from_slice(b"\\t"),
            other => piece.push(other),
        }
        if piece.len() >= STREAMED_PIECE {
            out.write_all(&piece)?;
            piece.clear();
        }
    }
    piece.push(b'\n');
    out.write_all(&piece)
}

/// Upserts `entries` (by entry id) in one transaction's statement.
fn append_in(
    tx: &mut postgres::Transaction<'_>,
    session_id: &str,
    entries: &[EncodedEntry],
) -> Result<(), StoreError> {
    let upsert = tx.prepare(&format!(
        "INSERT INTO entries (session_id, entry_id, at_ms, kind, body, search_text)
         VALUES ($1, $2, $3, $4, $5, $6) {UPSERT_CONFLICT}"
    ))?;
    for entry in entries {
        let body = entry.body.text()?;
        let search_text = entry.search_text();
        if body.len() > STREAMED_BODY {
            upsert_streamed(
                tx,
                session_id,
                entry,
                &body,
                search_text.as_deref().map(String::as_str),
            )?;
            continue;
        }
        tx.execute(
            &upsert,
            &[
                &session_id,
                &entry_key(entry.id),
                &entry.at_ms,
                &entry.kind,
                &body.as_str(),
                &search_text.as_deref().map(String::as_str),
            ],
        )?;
    }
    tx.execute(
        "UPDATE sessions SET updated_at = $2 WHERE id = $1",
        &[&session_id, &now_ms()],
    )?;
    Ok(())
}

/// One session's checked append inside an open transaction (its row locked for the check):
/// written (its `writer` now the basis's), found already there, or refused.
fn append_checked_in(
    tx: &mut postgres::Transaction<'_>,
    append: &SessionAppend,
) -> Result<Option<Refusal>, StoreError> {
    let stored: Option<String> = tx
        .query_opt(
            "SELECT writer FROM sessions WHERE id = $1 FOR UPDATE",
            &[&append.session],
        )?
        .map(|row| row.get(0));
    let mut same = |entry: &EncodedEntry| -> Result<bool, StoreError> {
        let body = entry.body.text()?;
        let row = tx.query_opt(
            "SELECT body = $3 FROM entries WHERE session_id = $1 AND entry_id = $2",
            &[&append.session, &entry_key(entry.id), &body.as_str()],
        )?;
        Ok(row.is_some_and(|row| row.get::<_, bool>(0)))
    };
    match crate::check_basis(append, stored.as_deref(), &mut same)? {
        Check::Write => {
            append_in(tx, &append.session, &append.entries)?;
            tx.execute(
                "UPDATE sessions SET writer = $2 WHERE id = $1",
                &[&append.session, &append.basis.writer],
            )?;
            Ok(None)
        }
        Check::AlreadyThere => Ok(None),
        Check::Refused(refusal) => Ok(Some(refusal)),
    }
}

/// The server's clock in milliseconds since the Unix epoch (asks are timed by it).
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// A session's tombstone key: creations and deletes of one id take it for their
/// transaction, so a creation never reads "not deleted" while a delete commits.
const TOMBSTONE_KEY: &str = "hashtextextended('talaria-deleted:' || $1, 0)";

/// Refuses writes of a deleted session (`Deleted`), its tombstone key held until `tx` ends.
fn refuse_deleted(tx: &mut postgres::Transaction<'_>, session_id: &str) -> Result<(), StoreError> {
    tx.execute(
        &format!("SELECT pg_advisory_xact_lock({TOMBSTONE_KEY})"),
        &[&session_id],
    )?;
    let deleted = tx.query_opt(
        "SELECT 1 FROM deleted_sessions WHERE id = $1",
        &[&session_id],
    )?;
    match deleted {
        Some(_) => Err(StoreError::Deleted(session_id.to_string())),
        None => Ok(()),
    }
}

/// Records a session (nothing when it is there already) in `tx`; a deleted one is refused
/// (`Deleted`).
fn create_in(tx: &mut postgres::Transaction<'_>, meta: &SessionMeta) -> Result<(), StoreError> {
    refuse_deleted(tx, &meta.id)?;
    let directories = serde_json::to_string(&meta.additional_directories)
        .map_err(|e| StoreError::Other(e.to_string()))?;
    tx.execute(
        &format!(
            "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             ON CONFLICT (id) DO NOTHING"
        ),
        &[
            &meta.id,
            &meta.cwd,
            &directories,
            &meta.title,
            &meta.model,
            &meta.mode,
            &meta.created_at,
            &meta.updated_at,
            &tokens(meta.input_tokens),
            &tokens(meta.output_tokens),
            &meta.cost,
            &meta.parent_id,
            &meta.writer,
        ],
    )?;
    Ok(())
}

/// Appends several sessions' entries in one transaction.
fn append_all(
    client: &mut Client,
    batch: &[(String, Vec<EncodedEntry>)],
) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    for (session_id, entries) in batch {
        if !entries.is_empty() {
            refuse_deleted(&mut tx, session_id)?;
            append_in(&mut tx, session_id, entries)?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn search_rows(
    client: &mut Client,
    query: &str,
    limit: usize,
) -> Result<Vec<SearchHit>, StoreError> {
    let rows = client.query(
        "SELECT e.session_id, e.entry_id, -ts_rank_cd(e.search, q) AS rank,
                ts_headline('english', e.search_text, q,
                    'StartSel=[, StopSel=], MaxWords=16, MinWords=4, ShortWord=2'),
                e.at_ms, s.title
         FROM entries e
         JOIN sessions s ON s.id = e.session_id,
              to_tsquery('english', $1) q
         WHERE e.search @@ q
         ORDER BY rank, e.at_ms DESC LIMIT $2",
        &[&query, &i64::try_from(limit.clamp(1, 100)).unwrap_or(100)],
    )?;
    Ok(rows
        .iter()
        .map(|row| SearchHit {
            session_id: row.get(0),
            entry_id: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
            rank: f64::from(row.get::<_, f32>(2)),
            snippet: row.get(3),
            at_ms: row.get(4),
            session_title: row.get(5),
        })
        .collect())
}

impl SessionStore for PgStore {
    fn accepts_writes(&self) -> Result<(), StoreError> {
        self.with(|client| {
            client.batch_execute("SELECT 1")?;
            Ok(())
        })
    }

    fn create(&self, meta: &SessionMeta) -> Result<(), StoreError> {
        self.with(|client| {
            let mut tx = client.transaction()?;
            create_in(&mut tx, meta)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn create_with_entries(
        &self,
        meta: &SessionMeta,
        entries: &[EncodedEntry],
        basis: &Basis,
    ) -> Result<Option<Refusal>, StoreError> {
        self.fence(&meta.id)?;
        let append = SessionAppend {
            session: meta.id.clone(),
            entries: entries.to_vec(),
            basis: basis.clone(),
        };
        self.with(|client| {
            let mut tx = client.transaction()?;
            match create_in(&mut tx, meta) {
                Err(StoreError::Deleted(session)) => {
                    return Ok(Some(Refusal::Missing { session }));
                }
                other => other?,
            }
            let refused = append_checked_in(&mut tx, &append)?;
            tx.commit()?;
            Ok(refused)
        })
    }

    fn append_checked(&self, batch: &[SessionAppend]) -> Result<Vec<Refusal>, StoreError> {
        if batch.iter().all(|a| a.entries.is_empty()) {
            return Ok(Vec::new());
        }
        for append in batch {
            self.fence(&append.session)?;
        }
        self.with(|client| {
            let mut tx = client.transaction()?;
            let mut refused = Vec::new();
            for append in batch.iter().filter(|a| !a.entries.is_empty()) {
                refused.extend(append_checked_in(&mut tx, append)?);
            }
            tx.commit()?;
            Ok(refused)
        })
    }

    fn append_encoded(&self, session_id: &str, entries: &[EncodedEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.fence(session_id)?;
        self.with(|client| {
            let mut tx = client.transaction()?;
            refuse_deleted(&mut tx, session_id)?;
            append_in(&mut tx, session_id, entries)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn append_batch(&self, batch: &[(String, Vec<EncodedEntry>)]) -> Result<(), StoreError> {
        if batch.iter().all(|(_, entries)| entries.is_empty()) {
            return Ok(());
        }
        for (session_id, _) in batch {
            self.fence(session_id)?;
        }
        self.with(|client| append_all(client, batch))
    }

    fn update(&self, session_id: &str, update: &MetaUpdate) -> Result<(), StoreError> {
        self.fence(session_id)?;
        let (input, output) = update.tokens.unzip();
        self.with(|client| {
            client.execute(
                "UPDATE sessions SET
                    title = COALESCE($2, title),
                    model = COALESCE($3, model),
                    mode = COALESCE($4, mode),
                    input_tokens = COALESCE($5, input_tokens),
                    output_tokens = COALESCE($6, output_tokens),
                    cost = COALESCE($7, cost),
                    updated_at = COALESCE($8, updated_at)
                 WHERE id = $1",
                &[
                    &session_id,
                    &update.title,
                    &update.model,
                    &update.mode,
                    &input.map(tokens),
                    &output.map(tokens),
                    &update.cost,
                    &update.updated_at,
                ],
            )?;
            Ok(())
        })
    }

    fn load(&self, session_id: &str) -> Result<(SessionMeta, Transcript), StoreError> {
        self.with(|client| {
            let mut tx = client.build_transaction().read_only(true).start()?;
            let meta = tx
                .query_opt(
                    &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"),
                    &[&session_id],
                )?
                .map(|row| meta_of(&row))
                .ok_or_else(|| StoreError::NotFound(session_id.to_string()))?;
            let rows = tx.query(
                "SELECT body FROM entries WHERE session_id = $1 ORDER BY entry_id",
                &[&session_id],
            )?;
            tx.commit()?;
            Ok((
                meta,
                Transcript::from_entries(entries_of(&rows, session_id)?),
            ))
        })
    }

    fn list(
        &self,
        cwd: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let (after_time, after_id) = crate::list_cursor(cursor);
        let limit = limit.clamp(1, 1000);
        let rows = self.with(|client| {
            Ok(client.query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions
                     WHERE ($1::text IS NULL OR cwd = $1)
                       AND ($2::bigint IS NULL OR (updated_at, id) < ($2, $3::text))
                     ORDER BY updated_at DESC, id DESC LIMIT $4"
                ),
                &[
                    &cwd,
                    &after_time,
                    &after_id,
                    &i64::try_from(limit + 1).unwrap_or(1001),
                ],
            )?)
        })?;
        Ok(ListPage::of(rows.iter().map(meta_of).collect(), limit))
    }

    fn delete(&self, session_id: &str, waiting_here: bool) -> Result<bool, StoreError> {
        let held_before = super::lock(&self.held).contains(session_id);
        self.claim(session_id)?;
        let deleted = self.with(|client| {
            let mut tx = client.transaction()?;
            tx.execute(
                &format!("SELECT pg_advisory_xact_lock({TOMBSTONE_KEY})"),
                &[&session_id],
            )?;
            let removed = tx.execute("DELETE FROM sessions WHERE id = $1", &[&session_id])?;
            let deleted = removed > 0 || waiting_here;
            if deleted {
                tx.execute(
                    "INSERT INTO deleted_sessions (id, deleted_at) VALUES ($1, $2)
                     ON CONFLICT (id) DO NOTHING",
                    &[&session_id, &now_ms()],
                )?;
            }
            if talaria_util::failpoint::injected("delete::commit::before") {
                return Err(StoreError::Full(
                    "injected at delete::commit::before".into(),
                ));
            }
            tx.commit()?;
            talaria_util::failpoint::step("delete::commit::after");
            Ok(deleted)
        });
        if !held_before || matches!(deleted, Ok(true)) {
            self.release(session_id)?;
        }
        deleted
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let Some(query) = crate::search_text::tsquery_of(query) else {
            return Ok(Vec::new());
        };
        self.with(|client| search_rows(client, &query, limit))
    }

    fn was_deleted(&self, session_id: &str) -> Result<bool, StoreError> {
        self.with(|client| {
            let found = client.query_opt(
                "SELECT 1 FROM deleted_sessions WHERE id = $1",
                &[&session_id],
            )?;
            Ok(found.is_some())
        })
    }

    fn entries_around(
        &self,
        session_id: &str,
        entry_id: EntryId,
        before: usize,
        after: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let id = entry_key(entry_id);
        let count = |n: usize| i64::try_from(n).unwrap_or(0);
        self.with(|client| {
            let earlier = client.query(
                "SELECT body FROM entries WHERE session_id = $1 AND entry_id < $2
                 ORDER BY entry_id DESC LIMIT $3",
                &[&session_id, &id, &count(before)],
            )?;
            let later = client.query(
                "SELECT body FROM entries WHERE session_id = $1 AND entry_id >= $2
                 ORDER BY entry_id LIMIT $3",
                &[&session_id, &id, &count(after + 1)],
            )?;
            let mut entries = entries_of(&earlier, session_id)?;
            entries.reverse();
            entries.extend(entries_of(&later, session_id)?);
            Ok(entries)
        })
    }

    fn claim(&self, session_id: &str) -> Result<(), StoreError> {
        self.claim_session(session_id)
    }

    fn release(&self, session_id: &str) -> Result<(), StoreError> {
        self.release_session(session_id)
    }

    fn holds(&self, session_id: &str) -> bool {
        super::lock(&self.held).contains(session_id)
            && !super::lock(&self.lost).contains_key(session_id)
    }

    fn ask_for(&self, session_id: &str, by: &str) -> Result<Option<String>, StoreError> {
        self.with(|client| {
            // The server's clock: hosts' clocks may differ.
            let renewed = client.query_opt(
                &format!(
                    "INSERT INTO session_asks (session_id, asked_by, asked_at)
                     VALUES ($1, $2, {NOW_MS})
                     ON CONFLICT (session_id) DO UPDATE SET asked_by = $2, asked_at = {NOW_MS}
                     WHERE session_asks.asked_by = $2
                        OR session_asks.asked_at <= {NOW_MS} - $3
                     RETURNING asked_by"
                ),
                &[&session_id, &by, &crate::ASK_FRESH_MS],
            )?;
            if renewed.is_some() {
                return Ok(None);
            }
            let standing = client.query_opt(
                "SELECT asked_by FROM session_asks WHERE session_id = $1",
                &[&session_id],
            )?;
            Ok(standing.map(|row| row.get(0)))
        })
    }

    fn asked_for(
        &self,
        session_ids: &[String],
        within_ms: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.with(|client| {
            let rows = client.query(
                &format!(
                    "SELECT session_id, asked_by FROM session_asks
                     WHERE session_id = ANY($1) AND asked_at > {NOW_MS} - $2"
                ),
                &[&session_ids, &within_ms],
            )?;
            Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        })
    }

    fn withdraw_ask(&self, session_id: &str, by: &str) -> Result<(), StoreError> {
        self.with(|client| {
            client.execute(
                "DELETE FROM session_asks WHERE session_id = $1 AND asked_by = $2",
                &[&session_id, &by],
            )?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::write_copy_text;

    #[test]
    fn a_streamed_body_is_one_row_of_copy_text_with_its_escapes() {
        let mut out = Vec::new();
        let text = format!("{}\\ \n\t\r end", "x".repeat(200_000));
        write_copy_text(&mut out, &text).expect("written");
        let expected = format!("{}\\\\ \\n\\t\\r end\n", "x".repeat(200_000));
        assert_eq!(String::from_utf8(out).expect("utf-8"), expected);
    }
}
