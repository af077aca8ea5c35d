//! A provider's rate limits in the ACP quotas draft's shapes: a pool per provider and model
//! with a meter per window (`quota_update`, `quota/read`), and the `_meta` a `usage_update`
//! carries them in (Talaria's windows, and claude-agent-acp's `_claude/rateLimit`).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use talaria_engine::LimitsView;
use talaria_protocol::acp;
use talaria_provider::LimitWindow;

/// From this share of a window used, its meter says `warning`.
const WARNING_SHARE: f64 = 0.8;

/// A time as the draft writes it: RFC 3339, UTC, milliseconds.
pub fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A share as a percentage, two decimals.
fn percent(share: f64) -> f64 {
    (share * 10_000.0).round() / 100.0
}

/// How close a window is to its limit, when its figures say.
fn status(window: &LimitWindow) -> Option<&'static str> {
    if window.exhausted() {
        return Some("exceeded");
    }
    let share = window.used_share()?;
    Some(if share >= WARNING_SHARE {
        "warning"
    } else {
        "ok"
    })
}

/// An amount with its unit (the draft's `Quantity`: a decimal string).
fn quantity(value: u64, unit: &str) -> Value {
    json!({"value": value.to_string(), "unit": unit})
}

/// A window as a meter; `None` when it states nothing a meter may carry alone (a share, what
/// remains, a status).
fn meter(window: &LimitWindow) -> Option<Value> {
    let share = window.used_share();
    let status = status(window);
    if share.is_none() && window.remaining.is_none() && status.is_none() {
        return None;
    }
    let kind = window.kind;
    let mut meter = Map::new();
    meter.insert("id".into(), kind.id().into());
    meter.insert("label".into(), kind.label().into());
    if let Some(share) = share {
        meter.insert("usedPercent".into(), percent(share).into());
    }
    if let Some(limit) = window.limit {
        meter.insert("limit".into(), quantity(limit, kind.unit()));
    }
    if let Some(remaining) = window.remaining {
        meter.insert("remaining".into(), quantity(remaining, kind.unit()));
    }
    if let Some(at) = window.resets_at {
        meter.insert("resetsAt".into(), rfc3339(at).into());
    }
    if let Some(status) = status {
        meter.insert("status".into(), status.into());
    }
    Some(Value::Object(meter))
}

/// A model's limits as a pool: exhausted when a limit refused its call or a window is spent.
pub fn pool(view: &LimitsView) -> Value {
    let meters: Vec<Value> = view.limits.windows.iter().filter_map(meter).collect();
    let mut pool = Map::new();
    pool.insert("id".into(), view.pool().into());
    pool.insert(
        "label".into(),
        format!("{} ({}) rate limits", view.model, view.provider).into(),
    );
    let spent = view.refused.is_some() || view.limits.windows.iter().any(|w| w.exhausted());
    if spent {
        pool.insert("state".into(), "exhausted".into());
    } else if !meters.is_empty() {
        pool.insert("state".into(), "available".into());
    }
    pool.insert("meters".into(), meters.into());
    Value::Object(pool)
}

/// The windows of the pools a session knows, for a `usage_update`'s `_meta`: Talaria's own
/// (`talaria.rateLimits`: each window's used share and reset), and the shape
/// claude-agent-acp sends (`_claude/rateLimit`: the most used window).
pub fn usage_meta(views: &[LimitsView]) -> Option<acp::Meta> {
    if views.is_empty() {
        return None;
    }
    let mut windows = Vec::new();
    for view in views {
        for window in &view.limits.windows {
            let mut entry = json!({"pool": view.pool(), "provider": view.provider,
                                   "model": view.model, "window": window.kind.id()});
            let fields = [
                ("limit", window.limit.map(Value::from)),
                ("remaining", window.remaining.map(Value::from)),
                ("usedShare", window.used_share().map(Value::from)),
                ("resetsAt", window.resets_at.map(|at| rfc3339(at).into())),
            ];
            for (name, value) in fields {
                if let Some(value) = value {
                    entry[name] = value;
                }
            }
            windows.push(entry);
        }
    }
    let updated = views.iter().map(|v| v.limits.observed_at).max();
    let mut limits = json!({"windows": windows});
    if let Some(updated) = updated {
        limits["updatedAt"] = rfc3339(updated).into();
    }
    let refused = views.iter().find(|v| v.refused.is_some());
    if let Some(wait) = refused.and_then(|v| v.limits.retry_after) {
        limits["retryAfterSecs"] = wait.as_secs_f64().into();
    }
    let mut meta = acp::Meta::new();
    meta.insert("talaria".into(), json!({"rateLimits": limits}));
    if let Some(claude) = claude_rate_limit(views) {
        meta.insert("_claude/rateLimit".into(), claude);
    }
    Some(meta)
}

/// claude-agent-acp's `_claude/rateLimit`: the status, utilization (0–1) and reset (Unix
/// seconds) of the most used window, `rejected` when a limit refused a call.
fn claude_rate_limit(views: &[LimitsView]) -> Option<Value> {
    let most_used = views
        .iter()
        .flat_map(|v| v.limits.windows.iter())
        .filter_map(|w| w.used_share().map(|share| (share, w)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let refused = views.iter().find(|v| v.refused.is_some());
    let mut info = Map::new();
    let status = match (refused, most_used) {
        (Some(_), _) => "rejected",
        (None, Some((_, window))) if window.exhausted() => "rejected",
        (None, Some((share, _))) if share >= WARNING_SHARE => "allowed_warning",
        (None, Some(_)) => "allowed",
        (None, None) => return None,
    };
    info.insert("status".into(), status.into());
    if let Some((share, _)) = most_used {
        info.insert("utilization".into(), share.into());
    }
    let resets = refused
        .and_then(|v| v.limits.clears_at())
        .or_else(|| most_used.and_then(|(_, w)| w.resets_at));
    if let Some(seconds) = resets.and_then(|at| at.duration_since(UNIX_EPOCH).ok()) {
        info.insert("resetsAt".into(), seconds.as_secs().into());
    }
    Some(Value::Object(info))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use talaria_engine::ContextUse;
    use talaria_provider::{LimitKind, RateLimits};

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_791_292_200 + seconds)
    }

    fn view(remaining: u64, refused: bool) -> LimitsView {
        LimitsView {
            provider: "openai".into(),
            model: "gpt-x".into(),
            limits: RateLimits {
                observed_at: at(0),
                windows: vec![
                    LimitWindow {
                        kind: LimitKind::Requests,
                        limit: Some(60),
                        remaining: Some(remaining),
                        resets_at: Some(at(60)),
                    },
                    LimitWindow {
                        kind: LimitKind::Tokens,
                        limit: None,
                        remaining: None,
                        resets_at: Some(at(1)),
                    },
                ],
                retry_after: refused.then(|| Duration::from_secs(600)),
            },
            refused: refused.then_some(ContextUse {
                used: 10,
                size: 100,
            }),
        }
    }

    #[test]
    fn a_pool_has_a_meter_per_window_that_says_something() {
        let pool = pool(&view(6, false));
        assert_eq!(
            pool,
            json!({"id": "openai/gpt-x", "label": "gpt-x (openai) rate limits",
                   "state": "available", "meters": [{
                       "id": "requests", "label": "Requests", "usedPercent": 90.0,
                       "limit": {"value": "60", "unit": "requests"},
                       "remaining": {"value": "6", "unit": "requests"},
                       "resetsAt": "2026-10-06T13:11:00.000Z", "status": "warning"}]})
        );
        let spent = super::pool(&view(0, false));
        assert_eq!(spent["state"], "exhausted");
        assert_eq!(spent["meters"][0]["status"], "exceeded");
        assert_eq!(super::pool(&view(59, true))["state"], "exhausted");
    }

    #[test]
    fn usage_meta_carries_each_window_and_claudes_shape() {
        assert_eq!(usage_meta(&[]), None);
        let meta = usage_meta(&[view(15, false)]).expect("meta");
        let limits = &meta["talaria"]["rateLimits"];
        assert_eq!(limits["updatedAt"], "2026-10-06T13:10:00.000Z");
        assert_eq!(limits["windows"][0]["usedShare"], 0.75);
        assert_eq!(limits["windows"][0]["resetsAt"], "2026-10-06T13:11:00.000Z");
        assert_eq!(limits["windows"][1]["window"], "tokens");
        assert!(limits["windows"][1].get("usedShare").is_none());
        assert_eq!(
            meta["_claude/rateLimit"],
            json!({"status": "allowed", "utilization": 0.75, "resetsAt": 1_791_292_260u64})
        );
        let refused = usage_meta(&[view(59, true)]).expect("meta");
        assert_eq!(refused["talaria"]["rateLimits"]["retryAfterSecs"], 600.0);
        assert_eq!(refused["_claude/rateLimit"]["status"], "rejected");
        assert_eq!(refused["_claude/rateLimit"]["resetsAt"], 1_791_292_800u64);
    }
}
