//! The ACP tool-interception draft (`docs/rfds/tool-interception.mdx`) on the wire: the
//! client's opt-in in `initialize`, the `_agentclientprotocol.com/tool/intercept` request the
//! engine's checkpoints send, and its answer read strictly (anything unreadable is an error,
//! which the engine treats as no decision: fail closed). Shapes in docs/interception.md.

use serde_json::{Value, json};
use talaria_engine::{
    InterceptDecision, InterceptError, InterceptPhase, InterceptedCall, Interception,
};
use talaria_protocol::{Peer, acp};
use tokio_util::sync::CancellationToken;

/// The draft's method (a reserved extension name while the draft is discussed).
pub const METHOD: &str = "_agentclientprotocol.com/tool/intercept";

/// The draft's namespace in `_meta`.
const NAMESPACE: &str = "agentclientprotocol.com";

/// What `initialize`'s `agentCapabilities._meta` says: both checkpoints are offered.
pub fn advertised() -> (String, Value) {
    (
        "toolInterception".to_string(),
        json!({"before": true, "after": true}),
    )
}

/// The checkpoints the client opted in to in `initialize`'s parameters: the draft's
/// `clientCapabilities._meta["agentclientprotocol.com"].toolInterception`, or the same
/// object directly in `clientCapabilities._meta`; only `true` counts.
pub fn wanted(initialize: &Value) -> Interception {
    let meta = &initialize["clientCapabilities"]["_meta"];
    let asked = [
        &meta[NAMESPACE]["toolInterception"],
        &meta["toolInterception"],
    ];
    Interception {
        before: asked.iter().any(|a| a["before"] == json!(true)),
        after: asked.iter().any(|a| a["after"] == json!(true)),
        ..Interception::default()
    }
}

/// Asks the client for its decision on `call`; `Err` says why there is none.
pub async fn ask(
    peer: &Peer,
    session_id: &acp::SessionId,
    call: InterceptedCall,
    cancel: &CancellationToken,
) -> Result<InterceptDecision, InterceptError> {
    let phase = call.phase;
    let params = request(session_id, call);
    match peer.request(METHOD, &params, cancel).await {
        Ok(answer) => decision(phase, &answer),
        Err(_) if cancel.is_cancelled() => Err(InterceptError::Withdrawn),
        Err(error) => Err(InterceptError::Client(error.message)),
    }
}

/// The request's parameters: the draft's candidate shape (ACP's tool-call fields; after the
/// call its status and content).
fn request(session_id: &acp::SessionId, call: InterceptedCall) -> Value {
    let kind = serde_json::to_value(super::updates::tool_kind(call.kind)).unwrap_or(Value::Null);
    let mut tool_call = json!({
        "toolCallId": call.tool_call_id,
        "name": call.name,
        "title": call.title,
        "kind": kind,
        "rawInput": call.raw_input,
    });
    let phase = match call.phase {
        InterceptPhase::Before => "before",
        InterceptPhase::After => "after",
    };
    if let Some((failed, text)) = call.result {
        tool_call["status"] = json!(if failed { "failed" } else { "completed" });
        tool_call["content"] =
            json!([{"type": "content", "content": {"type": "text", "text": text}}]);
    } else {
        tool_call["status"] = json!("pending");
    }
    json!({"sessionId": session_id, "phase": phase, "toolCall": tool_call})
}

/// Reads the client's answer: `{action: "allow"}`, `{action: "replace", result: {status,
/// content}}` (text content only), Talaria's `{action: "replace", rawInput}` before the call,
/// or `{action: "stop", reason?}`.
fn decision(phase: InterceptPhase, answer: &Value) -> Result<InterceptDecision, InterceptError> {
    let unreadable = |why: &str| {
        Err(InterceptError::Unreadable {
            why: why.to_string(),
            answer: talaria_util::within_bytes(&answer.to_string(), 500).to_string(),
        })
    };
    match answer["action"].as_str() {
        Some("allow") => Ok(InterceptDecision::Allow),
        Some("stop") => match &answer["reason"] {
            Value::Null => Ok(InterceptDecision::Stop(None)),
            Value::String(reason) => Ok(InterceptDecision::Stop(Some(reason.clone()))),
            _ => unreadable("reason is not a string"),
        },
        Some("replace") => match (&answer["result"], &answer["rawInput"]) {
            (Value::Null, Value::Null) => unreadable("replace without result or rawInput"),
            (result, Value::Null) => replaced_result(result).or_else(|why| unreadable(why.0)),
            (Value::Null, input) if phase == InterceptPhase::Before && input.is_object() => {
                Ok(InterceptDecision::ReplaceInput(input.clone()))
            }
            (Value::Null, _) if phase == InterceptPhase::After => {
                unreadable("rawInput after the call ran")
            }
            (Value::Null, _) => unreadable("rawInput is not an object"),
            _ => unreadable("both result and rawInput"),
        },
        _ => unreadable("no known action"),
    }
}

/// What is wrong with a replacement result.
struct Unusable(&'static str);

/// A replacement result: `status` `completed` (the default) or `failed`, and `content` a list
/// of ACP tool-call content of which only text can be read; `Err` says what is wrong.
fn replaced_result(result: &Value) -> Result<InterceptDecision, Unusable> {
    let failed = match result["status"].as_str() {
        None | Some("completed") => false,
        Some("failed") => true,
        Some(_) => return Err(Unusable("an unknown status")),
    };
    let Some(content) = result["content"].as_array() else {
        return Err(Unusable("a result without a content list"));
    };
    let mut texts = Vec::with_capacity(content.len());
    for item in content {
        match (item["type"].as_str(), &item["content"]) {
            (Some("content"), block) if block["type"] == "text" => match block["text"].as_str() {
                Some(text) => texts.push(text),
                None => return Err(Unusable("text content without text")),
            },
            _ => return Err(Unusable("only text content can replace a result")),
        }
    }
    Ok(InterceptDecision::ReplaceResult {
        failed,
        text: texts.join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn before(answer: Value) -> Result<InterceptDecision, InterceptError> {
        decision(InterceptPhase::Before, &answer)
    }

    #[test]
    fn the_three_actions_are_read() {
        assert_eq!(
            before(json!({"action": "allow"})),
            Ok(InterceptDecision::Allow)
        );
        assert_eq!(
            before(json!({"action": "stop", "reason": "no"})),
            Ok(InterceptDecision::Stop(Some("no".into())))
        );
        let text = json!({"type": "content", "content": {"type": "text", "text": "kept"}});
        assert_eq!(
            before(json!({"action": "replace", "result": {"content": [text]}})),
            Ok(InterceptDecision::ReplaceResult {
                failed: false,
                text: "kept".into()
            })
        );
        assert_eq!(
            before(json!({"action": "replace", "rawInput": {"path": "a"}})),
            Ok(InterceptDecision::ReplaceInput(json!({"path": "a"})))
        );
    }

    #[test]
    fn anything_else_is_unreadable() {
        for answer in [
            json!(null),
            json!("allow"),
            json!({"action": "maybe"}),
            json!({"action": "replace"}),
            json!({"action": "replace", "rawInput": "rm -rf /"}),
            json!({"action": "replace", "result": {"content": "text"}}),
            json!({"action": "replace", "result": {"status": "done", "content": []}}),
            json!({"action": "replace", "result": {"content": [{"type": "diff"}]}}),
            json!({"action": "stop", "reason": 7}),
        ] {
            assert!(before(answer.clone()).is_err(), "{answer}");
        }
        let input = json!({"action": "replace", "rawInput": {"path": "a"}});
        assert!(decision(InterceptPhase::After, &input).is_err());
    }

    #[test]
    fn only_true_opts_in() {
        let caps = |meta: Value| wanted(&json!({"clientCapabilities": {"_meta": meta}}));
        let both = Interception {
            before: true,
            after: true,
            ..Interception::default()
        };
        assert_eq!(
            caps(
                json!({"agentclientprotocol.com": {"toolInterception": {"before": true, "after": true}}})
            ),
            both
        );
        assert_eq!(
            caps(json!({"toolInterception": {"before": true, "after": true}})),
            both
        );
        assert_eq!(
            caps(json!({"toolInterception": {"before": "yes"}})),
            Interception::default()
        );
        assert_eq!(wanted(&json!(null)), Interception::default());
    }
}
