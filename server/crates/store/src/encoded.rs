//! An entry as every store writes it: its JSON body (built once, in one allocation of its
//! exact size) and what of it is searchable; encoding happens where the entry lives, so
//! the entry itself is never copied on its way to the store. A body may leave memory for a
//! file it was written into whole (the journal's spool, while the store is stuck): every
//! holder of it then reads it back from there.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, PoisonError, RwLock};

use talaria_record::{Entry, EntryId};

use crate::StoreError;

/// One entry ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedEntry {
    pub id: EntryId,
    pub at_ms: i64,
    /// The kind it is filed under (`user`, `assistant`, `tool_result`…).
    pub kind: &'static str,
    /// The entry as JSON and what search sees of it, shared: the journal's view of a
    /// session and its writer hold the same body, never a copy.
    pub body: Arc<Body>,
}

impl EncodedEntry {
    pub fn of(entry: &Entry) -> Result<Self, StoreError> {
        Ok(Self {
            id: entry.id,
            at_ms: entry.at_ms,
            kind: crate::search_text::kind_of(&entry.body),
            body: Arc::new(Body::new(
                json_of(entry)?,
                crate::search_text::text_of(entry).map(Arc::new),
            )),
        })
    }

    /// The text full-text search sees, if any (bounded, whatever the entry's size).
    pub fn search_text(&self) -> Option<Arc<String>> {
        self.body.search_text()
    }

    /// The entry back from its body.
    pub fn decoded(&self) -> Result<Entry, StoreError> {
        serde_json::from_str(&self.body.text()?)
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

/// An entry's JSON and its searchable text: held in memory, or spilled to a file that holds
/// the JSON whole at a known place (the file stays readable through its handle even once it
/// is removed or replaced; the searchable text is then made again from it when asked).
pub struct Body {
    len: usize,
    state: RwLock<BodyState>,
}

enum BodyState {
    Held {
        text: Arc<String>,
        search: Option<Arc<String>>,
    },
    Spilled {
        file: Arc<File>,
        offset: u64,
    },
}

impl Body {
    pub fn new(text: String, search: Option<Arc<String>>) -> Self {
        Self {
            len: text.len(),
            state: RwLock::new(BodyState::Held {
                text: Arc::new(text),
                search,
            }),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it is in memory (not spilled).
    pub fn is_held(&self) -> bool {
        matches!(
            *self.state.read().unwrap_or_else(PoisonError::into_inner),
            BodyState::Held { .. }
        )
    }

    /// The text: shared while held, read back from its file once spilled.
    pub fn text(&self) -> Result<Arc<String>, StoreError> {
        let (file, offset) = match &*self.state.read().unwrap_or_else(PoisonError::into_inner) {
            BodyState::Held { text, .. } => return Ok(text.clone()),
            BodyState::Spilled { file, offset } => (file.clone(), *offset),
        };
        let mut bytes = vec![0; self.len];
        file.read_exact_at(&mut bytes, offset).map_err(|e| {
            StoreError::Other(format!(
                "an entry kept in the spool cannot be read back: {e}"
            ))
        })?;
        String::from_utf8(bytes)
            .map(Arc::new)
            .map_err(|_| StoreError::Other("an entry kept in the spool reads back damaged".into()))
    }

    /// What full-text search sees: kept while held, made again from the text once spilled.
    pub fn search_text(&self) -> Option<Arc<String>> {
        if let BodyState::Held { search, .. } =
            &*self.state.read().unwrap_or_else(PoisonError::into_inner)
        {
            return search.clone();
        }
        let text = self.text().ok()?;
        let entry: Entry = serde_json::from_str(&text).ok()?;
        crate::search_text::text_of(&entry).map(Arc::new)
    }

    /// Leaves memory: `file` holds this very text at `offset` (the caller wrote it there).
    pub fn spill(&self, file: Arc<File>, offset: u64) {
        *self.state.write().unwrap_or_else(PoisonError::into_inner) =
            BodyState::Spilled { file, offset };
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("len", &self.len)
            .field("held", &self.is_held())
            .finish()
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && match (self.text(), other.text()) {
                (Ok(mine), Ok(theirs)) => mine == theirs,
                _ => false,
            }
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
        let body = encoded.body.text().expect("held");
        assert_eq!(*body, serde_json::to_string(entry).expect("json"));
        assert_eq!(body.capacity(), body.len());
        assert_eq!(encoded.kind, "system");
        assert_eq!(encoded.search_text(), None);
    }

    #[test]
    fn a_spilled_body_is_read_back_from_its_file_even_once_the_file_is_removed() {
        let mut transcript = Transcript::default();
        transcript.push(EntryBody::System {
            text: "spilled ".repeat(1000),
            environment: None,
        });
        let encoded = EncodedEntry::of(&transcript.entries()[0]).expect("encodes");
        let text = encoded.body.text().expect("held");
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("spool");
        std::fs::write(&path, format!("head{text}tail")).expect("write");
        let file = Arc::new(File::open(&path).expect("open"));
        let shared = encoded.clone();
        encoded.body.spill(file, 4);
        std::fs::remove_file(&path).expect("removed");
        assert!(!shared.body.is_held(), "every holder sees it spilled");
        assert_eq!(
            shared.search_text(),
            None,
            "a system prompt is not searched"
        );
        assert_eq!(shared.body.text().expect("read back"), text);
        assert_eq!(
            shared.decoded().expect("decodes"),
            transcript.entries()[0].clone()
        );
    }
}
