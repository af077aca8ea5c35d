//! Quotas and rate limits at the edge (the ACP quotas draft, behind `_meta` where ACP 1.20
//! has no place for it): the agent advertises `quota: {}` in its capabilities' `_meta`; a
//! client that opts in (`clientCapabilities.session.quota`, or `quota` in the session
//! capabilities' or the capabilities' `_meta`) gets a `quota_update` with the full snapshot
//! whenever a model call's answer changes it, and may ask `quota/read`; every client gets the
//! windows on `usage_update`'s `_meta`; a turn a limit refused ends with `quotaExceeded`.
//!
//! Invariants: snapshots' `updatedAt` never decreases within the process, and two snapshots
//! with the same `updatedAt` are the same; identical consecutive snapshots are not sent.

mod exceeded;
mod snapshot;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use talaria_engine::LimitsView;
use talaria_protocol::acp;

use super::state::QuotaBoard;

pub use exceeded::quota_exceeded;
pub use snapshot::usage_meta;

/// The draft's request for a snapshot on demand.
pub const READ_METHOD: &str = "quota/read";

/// The last `updatedAt` this process stamped, in milliseconds since the epoch.
static LAST_STAMP_MS: AtomicU64 = AtomicU64::new(0);

/// A snapshot's `updatedAt` for data obtained at `observed`: never before the last one
/// stamped, and always after it, so two different snapshots never share a stamp.
fn stamp(observed: SystemTime) -> SystemTime {
    let observed_ms = observed
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut last = LAST_STAMP_MS.load(Ordering::Relaxed);
    loop {
        let next = observed_ms.max(last.saturating_add(1));
        match LAST_STAMP_MS.compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return UNIX_EPOCH + Duration::from_millis(next),
            Err(seen) => last = seen,
        }
    }
}

/// What `initialize`'s `agentCapabilities._meta` says: quota is supported.
pub fn advertised() -> (String, Value) {
    ("quota".to_string(), json!({}))
}

/// Whether the client opted in to `quota_update` in `initialize`'s parameters: the draft's
/// `clientCapabilities.session.quota`, or `quota` in `session._meta` or the capabilities'
/// `_meta` (an object; `null` or absent is no).
pub fn wants_quota(initialize: &Value) -> bool {
    let capabilities = &initialize["clientCapabilities"];
    [
        &capabilities["session"]["quota"],
        &capabilities["session"]["_meta"]["quota"],
        &capabilities["_meta"]["quota"],
    ]
    .iter()
    .any(|marker| marker.is_object())
}

/// The snapshot that applies to `session` on `board` (or, without one, the newest of any
/// session); no pools when nothing was reported yet.
pub fn read(board: &QuotaBoard, session: Option<&str>) -> Value {
    board.snapshot(session).unwrap_or_else(
        || json!({"pools": [], "updatedAt": snapshot::rfc3339(stamp(SystemTime::now()))}),
    )
}

/// A session's view of its limits, kept by its forwarder: the pools its model calls
/// reported (the latest of each, in the order first seen) and the last snapshot sent.
pub struct SessionQuota {
    board: Arc<QuotaBoard>,
    session: String,
    pools: Vec<LimitsView>,
    sent: Option<Value>,
}

impl SessionQuota {
    pub fn new(board: Arc<QuotaBoard>, session: &acp::SessionId) -> Self {
        Self {
            board,
            session: session.0.to_string(),
            pools: Vec::new(),
            sent: None,
        }
    }

    /// Takes a call's limits; the new full snapshot (`updatedAt` and `pools`) when it differs
    /// from the last one.
    pub fn observe(&mut self, view: LimitsView) -> Option<Value> {
        let observed = view.limits.observed_at;
        match self.pools.iter_mut().find(|p| p.pool() == view.pool()) {
            Some(known) => *known = view,
            None => self.pools.push(view),
        }
        let pools: Vec<Value> = self.pools.iter().map(snapshot::pool).collect();
        let pools = Value::from(pools);
        if self
            .sent
            .as_ref()
            .is_some_and(|sent| sent["pools"] == pools)
        {
            return None;
        }
        let updated = snapshot::rfc3339(stamp(observed));
        let full = json!({"updatedAt": updated, "pools": pools});
        self.board.publish(&self.session, &full);
        self.sent = Some(full.clone());
        Some(full)
    }

    /// The `_meta` of a `usage_update`: the windows of every pool the session knows.
    pub fn usage_meta(&self) -> Option<acp::Meta> {
        usage_meta(&self.pools)
    }

    /// The session ends: its snapshot is no longer read.
    pub fn close(&self) {
        self.board.forget(&self.session);
    }
}

#[cfg(test)]
mod tests {
    use talaria_provider::{LimitKind, LimitWindow, RateLimits};

    use super::*;

    fn view(model: &str, remaining: u64, observed: SystemTime) -> LimitsView {
        LimitsView {
            provider: "anthropic".into(),
            model: model.into(),
            limits: RateLimits {
                observed_at: observed,
                windows: vec![LimitWindow {
                    kind: LimitKind::Requests,
                    limit: Some(50),
                    remaining: Some(remaining),
                    resets_at: None,
                }],
                retry_after: None,
            },
            refused: None,
        }
    }

    #[test]
    fn snapshots_are_full_stamped_forward_and_not_repeated() {
        let board = Arc::new(QuotaBoard::default());
        let mut quota = SessionQuota::new(board.clone(), &acp::SessionId::new("s1"));
        let now = SystemTime::now();
        let first = quota.observe(view("a", 40, now)).expect("a first snapshot");
        assert_eq!(first["pools"].as_array().map(Vec::len), Some(1));
        assert_eq!(quota.observe(view("a", 40, now)), None, "nothing changed");
        // A second model's pool joins the snapshot; the first stays in it, in place.
        let second = quota.observe(view("b", 10, now)).expect("changed");
        let ids: Vec<&str> = second["pools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["id"].as_str())
            .collect();
        assert_eq!(ids, ["anthropic/a", "anthropic/b"]);
        // Data observed at the same millisecond (or a clock set back) still moves forward.
        let earlier = now - Duration::from_secs(3600);
        let third = quota.observe(view("a", 39, earlier)).expect("changed");
        let stamps: Vec<&str> = [&first, &second, &third]
            .iter()
            .filter_map(|s| s["updatedAt"].as_str())
            .collect();
        assert!(stamps[0] < stamps[1] && stamps[1] < stamps[2], "{stamps:?}");
        assert_eq!(read(&board, Some("s1")), third);
        assert_eq!(read(&board, None), third);
        assert_eq!(read(&board, Some("other"))["pools"], json!([]));
        quota.close();
        assert_eq!(read(&board, Some("s1"))["pools"], json!([]));
    }

    #[test]
    fn the_client_opts_in_by_the_drafts_marker_or_under_meta() {
        let with = |caps: Value| wants_quota(&json!({"clientCapabilities": caps}));
        assert!(with(json!({"session": {"quota": {}}})));
        assert!(with(json!({"session": {"_meta": {"quota": {}}}})));
        assert!(with(json!({"_meta": {"quota": {}}})));
        assert!(!with(json!({"session": {"quota": null}})));
        assert!(!with(json!({"session": {"notices": {}}})));
        assert!(!with(json!({})));
        assert!(!wants_quota(&json!(null)));
    }
}
