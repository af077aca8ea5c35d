//! A server-sent-events decoder: bytes in, `data` payloads out.
//!
//! Only `data:` fields matter to model APIs (`event:` names are kept for Anthropic-style
//! streams). Comments and unknown fields are skipped. Lines may be split across chunks.

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental decoder state.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseDecoder {
    /// Feeds a chunk; complete events are appended to `out`. Lines inside the chunk are read
    /// where they are; only a line split across chunks is copied.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(pos);
            rest = &after[1..];
            if self.line.is_empty() {
                self.take_line(without_cr(line), out);
            } else {
                let mut joined = std::mem::take(&mut self.line);
                joined.extend_from_slice(line);
                self.take_line(without_cr(&joined), out);
                joined.clear();
                self.line = joined;
            }
        }
        self.line.extend_from_slice(rest);
    }

    /// Ends the input: a final event without its blank line is still delivered.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.take_line(without_cr(&line), out);
        }
        self.dispatch(out);
    }

    fn take_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        // Valid UTF-8 (every model API's case) is read in place, at the speed of a check.
        let line = match std::str::from_utf8(line) {
            Ok(line) => std::borrow::Cow::Borrowed(line),
            Err(_) => String::from_utf8_lossy(line),
        };
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            out.push(SseEvent { event, data });
        }
    }
}

/// A line without the `\r` of a CRLF ending.
fn without_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_events_split_across_chunks() {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        decoder.feed(b"data: {\"a\"", &mut out);
        decoder.feed(
            b":1}\r\n\r\n: comment\n\nevent: ping\ndata: x\ndata: y\n\ndata: [DONE]",
            &mut out,
        );
        decoder.finish(&mut out);
        assert_eq!(
            out,
            vec![
                SseEvent {
                    event: None,
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: Some("ping".into()),
                    data: "x\ny".into()
                },
                SseEvent {
                    event: None,
                    data: "[DONE]".into()
                },
            ]
        );
    }

    /// Every way of cutting a stream into chunks decodes to what the whole stream does
    /// (lines, CRLF endings and multi-byte characters split anywhere).
    fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        let mut start = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts {
            decoder.feed(&bytes[start..cut], &mut out);
            start = cut;
        }
        decoder.feed(&bytes[start..], &mut out);
        decoder.finish(&mut out);
        out
    }

    proptest::proptest! {
        #[test]
        fn chunking_never_changes_the_events(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    "data: [a-zé{}\":, ]{0,12}",
                    "event: [a-z]{1,6}",
                    ": [a-z ]{0,6}",
                    proptest::strategy::Just(String::new()),
                ],
                0..12,
            ),
            crlf in proptest::bool::ANY,
            cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            let ending = if crlf { "\r\n" } else { "\n" };
            let text: String = lines.iter().map(|line| format!("{line}{ending}")).collect();
            let bytes = text.as_bytes();
            let whole = decode_in_pieces(bytes, &[]);
            proptest::prop_assert_eq!(decode_in_pieces(bytes, &cuts), whole.clone());
            let blank_lines = lines.iter().filter(|line| line.is_empty()).count();
            proptest::prop_assert!(whole.len() <= blank_lines + 1);
            for event in &whole {
                proptest::prop_assert!(!event.data.contains('\r'));
            }
        }
    }
}
