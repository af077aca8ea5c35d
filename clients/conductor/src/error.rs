//! What can go wrong with a child agent, each with what the user needs to act on it.

use std::time::Duration;

/// A child agent's failure.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("agent {name}: could not start {program}: {source}")]
    Spawn {
        name: String,
        program: String,
        source: std::io::Error,
    },
    #[error("agent {name} ended ({status}){}", tail_text(.stderr_tail))]
    Exited {
        name: String,
        status: String,
        stderr_tail: Vec<String>,
    },
    #[error("agent {name} said nothing for {}s while nothing waited on Talaria: it is taken as hung and stopped{}", .idle.as_secs(), tail_text(.stderr_tail))]
    Hung {
        name: String,
        idle: Duration,
        stderr_tail: Vec<String>,
    },
    #[error("agent {name} refused {method}: {message}")]
    Refused {
        name: String,
        method: String,
        message: String,
    },
    #[error("agent {name} answered {method} with something that is not ACP: {detail}")]
    Malformed {
        name: String,
        method: String,
        detail: String,
    },
    #[error("agent {name}: the call was cancelled")]
    Cancelled { name: String },
}

impl ChildError {
    /// The child's last lines of stderr, when it has any to show.
    pub fn stderr_tail(&self) -> &[String] {
        match self {
            ChildError::Exited { stderr_tail, .. } | ChildError::Hung { stderr_tail, .. } => {
                stderr_tail
            }
            _ => &[],
        }
    }
}

fn tail_text(tail: &[String]) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its last words:\n{}", tail.join("\n"))
    }
}
