//! The one way against the links and names a command can plant: each test plants one where
//! Talaria is about to read, write, list or remove, and checks nothing outside was reached.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::OFlags;

use crate::{Access, FileError, Kind, Places, Replace, Root, Unguarded, is_temporary_of};

/// A workspace and a secret folder beside it.
struct Scene {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    secret: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical");
    let (ws, secret) = (base.join("ws"), base.join("secret"));
    std::fs::create_dir_all(&ws).expect("ws");
    std::fs::create_dir_all(&secret).expect("secret");
    std::fs::write(secret.join("config.toml"), "mode = \"ask\"\n").expect("config");
    std::fs::write(secret.join("authorized_keys"), "KEY\n").expect("keys");
    Scene {
        _dir: dir,
        ws,
        secret,
    }
}

/// Hides one folder, as the sandbox would.
#[derive(Debug)]
struct HidesOne(PathBuf);

impl Places for HidesOne {
    fn access(&self, path: &Path) -> Access {
        if path.starts_with(&self.0) {
            Access::Hidden
        } else {
            Access::Writable
        }
    }
}

fn root(at: &Path) -> Root {
    Root::open(at, Arc::new(Unguarded)).expect("root")
}

fn unchanged(scene: &Scene) {
    assert_eq!(
        std::fs::read_to_string(scene.secret.join("config.toml")).expect("config"),
        "mode = \"ask\"\n"
    );
    assert_eq!(
        std::fs::read_to_string(scene.secret.join("authorized_keys")).expect("keys"),
        "KEY\n"
    );
    let names: Vec<_> = std::fs::read_dir(&scene.secret)
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "nothing new beside the secrets: {names:?}");
}

#[test]
fn files_are_written_whole_read_back_and_removed_below_the_root() {
    let scene = scene();
    let root = root(&scene.ws);
    root.replace(Path::new("a/b/c.txt"), b"one\n", &Replace::default())
        .expect("written");
    assert_eq!(
        root.read(Path::new("a/b/c.txt"), 100).expect("read"),
        b"one\n"
    );
    let stat = root
        .stat(Path::new("a/b/c.txt"))
        .expect("stat")
        .expect("there");
    assert_eq!((stat.kind, stat.len, stat.mode), (Kind::File, 4, 0o644));
    std::fs::set_permissions(
        scene.ws.join("a/b/c.txt"),
        std::fs::Permissions::from_mode(0o750),
    )
    .expect("chmod");
    root.replace(Path::new("a/b/c.txt"), b"two\n", &Replace::default())
        .expect("replaced");
    let stat = root
        .stat(Path::new("a/b/c.txt"))
        .expect("stat")
        .expect("there");
    assert_eq!(stat.mode, 0o750, "a replaced file keeps its mode");
    let listed = root
        .dir(Path::new("a/b"))
        .expect("dir")
        .entries()
        .expect("list");
    assert_eq!(
        listed,
        vec![("c.txt".into(), Kind::File)],
        "no temporary left"
    );
    assert!(root.remove(Path::new("a/b/c.txt")).expect("removed"));
    assert!(!root.remove(Path::new("a/b/c.txt")).expect("gone already"));
    assert!(root.stat(Path::new("a/b/c.txt")).expect("stat").is_none());
    assert!(root.stat(Path::new("x/y/z")).expect("stat").is_none());
}

#[test]
fn a_planted_temporary_name_is_never_written_through() {
    let scene = scene();
    std::fs::write(scene.ws.join("a.txt"), "agent\n").expect("a");
    // Every name this process could pick next, and the name of earlier restores, as links
    // to the settings (a dangling one too: `O_CREAT` alone would make its target).
    let pid = std::process::id();
    for n in 0..64 {
        let planted = scene.ws.join(format!(".a.txt.talaria-tmp-{pid}-{n}"));
        let target = if n % 2 == 0 {
            scene.secret.join("config.toml")
        } else {
            scene.secret.join(format!("new-{n}.toml"))
        };
        symlink(target, planted).expect("plant");
    }
    symlink(
        scene.secret.join("config.toml"),
        scene.ws.join(".a.txt.talaria-restore"),
    )
    .expect("plant");
    let root = root(&scene.ws);
    let written = root.replace(
        Path::new("a.txt"),
        b"mode = \"yolo\"\n",
        &Replace::default(),
    );
    // Either a fresh name was found past the planted ones, or the write failed: never a
    // write through them.
    if written.is_ok() {
        assert_eq!(
            std::fs::read_to_string(scene.ws.join("a.txt")).expect("a"),
            "mode = \"yolo\"\n"
        );
    }
    unchanged(&scene);
    let swept = root
        .as_dir()
        .sweep_temporaries("a.txt".as_ref())
        .expect("swept");
    assert_eq!(
        swept, 65,
        "the planted names are swept, links removed, not followed"
    );
    unchanged(&scene);
}

#[test]
fn a_folder_swapped_for_a_link_is_not_followed_for_any_operation() {
    let scene = scene();
    let root = root(&scene.ws);
    std::fs::create_dir_all(scene.ws.join("deploy")).expect("deploy");
    std::fs::write(scene.ws.join("deploy/authorized_keys"), "agent\n").expect("file");
    // The command's swap: the folder the agent wrote into becomes a link to the secrets.
    std::fs::rename(scene.ws.join("deploy"), scene.ws.join("deploy.old")).expect("move");
    symlink(&scene.secret, scene.ws.join("deploy")).expect("link");
    let keys = Path::new("deploy/authorized_keys");
    let wrote = root.replace(keys, b"ATTACKER\n", &Replace::default());
    assert!(matches!(wrote, Err(FileError::Link(_))), "{wrote:?}");
    assert!(matches!(root.remove(keys), Err(FileError::Link(_))));
    assert!(matches!(root.read(keys, 100), Err(FileError::Link(_))));
    assert!(matches!(root.stat(keys), Err(FileError::Link(_))));
    assert!(root.dir(Path::new("deploy")).is_err());
    assert!(root.make_dirs(Path::new("deploy/x")).is_err());
    // A link higher up, relative, to a grandparent: the same.
    std::fs::create_dir_all(scene.ws.join("up")).expect("up");
    symlink("../../secret", scene.ws.join("up/down")).expect("relative link");
    assert!(
        root.replace(Path::new("up/down/config.toml"), b"x", &Replace::default())
            .is_err()
    );
    // The file itself a link: replaced as a name (the link goes), its target untouched.
    symlink(scene.secret.join("config.toml"), scene.ws.join("c.toml")).expect("link");
    assert!(matches!(
        root.read(Path::new("c.toml"), 100),
        Err(FileError::Link(_))
    ));
    root.replace(Path::new("c.toml"), b"plain\n", &Replace::default())
        .expect("the link's name replaced");
    assert!(!scene.ws.join("c.toml").is_symlink());
    assert!(root.remove(Path::new("c.toml")).expect("removed"));
    unchanged(&scene);
}

#[test]
fn paths_that_climb_out_of_the_root_are_refused() {
    let scene = scene();
    let root = root(&scene.ws);
    for path in [
        "../secret/config.toml",
        "a/../../secret/config.toml",
        "/etc/passwd",
    ] {
        let read = root.read(Path::new(path), 100);
        assert!(read.is_err(), "{path}: {read:?}");
        assert!(
            root.replace(Path::new(path), b"x", &Replace::default())
                .is_err()
        );
    }
    assert_eq!(root.relative(&scene.ws.join("a/b")), Some(Path::new("a/b")));
    assert_eq!(root.relative(&scene.ws.join("a/../b")), None);
    assert_eq!(root.relative(&scene.secret), None);
    unchanged(&scene);
}

#[test]
fn what_the_sandbox_hides_is_neither_read_written_nor_listed() {
    let scene = scene();
    let hidden = scene.ws.join("private");
    std::fs::create_dir_all(&hidden).expect("private");
    std::fs::write(hidden.join("token"), "T").expect("token");
    std::fs::write(scene.ws.join("open.txt"), "o").expect("open");
    let places: Arc<dyn Places> = Arc::new(HidesOne(hidden.clone()));
    let root = Root::open(&scene.ws, places.clone()).expect("root");
    assert!(matches!(
        root.read(Path::new("private/token"), 100),
        Err(FileError::Hidden(_))
    ));
    assert!(matches!(
        root.replace(Path::new("private/token"), b"x", &Replace::default()),
        Err(FileError::Hidden(_))
    ));
    assert!(matches!(
        root.remove(Path::new("private/token")),
        Err(FileError::Hidden(_))
    ));
    let names: Vec<_> = root
        .as_dir()
        .entries()
        .expect("list")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("open.txt")]);
    assert!(matches!(
        Root::open(&hidden, places),
        Err(FileError::Hidden(_))
    ));
    assert_eq!(
        std::fs::read_to_string(hidden.join("token")).expect("t"),
        "T"
    );
}

#[test]
fn a_pipe_in_a_files_place_is_refused_without_waiting() {
    let scene = scene();
    let made = std::process::Command::new("mkfifo")
        .arg(scene.ws.join("pipe"))
        .status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let root = root(&scene.ws);
    assert!(matches!(
        root.read(Path::new("pipe"), 100),
        Err(FileError::NotRegular(_))
    ));
}

#[test]
fn the_walk_of_old_kernels_refuses_links_as_openat2_does() {
    let scene = scene();
    std::fs::create_dir_all(scene.ws.join("real")).expect("real");
    std::fs::write(scene.ws.join("real/f"), "f").expect("f");
    symlink(&scene.secret, scene.ws.join("swapped")).expect("link");
    symlink(scene.secret.join("config.toml"), scene.ws.join("file-link")).expect("link");
    let root = root(&scene.ws);
    let fd = root.as_dir().fd();
    let open = |path: &str, flags| crate::open::walk_for_test(fd, Path::new(path), flags);
    assert!(open("real/f", OFlags::RDONLY).is_ok());
    assert_eq!(
        open("swapped/config.toml", OFlags::RDONLY).err(),
        Some(rustix::io::Errno::LOOP)
    );
    assert!(open("file-link", OFlags::RDONLY).is_err());
    assert_eq!(
        open("file-link", OFlags::PATH).err(),
        Some(rustix::io::Errno::LOOP)
    );
    assert_eq!(
        open("../secret/config.toml", OFlags::RDONLY).err(),
        Some(rustix::io::Errno::XDEV)
    );
}

#[test]
fn an_absolute_path_is_opened_with_no_link_on_the_way() {
    let scene = scene();
    symlink(&scene.secret, scene.ws.join("swapped")).expect("link");
    assert!(crate::open_resolved(&scene.secret.join("config.toml"), OFlags::RDONLY).is_ok());
    let through = crate::open_resolved(&scene.ws.join("swapped/config.toml"), OFlags::RDONLY);
    assert!(matches!(through, Err(FileError::Link(_))), "{through:?}");
    assert!(crate::open_resolved(Path::new("relative"), OFlags::RDONLY).is_err());
}

#[test]
fn temporary_names_are_told_from_the_users_own() {
    assert!(is_temporary_of(".a.txt.talaria-tmp-12-0", "a.txt"));
    assert!(is_temporary_of(".a.txt.talaria-restore", "a.txt"));
    assert!(!is_temporary_of(".a.txt.talaria-tmp-12-", "a.txt"));
    assert!(!is_temporary_of(".a.txt.talaria-tmp-12-0-1", "a.txt"));
    assert!(!is_temporary_of(".a.txt.talaria-tmp-x-0", "a.txt"));
    assert!(!is_temporary_of(".b.txt.talaria-tmp-12-0", "a.txt"));
    assert!(!is_temporary_of("a.txt.talaria-tmp-12-0", "a.txt"));
    assert!(!is_temporary_of(".a.txt.bak", "a.txt"));
}

#[test]
fn a_root_is_fixed_by_what_it_was_when_opened() {
    let scene = scene();
    let root = root(&scene.ws);
    // The workspace's name moves and another folder takes it: the root is still the first.
    let moved = scene.ws.with_file_name("ws.moved");
    std::fs::rename(&scene.ws, &moved).expect("move");
    symlink(&scene.secret, &scene.ws).expect("link in its place");
    root.replace(Path::new("new.txt"), b"n", &Replace::default())
        .expect("written");
    assert!(moved.join("new.txt").exists());
    unchanged(&scene);
}

#[test]
fn the_room_left_on_the_disk_is_measured() {
    let scene = scene();
    let (free, size) = root(&scene.ws).as_dir().room().expect("room");
    assert!(size > 0 && free <= size, "{free} of {size}");
}
