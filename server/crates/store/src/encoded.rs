//! An entry as every store writes it: its JSON body (built once, in one allocation of its
//! exact size) and what of it is searchable; encoding happens where the entry lives, so
//! the entry itself is never copied on its way to the store.

use std::io;
use std::sync::Arc;

use talaria_record::{Entry, EntryId};

use crate::StoreError;

/// One entry ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedEntry {
    pub id: EntryId,
    pub at_ms: i64,
    /// The kind it is filed under (`user`, `assistant`, `tool_result`…).
    pub kind: &'static str,
    /// The entry as JSON, shared: the journal's view of a session and its writer hold the
    /// same body, never a copy.
    pub body: Arc<String>,
    /// The text full-text search sees, if any (bounded, whatever the entry's size).
    pub search_text: Option<Arc<String>>,
}

impl EncodedEntry {
    pub fn of(entry: &Entry) -> Result<Self, StoreError> {
        Ok(Self {
            id: entry.id,
            at_ms: entry.at_ms,
            kind: crate::search_text::kind_of(&entry.body),
            body: Arc::new(json_of(entry)?),
            search_text: crate::search_text::text_of(entry).map(Arc::new),
        })
    }

    /// The entry back from its body.
    pub fn decoded(&self) -> Result<Entry, StoreError> {
        serde_json::from_str(&self.body)
            .map_err(|e| StoreError::Other(format!("entry {} does not decode: {e}", self.id)))
    }

    /// Whether `other` is this very encoding (the same body, not an equal copy).
    pub fn is_same(&self, other: &Self) -> bool {
        self.id == other.id && Arc::ptr_eq(&self.body, &other.body)
    }

    /// Every entry of `entries`, in order.
    pub fn all(entries: &[Entry]) -> Result<Vec<Self>, StoreError> {
        entries.iter().map(Self::of).collect()
    }
}

/// `entry` as JSON in a buffer of exactly its size: a growing buffer would hold up to twice
/// a large answer while it doubles.
fn json_of(entry: &Entry) -> Result<String, StoreError> {
    let failed = |e: serde_json::Error| StoreError::Other(format!("cannot encode an entry: {e}"));
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, entry).map_err(failed)?;
    let mut body = Vec::with_capacity(counter.0);
    serde_json::to_writer(&mut body, entry).map_err(failed)?;
    String::from_utf8(body).map_err(|e| StoreError::Other(format!("cannot encode an entry: {e}")))
}

/// A writer that only counts what it is given.
struct ByteCounter(usize);

impl io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use talaria_record::{EntryBody, Transcript};

    use super::*;

    #[test]
    fn the_body_is_the_entry_as_json_in_a_buffer_of_its_exact_size() {
        let mut transcript = Transcript::default();
        transcript.push(EntryBody::System {
            text: "ünïcode and \"quotes\"\n".repeat(100),
            environment: None,
        });
        let entry = &transcript.entries()[0];
        let encoded = EncodedEntry::of(entry).expect("encodes");
        assert_eq!(*encoded.body, serde_json::to_string(entry).expect("json"));
        assert_eq!(encoded.body.capacity(), encoded.body.len());
        assert_eq!(encoded.kind, "system");
        assert_eq!(encoded.search_text, None);
    }
}
