//! Small helpers every Talaria crate shares, so each is written once: a lock that survives a
//! panicked holder, and text clipped at character boundaries (each caller words its own note
//! about what was left out), files only this user may read (`private`), and folder trees
//! copied without following links (`tree`), the named failpoints of the crash suite
//! (`failpoint`), where a program named by a bare word is looked for (`search_path`), and
//! the known word a mistyped one meant (`closest`).

pub mod failpoint;
#[cfg(unix)]
pub mod private;
#[cfg(unix)]
pub mod search_path;
#[cfg(unix)]
pub mod tree;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`; a holder that panicked leaves the data as it was (every value guarded in
/// Talaria stays valid between statements), so the lock is taken anyway.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The value a mutex guards, through an exclusive borrow (poisoned or not, as [`lock`]).
pub fn get_mut<T>(mutex: &mut Mutex<T>) -> &mut T {
    mutex.get_mut().unwrap_or_else(PoisonError::into_inner)
}

/// The value a mutex guarded, once nobody else holds it (poisoned or not, as [`lock`]).
pub fn into_inner<T>(mutex: Mutex<T>) -> T {
    mutex.into_inner().unwrap_or_else(PoisonError::into_inner)
}

/// The first `max_chars` characters of `text` and how many characters follow them, or `None`
/// when the text is no longer than that.
pub fn head(text: &str, max_chars: usize) -> Option<(&str, usize)> {
    let (cut, _) = text.char_indices().nth(max_chars)?;
    Some((&text[..cut], text[cut..].chars().count()))
}

/// How many characters come before the last `max_chars` of `text`, and those, or `None` when
/// the text is no longer than that.
pub fn tail(text: &str, max_chars: usize) -> Option<(usize, &str)> {
    let total = text.chars().count();
    let skipped = total.checked_sub(max_chars).filter(|&s| s > 0)?;
    let cut = text
        .char_indices()
        .nth(skipped)
        .map_or(text.len(), |(at, _)| at);
    Some((skipped, &text[cut..]))
}

/// At most `max_bytes` bytes of `text`, cut back to a character boundary.
pub fn within_bytes(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The edit distance between two short strings, a swap of neighbours counting as one edit
/// (`modle` is one edit from `model`).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The known word closest to `key` (a key, a name), if it is close enough to be a typo of it.
pub fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let lower = key.to_ascii_lowercase();
    known
        .iter()
        .map(|candidate| (distance(&lower, candidate), *candidate))
        .filter(|(d, candidate)| key != *candidate && *d <= (candidate.len() / 3).clamp(1, 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The pieces add up to the text and have the lengths asked for.
        #[test]
        fn clipped_pieces_add_up(text in "\\PC{0,40}", max in 0usize..50) {
            let total = text.chars().count();
            match head(&text, max) {
                None => prop_assert!(total <= max),
                Some((kept, rest)) => {
                    prop_assert_eq!(kept.chars().count(), max);
                    prop_assert_eq!(rest, total - max);
                    prop_assert!(text.starts_with(kept));
                }
            }
            match tail(&text, max) {
                None => prop_assert!(total <= max),
                Some((skipped, kept)) => {
                    prop_assert_eq!(kept.chars().count(), max);
                    prop_assert_eq!(skipped, total - max);
                    prop_assert!(text.ends_with(kept));
                }
            }
            let bytes = within_bytes(&text, max);
            prop_assert!(bytes.len() <= max && text.starts_with(bytes));
        }
    }

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let held = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("holder panics");
        })
        .join();
        assert_eq!(*lock(&mutex), 1);
    }
}
