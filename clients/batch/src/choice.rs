//! A command-line choice that is not one of its values (`--approve`, `--format`).

/// `given` is not one of `expected` for `flag`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{flag} {given:?}: one of {expected}")]
pub struct BadChoice {
    pub flag: &'static str,
    pub given: String,
    pub expected: &'static str,
}
