//! `[sandbox] writable` entries, fixed by what they were when the user listed them: the
//! first session that meets an entry records where it leads (in `TALARIA_HOME`, which no
//! command can reach), and later sessions grant it only while it still leads there. A
//! command cannot change where an entry leads within its own session (the helper grants a
//! root only while it resolves to itself), but it can swap the entry, or a folder above it,
//! for a link before the next session resolves it; the record keeps that link's target out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The record's file in `TALARIA_HOME`.
pub const RECORD: &str = "sandbox-writable.json";

/// The entries of `[sandbox] writable` (expanded, absolute) that may be granted, as they
/// resolve; each made first if missing (in a folder that exists). Blocking.
pub fn granted(talaria_home: &Path, entries: Vec<PathBuf>) -> Vec<PathBuf> {
    let file = talaria_home.join(RECORD);
    let mut record = read(&file);
    let mut changed = false;
    let mut out = Vec::new();
    for entry in entries {
        let Some(resolved) = made(&entry) else {
            continue;
        };
        let key = entry.display().to_string();
        match record.get(&key) {
            Some(listed) if Path::new(listed) == resolved => out.push(resolved),
            Some(listed) => tracing::warn!(
                "[sandbox] writable {}: it led to {listed} when it was listed and leads to {} \
                 now (something replaced it, or a folder above it, by a link); not granted. \
                 If you moved it yourself, remove its line from {}",
                entry.display(),
                resolved.display(),
                file.display()
            ),
            None => {
                record.insert(key, resolved.display().to_string());
                changed = true;
                out.push(resolved);
            }
        }
    }
    if changed {
        save(&file, &record);
    }
    out
}

/// The entry made when it does not exist yet, as it resolves now; `None` (not granted, and
/// said) when it cannot be made.
fn made(entry: &Path) -> Option<PathBuf> {
    match std::fs::create_dir(entry) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            tracing::warn!(
                "[sandbox] writable {}: it does not exist and cannot be made ({error}); not \
                 granted",
                entry.display()
            );
            return None;
        }
    }
    entry.canonicalize().ok()
}

/// The record (an unreadable one counts as empty: each entry is recorded again as it
/// resolves now).
fn read(file: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// Writes the record whole, private (a new file put in place by a rename). A record that
/// cannot be written leaves the entries granted as they resolve now, and says so.
fn save(file: &Path, record: &BTreeMap<String, String>) {
    let staged = file.with_extension(format!("json.{}", std::process::id()));
    let written = serde_json::to_vec_pretty(record)
        .map_err(std::io::Error::other)
        .and_then(|text| talaria_util::private::write_private(&staged, &text))
        .and_then(|()| std::fs::rename(&staged, file));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&staged);
        tracing::warn!(
            "cannot record where the [sandbox] writable entries lead in {} ({error}); a later \
             session will take them as they lead then",
            file.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_swapped_for_a_link_after_it_was_listed_is_not_granted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let (home, project, elsewhere) = (root.join("th"), root.join("p"), root.join("else"));
        for folder in [&home, &project, &elsewhere] {
            std::fs::create_dir(folder).expect("mkdir");
        }
        let entries = vec![project.join("out"), project.join("build/cache")];
        std::fs::create_dir_all(project.join("build/cache")).expect("mkdir");
        // First session: `out` is made, both are recorded and granted.
        assert_eq!(
            granted(&home, entries.clone()),
            [project.join("out"), project.join("build/cache")]
        );
        assert!(home.join(RECORD).exists());
        // A command swaps `out` and the folder above `build/cache` for links elsewhere.
        std::fs::rename(project.join("out"), project.join("out.moved")).expect("mv");
        std::os::unix::fs::symlink(&elsewhere, project.join("out")).expect("ln");
        std::fs::create_dir_all(elsewhere.join("cache")).expect("mkdir");
        std::fs::rename(project.join("build"), project.join("build.moved")).expect("mv");
        std::os::unix::fs::symlink(&elsewhere, project.join("build")).expect("ln");
        assert!(granted(&home, entries.clone()).is_empty());
        // Put back, they are granted again; an entry listed later is recorded then.
        std::fs::remove_file(project.join("out")).expect("rm");
        std::fs::rename(project.join("out.moved"), project.join("out")).expect("mv");
        let later = project.join("later");
        assert_eq!(
            granted(&home, vec![project.join("out"), later.clone()]),
            [project.join("out"), later]
        );
        // A garbled record counts as none.
        std::fs::write(home.join(RECORD), "{not json").expect("write");
        assert_eq!(
            granted(&home, vec![project.join("out")]),
            [project.join("out")]
        );
    }
}
