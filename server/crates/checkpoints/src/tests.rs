//! Checkpoints against a real workspace: what a command changes is found and put back byte
//! for byte; a file changed by hand afterwards is left unless forced.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::{BlobStore, Bounds, Workspace};

fn sh(dir: &Path, script: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .status()
        .expect("sh runs");
    assert!(status.success(), "{script}");
}

fn workspace(
    bounds: Bounds,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    Arc<BlobStore>,
    Workspace,
) {
    let home = tempfile::tempdir().expect("home");
    let work = tempfile::tempdir().expect("work");
    let blobs = Arc::new(BlobStore::open(home.path()).expect("store"));
    let space = Workspace::new(
        vec![work.path().to_path_buf()],
        blobs.clone(),
        bounds,
        Arc::new(talaria_files::Unguarded),
    );
    (home, work, blobs, space)
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut files: Vec<_> = walk(dir)
        .into_iter()
        .map(|p| {
            let meta = fs::metadata(&p).expect("meta");
            (
                p.strip_prefix(dir).expect("inside").display().to_string(),
                fs::read(&p).expect("read"),
                meta.permissions().mode() & 0o7777,
            )
        })
        .collect();
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn what_a_command_changes_is_found_and_put_back_byte_for_byte() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let dir = work.path();
    sh(
        dir,
        "mkdir -p src .git && printf 'a\\nb\\n' > src/a.txt && printf 'keep' > b.txt && \
         printf 'gone' > c.txt && printf 'x' > run.sh && printf 'ignored/\\n' > .gitignore && \
         mkdir ignored && printf 'i' > ignored/i && printf 'g' > .git/HEAD",
    );
    let before = snapshot(dir);
    space.before_command();
    sh(
        dir,
        "sed -i 's/a/A/' src/a.txt && mv b.txt moved.txt && rm c.txt && printf n > new.txt && \
         chmod 755 run.sh && printf j > ignored/j && printf h > .git/HEAD",
    );
    let capture = space.after_command("s1");
    let mut paths: Vec<String> = capture
        .changes
        .iter()
        .map(|c| {
            c.path
                .strip_prefix(&format!("{}/", dir.display()))
                .unwrap_or(&c.path)
                .to_string()
        })
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "b.txt",
            "c.txt",
            "moved.txt",
            "new.txt",
            "run.sh",
            "src/a.txt"
        ]
    );
    assert!(capture.notes.is_empty());
    let report = space.restore("s1", &capture.changes, false);
    assert_eq!(report.restored.len(), 6, "{report:?}");
    let mut after = snapshot(dir);
    // What is ignored and the .git folder are never touched.
    after.retain(|(p, _, _)| p != "ignored/j");
    let mut expected = before;
    expected.retain(|(p, _, _)| p != ".git/HEAD");
    after.retain(|(p, _, _)| p != ".git/HEAD");
    assert_eq!(after, expected);
    assert_eq!(fs::read(dir.join(".git/HEAD")).expect("git"), b"h");
}

#[test]
fn a_file_changed_by_hand_after_the_agent_is_skipped_unless_forced() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let file = work.path().join("f.txt");
    fs::write(&file, "one").expect("write");
    let paths = vec![file.clone()];
    let before = space.files_before(&paths);
    fs::write(&file, "two").expect("the tool writes");
    let first = space.files_after("s", before);
    let before = space.files_before(&paths);
    fs::write(&file, "three").expect("the tool writes again");
    let second = space.files_after("s", before);
    let changes: Vec<_> = first.changes.into_iter().chain(second.changes).collect();
    fs::write(&file, "by hand").expect("the user edits");
    let report = space.restore("s", &changes, false);
    assert_eq!(report.skipped, vec![file.display().to_string()]);
    assert_eq!(fs::read_to_string(&file).expect("read"), "by hand");
    let forced = space.restore("s", &changes, true);
    assert_eq!(forced.restored, vec![file.display().to_string()]);
    assert_eq!(fs::read_to_string(&file).expect("read"), "one");
}

#[test]
fn a_file_over_the_bound_is_noted_and_not_half_restored() {
    let bounds = Bounds {
        max_file_bytes: 8,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(bounds);
    let dir = work.path();
    fs::write(dir.join("big"), "0123456789abcdef").expect("write");
    fs::write(dir.join("small"), "s").expect("write");
    space.before_command();
    fs::write(dir.join("big"), "changed big file").expect("write");
    fs::write(dir.join("small"), "t").expect("write");
    let capture = space.after_command("s");
    assert_eq!(capture.changes.len(), 2);
    assert!(capture.notes[0].contains("big"), "{:?}", capture.notes);
    let report = space.restore("s", &capture.changes, false);
    assert_eq!(
        report.restored,
        vec![dir.join("small").display().to_string()]
    );
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(
        fs::read_to_string(dir.join("big")).expect("read"),
        "changed big file"
    );
}

#[test]
fn a_workspace_over_the_file_bound_says_commands_are_not_covered() {
    let bounds = Bounds {
        max_files: 3,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(bounds);
    for n in 0..5 {
        fs::write(work.path().join(format!("f{n}")), "x").expect("write");
    }
    space.before_command();
    let capture = space.after_command("s");
    assert!(capture.changes.is_empty());
    assert!(capture.notes[0].contains("more than 3 files"));
    // Told once per session; the workspace is not walked again.
    space.before_command();
    assert!(space.after_command("s").notes.is_empty());
    assert_eq!(space.after_command("t").notes.len(), 1);
}

#[test]
fn a_workspace_over_the_byte_bound_is_not_read_for_commands() {
    let bounds = Bounds {
        max_workspace_bytes: 10,
        ..Bounds::default()
    };
    let (home, work, _blobs, space) = workspace(bounds);
    fs::write(work.path().join("big"), "more than ten bytes").expect("write");
    space.before_command();
    fs::write(work.path().join("big"), "changed, still more than ten").expect("write");
    let capture = space.after_command("s");
    assert!(capture.changes.is_empty());
    assert!(capture.notes[0].contains("GiB"), "{:?}", capture.notes);
    let pending = home.path().join("checkpoints/pending");
    let kept: usize = fs::read_dir(&pending)
        .expect("pending")
        .flatten()
        .map(|d| fs::read_dir(d.path()).map_or(0, |f| f.count()))
        .sum();
    assert_eq!(kept, 1, "only the process's lock: no content was read");
}

#[test]
fn a_write_that_fails_during_a_restore_names_the_file_and_leaves_it_whole() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let dir = work.path();
    fs::create_dir(dir.join("locked")).expect("dir");
    fs::write(dir.join("locked/f"), "old").expect("write");
    fs::write(dir.join("open"), "old").expect("write");
    space.before_command();
    fs::write(dir.join("locked/f"), "new").expect("write");
    fs::write(dir.join("open"), "new").expect("write");
    let capture = space.after_command("s");
    fs::set_permissions(dir.join("locked"), fs::Permissions::from_mode(0o555)).expect("chmod");
    let report = space.restore("s", &capture.changes, false);
    fs::set_permissions(dir.join("locked"), fs::Permissions::from_mode(0o755)).expect("chmod");
    if nix_is_root() {
        return;
    }
    assert_eq!(
        report.restored,
        vec![dir.join("open").display().to_string()]
    );
    assert_eq!(
        report.failed[0].0,
        dir.join("locked/f").display().to_string()
    );
    assert_eq!(
        fs::read_to_string(dir.join("locked/f")).expect("read"),
        "new"
    );
    assert_eq!(fs::read_to_string(dir.join("open")).expect("read"), "old");
}

/// Root writes into a read-only folder anyway.
fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

#[test]
fn nested_gitignores_and_their_exceptions_decide_what_a_walk_sees() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let dir = work.path();
    sh(
        dir,
        "mkdir -p a/b && printf 'build/\\n' > .gitignore && printf '*.log\\n!keep.log\\n' > a/.gitignore",
    );
    space.before_command();
    sh(
        dir,
        "mkdir -p build a/b/build && printf x > build/out && printf x > a/b/build/o && \
         printf x > a/b/noise.log && printf x > a/b/keep.log && printf x > a/b/code.rs",
    );
    let mut seen: Vec<String> = space
        .after_command("s")
        .changes
        .iter()
        .map(|c| {
            c.path
                .trim_start_matches(&format!("{}/", dir.display()))
                .to_string()
        })
        .collect();
    seen.sort();
    assert_eq!(seen, ["a/b/code.rs", "a/b/keep.log"]);
}

#[test]
fn a_fifo_a_socket_and_an_unreadable_file_never_block_or_break_a_checkpoint() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let dir = work.path();
    let fifo = dir.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(dir.join("agent.sock")).expect("socket");
    fs::write(dir.join("secret"), "s").expect("write");
    fs::set_permissions(dir.join("secret"), fs::Permissions::from_mode(0o000)).expect("chmod");
    fs::write(dir.join("plain"), "p").expect("write");
    // A FIFO opened for reading would wait for a writer: neither walk nor file tool opens it.
    space.before_command();
    fs::write(dir.join("plain"), "q").expect("write");
    let capture = space.after_command("s");
    let paths: Vec<&str> = capture.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, [dir.join("plain").display().to_string()]);
    let before = space.files_before(std::slice::from_ref(&fifo));
    assert!(space.files_after("s", before).changes.is_empty());
    let report = space.restore("s", &capture.changes, false);
    assert_eq!(report.restored.len(), 1, "{report:?}");
    fs::set_permissions(dir.join("secret"), fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn a_disk_under_the_reserve_keeps_no_content_and_says_why() {
    // The whole disk as the reserve: nothing fits.
    let full = Bounds {
        store_reserve_bytes: u64::MAX,
        store_reserve_share: 1,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(full);
    let dir = work.path();
    fs::write(dir.join("a.txt"), "before").expect("write");
    space.before_command();
    fs::write(dir.join("a.txt"), "after").expect("write");
    let capture = space.after_command("s");
    assert_eq!(capture.changes.len(), 1);
    assert_eq!(
        capture.changes[0]
            .before
            .as_ref()
            .and_then(|v| v.hash.clone()),
        None
    );
    let note = capture.notes.join("\n");
    assert!(note.contains("MiB free"), "the true reason: {note}");
    assert!(note.contains("session store"), "{note}");
    assert!(!note.contains("over 16 MiB"), "{note}");
    // No reserve: the same change is kept.
    let none = Bounds {
        store_reserve_bytes: 0,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(none);
    fs::write(work.path().join("a.txt"), "before").expect("write");
    space.before_command();
    fs::write(work.path().join("a.txt"), "after").expect("write");
    let capture = space.after_command("s");
    assert!(capture.notes.is_empty(), "{:?}", capture.notes);
    assert!(
        capture.changes[0]
            .before
            .as_ref()
            .and_then(|v| v.hash.clone())
            .is_some()
    );
}

#[test]
fn each_version_not_kept_is_told_with_its_own_reason() {
    let bounds = Bounds {
        max_file_bytes: 8,
        max_call_bytes: 12,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(bounds);
    let dir = work.path();
    fs::write(dir.join("big"), "0123456789").expect("big");
    fs::write(dir.join("m1"), "1234567").expect("m1");
    fs::write(dir.join("m2"), "abcdefg").expect("m2");
    space.before_command();
    fs::write(dir.join("big"), "0123456789ab").expect("big");
    fs::write(dir.join("m1"), "7654321").expect("m1");
    fs::write(dir.join("m2"), "gfedcba").expect("m2");
    let capture = space.after_command("s");
    let note = capture.notes.join("\n");
    assert!(
        note.contains("over 1 MiB each") || note.contains("over 0 MiB"),
        "{note}"
    );
    assert!(note.contains("one call may keep"), "{note}");
    assert!(
        note.contains(&dir.join("big").display().to_string()),
        "{note}"
    );
}

#[test]
fn a_restore_run_again_finishes_what_a_crash_cut_off_and_sweeps_temporary_names() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let dir = work.path();
    for i in 0..5 {
        fs::write(dir.join(format!("f{i}")), format!("before {i}")).expect("seed");
    }
    space.before_command();
    for i in 0..5 {
        fs::write(dir.join(format!("f{i}")), format!("after {i}")).expect("change");
    }
    fs::write(dir.join("new"), "made").expect("new");
    let capture = space.after_command("s");
    // As if a restore was cut off after two files: they are back, a temporary file is left.
    fs::write(dir.join("f0"), "before 0").expect("back");
    fs::write(dir.join("f1"), "before 1").expect("back");
    fs::write(dir.join(".f2.talaria-tmp-999-0"), "half").expect("left");
    fs::write(dir.join(".f3.talaria-restore"), "old name").expect("left");
    let report = space.restore("s", &capture.changes, false);
    assert_eq!(report.restored.len(), 6, "{report:?}");
    assert!(
        report.skipped.is_empty() && report.failed.is_empty(),
        "{report:?}"
    );
    for i in 0..5 {
        assert_eq!(
            fs::read_to_string(dir.join(format!("f{i}"))).expect("read"),
            format!("before {i}")
        );
    }
    assert!(!dir.join("new").exists());
    assert!(!dir.join(".f2.talaria-tmp-999-0").exists(), "swept");
    assert!(!dir.join(".f3.talaria-restore").exists(), "swept");
    // Once more: everything is back already, nothing is written.
    let again = space.restore("s", &capture.changes, false);
    assert_eq!(again.restored.len(), 6, "{again:?}");
}

#[test]
fn a_file_changed_twice_goes_back_to_before_the_first_change_in_one_write() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let file = work.path().join("f.txt");
    fs::write(&file, "one").expect("write");
    let before = space.files_before(std::slice::from_ref(&file));
    fs::write(&file, "two").expect("write");
    let first = space.files_after("s", before);
    let before = space.files_before(std::slice::from_ref(&file));
    fs::write(&file, "three").expect("write");
    let second = space.files_after("s", before);
    let changes: Vec<_> = first.changes.into_iter().chain(second.changes).collect();
    assert_eq!(changes.len(), 2);
    // Back at "two" by hand: not as the agent left it, nor as it was: left.
    fs::write(&file, "two").expect("write");
    let report = space.restore("s", &changes, false);
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    fs::write(&file, "three").expect("write");
    let report = space.restore("s", &changes, false);
    assert_eq!(report.restored.len(), 1, "{report:?}");
    assert_eq!(fs::read_to_string(&file).expect("read"), "one");
}

#[test]
fn a_folder_swapped_for_a_link_is_neither_walked_nor_written_through_by_a_restore() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let outside = tempfile::tempdir().expect("outside");
    fs::write(outside.path().join("authorized_keys"), "USER KEY").expect("key");
    fs::write(outside.path().join("id"), "PRIVATE").expect("id");
    let dir = work.path();
    fs::create_dir(dir.join("deploy")).expect("deploy");
    fs::write(dir.join("deploy/authorized_keys"), "workspace key").expect("ws key");
    space.before_command();
    fs::write(dir.join("deploy/authorized_keys"), "agent's key").expect("agent");
    let capture = space.after_command("s");
    assert_eq!(capture.changes.len(), 1);
    // The command's swap, then a walk and a forced restore.
    fs::rename(dir.join("deploy"), dir.join("deploy.orig")).expect("move");
    std::os::unix::fs::symlink(outside.path(), dir.join("deploy")).expect("link");
    space.before_command();
    let walked = space.after_command("s");
    assert!(
        walked.changes.iter().all(|c| !c.path.contains("/deploy/")),
        "the link is not walked: {:?}",
        walked.changes
    );
    let report = space.restore("s", &capture.changes, true);
    assert_eq!(report.failed.len(), 1, "{report:?}");
    let report = space.restore("s", &capture.changes, false);
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(
        fs::read_to_string(outside.path().join("authorized_keys")).expect("key"),
        "USER KEY"
    );
    assert_eq!(fs::read_dir(outside.path()).expect("list").count(), 2);
}

#[test]
fn what_the_sandbox_hides_in_the_workspace_is_never_read_into_a_checkpoint() {
    #[derive(Debug)]
    struct HidesSecrets(std::path::PathBuf);
    impl talaria_files::Places for HidesSecrets {
        fn access(&self, path: &Path) -> talaria_files::Access {
            if path.starts_with(&self.0) {
                talaria_files::Access::Hidden
            } else {
                talaria_files::Access::Writable
            }
        }
    }
    let home = tempfile::tempdir().expect("home");
    let work = tempfile::tempdir().expect("work");
    let dir = work.path().canonicalize().expect("canonical");
    fs::create_dir(dir.join("secrets")).expect("secrets");
    fs::write(dir.join("secrets/token"), "TOKEN-1").expect("token");
    fs::write(dir.join("open.txt"), "open").expect("open");
    let blobs = Arc::new(BlobStore::open(home.path()).expect("store"));
    let space = Workspace::new(
        vec![dir.clone()],
        blobs,
        Bounds::default(),
        Arc::new(HidesSecrets(dir.join("secrets"))),
    );
    space.before_command();
    fs::write(dir.join("secrets/token"), "TOKEN-2").expect("token");
    fs::write(dir.join("open.txt"), "changed").expect("open");
    let capture = space.after_command("s");
    let paths: Vec<&str> = capture.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, [dir.join("open.txt").display().to_string()]);
    let kept = walk(&home.path().join("checkpoints"));
    for file in kept {
        let bytes = fs::read(&file).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("TOKEN"),
            "{file:?}"
        );
    }
    // A restore does not write there either.
    let planted = vec![talaria_record::FileChange {
        path: dir.join("secrets/token").display().to_string(),
        before: None,
        after: None,
    }];
    let report = space.restore("s", &planted, true);
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(dir.join("secrets/token").exists());
}

#[test]
fn a_file_tool_outside_the_roots_is_kept_only_with_no_link_on_its_way() {
    let (_home, _work, _blobs, space) = workspace(Bounds::default());
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let real = elsewhere.path().canonicalize().expect("canonical");
    fs::write(real.join("notes"), "notes").expect("notes");
    std::os::unix::fs::symlink(&real, real.with_extension("link")).expect("link");
    let through = real.with_extension("link").join("notes");
    let direct = real.join("notes");
    let before = space.files_before(&[direct.clone(), through.clone()]);
    fs::write(&direct, "changed").expect("write");
    let capture = space.files_after("s", before);
    let paths: Vec<&str> = capture.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, [direct.display().to_string()]);
    let _ = fs::remove_file(real.with_extension("link"));
}

#[test]
fn many_folders_are_walked_on_every_core_and_the_bound_counts_files_below_them() {
    let bounds = Bounds {
        max_files: 24,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(bounds);
    let dir = work.path();
    for i in 0..24 {
        fs::create_dir(dir.join(format!("d{i:02}"))).expect("dir");
        fs::write(dir.join(format!("d{i:02}/f")), "a").expect("file");
    }
    space.before_command();
    for i in 0..24 {
        fs::write(dir.join(format!("d{i:02}/f")), "b").expect("file");
    }
    let capture = space.after_command("s");
    assert_eq!(
        capture.changes.len(),
        24,
        "exactly at the bound: {:?}",
        capture.notes
    );
    // One more, below a folder: over the bound.
    fs::write(dir.join("d00/g"), "c").expect("file");
    space.before_command();
    let capture = space.after_command("s");
    assert!(capture.changes.is_empty());
    assert!(
        capture.notes[0].contains("more than 24 files"),
        "{:?}",
        capture.notes
    );
}

#[test]
fn a_gitignore_above_the_workspace_in_its_repository_counts() {
    let home = tempfile::tempdir().expect("home");
    let repo = tempfile::tempdir().expect("repo");
    let repo_dir = repo.path().canonicalize().expect("canonical");
    fs::create_dir_all(repo_dir.join(".git")).expect("git");
    fs::write(repo_dir.join(".gitignore"), "*.log\n").expect("ignore");
    let ws = repo_dir.join("ws");
    fs::create_dir(&ws).expect("ws");
    let blobs = Arc::new(BlobStore::open(home.path()).expect("store"));
    let space = Workspace::new(
        vec![ws.clone()],
        blobs,
        Bounds::default(),
        Arc::new(talaria_files::Unguarded),
    );
    space.before_command();
    fs::write(ws.join("noise.log"), "x").expect("log");
    fs::write(ws.join("code.rs"), "x").expect("code");
    let capture = space.after_command("s");
    let paths: Vec<&str> = capture.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, [ws.join("code.rs").display().to_string()]);
}

#[test]
fn a_file_exactly_at_a_bound_is_kept() {
    let bounds = Bounds {
        max_file_bytes: 8,
        max_call_bytes: 8,
        ..Bounds::default()
    };
    let (_home, work, _blobs, space) = workspace(bounds);
    let file = work.path().join("f");
    fs::write(&file, "12345678").expect("write");
    let before = space.files_before(std::slice::from_ref(&file));
    fs::write(&file, "87654321").expect("write");
    let capture = space.files_after("s", before);
    assert!(capture.notes.is_empty(), "{:?}", capture.notes);
    let change = &capture.changes[0];
    assert!(change.before.as_ref().is_some_and(|v| v.hash.is_some()));
    assert!(change.after.as_ref().is_some_and(|v| v.hash.is_some()));
}

#[test]
fn a_file_a_tool_creates_is_recorded_as_absent_before_and_removed_by_a_restore() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let file = work.path().join("new.txt");
    let before = space.files_before(std::slice::from_ref(&file));
    fs::write(&file, "made").expect("write");
    let capture = space.files_after("s", before);
    assert_eq!(capture.changes.len(), 1);
    assert!(capture.changes[0].before.is_none());
    let report = space.restore("s", &capture.changes, false);
    assert_eq!(report.restored.len(), 1, "{report:?}");
    assert!(!file.exists());
}

#[test]
fn a_folder_in_a_files_place_is_left_not_failed() {
    let (_home, work, _blobs, space) = workspace(Bounds::default());
    let path = work.path().join("f");
    fs::create_dir(&path).expect("dir");
    let meta = fs::metadata(&path).expect("meta");
    // A change whose version has the folder's very size and mode.
    let version = talaria_record::FileVersion {
        hash: Some(crate::hash_of(b"x")),
        mode: meta.permissions().mode() & 0o7777,
        len: meta.len(),
    };
    let change = talaria_record::FileChange {
        path: path.display().to_string(),
        before: Some(version.clone()),
        after: Some(version),
    };
    let report = space.restore("s", &[change], false);
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert!(path.is_dir());
}

#[test]
fn the_temporary_names_beside_a_file_outside_the_roots_are_swept_there() {
    let (_home, _work, _blobs, space) = workspace(Bounds::default());
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let dir = elsewhere.path().canonicalize().expect("canonical");
    let file = dir.join("notes");
    fs::write(&file, "one").expect("write");
    let before = space.files_before(std::slice::from_ref(&file));
    fs::write(&file, "two").expect("write");
    let capture = space.files_after("s", before);
    fs::write(dir.join(".notes.talaria-tmp-1-1"), "half").expect("left");
    let report = space.restore("s", &capture.changes, false);
    assert_eq!(report.restored.len(), 1, "{report:?}");
    assert_eq!(fs::read_to_string(&file).expect("read"), "one");
    assert!(
        !dir.join(".notes.talaria-tmp-1-1").exists(),
        "swept where the file is"
    );
}
