//! The session's plan as each client takes it: the whole-plan `plan` update for clients that
//! do not announce `clientCapabilities.plan`, plan operations for those that do — the todo
//! list as one id-addressed plan (`plan_update` with its items), and `plan_removed` once the
//! list is emptied. Live and in a load's replay alike (one write path).

use talaria_protocol::acp::{PlanRemoved, PlanUpdate, PlanUpdateContent, SessionUpdate};

/// The id of the session's todo list as a plan (one per session).
pub(super) const TODO_PLAN_ID: &str = "todo";

/// `update` as a client that takes plan operations (`plans`) or not reads it.
pub(super) fn for_client(update: SessionUpdate, plans: bool) -> SessionUpdate {
    match update {
        SessionUpdate::Plan(plan) if plans => {
            if plan.entries.is_empty() {
                SessionUpdate::PlanRemoved(PlanRemoved::new(TODO_PLAN_ID))
            } else {
                SessionUpdate::PlanUpdate(PlanUpdate::new(PlanUpdateContent::items(
                    TODO_PLAN_ID,
                    plan.entries,
                )))
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use talaria_protocol::acp::{Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus};

    fn plan(entries: Vec<PlanEntry>) -> SessionUpdate {
        SessionUpdate::Plan(Plan::new(entries))
    }

    #[test]
    fn a_client_with_plan_operations_gets_updates_and_a_removal_others_the_whole_plan() {
        let step = PlanEntry::new("Step", PlanEntryPriority::Medium, PlanEntryStatus::Pending);
        let updated =
            serde_json::to_value(for_client(plan(vec![step.clone()]), true)).expect("json");
        assert_eq!(updated["sessionUpdate"], "plan_update");
        assert_eq!(updated["plan"]["type"], "items");
        assert_eq!(updated["plan"]["planId"], TODO_PLAN_ID);
        assert_eq!(updated["plan"]["entries"][0]["content"], "Step");
        let removed = serde_json::to_value(for_client(plan(Vec::new()), true)).expect("json");
        assert_eq!(
            removed,
            json!({"sessionUpdate": "plan_removed", "planId": TODO_PLAN_ID})
        );
        let legacy = serde_json::to_value(for_client(plan(vec![step]), false)).expect("json");
        assert_eq!(legacy["sessionUpdate"], "plan");
    }
}
