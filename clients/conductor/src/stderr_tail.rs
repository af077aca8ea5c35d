//! The last lines a child wrote to stderr (kept for the error that names its end), also
//! passed on to Talaria's log.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How many of the last lines are kept.
const KEPT_LINES: usize = 20;
/// A line longer than this is cut (a child may write anything).
const LINE_BYTES: usize = 2000;

/// The kept lines; cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
}

impl StderrTail {
    /// Reads `stderr` to its end in a task of its own.
    pub fn follow(stderr: impl AsyncRead + Unpin + Send + 'static, name: String) -> Self {
        let tail = Self::default();
        let kept = tail.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut bytes = Vec::new();
            while let Ok(n) = reader.read_until(b'\n', &mut bytes).await {
                if n == 0 {
                    break;
                }
                let mut line = String::from_utf8_lossy(&bytes).trim_end().to_string();
                bytes.clear();
                if line.len() > LINE_BYTES {
                    let mut cut = LINE_BYTES;
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    line.truncate(cut);
                    line.push('…');
                }
                tracing::debug!(agent = %name, "{line}");
                kept.push(line);
            }
        });
        tail
    }

    fn push(&self, line: String) {
        let mut lines = talaria_util::lock(&self.lines);
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The lines so far, oldest first.
    pub fn lines(&self) -> Vec<String> {
        let lines = talaria_util::lock(&self.lines);
        lines.iter().cloned().collect()
    }
}
