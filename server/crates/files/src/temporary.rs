//! The names of the temporary files a replacement writes before it renames them into place:
//! `.<name>.talaria-tmp-<process>-<n>`, unique within the process, so a name a command
//! planted is never the one written (the creation is exclusive anyway), and a sweep can tell
//! them from the user's own files.

use std::sync::atomic::{AtomicU64, Ordering};

/// What every temporary name holds after the file's own name.
pub const TEMPORARY_MARK: &str = ".talaria-tmp-";

/// The name the restores of earlier versions wrote through (swept too).
const OLD_RESTORE_MARK: &str = ".talaria-restore";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary name for a file named `name`.
pub(crate) fn temporary_name(name: &str) -> String {
    format!(
        ".{name}{TEMPORARY_MARK}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The number the next temporary name of this process will carry (tests plant names ahead).
#[cfg(test)]
pub(crate) fn next_number() -> u64 {
    NEXT.load(Ordering::Relaxed)
}

/// Whether `entry` is a temporary name a replacement of `name` used (by any process, or by
/// the restores of earlier versions).
pub fn is_temporary_of(entry: &str, name: &str) -> bool {
    let Some(rest) = entry
        .strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(name))
    else {
        return false;
    };
    if rest == OLD_RESTORE_MARK {
        return true;
    }
    let Some(numbers) = rest.strip_prefix(TEMPORARY_MARK) else {
        return false;
    };
    let mut parts = numbers.split('-');
    let digits = |part: Option<&str>| {
        part.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    digits(parts.next()) && digits(parts.next()) && parts.next().is_none()
}
