//! Workspace trust in the session room: who is asked while a session starts (a question the
//! wire room puts to its client, tied to the request being answered) and the one notice a
//! session starts with about what its folder's trust left out.

use std::path::Path;

use futures_util::future::BoxFuture;
use talaria_engine::TrustAssessment;

/// Who can be asked about a folder's trust while a session starts. The wire room implements
/// it over its client; a start with none asks nobody (the folder stays as it stands).
pub trait TrustQuestion: Send + Sync {
    /// Asks the user when `assessment` is worth a question and someone can answer, and
    /// applies the answer; an answer that cannot be read or saved leaves the folder untrusted.
    fn settle<'a>(
        &'a self,
        home: &'a Path,
        assessment: TrustAssessment,
    ) -> BoxFuture<'a, TrustAssessment>;
}

fn listed(paths: &[std::path::PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one notice a session starts with about what its folder's trust left out, if any.
pub fn notice(assessment: &TrustAssessment) -> Option<String> {
    let left_out = assessment.left_out();
    let too_big = assessment.too_big_to_load();
    if left_out.is_empty() {
        return (!too_big.is_empty()).then(|| {
            format!(
                "The skills of {} were not loaded: the folder holds too much to fingerprint \
                 (more than 512 files or 64 MiB).",
                too_big.join(" and ")
            )
        });
    }
    let shown_dir = assessment
        .through
        .as_deref()
        .unwrap_or(&assessment.cwd)
        .display()
        .to_string();
    let mut text = if !assessment.status.is_trusted() {
        format!(
            "This folder is not trusted, so its own instructions, skills, configuration and \
             hooks were left out: {}. Trust it with `talaria trust {}` (or your editor's \
             trust question) and start a new session to load them.",
            listed(&left_out),
            assessment.cwd.display()
        )
    } else {
        format!(
            "Instruction files changed since {shown_dir} was trusted were left out: {}. \
             Accept them with `talaria trust {shown_dir}` (or your editor's question) and \
             start a new session.",
            listed(&left_out)
        )
    };
    if let Some(problem) = &assessment.problem {
        text.push_str(&format!(" ({problem})"));
    }
    Some(text)
}
