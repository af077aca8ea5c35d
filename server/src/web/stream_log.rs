//! One stream of a connection (its own, or one session's) as an ordered log: every message
//! the agent sent on it, numbered from 1 in the order sent, stamped with its cursor, kept
//! after it was handed out (its history, for a receiver that comes back) until the
//! retention bound drops the oldest. A receiver reads from a position; the log says whether
//! a position a client asks to resume from is still here.
//!
//! Numbers are per stream and contiguous, so whether a point is still kept is a comparison
//! with the oldest kept number, never a guess.

use std::collections::VecDeque;

use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::cursor;

/// One message, numbered in its stream and in the connection's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Its place in its stream (from 1): the `N` of its cursor.
    pub seq: u64,
    /// Its place among everything the connection sent (which stream's history is oldest).
    pub order: u64,
    /// The message, its cursor stamped in, shared without copying by the log and the frame.
    pub text: Utf8Bytes,
}

/// Why a point cannot be resumed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresumable {
    /// The messages after it were dropped from memory (past the retention bound).
    Dropped,
    /// Not a point of this stream (another stream's cursor, a server that restarted, one
    /// never handed out).
    Unknown,
}

impl Unresumable {
    /// Why, in words.
    pub fn says(self) -> &'static str {
        match self {
            Self::Dropped => "past what the server keeps",
            Self::Unknown => "not a cursor of this stream",
        }
    }
}

/// A stream's log.
#[derive(Debug)]
pub struct StreamLog {
    /// Names the stream in its cursors.
    pub tag: String,
    entries: VecDeque<Queued>,
    /// The number the next message gets.
    next_seq: u64,
    /// The last number handed to a receiver.
    read_to: u64,
    /// Bytes of the messages handed out and kept (`seq <= read_to`).
    history_bytes: usize,
    /// Bytes of the messages not handed out yet.
    waiting_bytes: usize,
    /// The receiver holding the stream now (its hold's number).
    pub holder: Option<u64>,
    /// Holds given so far (each receiver's number).
    holds: u64,
    /// A receiver held it once: a session's messages go to its own stream from then on.
    pub opened: bool,
}

impl Default for StreamLog {
    fn default() -> Self {
        Self {
            tag: cursor::new_tag(),
            entries: VecDeque::new(),
            next_seq: 1,
            read_to: 0,
            history_bytes: 0,
            waiting_bytes: 0,
            holder: None,
            holds: 0,
            opened: false,
        }
    }
}

impl StreamLog {
    /// A new receiver holds the stream (any other loses it); its hold's number.
    pub fn hold(&mut self) -> u64 {
        self.holds += 1;
        self.holder = Some(self.holds);
        self.opened = true;
        self.holds
    }

    /// Appends a message (its cursor stamped in); the bytes now waiting for a receiver.
    pub fn push(&mut self, text: String, order: u64) -> usize {
        let seq = self.next_seq;
        self.next_seq += 1;
        let text = cursor::stamp(text, &cursor::text(&self.tag, seq));
        let bytes = text.len();
        self.entries.push_back(Queued {
            seq,
            order,
            text: Utf8Bytes::from(text),
        });
        self.waiting_bytes += bytes;
        bytes
    }

    fn first_seq(&self) -> u64 {
        self.entries.front().map_or(self.next_seq, |q| q.seq)
    }

    /// Hands out up to `most` of the messages after the read position (into `into`); the
    /// bytes handed out.
    pub fn take(&mut self, most: usize, into: &mut Vec<Queued>) -> usize {
        let start = (self.read_to + 1 - self.first_seq()) as usize;
        let mut bytes = 0;
        for queued in self.entries.iter().skip(start).take(most) {
            bytes += queued.text.len();
            into.push(queued.clone());
        }
        let count = self.entries.len().saturating_sub(start).min(most);
        self.read_to += count as u64;
        self.waiting_bytes -= bytes;
        self.history_bytes += bytes;
        bytes
    }

    /// Whether messages wait to be handed out.
    #[cfg(test)]
    pub fn has_waiting(&self) -> bool {
        self.read_to + 1 < self.next_seq
    }

    /// Moves the read position back to `after` (the last message a receiver says it got), so
    /// what came after is handed out again; the bytes that wait again.
    pub fn rewind(&mut self, after: u64) -> Result<usize, Unresumable> {
        if after > self.read_to {
            return Err(Unresumable::Unknown);
        }
        if after + 1 < self.first_seq() {
            return Err(Unresumable::Dropped);
        }
        let again: usize = self
            .entries
            .iter()
            .filter(|q| q.seq > after && q.seq <= self.read_to)
            .map(|q| q.text.len())
            .sum();
        self.read_to = after;
        self.history_bytes -= again;
        self.waiting_bytes += again;
        Ok(again)
    }

    /// Reads a cursor a client sent as a point of this stream.
    pub fn point(&self, asked: &cursor::Asked) -> Result<u64, Unresumable> {
        match asked {
            cursor::Asked::At { tag, seq } if tag.as_ref().is_none_or(|t| *t == self.tag) => {
                Ok(*seq)
            }
            _ => Err(Unresumable::Unknown),
        }
    }

    /// Handed-out messages kept beyond `most`: how many.
    pub fn history_over(&self, most: usize) -> usize {
        let kept = (self.read_to + 1).saturating_sub(self.first_seq()) as usize;
        kept.saturating_sub(most)
    }

    /// The connection order of the oldest handed-out message kept.
    pub fn oldest_history(&self) -> Option<u64> {
        self.entries
            .front()
            .filter(|q| q.seq <= self.read_to)
            .map(|q| q.order)
    }

    /// Drops the oldest handed-out message; its bytes (0: none to drop).
    pub fn drop_oldest(&mut self) -> usize {
        match self.entries.front() {
            Some(front) if front.seq <= self.read_to => {
                let bytes = front.text.len();
                self.entries.pop_front();
                self.history_bytes -= bytes;
                bytes
            }
            _ => 0,
        }
    }

    #[cfg(test)]
    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    #[cfg(test)]
    pub fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }

    /// The cursor of the last message handed out (where a receiver that got everything is).
    #[cfg(test)]
    pub fn read_cursor(&self) -> String {
        cursor::text(&self.tag, self.read_to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(count: u64) -> StreamLog {
        let mut log = StreamLog::default();
        for n in 1..=count {
            log.push(
                format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"n":{n}}}}}"#),
                n,
            );
        }
        log
    }

    fn seqs(taken: &[Queued]) -> Vec<u64> {
        taken.iter().map(|q| q.seq).collect()
    }

    #[test]
    fn messages_are_numbered_per_stream_and_carry_their_cursor() {
        let mut log = log_of(3);
        let mut taken = Vec::new();
        log.take(10, &mut taken);
        assert_eq!(seqs(&taken), [1, 2, 3]);
        let third: serde_json::Value = serde_json::from_str(&taken[2].text).expect("json");
        assert_eq!(cursor::of(&third), Some(cursor::text(&log.tag, 3).as_str()));
        assert_eq!(log.read_cursor(), cursor::text(&log.tag, 3));
        assert!(!log.has_waiting());
    }

    #[test]
    fn a_rewind_hands_out_again_exactly_what_followed_the_point() {
        let mut log = log_of(6);
        let mut taken = Vec::new();
        log.take(4, &mut taken);
        let waiting = log.waiting_bytes();
        let again = log.rewind(2).expect("kept");
        assert_eq!(log.waiting_bytes(), waiting + again);
        taken.clear();
        log.take(10, &mut taken);
        assert_eq!(seqs(&taken), [3, 4, 5, 6]);
        assert_eq!(log.rewind(7), Err(Unresumable::Unknown), "never handed out");
        assert_eq!(log.rewind(6), Ok(0), "everything was had");
    }

    #[test]
    fn dropped_history_is_said_to_be_gone_never_skipped() {
        let mut log = log_of(10);
        let mut taken = Vec::new();
        log.take(8, &mut taken);
        assert_eq!(log.history_over(5), 3);
        let before = log.history_bytes();
        let mut freed = 0;
        while log.history_over(5) > 0 {
            freed += log.drop_oldest();
        }
        assert_eq!(log.history_bytes(), before - freed);
        // 1..=3 are gone: resuming after 3 is exact, after 2 or before is refused.
        assert_eq!(log.rewind(2), Err(Unresumable::Dropped));
        assert_eq!(log.rewind(0), Err(Unresumable::Dropped));
        assert!(log.rewind(3).is_ok());
        taken.clear();
        log.take(100, &mut taken);
        assert_eq!(seqs(&taken), [4, 5, 6, 7, 8, 9, 10]);
        // Waiting messages are never dropped, however many.
        while log.drop_oldest() > 0 {}
        assert_eq!(log.oldest_history(), None);
        let foreign = cursor::parse("0000beef.4");
        assert_eq!(log.point(&foreign), Err(Unresumable::Unknown));
        assert_eq!(log.point(&cursor::parse("4")), Ok(4));
    }
}
