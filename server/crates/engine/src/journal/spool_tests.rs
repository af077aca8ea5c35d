//! The spool's adoption rule (an orphan is removed only once all of it is copied and synced)
//! and its reserve, on real files: a copy that fails (this process's spool refuses writes,
//! as a full disk would) and a line this build cannot read each keep the orphan whole.

use super::*;
use talaria_record::Transcript;
use talaria_record::testing::user;

fn meta(id: &str) -> SessionMeta {
    SessionMeta {
        id: id.into(),
        cwd: "/w".into(),
        model: "m".into(),
        mode: "ask".into(),
        ..SessionMeta::default()
    }
}

/// An ended process's spool in `dir` holding a creation and two entries of session `s`.
fn an_orphan(dir: &Path) -> PathBuf {
    let mut spool = Spool::in_dir(dir.to_path_buf(), "ended".into());
    assert!(spool.create(&meta("s")));
    let mut transcript = Transcript::with_system("sys");
    transcript.push(user("answered"));
    let entries: Vec<EncodedEntry> = transcript
        .entries()
        .iter()
        .map(|e| EncodedEntry::of(e).expect("encodes"))
        .collect();
    assert!(
        spool
            .entries("s", &entries, &[])
            .iter()
            .all(Option::is_some)
    );
    spool.close().expect("an ended process's spool with lines")
}

/// This process's spool, its file opened read-only so every write fails (as ENOSPC would).
fn a_spool_that_refuses_writes(dir: &Path) -> Spool {
    let mut spool = Spool::in_dir(dir.to_path_buf(), "adopter".into());
    spool.prepare();
    let own = spool.own.as_mut().expect("opened");
    own.file = File::open(&own.path).expect("read-only");
    spool
}

#[test]
fn an_orphan_whose_copy_fails_is_kept_whole_and_none_of_it_taken_until_a_copy_succeeds() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    let orphan = an_orphan(&dir);
    let bytes = std::fs::read(&orphan).expect("read");
    let mut spool = a_spool_that_refuses_writes(&dir);
    assert!(
        spool.adopt().is_empty(),
        "nothing is taken of a failed copy"
    );
    assert_eq!(std::fs::read(&orphan).expect("kept"), bytes);
    assert!(
        spool.orphans_to_retry(),
        "a full disk may pass: tried again"
    );
    assert!(spool.kept.contains_key(&orphan));
    let own = spool.own.as_ref().expect("own");
    assert_eq!(own.len, 0, "what was copied is cut off again");
    // Its lock was released: the orphan is free for this or another process.
    let other = File::open(&orphan).expect("open");
    other.try_lock().expect("not held");
    drop(other);
    // Room again: the next try copies all of it, and only then removes it.
    let own = spool.own.as_mut().expect("own");
    own.file = OpenOptions::new()
        .write(true)
        .open(&own.path)
        .expect("writable");
    let adopted = spool.adopt();
    assert_eq!(adopted.len(), 3, "{adopted:?}");
    assert!(!orphan.exists(), "removed once copied and synced");
    assert!(!spool.orphans_to_retry());
    assert!(spool.kept.is_empty());
    let own = spool.own.as_ref().expect("own");
    assert!(own.len > 0, "copied into this process's spool");
}

#[test]
fn an_orphan_with_a_line_this_build_cannot_read_is_left_whole_and_not_retried() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    let orphan = an_orphan(&dir);
    let mut bytes = std::fs::read(&orphan).expect("read");
    bytes.extend_from_slice(b"{\"t\":\"tombstone\",\"session\":\"s\"}\n");
    std::fs::write(&orphan, &bytes).expect("a newer build's line");
    let mut spool = Spool::in_dir(dir.clone(), "adopter".into());
    assert!(spool.adopt().is_empty());
    assert_eq!(std::fs::read(&orphan).expect("kept"), bytes);
    assert!(
        !spool.orphans_to_retry(),
        "this build will never read it: not tried every few seconds"
    );
    assert!(
        spool
            .kept
            .get(&orphan)
            .is_some_and(|why| why.contains("1 of its lines"))
    );
    assert!(
        spool.own.as_ref().is_none_or(|own| own.len == 0),
        "nothing of it copied"
    );
}

#[test]
fn an_orphan_whose_lines_all_read_is_copied_then_removed() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    let orphan = an_orphan(&dir);
    let mut spool = Spool::in_dir(dir.clone(), "adopter".into());
    let adopted = spool.adopt();
    assert!(matches!(adopted.first(), Some(Spooled::Create(meta)) if meta.id == "s"));
    assert_eq!(adopted.len(), 3);
    assert!(!orphan.exists());
    assert!(!spool.dirty, "the copy is synced before the orphan goes");
    let own = spool.own.as_ref().expect("own");
    let copied = std::fs::read(&own.path).expect("read");
    assert_eq!(
        copied.iter().filter(|b| **b == b'\n').count(),
        3,
        "every line is copied before the orphan goes"
    );
}

#[test]
fn the_spool_keeps_room_allocated_ahead_of_need_and_again_after_it_is_cut_back() {
    use std::os::unix::fs::MetadataExt;
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("spool");
    let mut spool = Spool::in_dir(dir, "writer".into());
    spool.prepare();
    let allocated = |spool: &Spool| {
        let own = spool.own.as_ref().expect("own");
        let meta = own.file.metadata().expect("metadata");
        (meta.len(), meta.blocks() * 512, own.reserved_to)
    };
    let (len, bytes, reserved) = allocated(&spool);
    assert_eq!(len, 0, "the reserve does not change the size");
    assert!(
        bytes >= RESERVE[RESERVE.len() - 1] && reserved >= RESERVE[RESERVE.len() - 1],
        "no room kept: {bytes} bytes allocated, reserved to {reserved}"
    );
    assert!(spool.create(&meta("s")));
    spool.written();
    let (len, bytes, reserved) = allocated(&spool);
    assert_eq!(len, 0, "emptied");
    assert!(
        bytes >= RESERVE[RESERVE.len() - 1] && reserved >= RESERVE[RESERVE.len() - 1],
        "emptying it freed its reserve: {bytes}, {reserved}"
    );
}
