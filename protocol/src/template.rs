//! Notifications serialized once with one string left open. A session's stream of text
//! chunks differs only in the text: filling a template costs escaping that text, not
//! serializing the whole message (envelope, session id, tags) again for every delta.

use serde::Serialize;

/// A serialized notification with a hole where one JSON string goes.
#[derive(Debug, Clone)]
pub struct NotificationTemplate {
    before: String,
    after: String,
}

impl NotificationTemplate {
    /// `params` serialized as a `method` notification, with the string `marker` as the hole.
    /// `None` when the serialized message does not hold the marker exactly once (the marker
    /// also occurs elsewhere, say in an id): the caller then sends whole notifications.
    pub fn new<P: Serialize>(method: &str, params: &P, marker: &str) -> Option<Self> {
        let json = crate::peer::notification_json(method, params).ok()?;
        let quoted = serde_json::to_string(marker).ok()?;
        let mut found = json.match_indices(&quoted);
        let (at, _) = found.next()?;
        if found.next().is_some() {
            return None;
        }
        Some(Self {
            before: json[..at].to_string(),
            after: json[at + quoted.len()..].to_string(),
        })
    }

    /// The notification with `text` in the hole: the same JSON the whole message with `text`
    /// in the marker's place serializes to.
    /// The notification with `text` in its hole, to send to several peers.
    pub fn filled(&self, text: &str) -> SerializedNotification {
        SerializedNotification(self.fill(text))
    }

    pub fn fill(&self, text: &str) -> String {
        let mut out = Vec::with_capacity(self.before.len() + text.len() + 8 + self.after.len());
        out.extend_from_slice(self.before.as_bytes());
        // A `&str` always serializes: the writer is a Vec and a string has no map keys.
        let _ = serde_json::to_writer(&mut out, text);
        out.extend_from_slice(self.after.as_bytes());
        // serde_json writes valid UTF-8 and both halves came from a String.
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MARKER: &str = "talaria-hole-1b7e";

    fn params(text: &str) -> serde_json::Value {
        json!({"sessionId": "s-1", "update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}}})
    }

    proptest::proptest! {
        #[test]
        fn a_filled_template_is_the_whole_message(text in "\\PC*|[\"\\\\\\n\\t\\u{0}-\\u{1f}\\u{7f}]*") {
            let template = NotificationTemplate::new("session/update", &params(MARKER), MARKER);
            let template = template.ok_or_else(|| proptest::test_runner::TestCaseError::fail("no template"))?;
            let whole = crate::peer::notification_json("session/update", &params(&text))
                .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(template.fill(&text), whole);
        }
    }

    #[test]
    fn a_marker_found_twice_makes_no_template() {
        let twice = json!({"sessionId": MARKER, "text": MARKER});
        assert!(NotificationTemplate::new("session/update", &twice, MARKER).is_none());
        let absent = json!({"text": "other"});
        assert!(NotificationTemplate::new("session/update", &absent, MARKER).is_none());
    }
}

/// A notification serialized once, to send the same bytes to several peers (the clients
/// attached to one session): each gets a copy, none serializes it again.
#[derive(Debug, Clone)]
pub struct SerializedNotification(pub(crate) String);

impl SerializedNotification {
    /// `params` as a `method` notification; `None` when it does not serialize.
    pub fn new<P: Serialize>(method: &str, params: &P) -> Option<Self> {
        crate::peer::notification_json(method, params)
            .ok()
            .map(Self)
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
