//! Why a model call failed, after the whole recovery stack: typed, with the provider's own
//! error kept as the source (the turn, the side tasks and the edge read it, never a string).

use talaria_compress::CompressError;
use talaria_provider::ProviderError;
use talaria_provider::classify::ErrorClass;

/// A model call that failed for good (the sink has already been told).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The request cannot be made to fit the window; nothing was sent.
    #[error(
        "the request needs about {needed} tokens, but the model's context window is {window} \
         ({limit} with room for the answer) and it could not be shortened enough; nothing was \
         sent. Start a new session, or use a model with a larger window"
    )]
    DoesNotFit {
        needed: u64,
        window: u64,
        limit: u64,
    },
    /// Every key of the target failed recently and no fallback is left.
    #[error("every API key of {label} is cooling down after failures")]
    KeysCoolingDown { label: String },
    /// The provider said the conversation is too long, and compacting it failed.
    #[error(
        "{label}: the conversation does not fit the model's context window, and compacting it \
         failed ({source}); start a new session or use a model with a larger window"
    )]
    CompactionFailed {
        label: String,
        #[source]
        source: CompressError,
    },
    /// The provider kept saying the conversation is too long after every shrink.
    #[error(
        "{label}: the conversation still does not fit after {attempts} attempts to shrink it \
         ({source})"
    )]
    StillTooLarge {
        label: String,
        attempts: u32,
        #[source]
        source: ProviderError,
    },
    /// The answer broke off after output was shown: it cannot be restarted unseen.
    #[error(
        "The answer from {label} was interrupted after it had started ({source}). What was \
         shown is incomplete; ask again to continue."
    )]
    CutAfterOutput {
        label: String,
        #[source]
        source: ProviderError,
    },
    /// The provider failed, retries and fallbacks are exhausted.
    #[error("{label}: {} — {source}", .class.describe())]
    Provider {
        label: String,
        class: ErrorClass,
        #[source]
        source: ProviderError,
    },
    /// The chain was empty.
    #[error("no model could be reached")]
    NoModel,
}

impl CallError {
    /// The provider's error behind this failure, if one was.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            Self::StillTooLarge { source, .. }
            | Self::CutAfterOutput { source, .. }
            | Self::Provider { source, .. } => Some(source),
            Self::DoesNotFit { .. }
            | Self::KeysCoolingDown { .. }
            | Self::CompactionFailed { .. }
            | Self::NoModel => None,
        }
    }

    /// The class of the provider's failure, when it was classified.
    pub fn class(&self) -> Option<ErrorClass> {
        match self {
            Self::Provider { class, .. } => Some(*class),
            Self::StillTooLarge { .. } => Some(ErrorClass::ContextOverflow),
            _ => None,
        }
    }
}
