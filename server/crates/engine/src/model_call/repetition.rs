//! A guard on a streaming answer that has gone into a loop (small models repeat the same call
//! or line until the output limit): once the same line, or block of up to four lines, has
//! come [`REPEATS`] times in a row, the stream is stopped and the answer kept with one copy.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Copies in a row that make a loop.
pub(crate) const REPEATS: usize = 8;
/// The longest block (in lines) looked for.
const MAX_PERIOD: usize = 4;
/// Lines shorter than this (fences, braces, blank lines) neither count nor break a run.
const MIN_LINE: usize = 8;

/// Watches the complete lines of one answer.
#[derive(Debug, Default)]
pub(crate) struct RepetitionGuard {
    /// The last lines that count (at most `MAX_PERIOD * REPEATS`): their hash and where
    /// each starts in the answer.
    recent: VecDeque<(u64, usize)>,
    /// Where the line being streamed starts.
    line_start: usize,
    /// How far the answer was searched for a line's end (each byte is looked at once).
    scanned: usize,
}

impl RepetitionGuard {
    /// Looks at the lines `answer` completed since the last look; where the answer should
    /// end (after the loop's first copy) once it loops.
    pub fn check(&mut self, answer: &str) -> Option<usize> {
        loop {
            let from = self.scanned.max(self.line_start);
            let Some(newline) = answer
                .as_bytes()
                .get(from..)
                .and_then(|rest| memchr::memchr(b'\n', rest))
            else {
                self.scanned = answer.len();
                return None;
            };
            let start = self.line_start;
            let end = from + newline;
            let line = answer[start..end].trim();
            self.line_start = end + 1;
            self.scanned = end + 1;
            if line.len() < MIN_LINE {
                continue;
            }
            let mut hasher = DefaultHasher::new();
            line.hash(&mut hasher);
            if self.recent.len() == MAX_PERIOD * REPEATS {
                self.recent.pop_front();
            }
            self.recent.push_back((hasher.finish(), start));
            if let Some(cut) = self.looped() {
                return Some(cut);
            }
        }
    }

    /// Where the second copy starts, when the last lines are one block repeated.
    fn looped(&self) -> Option<usize> {
        for period in 1..=MAX_PERIOD {
            let need = period * REPEATS;
            if self.recent.len() < need {
                break;
            }
            let tail: Vec<&(u64, usize)> =
                self.recent.iter().skip(self.recent.len() - need).collect();
            let repeated = (period..need).all(|i| tail[i].0 == tail[i % period].0);
            let one_block = period == 1 || (1..period).any(|i| tail[i].0 != tail[0].0);
            if repeated && one_block {
                return Some(tail[period].1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `answer` in pieces of `size` bytes; where it was cut, if it was.
    fn cut_of(answer: &str, size: usize) -> Option<usize> {
        let mut guard = RepetitionGuard::default();
        let mut end = 0;
        while end < answer.len() {
            end = (end + size).min(answer.len());
            if let Some(cut) = guard.check(&answer[..end]) {
                return Some(cut);
            }
        }
        None
    }

    #[test]
    fn a_line_repeated_is_cut_after_its_first_copy_early() {
        let call = "{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.py\"}}\n";
        let answer = format!("I'll write it.\n{}", call.repeat(200));
        let cut = cut_of(&answer, 7).expect("stopped");
        assert_eq!(&answer[..cut], format!("I'll write it.\n{call}"));
    }

    #[test]
    fn a_repeated_block_of_lines_with_fences_is_cut_once() {
        let block = "```json\n{\"name\": \"terminal\", \"arguments\": {\"command\": \"pytest\"}}\n```\nRunning the tests now.\n";
        let answer = format!("Sure.\n{}", block.repeat(50));
        let cut = cut_of(&answer, 13).expect("stopped");
        assert!(answer[..cut].starts_with("Sure.\n```json"));
        assert_eq!(
            answer[..cut].matches("pytest").count(),
            1,
            "{}",
            &answer[..cut]
        );
    }

    #[test]
    fn ordinary_answers_are_never_cut() {
        let code =
            "fn main() {\n    if a {\n        if b {\n            x();\n        }\n    }\n}\n";
        let list: String = (1..=40).map(|n| format!("- step number {n}\n")).collect();
        let braces = "}\n".repeat(30);
        let seven = "print('hello world')\n".repeat(REPEATS - 1);
        for answer in [code.repeat(3), list, braces, seven] {
            assert_eq!(cut_of(&answer, 5), None, "{answer}");
        }
    }
}

#[cfg(test)]
mod cost {
    use super::RepetitionGuard;

    #[test]
    fn a_long_line_streamed_in_small_pieces_is_scanned_once() {
        // 256 KB without a line break in 1-byte deltas: each byte is searched once.
        let answer = "x".repeat(1 << 18);
        let mut guard = RepetitionGuard::default();
        for end in (1..=answer.len()).step_by(1) {
            assert_eq!(guard.check(&answer[..end]), None);
        }
        assert_eq!(guard.scanned, answer.len());
    }
}
