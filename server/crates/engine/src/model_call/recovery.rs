//! The recovery decision, as a pure function: given how a model call failed and what has been
//! tried, what to do next. The model-call loop carries the decision out.

use talaria_provider::ErrorClass;

/// Attempts to restart an answer that broke off after output was shown.
pub const MAX_RESTARTS: u32 = 2;
/// Attempts to shrink the context after an overflow.
pub const MAX_COMPRESSIONS: u32 = 3;
/// Attempts to lower `max_tokens`.
pub const MAX_SHRINKS: u32 = 2;

/// What has been tried for the current call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecoveryState {
    /// Attempts with the current model, the failed one included.
    pub attempts: u32,
    pub max_attempts: u32,
    /// The model's key pool has another key to rotate to.
    pub other_key: bool,
    pub shrinks: u32,
    pub compressions: u32,
    pub restarts: u32,
    /// Part of the answer was already shown to the user.
    pub output_shown: bool,
    /// The chain has a model after the current one.
    pub fallback_left: bool,
    /// The provider asked to wait longer than the retry budget allows (`retry-after`, or the
    /// reset of the limit that refused): asking again before then meets the same refusal.
    pub wait_beyond_budget: bool,
}

/// Why recovery gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The answer broke off after output and restarting is spent or pointless.
    CutAfterOutput,
    /// The context still does not fit after shrinking it.
    StillTooLarge,
    /// Retries and fallbacks are spent, or the failure is not recoverable.
    Exhausted,
}

/// The next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Put the key aside and use the next one (not counted as an attempt).
    RotateKey,
    /// Lower `max_tokens` and try again.
    ShrinkMaxTokens,
    /// Shrink the context and try again.
    Compress,
    /// Abandon the partial answer (tell the user) and ask again.
    Restart,
    /// Back off and try the same model again.
    Retry,
    /// Move to the next model of the chain.
    FallBack,
    Fail(GiveUp),
}

/// Decides what to do about a failed call. First match wins: output already shown →
/// restart (transient failures only, at most [`MAX_RESTARTS`]) or fail; another key →
/// rotate; `max_tokens` too large → shrink; overflow → compress (at most
/// [`MAX_COMPRESSIONS`]); retryable → retry while attempts last, unless the provider's wait is
/// beyond the retry budget; fall back when the class allows and a model is left; else fail.
pub fn next_action(class: ErrorClass, state: &RecoveryState) -> Action {
    let policy = class.policy();
    if state.output_shown {
        // Tools only run after a stream ends, so nothing was executed: a transient failure
        // can be asked again without repeating an action.
        return if policy.retry && state.restarts < MAX_RESTARTS {
            Action::Restart
        } else {
            Action::Fail(GiveUp::CutAfterOutput)
        };
    }
    if policy.rotate_key && state.other_key {
        return Action::RotateKey;
    }
    if class == ErrorClass::MaxTokensTooLarge && state.shrinks < MAX_SHRINKS {
        return Action::ShrinkMaxTokens;
    }
    if policy.compress {
        return if state.compressions < MAX_COMPRESSIONS {
            Action::Compress
        } else {
            Action::Fail(GiveUp::StillTooLarge)
        };
    }
    if policy.retry && state.attempts < state.max_attempts && !state.wait_beyond_budget {
        return Action::Retry;
    }
    if policy.fall_back && state.fallback_left {
        return Action::FallBack;
    }
    Action::Fail(GiveUp::Exhausted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> RecoveryState {
        RecoveryState {
            attempts: 1,
            max_attempts: 3,
            ..RecoveryState::default()
        }
    }

    /// One row per class: first failure with nothing else available, with another key, with
    /// retries spent and a fallback left, and after output was shown.
    #[test]
    fn every_class_has_a_row() {
        use Action::*;
        use ErrorClass::*;
        let spent = RecoveryState {
            attempts: 3,
            fallback_left: true,
            ..fresh()
        };
        let keyed = RecoveryState {
            other_key: true,
            ..fresh()
        };
        let shown = RecoveryState {
            output_shown: true,
            ..fresh()
        };
        let fail = Fail(GiveUp::Exhausted);
        let cut = Fail(GiveUp::CutAfterOutput);
        let table: [(ErrorClass, Action, Action, Action, Action); 15] = [
            (Auth, fail, RotateKey, FallBack, cut),
            (Billing, fail, RotateKey, FallBack, cut),
            (RateLimit, Retry, RotateKey, FallBack, Restart),
            (Overloaded, Retry, Retry, FallBack, Restart),
            (ServerError, Retry, Retry, FallBack, Restart),
            (Timeout, Retry, Retry, FallBack, Restart),
            (Unreachable, fail, fail, FallBack, cut),
            (StreamCut, Retry, Retry, FallBack, Restart),
            (ContextOverflow, Compress, Compress, Compress, cut),
            (PayloadTooLarge, Compress, Compress, Compress, cut),
            (
                MaxTokensTooLarge,
                ShrinkMaxTokens,
                ShrinkMaxTokens,
                ShrinkMaxTokens,
                cut,
            ),
            (ModelNotFound, fail, fail, FallBack, cut),
            (ContentPolicy, fail, fail, fail, cut),
            (BadRequest, fail, fail, fail, cut),
            (Unknown, fail, fail, FallBack, cut),
        ];
        assert_eq!(table.len(), ErrorClass::ALL.len());
        for (class, first, with_key, retries_spent, after_output) in table {
            assert_eq!(next_action(class, &fresh()), first, "{class:?} first");
            assert_eq!(next_action(class, &keyed), with_key, "{class:?} keyed");
            assert_eq!(next_action(class, &spent), retries_spent, "{class:?} spent");
            assert_eq!(next_action(class, &shown), after_output, "{class:?} shown");
        }
    }

    /// A wait beyond the budget is never retried into: another key, a fallback, or the end.
    #[test]
    fn a_wait_beyond_the_budget_is_not_retried() {
        let far = RecoveryState {
            wait_beyond_budget: true,
            ..fresh()
        };
        for class in [
            ErrorClass::RateLimit,
            ErrorClass::Overloaded,
            ErrorClass::ServerError,
        ] {
            assert_eq!(next_action(class, &fresh()), Action::Retry, "{class:?}");
            assert_eq!(
                next_action(class, &far),
                Action::Fail(GiveUp::Exhausted),
                "{class:?}"
            );
            let falls_back = RecoveryState {
                fallback_left: true,
                ..far
            };
            assert_eq!(next_action(class, &falls_back), Action::FallBack);
        }
        let keyed = RecoveryState {
            other_key: true,
            ..far
        };
        assert_eq!(
            next_action(ErrorClass::RateLimit, &keyed),
            Action::RotateKey
        );
    }

    #[test]
    fn limits_end_each_kind_of_recovery() {
        let restarted = RecoveryState {
            output_shown: true,
            restarts: MAX_RESTARTS,
            ..fresh()
        };
        assert_eq!(
            next_action(ErrorClass::StreamCut, &restarted),
            Action::Fail(GiveUp::CutAfterOutput)
        );
        let compressed = RecoveryState {
            compressions: MAX_COMPRESSIONS,
            ..fresh()
        };
        assert_eq!(
            next_action(ErrorClass::ContextOverflow, &compressed),
            Action::Fail(GiveUp::StillTooLarge)
        );
        let shrunk = RecoveryState {
            shrinks: MAX_SHRINKS,
            ..fresh()
        };
        assert_eq!(
            next_action(ErrorClass::MaxTokensTooLarge, &shrunk),
            Action::Fail(GiveUp::Exhausted)
        );
    }
}
