//! Bounded command output: the head and the tail are kept, the middle is elided with a count.

use std::collections::VecDeque;

/// Keeps the first `head_cap` and the last `tail_cap` bytes of a stream.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: usize,
}

impl HeadTail {
    /// A buffer keeping at most `limit` bytes: a third from the start, the rest from the end.
    pub fn new(limit: usize) -> Self {
        let head_cap = limit / 3;
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: limit - head_cap,
            total: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        if self.head.len() < self.head_cap {
            let take = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Bytes seen in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes dropped from the middle.
    pub fn elided(&self) -> usize {
        self.total - self.head.len() - self.tail.len()
    }

    /// The kept text, with a marker where the middle was cut.
    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail_bytes: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail_bytes);
        match self.elided() {
            0 => format!("{head}{tail}"),
            n => format!("{head}\n\n[… {n} bytes of output elided …]\n\n{tail}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_and_counts_the_middle() {
        let mut buffer = HeadTail::new(9);
        buffer.push(b"abc");
        buffer.push(b"defghij");
        buffer.push(b"klmnop");
        assert_eq!(buffer.total(), 16);
        assert_eq!(buffer.elided(), 7);
        assert_eq!(
            buffer.render(),
            "abc\n\n[… 7 bytes of output elided …]\n\nklmnop"
        );
        let mut small = HeadTail::new(100);
        small.push(b"hello");
        assert_eq!(small.render(), "hello");
    }
}
