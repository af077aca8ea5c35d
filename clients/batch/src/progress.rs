//! The batch's progress on stderr: on a terminal one line redrawn (done, running, failed,
//! tokens, ETA); otherwise a plain line a finished task.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::outputs::TaskResult;

/// Counts and how they are shown.
pub struct Progress {
    total: usize,
    done: usize,
    failed: usize,
    running: usize,
    tokens: u64,
    started: Instant,
    terminal: bool,
    quiet: bool,
}

impl Progress {
    /// For `total` tasks still to run; `quiet` shows nothing.
    pub fn new(total: usize, quiet: bool) -> Self {
        Self {
            total,
            done: 0,
            failed: 0,
            running: 0,
            tokens: 0,
            started: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            quiet,
        }
    }

    pub fn started_one(&mut self) {
        self.running += 1;
        if self.terminal {
            self.redraw();
        }
    }

    pub fn finished(&mut self, result: &TaskResult) {
        self.running = self.running.saturating_sub(1);
        self.done += 1;
        self.failed += usize::from(result.verdict.failed());
        self.tokens += result.tokens_in + result.tokens_out;
        if self.terminal {
            self.redraw();
        } else {
            let verdict = serde_json::to_value(result.verdict).unwrap_or_default();
            let line = format!(
                "{} — task {}: {}",
                self.status(),
                result.id,
                verdict.as_str().unwrap_or("")
            );
            self.say(&line);
        }
    }

    /// Ends the redrawn line.
    pub fn end(&self) {
        if self.terminal && !self.quiet {
            let _ = writeln!(std::io::stderr());
        }
    }

    fn status(&self) -> String {
        if self.total == 0 {
            // A queue's worker: how many tasks there are is the queue's to know.
            return format!(
                "batch: {} done, {} running, {} failed, {} tokens",
                self.done, self.running, self.failed, self.tokens
            );
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = if self.done == 0 {
            "?".to_string()
        } else {
            let left = (self.total - self.done.min(self.total)) as f64;
            let secs = (elapsed / self.done as f64 * left).round() as u64;
            format!("{}:{:02}", secs / 60, secs % 60)
        };
        format!(
            "batch: {}/{} done, {} running, {} failed, {} tokens, ETA {eta}",
            self.done, self.total, self.running, self.failed, self.tokens
        )
    }

    fn redraw(&self) {
        let status = self.status();
        if !self.quiet {
            let _ = write!(std::io::stderr(), "\r\x1b[2K{status}");
        }
    }

    fn say(&self, line: &str) {
        if !self.quiet {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}
