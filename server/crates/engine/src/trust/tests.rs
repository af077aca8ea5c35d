//! Trust decisions: what a folder's standing is, what survives a rename, a link, a change.

use std::sync::Arc;

use super::*;

fn places() -> Arc<dyn Places> {
    Arc::new(talaria_files::Unguarded)
}

/// A home and a project with an `AGENTS.md` and a skill folder.
fn project() -> (tempfile::TempDir, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("home");
    let work = tempfile::tempdir().expect("work");
    std::fs::write(work.path().join("AGENTS.md"), "Say PINEAPPLE.").expect("write");
    std::fs::create_dir_all(work.path().join(".talaria/skills/x")).expect("mkdir");
    (home, work)
}

#[test]
fn an_unknown_folder_is_untrusted_and_says_what_it_leaves_out() {
    let (home, work) = project();
    let a = assess(home.path(), work.path(), places());
    assert_eq!(a.status, TrustStatus::Untrusted);
    assert_eq!(a.gate(), InstructionGate::Closed);
    assert!(!a.loads_project());
    assert_eq!(
        a.left_out(),
        vec![
            work.path().join("AGENTS.md"),
            work.path().join(".talaria/skills")
        ]
    );
    assert!(a.worth_asking());
    assert_eq!(
        a.decisions(),
        vec![
            TrustDecision::TrustCwd,
            TrustDecision::TrustSession,
            TrustDecision::Decline
        ]
    );
}

#[test]
fn trust_covers_subfolders_and_links_to_them_but_not_a_renamed_folder() {
    let (home, work) = project();
    std::fs::create_dir_all(work.path().join("sub")).expect("mkdir");
    trust_folder(home.path(), work.path()).expect("trust");
    let sub = assess(home.path(), &work.path().join("sub"), places());
    assert_eq!(sub.status, TrustStatus::Trusted);
    let link = home.path().join("link");
    std::os::unix::fs::symlink(work.path().join("sub"), &link).expect("link");
    assert_eq!(
        assess(home.path(), &link, places()).status,
        TrustStatus::Trusted
    );
    // Renamed away: its new name is not trusted, and a folder put under the old name is not.
    let moved = work.path().with_extension("moved");
    std::fs::rename(work.path(), &moved).expect("rename");
    assert_eq!(
        assess(home.path(), &moved, places()).status,
        TrustStatus::Untrusted
    );
    std::fs::create_dir(work.path()).expect("replace");
    let replaced = assess(home.path(), work.path(), places());
    assert_eq!(replaced.status, TrustStatus::Untrusted);
    assert!(replaced.problem.is_some());
    std::fs::remove_dir(work.path()).expect("rm");
    std::fs::rename(&moved, work.path()).expect("back");
}

#[test]
fn a_changed_or_new_instruction_file_is_left_out_until_accepted() {
    let (home, work) = project();
    trust_folder(home.path(), work.path()).expect("trust");
    let a = assess(home.path(), work.path(), places());
    assert!(a.changed.is_empty());
    assert!(!a.worth_asking());
    std::fs::write(work.path().join("AGENTS.md"), "Say COCONUT.").expect("write");
    std::fs::write(work.path().join("CLAUDE.md"), "Say MANGO.").expect("write");
    let mut a = assess(home.path(), work.path(), places());
    assert_eq!(a.status, TrustStatus::Trusted);
    assert_eq!(a.changed, vec!["AGENTS.md", "CLAUDE.md"]);
    // Only the unchanged skill folder is let in.
    assert!(matches!(a.gate(), InstructionGate::Accepted(h) if h.keys().eq([&".talaria/skills"])));
    assert!(a.worth_asking());
    a.accept_changes(home.path()).expect("accept");
    let again = assess(home.path(), work.path(), places());
    assert!(again.changed.is_empty(), "{:?}", again.changed);
    // The two instruction files and the skill folder.
    assert!(matches!(again.gate(), InstructionGate::Accepted(h) if h.len() == 3));
}

#[test]
fn decisions_are_remembered_and_a_decline_is_not_asked_again() {
    let (home, work) = project();
    let mut a = assess(home.path(), work.path(), places());
    a.decide(home.path(), TrustDecision::Decline)
        .expect("decline");
    let again = assess(home.path(), work.path(), places());
    assert!(again.declined && !again.worth_asking());
    assert_eq!(again.status, TrustStatus::Untrusted);
    // Session trust is not written.
    let mut a = assess(home.path(), work.path(), places());
    a.decide(home.path(), TrustDecision::TrustSession)
        .expect("session");
    assert_eq!(a.status, TrustStatus::Session);
    assert_eq!(
        assess(home.path(), work.path(), places()).status,
        TrustStatus::Untrusted
    );
    // Trusting forgets the decline; revoking forgets the trust.
    let mut a = assess(home.path(), work.path(), places());
    a.decide(home.path(), TrustDecision::TrustCwd)
        .expect("trust");
    assert_eq!(
        assess(home.path(), work.path(), places()).status,
        TrustStatus::Trusted
    );
    assert!(
        revoke_folder(home.path(), work.path())
            .expect("revoke")
            .is_some()
    );
    assert_eq!(
        assess(home.path(), work.path(), places()).status,
        TrustStatus::Untrusted
    );
    // A decision that is not on offer is refused.
    let mut trusted = assess(home.path(), work.path(), places());
    trusted.status = TrustStatus::Trusted;
    assert!(
        trusted
            .decide(home.path(), TrustDecision::TrustCwd)
            .is_err()
    );
}

#[test]
fn a_repository_can_be_trusted_from_a_subfolder() {
    let (home, work) = project();
    std::fs::create_dir_all(work.path().join(".git")).expect("git");
    let app = work.path().join("packages/app");
    std::fs::create_dir_all(&app).expect("mkdir");
    std::fs::write(app.join("CLAUDE.md"), "Say KIWI.").expect("write");
    let mut a = assess(home.path(), &app, places());
    let resolved_root = std::fs::canonicalize(work.path()).expect("root");
    assert_eq!(a.repo_root.as_deref(), Some(resolved_root.as_path()));
    assert_eq!(a.decisions()[0], TrustDecision::TrustRepo);
    a.decide(home.path(), TrustDecision::TrustRepo)
        .expect("repo");
    let top = assess(home.path(), work.path(), places());
    assert_eq!(top.status, TrustStatus::Trusted);
    // The subfolder's file was accepted with the decision; the root's was never shown.
    assert!(assess(home.path(), &app, places()).changed.is_empty());
    assert_eq!(top.changed, vec!["AGENTS.md", ".talaria/skills"]);
}

#[test]
fn an_unreadable_trust_file_trusts_nothing_and_is_not_written_over() {
    let (home, work) = project();
    trust_folder(home.path(), work.path()).expect("trust");
    let file = home.path().join(TRUST_FILE);
    std::fs::write(&file, "{not json").expect("corrupt");
    let a = assess(home.path(), work.path(), places());
    assert_eq!(a.status, TrustStatus::Untrusted);
    assert!(a.problem.is_some());
    assert!(trust_folder(home.path(), work.path()).is_err());
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "{not json");
}

#[test]
fn a_linked_instruction_file_is_never_read_for_trust() {
    let (home, work) = project();
    let secret = home.path().join("secret");
    std::fs::write(&secret, "SECRET").expect("write");
    std::fs::remove_file(work.path().join("AGENTS.md")).expect("rm");
    std::os::unix::fs::symlink(&secret, work.path().join("AGENTS.md")).expect("link");
    let files = trust_folder(home.path(), work.path()).expect("trust");
    assert!(files.iter().all(|f| f.name != "AGENTS.md"), "{files:?}");
    let a = assess(home.path(), work.path(), places());
    assert!(a.instructions.iter().all(|f| !f.text.contains("SECRET")));
}

#[test]
fn a_folder_trusted_for_the_process_is_trusted_until_it_ends_and_nothing_is_written() {
    let (home, work) = project();
    assert_eq!(
        assess(home.path(), work.path(), places()).status,
        TrustStatus::Untrusted
    );
    let mut shown = assess(home.path(), work.path(), places());
    shown
        .decide(home.path(), TrustDecision::TrustSession)
        .expect("session");
    trust_for_process(&shown);
    let a = assess(home.path(), &work.path().join(".talaria"), places());
    assert_eq!(a.status, TrustStatus::Session);
    assert!(!home.path().join(TRUST_FILE).exists());
    // Pinned to what was assessed: a file planted since is left out.
    std::fs::write(work.path().join("AGENTS.md"), "Say DURIAN.").expect("swap");
    let a = assess(home.path(), work.path(), places());
    assert_eq!(a.status, TrustStatus::Session);
    assert_eq!(a.changed, vec!["AGENTS.md"]);
    // A repository inside it is not covered.
    std::fs::create_dir_all(work.path().join("clone/.git")).expect("git");
    let clone = assess(home.path(), &work.path().join("clone"), places());
    assert_eq!(clone.status, TrustStatus::Untrusted);
}

#[test]
fn a_skill_added_after_trust_and_a_changed_project_config_are_left_out_until_accepted() {
    let (home, work) = project();
    std::fs::write(work.path().join(".talaria/config.toml"), "[hooks]\n").expect("config");
    trust_folder(home.path(), work.path()).expect("trust");
    let a = assess(home.path(), work.path(), places());
    assert!(a.loads_project_skills() && a.project_config().is_some());
    std::fs::write(work.path().join(".talaria/skills/x/SKILL.md"), "planted").expect("skill");
    std::fs::write(
        work.path().join(".talaria/config.toml"),
        "[[hooks.SessionStart]]\ncommand = \"planted\"\n",
    )
    .expect("config");
    let mut a = assess(home.path(), work.path(), places());
    assert_eq!(a.changed, vec![".talaria/config.toml", ".talaria/skills"]);
    assert!(!a.loads_project_skills() && a.project_config().is_none());
    assert!(a.changed_files().any(|f| f.text.contains("planted")));
    a.accept_changes(home.path()).expect("accept");
    let a = assess(home.path(), work.path(), places());
    assert!(a.loads_project_skills() && a.project_config().is_some());
}

#[test]
fn a_repository_below_a_trusted_folder_is_not_covered() {
    let (home, work) = project();
    trust_folder(home.path(), work.path()).expect("trust");
    let clone = work.path().join("clone");
    std::fs::create_dir_all(clone.join(".git")).expect("git");
    let a = assess(home.path(), &clone, places());
    assert_eq!(a.status, TrustStatus::Untrusted);
    assert!(
        a.problem
            .as_deref()
            .is_some_and(|p| p.contains("repository of its own"))
    );
    let plain = work.path().join("plain");
    std::fs::create_dir_all(&plain).expect("mkdir");
    assert_eq!(
        assess(home.path(), &plain, places()).status,
        TrustStatus::Trusted
    );
}

#[test]
fn a_trust_file_others_can_write_or_a_link_trusts_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let (home, work) = project();
    trust_folder(home.path(), work.path()).expect("trust");
    let file = home.path().join(TRUST_FILE);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let a = assess(home.path(), work.path(), places());
    assert_eq!(a.status, TrustStatus::Untrusted);
    assert!(
        a.problem
            .as_deref()
            .is_some_and(|p| p.contains("others can write it"))
    );
    let elsewhere = work.path().join("trust.json");
    std::fs::rename(&file, &elsewhere).expect("move");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::os::unix::fs::symlink(&elsewhere, &file).expect("link");
    let a = assess(home.path(), work.path(), places());
    assert_eq!(a.status, TrustStatus::Untrusted);
    assert!(a.problem.as_deref().is_some_and(|p| p.contains("link")));
}

#[test]
fn trust_for_the_session_loads_only_what_the_question_showed() {
    let (home, work) = project();
    let mut a = assess(home.path(), work.path(), places());
    a.decide(home.path(), TrustDecision::TrustSession)
        .expect("session");
    assert!(matches!(a.gate(), InstructionGate::Accepted(h) if h.contains_key("AGENTS.md")));
}

// Red team two: what a skill folder can hold to get past its fingerprint.

#[test]
fn red_two_a_skill_folder_too_big_to_list_never_loads_even_once_trusted() {
    let (home, work) = project();
    let skills = work.path().join(".talaria/skills/x");
    std::fs::write(skills.join("SKILL.md"), "shown").expect("skill");
    for n in 0..600 {
        std::fs::write(skills.join(format!("f{n:03}.md")), "x").expect("file");
    }
    trust_folder(home.path(), work.path()).expect("trust");
    let a = assess(home.path(), work.path(), places());
    assert!(!a.loads_project_skills(), "a folder past the limit loaded");
}

#[test]
fn red_two_a_pipe_in_a_skill_folder_never_blocks_the_assessment() {
    let (home, work) = project();
    let fifo = work.path().join(".talaria/skills/x/SKILL.md");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let (tx, rx) = std::sync::mpsc::channel();
    let (h, w) = (home.path().to_path_buf(), work.path().to_path_buf());
    std::thread::spawn(move || {
        let a = assess(&h, &w, places());
        let _ = tx.send(a.instructions.len());
    });
    let listed = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the assessment hung on a pipe");
    assert!(listed >= 2);
}

#[test]
fn red_two_a_link_in_a_skill_folder_is_fingerprinted_as_a_link() {
    let (home, work) = project();
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("SKILL.md"), "benign").expect("skill");
    std::os::unix::fs::symlink(outside.path(), work.path().join(".talaria/skills/y"))
        .expect("link");
    trust_folder(home.path(), work.path()).expect("trust");
    std::fs::write(outside.path().join("SKILL.md"), "planted").expect("swap");
    // The fingerprint does not change (the link is listed, not followed): this holds only
    // because the skill catalog never follows a link either (talaria_skills::catalog).
    let a = assess(home.path(), work.path(), places());
    assert!(a.instructions.iter().all(|f| !f.text.contains("planted")));
}

#[test]
fn the_skill_files_of_a_trusted_folder_are_pinned_to_their_bytes_as_accepted() {
    let (home, work) = project();
    let skill = work.path().join(".talaria/skills/x");
    std::fs::write(skill.join("SKILL.md"), "shown").expect("skill");
    std::fs::write(skill.join("big.md"), vec![b'a'; 300 * 1024]).expect("big");
    std::fs::write(skill.join("long.md"), vec![b'b'; 200 * 1024]).expect("long");
    // Untrusted: nothing loads, so nothing to pin.
    assert_eq!(
        assess(home.path(), work.path(), places()).pinned_skill_files(),
        None
    );
    trust_folder(home.path(), work.path()).expect("trust");
    let pin = assess(home.path(), work.path(), places())
        .pinned_skill_files()
        .expect("pinned");
    let file = Path::new(".talaria/skills/x/SKILL.md");
    assert!(pin.admits(file, b"shown"));
    assert!(!pin.admits(file, b"shown "), "changed bytes admitted");
    assert!(!pin.admits(Path::new(".talaria/skills/x/new.md"), b"shown"));
    assert!(!pin.admits(Path::new("AGENTS.md"), b"Say PINEAPPLE."));
    // A long reference (200 KiB) is admitted as it is, and so is one longer than the
    // question shows (300 KiB, hashed whole), but not with a byte changed past what is shown.
    assert!(pin.admits(Path::new(".talaria/skills/x/long.md"), &[b'b'; 200 * 1024]));
    let mut big = vec![b'a'; 300 * 1024];
    assert!(pin.admits(Path::new(".talaria/skills/x/big.md"), &big));
    big[290 * 1024] = b'b';
    assert!(!pin.admits(Path::new(".talaria/skills/x/big.md"), &big));
}

#[test]
fn skills_trusted_by_the_environment_or_changed_are_not_pinned() {
    let (home, work) = project();
    std::fs::write(work.path().join(".talaria/skills/x/SKILL.md"), "one").expect("skill");
    trust_folder(home.path(), work.path()).expect("trust");
    std::fs::write(work.path().join(".talaria/skills/x/SKILL.md"), "two").expect("swap");
    // Changed since accepted: the skills do not load at all this session.
    let a = assess(home.path(), work.path(), places());
    assert!(!a.loads_project_skills());
    assert_eq!(a.pinned_skill_files(), None);
    // Trusted for the session by the user after being shown: pinned to what was shown.
    let (home, work) = project();
    std::fs::write(work.path().join(".talaria/skills/x/SKILL.md"), "two").expect("skill");
    let mut a = assess(home.path(), work.path(), places());
    a.decide(home.path(), TrustDecision::TrustSession)
        .expect("session");
    let pin = a.pinned_skill_files().expect("pinned");
    assert!(pin.admits(Path::new(".talaria/skills/x/SKILL.md"), b"two"));
    // Trusted by the environment (nothing was shown): read live, unpinned.
    a.pinned = false;
    assert_eq!(a.pinned_skill_files(), None);
}

#[test]
fn a_folder_is_the_trusted_one_only_with_its_device_inode_and_birth_time() {
    let work = tempfile::tempdir().expect("work");
    let meta = std::fs::metadata(work.path()).expect("meta");
    let expected = meta.created().ok().map(|t| {
        let since = t
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch");
        u64::try_from(since.as_nanos()).expect("fits")
    });
    assert_eq!(born_ns(&meta), expected);
    let entry = |inode: u64, born: Option<u64>| TrustedFolder {
        trusted_at: 0,
        device: Some(meta.dev()),
        inode: Some(inode),
        born_ns: born,
        instructions: Default::default(),
    };
    assert!(same_folder(work.path(), &entry(meta.ino(), expected)));
    // A record from before birth times were kept still matches by device and inode.
    assert!(same_folder(work.path(), &entry(meta.ino(), None)));
    assert!(!same_folder(work.path(), &entry(meta.ino() + 1, None)));
    if let Some(born) = expected {
        // The inode reused by a folder made later: another folder.
        assert!(!same_folder(
            work.path(),
            &entry(meta.ino(), Some(born + 1))
        ));
    }
}

#[test]
fn a_skill_folder_lists_links_and_special_files_as_such_and_never_opens_them() {
    let (_home, work) = project();
    let skill = work.path().join(".talaria/skills/x");
    std::fs::write(skill.join("SKILL.md"), "shown").expect("skill");
    std::os::unix::fs::symlink(skill.join("SKILL.md"), skill.join("alias.md")).expect("link");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        skill.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let folder = skill_folder(work.path(), ".talaria/skills").expect("listed");
    assert!(
        folder.text.contains("# .talaria/skills/x/alias.md\n"),
        "{}",
        folder.text
    );
    let mut listing = Vec::new();
    let mut budget = MAX_SKILL_FOLDER_BYTES;
    assert!(list_files(
        &work.path().join(".talaria/skills"),
        Path::new(""),
        &mut listing,
        &mut budget
    ));
    let said = |name: &str| {
        listing
            .iter()
            .find(|(relative, ..)| relative == name)
            .map(|(_, shown, _, admitted)| (shown.clone(), admitted.clone()))
            .expect("listed")
    };
    let (shown, admitted) = said("x/alias.md");
    assert!(shown.starts_with("a link to "), "{shown}");
    assert_eq!(admitted, None);
    assert_eq!(said("x/pipe"), ("a special file".to_string(), None));
    // Opened directly (swapped in after the listing), a link is not followed.
    let read = file_content(&skill.join("alias.md"));
    assert!(read.shown.starts_with("unreadable"), "{}", read.shown);
    assert_eq!(read.admitted, None);
}

#[test]
fn a_skill_file_is_admitted_by_all_its_bytes_and_hashed_up_to_its_limit() {
    let work = tempfile::tempdir().expect("work");
    let exact = work.path().join("exact.md");
    std::fs::write(&exact, vec![b'e'; MAX_SKILL_FILE_BYTES as usize]).expect("exact");
    let read = file_content(&exact);
    assert!(
        read.admitted.is_some(),
        "a file exactly at the limit is shown whole"
    );
    assert_eq!(read.admitted.as_deref(), Some(read.digest.as_str()));
    let over = work.path().join("over.md");
    std::fs::write(&over, vec![b'o'; MAX_SKILL_FILE_BYTES as usize + 1]).expect("over");
    let read = file_content(&over);
    assert_eq!(read.admitted.as_deref(), Some(read.digest.as_str()));
    assert!(
        read.shown.ends_with("bytes in all …]"),
        "{}",
        &read.shown[read.shown.len() - 40..]
    );
    assert_eq!(
        read.digest,
        file_content(&over).digest,
        "a long file hashes the same twice"
    );
    // Past the hashing limit: a fingerprint no later read matches.
    let huge = work.path().join("huge.bin");
    let file = std::fs::File::create(&huge).expect("huge");
    file.set_len(MAX_HASHED_FILE_BYTES + 1).expect("grow");
    assert_ne!(file_content(&huge).digest, file_content(&huge).digest);
}

#[test]
fn a_skill_folder_past_its_byte_budget_never_loads_even_once_trusted() {
    let (home, work) = project();
    let skill = work.path().join(".talaria/skills/x");
    std::fs::write(skill.join("SKILL.md"), "shown").expect("skill");
    // Sparse files: long by what they say, nothing on disk.
    for n in 0..2 {
        let file = std::fs::File::create(skill.join(format!("blob{n}"))).expect("blob");
        file.set_len(MAX_SKILL_FOLDER_BYTES / 2 + 1).expect("grow");
    }
    trust_folder(home.path(), work.path()).expect("trust");
    let a = assess(home.path(), work.path(), places());
    assert!(
        !a.loads_project_skills(),
        "a folder past the byte budget loaded"
    );
}
