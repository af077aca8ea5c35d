//! The last lines a child wrote to stderr (kept for the error that names its end), also
//! passed on to Talaria's log.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How many of the last lines are kept.
const KEPT_LINES: usize = 20;
/// A line longer than this is cut (a child may write anything).
const LINE_BYTES: usize = 2000;

/// Keeps what fits of `bytes` in `line` (at most [`LINE_BYTES`]); returns `used`.
fn take(line: &mut Vec<u8>, cut: &mut bool, bytes: &[u8], used: usize) -> usize {
    let room = LINE_BYTES.saturating_sub(line.len());
    if bytes.len() > room {
        *cut = true;
    }
    line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    used
}

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
            let mut line = Vec::new();
            let mut cut = false;
            loop {
                let (done, used) = match reader.fill_buf().await {
                    Ok([]) | Err(_) => break,
                    Ok(bytes) => match bytes.iter().position(|b| *b == b'\n') {
                        Some(at) => (true, take(&mut line, &mut cut, &bytes[..at], at + 1)),
                        None => (false, take(&mut line, &mut cut, bytes, bytes.len())),
                    },
                };
                reader.consume(used);
                if done {
                    kept.push_line(&line, cut, &name);
                    line.clear();
                    cut = false;
                }
            }
            if !line.is_empty() {
                kept.push_line(&line, cut, &name);
            }
        });
        tail
    }

    fn push_line(&self, bytes: &[u8], cut: bool, name: &str) {
        let mut line = String::from_utf8_lossy(bytes).trim_end().to_string();
        if cut {
            line.push('…');
        }
        tracing::debug!(agent = %name, "{line}");
        self.push(line);
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
