//! Message framing: newline-delimited JSON (ACP) or `Content-Length` headers (LSP style).
//!
//! The framing of a connection is detected from the first non-blank bytes it receives and is
//! then fixed; replies use the same framing. Frames over the size limit are skipped without
//! being buffered and reported as [`Frame::TooLarge`].

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// How messages are delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON message per line (the ACP stdio transport).
    NewlineDelimited,
    /// `Content-Length: N\r\n\r\n` followed by N bytes of JSON (LSP style).
    ContentLength,
}

/// One unit read from the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// The bytes of one message (not yet parsed).
    Message(Vec<u8>),
    /// A message longer than the limit was skipped.
    TooLarge { size: usize },
    /// A `Content-Length` header block that could not be understood.
    BadHeader(String),
}

const HEADER_PREFIX: &[u8] = b"content-length";
const MAX_HEADER_BYTES: usize = 8 * 1024;
const READ_CHUNK: usize = 64 * 1024;

/// Reads frames from a byte stream, detecting the framing from the first bytes.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    eof: bool,
    framing: Option<Framing>,
    max_message_bytes: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps `inner`; messages larger than `max_message_bytes` are skipped.
    pub fn new(inner: R, max_message_bytes: usize) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(READ_CHUNK),
            start: 0,
            eof: false,
            framing: None,
            max_message_bytes,
        }
    }

    /// The framing, once the first bytes have been seen.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn skip_leading_whitespace(&mut self) {
        while self.start < self.buf.len() && self.buf[self.start].is_ascii_whitespace() {
            self.start += 1;
        }
    }

    /// Detects the framing from the first non-blank bytes. Returns false at end of input.
    async fn detect(&mut self) -> io::Result<bool> {
        loop {
            self.skip_leading_whitespace();
            let pending = self.pending();
            if !pending.is_empty() {
                let n = pending.len().min(HEADER_PREFIX.len());
                let is_prefix = pending[..n].eq_ignore_ascii_case(&HEADER_PREFIX[..n]);
                if !is_prefix {
                    self.framing = Some(Framing::NewlineDelimited);
                    return Ok(true);
                }
                if n == HEADER_PREFIX.len() {
                    self.framing = Some(Framing::ContentLength);
                    return Ok(true);
                }
            }
            if !self.fill_once().await? {
                if !self.pending().is_empty() {
                    self.framing = Some(Framing::NewlineDelimited);
                    return Ok(true);
                }
                return Ok(false);
            }
        }
    }

    /// Reads the next frame; `None` at end of input.
    pub async fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        if self.framing.is_none() && !self.detect().await? {
            return Ok(None);
        }
        match self.framing {
            Some(Framing::ContentLength) => self.next_content_length_frame().await,
            _ => self.next_line_frame().await,
        }
    }

    async fn fill_once(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            // A large message's buffer is not kept for the small ones that follow.
            if self.buf.capacity() > 4 * READ_CHUNK {
                self.buf.shrink_to(READ_CHUNK);
            }
        }
        // Read into spare capacity, never zeroed ahead: an idle connection's buffer stays
        // untouched memory.
        self.buf.reserve(READ_CHUNK);
        match self.inner.read_buf(&mut self.buf).await {
            Ok(0) => {
                self.eof = true;
                Ok(false)
            }
            Ok(_) => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn next_line_frame(&mut self) -> io::Result<Option<Frame>> {
        let mut searched = 0;
        loop {
            let pending = &self.buf[self.start..];
            if let Some(pos) = pending[searched..].iter().position(|&b| b == b'\n') {
                let end = self.start + searched + pos;
                let size = end - self.start;
                if size > self.max_message_bytes {
                    self.start = end + 1;
                    return Ok(Some(Frame::TooLarge { size }));
                }
                let line = trim_line(&self.buf[self.start..end]).to_vec();
                self.start = end + 1;
                if line.is_empty() {
                    searched = 0;
                    continue;
                }
                return Ok(Some(Frame::Message(line)));
            }
            searched = pending.len();
            if pending.len() > self.max_message_bytes {
                return self.discard_line().await.map(Some);
            }
            if !self.fill_once().await? {
                let line = trim_line(self.pending()).to_vec();
                self.start = self.buf.len();
                if line.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Frame::Message(line)));
            }
        }
    }

    /// Skips the rest of an over-long line without keeping it.
    async fn discard_line(&mut self) -> io::Result<Frame> {
        let mut size = 0;
        loop {
            let pending = self.pending();
            if let Some(pos) = pending.iter().position(|&b| b == b'\n') {
                size += pos;
                self.start += pos + 1;
                return Ok(Frame::TooLarge { size });
            }
            size += pending.len();
            self.buf.clear();
            self.start = 0;
            if !self.fill_once().await? {
                return Ok(Frame::TooLarge { size });
            }
        }
    }

    async fn next_content_length_frame(&mut self) -> io::Result<Option<Frame>> {
        self.skip_leading_whitespace_filling().await?;
        if self.pending().is_empty() {
            return Ok(None);
        }
        // Read the header block.
        let header_end = loop {
            if let Some(end) = find_header_end(self.pending()) {
                break end;
            }
            if self.pending().len() > MAX_HEADER_BYTES {
                self.buf.clear();
                self.start = 0;
                return Ok(Some(Frame::BadHeader("header block too long".into())));
            }
            if !self.fill_once().await? {
                self.start = self.buf.len();
                return Ok(Some(Frame::BadHeader("input ended inside a header".into())));
            }
        };
        let (header_len, separator_len) = header_end;
        let header = String::from_utf8_lossy(&self.pending()[..header_len]).into_owned();
        self.start += header_len + separator_len;
        let length = match parse_content_length(&header) {
            Ok(length) => length,
            Err(wrong) => return Ok(Some(Frame::BadHeader(wrong.to_string()))),
        };
        if length > self.max_message_bytes {
            let mut remaining = length;
            loop {
                let take = remaining.min(self.pending().len());
                self.start += take;
                remaining -= take;
                if remaining == 0 || !self.fill_once().await? {
                    return Ok(Some(Frame::TooLarge { size: length }));
                }
            }
        }
        while self.pending().len() < length {
            if !self.fill_once().await? {
                let got = self.pending().len();
                self.start = self.buf.len();
                return Ok(Some(Frame::BadHeader(format!(
                    "input ended after {got} of {length} body bytes"
                ))));
            }
        }
        let body = self.pending()[..length].to_vec();
        self.start += length;
        Ok(Some(Frame::Message(body)))
    }

    async fn skip_leading_whitespace_filling(&mut self) -> io::Result<()> {
        loop {
            self.skip_leading_whitespace();
            if !self.pending().is_empty() || !self.fill_once().await? {
                return Ok(());
            }
        }
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    let mut start = 0;
    while start < end && line[start].is_ascii_whitespace() {
        start += 1;
    }
    &line[start..end]
}

/// Finds the blank line that ends a header block: returns (header length, separator length).
fn find_header_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) if b < a => Some((b, 2)),
        (Some(a), _) => Some((a, 4)),
        (None, Some(b)) => Some((b, 2)),
        (None, None) => None,
    }
}

/// What is wrong with a header block's length.
#[derive(Debug, thiserror::Error)]
enum LengthError {
    #[error("invalid Content-Length value {0:?}")]
    Invalid(String),
    #[error("missing Content-Length header")]
    Missing,
}

fn parse_content_length(header: &str) -> Result<usize, LengthError> {
    for line in header.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            return value
                .trim()
                .parse::<usize>()
                .map_err(|_| LengthError::Invalid(value.trim().to_string()));
        }
    }
    Err(LengthError::Missing)
}

/// Appends one framed message to `out`.
pub fn encode_frame(framing: Framing, json: &str, out: &mut Vec<u8>) {
    match framing {
        Framing::NewlineDelimited => {
            out.extend_from_slice(json.as_bytes());
            out.push(b'\n');
        }
        Framing::ContentLength => {
            out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", json.len()).as_bytes());
            out.extend_from_slice(json.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> (Vec<Frame>, Option<Framing>) {
        let mut reader = FrameReader::new(input, max);
        let mut out = Vec::new();
        while let Some(frame) = reader.next_frame().await.expect("read") {
            out.push(frame);
        }
        (out, reader.framing())
    }

    fn msg(s: &str) -> Frame {
        Frame::Message(s.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn newline_frames_skip_blank_lines_and_crlf() {
        let (f, framing) = frames(b"\n{\"a\":1}\r\n\n{\"b\":2}\n{\"c\":3}", 1024).await;
        assert_eq!(framing, Some(Framing::NewlineDelimited));
        assert_eq!(
            f,
            vec![msg("{\"a\":1}"), msg("{\"b\":2}"), msg("{\"c\":3}")]
        );
    }

    #[tokio::test]
    async fn content_length_frames_are_detected_case_insensitively() {
        let input = b"content-length: 7\r\n\r\n{\"a\":1}Content-Length: 7\r\nContent-Type: x\r\n\r\n{\"b\":2}";
        let (f, framing) = frames(input, 1024).await;
        assert_eq!(framing, Some(Framing::ContentLength));
        assert_eq!(f, vec![msg("{\"a\":1}"), msg("{\"b\":2}")]);
    }

    #[tokio::test]
    async fn oversized_line_is_skipped_and_reading_goes_on() {
        let mut input = vec![b'x'; 5000];
        input.extend_from_slice(b"\n{\"ok\":true}\n");
        let (f, _) = frames(&input, 100).await;
        assert_eq!(
            f,
            vec![Frame::TooLarge { size: 5000 }, msg("{\"ok\":true}")]
        );
    }

    #[tokio::test]
    async fn oversized_content_length_body_is_skipped() {
        let mut input = b"Content-Length: 500\r\n\r\n".to_vec();
        input.extend(vec![b' '; 500]);
        input.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
        let (f, _) = frames(&input, 100).await;
        assert_eq!(f, vec![Frame::TooLarge { size: 500 }, msg("{}")]);
    }

    #[tokio::test]
    async fn bad_content_length_is_reported() {
        let (f, _) = frames(b"Content-Length: abc\r\n\r\n", 100).await;
        assert!(matches!(&f[0], Frame::BadHeader(m) if m.contains("abc")));
    }

    #[test]
    fn encoding_matches_framing() {
        let mut out = Vec::new();
        encode_frame(Framing::ContentLength, "{}", &mut out);
        encode_frame(Framing::NewlineDelimited, "{}", &mut out);
        assert_eq!(out, b"Content-Length: 2\r\n\r\n{}{}\n");
    }
}

#[cfg(test)]
mod robustness {
    use super::*;

    #[tokio::test]
    async fn hostile_byte_streams_never_panic_or_hang() {
        let pieces: [&[u8]; 10] = [
            b"Content-Length: 5\r\n\r\n",
            b"content-length: 99999999999999999999\r\n\r\n",
            b"{}",
            b"\n",
            b"\r\n\r\n",
            b"Content-Length:",
            b"x",
            b"\xff\xfe",
            b"Content-Length: -1\n\n",
            b"   ",
        ];
        let mut state: u64 = 0x1234_5678_9ABC_DEF1;
        for _ in 0..2_000 {
            let mut input = Vec::new();
            for _ in 0..(state % 12) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                input.extend_from_slice(pieces[(state % pieces.len() as u64) as usize]);
            }
            state = state.wrapping_add(0x9E37_79B9);
            let mut reader = FrameReader::new(input.as_slice(), 64);
            let mut frames = 0;
            while let Ok(Some(_)) = reader.next_frame().await {
                frames += 1;
                assert!(frames < 10_000, "reader made no progress");
            }
        }
    }
}
