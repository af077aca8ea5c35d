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
    assert!(
        size > 1 << 20 && free > 0 && free <= size,
        "{free} of {size}"
    );
}

fn closed_on_exec(fd: impl std::os::fd::AsFd) -> bool {
    rustix::io::fcntl_getfd(fd).is_ok_and(|f| f.contains(rustix::io::FdFlags::CLOEXEC))
}

fn status_flags(fd: impl std::os::fd::AsFd) -> OFlags {
    rustix::fs::fcntl_getfl(fd).expect("flags")
}

#[test]
fn every_descriptor_is_closed_on_exec_and_opened_as_asked() {
    let scene = scene();
    std::fs::write(scene.ws.join("f"), "f").expect("f");
    let root = root(&scene.ws);
    let held = root.as_dir().fd();
    assert!(closed_on_exec(held));
    assert!(status_flags(held).contains(OFlags::PATH));
    let system = Root::system(Arc::new(Unguarded)).expect("system");
    assert!(closed_on_exec(system.as_dir().fd()));
    assert!(status_flags(system.as_dir().fd()).contains(OFlags::PATH));
    let (read, _) = root.open_read(Path::new("f")).expect("read");
    assert!(closed_on_exec(&read));
    assert!(status_flags(&read).contains(OFlags::NONBLOCK));
    let (read, _) = root.as_dir().open_read("f".as_ref()).expect("read");
    assert!(closed_on_exec(&read));
    assert!(status_flags(&read).contains(OFlags::NONBLOCK));
    let appending = root.as_dir().open_append("log".as_ref()).expect("append");
    assert!(closed_on_exec(&appending));
    assert!(status_flags(&appending).contains(OFlags::APPEND | OFlags::RDWR));
    let lock = root.as_dir().open_lock(".lock".as_ref()).expect("lock");
    assert!(closed_on_exec(&lock));
    assert!(status_flags(&lock).contains(OFlags::RDWR));
    let walked = crate::open::walk_for_test(held, Path::new("f"), OFlags::RDONLY).expect("walk");
    assert!(closed_on_exec(&walked));
}

#[test]
fn each_name_is_one_plain_name() {
    let scene = scene();
    let root = root(&scene.ws);
    let dir = root.as_dir();
    for bad in ["", ".", "..", "a/b"] {
        assert!(dir.stat(bad.as_ref()).is_err(), "{bad:?}");
        assert!(
            dir.replace(bad.as_ref(), b"x", &Replace::default())
                .is_err(),
            "{bad:?}"
        );
        assert!(dir.remove(bad.as_ref()).is_err(), "{bad:?}");
    }
    assert!(dir.stat("fine".as_ref()).expect("plain").is_none());
    unchanged(&scene);
}

#[test]
fn a_hidden_file_in_a_visible_folder_is_refused_by_every_operation() {
    let scene = scene();
    let secret = scene.ws.join("secret.txt");
    std::fs::write(&secret, "S").expect("secret");
    std::fs::write(scene.ws.join("open.txt"), "o").expect("open");
    let root = Root::open(&scene.ws, Arc::new(HidesOne(secret.clone()))).expect("root");
    let dir = root.as_dir();
    let name: &std::ffi::OsStr = "secret.txt".as_ref();
    let hidden = |r: Result<(), FileError>| matches!(r, Err(FileError::Hidden(_)));
    assert!(hidden(dir.stat(name).map(|_| ())));
    assert!(hidden(dir.open_read(name).map(|_| ())));
    assert!(hidden(dir.read(name, 10).map(|_| ())));
    assert!(hidden(dir.remove(name).map(|_| ())));
    assert!(hidden(dir.append(name, b"x")));
    assert!(hidden(dir.open_append(name).map(|_| ())));
    assert!(hidden(dir.open_lock(name).map(|_| ())));
    assert!(hidden(dir.replace(name, b"x", &Replace::default())));
    assert!(hidden(dir.make_dir(name).map(|_| ())));
    assert!(hidden(root.open_read(Path::new("secret.txt")).map(|_| ())));
    assert!(root.open_read(Path::new("open.txt")).is_ok());
    let names: Vec<_> = dir
        .entries()
        .expect("list")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("open.txt")]);
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), "S");
}

#[test]
fn errors_name_the_path_as_the_caller_named_it() {
    let scene = scene();
    let root = root(&scene.ws);
    let missing = root.as_dir().read("missing".as_ref(), 10);
    assert!(
        matches!(&missing, Err(FileError::NotFound(p)) if *p == scene.ws.join("missing")),
        "{missing:?}"
    );
    let nowhere = scene.ws.join("nowhere");
    assert!(matches!(
        Root::open(&nowhere, Arc::new(Unguarded)),
        Err(FileError::NotFound(p)) if p == nowhere
    ));
    let deep = scene.ws.join("a/b/c");
    let made = Root::open_making(&deep, Arc::new(Unguarded)).expect("made");
    assert_eq!(made.shown(), deep);
    assert!(deep.is_dir());
    made.as_dir()
        .replace("f".as_ref(), b"in c", &Replace::default())
        .expect("written");
    assert_eq!(std::fs::read(deep.join("f")).expect("f"), b"in c");
    assert_eq!(
        Root::open_making(&deep, Arc::new(Unguarded))
            .expect("again")
            .shown(),
        deep
    );
}

#[test]
fn reads_are_bounded_exactly() {
    let scene = scene();
    std::fs::write(scene.ws.join("four"), "1234").expect("four");
    let root = root(&scene.ws);
    assert_eq!(
        root.read(Path::new("four"), 4).expect("at the bound"),
        b"1234"
    );
    assert!(matches!(
        root.read(Path::new("four"), 3),
        Err(FileError::TooLarge { limit: 3, .. })
    ));
}

#[test]
fn folders_files_links_and_pipes_are_told_apart() {
    let scene = scene();
    std::fs::create_dir_all(scene.ws.join("sub/inner")).expect("sub");
    std::fs::write(scene.ws.join("sub/inner/f"), "f").expect("f");
    std::fs::write(scene.ws.join("file"), "f").expect("file");
    symlink(&scene.secret, scene.ws.join("link")).expect("link");
    symlink(&scene.secret, scene.ws.join("sub/out")).expect("link");
    let made = std::process::Command::new("mkfifo")
        .arg(scene.ws.join("pipe"))
        .status();
    assert!(made.is_ok_and(|s| s.success()));
    let root = root(&scene.ws);
    let dir = root.as_dir();
    let mut listed = dir.entries().expect("list");
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        listed,
        vec![
            ("file".into(), Kind::File),
            ("link".into(), Kind::Link),
            ("pipe".into(), Kind::Other),
            ("sub".into(), Kind::Directory),
        ]
    );
    let stat = |n: &str| dir.stat(n.as_ref()).expect("stat").expect("there");
    assert_eq!(stat("sub").kind, Kind::Directory);
    assert!(!stat("sub").is_file() && !stat("link").is_file() && stat("file").is_file());
    assert_eq!(stat("link").kind, Kind::Link);
    assert!(matches!(
        root.open_read(Path::new("sub")),
        Err(FileError::IsDirectory(_))
    ));
    assert!(matches!(
        dir.open_read("sub".as_ref()),
        Err(FileError::IsDirectory(_))
    ));
    // A folder is removed only as a tree, each entry by its name: the link inside goes, what
    // it leads to stays.
    assert!(matches!(
        dir.remove("sub".as_ref()),
        Err(FileError::IsDirectory(_))
    ));
    dir.remove_tree("sub".as_ref()).expect("removed");
    assert!(!scene.ws.join("sub").exists());
    assert!(
        dir.remove_tree("file".as_ref()).is_err(),
        "a file is no tree"
    );
    unchanged(&scene);
}

#[test]
fn times_are_told_in_nanoseconds() {
    use std::os::unix::fs::MetadataExt;
    let scene = scene();
    std::fs::write(scene.ws.join("f"), "f").expect("f");
    let meta = std::fs::metadata(scene.ws.join("f")).expect("meta");
    let stat = root(&scene.ws)
        .stat(Path::new("f"))
        .expect("stat")
        .expect("there");
    let nanos = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    assert_eq!(stat.mtime_ns, nanos(meta.mtime(), meta.mtime_nsec()));
    assert_eq!(stat.ctime_ns, nanos(meta.ctime(), meta.ctime_nsec()));
    assert_eq!(
        (stat.ino, stat.dev, stat.nlink),
        (meta.ino(), meta.dev(), 1)
    );
}

#[test]
fn appends_go_at_the_end_and_never_through_a_link() {
    let scene = scene();
    let root = root(&scene.ws);
    let dir = root.as_dir();
    dir.append("log".as_ref(), b"one\n").expect("append");
    dir.append("log".as_ref(), b"two\n").expect("append");
    assert_eq!(
        std::fs::read_to_string(scene.ws.join("log")).expect("log"),
        "one\ntwo\n"
    );
    {
        use std::io::{Read as _, Write as _};
        let mut file = dir.open_append("log".as_ref()).expect("open");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("read");
        assert_eq!(text, "one\ntwo\n");
        file.write_all(b"three\n").expect("write");
    }
    assert_eq!(
        std::fs::read_to_string(scene.ws.join("log")).expect("log"),
        "one\ntwo\nthree\n"
    );
    symlink(scene.secret.join("config.toml"), scene.ws.join("planted")).expect("link");
    assert!(dir.append("planted".as_ref(), b"x").is_err());
    assert!(dir.open_append("planted".as_ref()).is_err());
    assert!(dir.open_lock("planted".as_ref()).is_err());
    unchanged(&scene);
}

#[test]
fn names_ahead_of_the_counter_planted_as_links_are_never_written_through() {
    let scene = scene();
    std::fs::write(scene.ws.join("a.txt"), "agent\n").expect("a");
    let pid = std::process::id();
    let next = crate::temporary::next_number();
    for n in next..next + 4000 {
        let planted = scene.ws.join(format!(".a.txt.talaria-tmp-{pid}-{n}"));
        let target = if n % 2 == 0 {
            scene.secret.join("config.toml")
        } else {
            scene.secret.join(format!("new-{n}"))
        };
        symlink(target, planted).expect("plant");
    }
    let root = root(&scene.ws);
    let written = root.replace(Path::new("a.txt"), b"planted\n", &Replace::default());
    assert!(
        written.is_err(),
        "every name it tried was taken: {written:?}"
    );
    unchanged(&scene);
    assert_eq!(
        std::fs::read_to_string(scene.ws.join("a.txt")).expect("a"),
        "agent\n"
    );
}

#[test]
fn temporary_names_carry_the_file_the_process_and_a_count() {
    let first = crate::temporary::temporary_name("a.txt");
    let second = crate::temporary::temporary_name("a.txt");
    assert_ne!(first, second);
    let prefix = format!(".a.txt.talaria-tmp-{}-", std::process::id());
    assert!(first.starts_with(&prefix), "{first}");
    assert!(is_temporary_of(&first, "a.txt") && is_temporary_of(&second, "a.txt"));
}

#[test]
fn a_replaced_file_keeps_its_owner() {
    use std::os::unix::fs::MetadataExt;
    let scene = scene();
    let file = scene.ws.join("owned");
    std::fs::write(&file, "x").expect("file");
    let root_user = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root_user {
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).expect("chown");
    }
    let before = std::fs::metadata(&file).expect("meta");
    root(&scene.ws)
        .replace(Path::new("owned"), b"y", &Replace::default())
        .expect("replaced");
    let after = std::fs::metadata(&file).expect("meta");
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_ne!(after.ino(), before.ino(), "a new file took the name");
}

#[test]
fn the_walk_tells_a_file_on_the_way_from_a_link() {
    let scene = scene();
    std::fs::write(scene.ws.join("plain"), "p").expect("plain");
    let root = root(&scene.ws);
    let fd = root.as_dir().fd();
    assert_eq!(
        crate::open::walk_for_test(fd, Path::new("plain/x"), OFlags::RDONLY).err(),
        Some(rustix::io::Errno::NOTDIR)
    );
}

#[test]
fn the_open_flags_say_what_each_open_is_for() {
    use crate::open::{FOLDER_STEP, SYSTEM_ROOT, with_defaults};
    use crate::root::{APPENDING, LISTING, LOCKING, READ_APPENDING, READING, TEMPORARY};
    let private = OFlags::CLOEXEC | OFlags::NOCTTY;
    assert!(READING.contains(OFlags::NONBLOCK | OFlags::NOFOLLOW | private));
    assert!(!READING.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::CREATE));
    assert!(
        TEMPORARY
            .contains(OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | private)
    );
    assert!(
        APPENDING.contains(
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | private
        )
    );
    assert!(
        READ_APPENDING
            .contains(OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | private)
    );
    assert!(LOCKING.contains(OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC));
    assert!(LISTING.contains(OFlags::DIRECTORY | OFlags::CLOEXEC));
    assert!(
        FOLDER_STEP.contains(OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC)
    );
    assert!(SYSTEM_ROOT.contains(OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC));
    assert_eq!(with_defaults(OFlags::PATH), OFlags::PATH | OFlags::CLOEXEC);
    assert_eq!(with_defaults(OFlags::RDONLY), private);
}

/// Hides one folder and knows its files by device and inode, as the sandbox's places do.
#[derive(Debug)]
struct HidesOneByInode(PathBuf);

impl Places for HidesOneByInode {
    fn access(&self, path: &Path) -> Access {
        HidesOne(self.0.clone()).access(path)
    }

    fn is_hidden_file(&self, file: &crate::Stat) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(&self.0)
            .expect("list")
            .flatten()
            .any(|entry| {
                let meta = entry.metadata().expect("meta");
                (meta.dev(), meta.ino()) == (file.dev, file.ino)
            })
    }
}

#[test]
fn a_second_name_of_a_hidden_file_is_refused_wherever_it_is() {
    let scene = scene();
    std::fs::create_dir_all(scene.ws.join("deep/er")).expect("mkdir");
    std::fs::hard_link(
        scene.secret.join("authorized_keys"),
        scene.ws.join("deep/er/keys"),
    )
    .expect("link");
    std::fs::write(scene.ws.join("plain"), "plain\n").expect("plain");
    std::fs::hard_link(scene.ws.join("plain"), scene.ws.join("plain2")).expect("link");
    let root =
        Root::open(&scene.ws, Arc::new(HidesOneByInode(scene.secret.clone()))).expect("root");
    assert!(matches!(
        root.read(Path::new("deep/er/keys"), 100),
        Err(FileError::Hidden(_))
    ));
    assert!(matches!(
        root.open_read(Path::new("deep/er/keys")),
        Err(FileError::Hidden(_))
    ));
    // A second name of the user's own file is read.
    assert_eq!(
        root.read(Path::new("plain2"), 100).expect("read"),
        b"plain\n"
    );
    // Without a sandbox nothing is hidden, by name or by inode.
    assert_eq!(
        self::root(&scene.ws)
            .read(Path::new("deep/er/keys"), 100)
            .expect("read"),
        b"KEY\n"
    );
}

#[test]
fn other_processes_entries_in_the_process_table_are_hidden() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .env("TALARIA_TEST_SECRET", "s3cret")
        .spawn()
        .expect("sleep");
    let pid = child.id().to_string();
    let system = Root::system(Arc::new(Unguarded)).expect("root");
    for entry in ["environ", "cmdline", "maps", "mem", "status"] {
        let path = PathBuf::from(format!("proc/{pid}/{entry}"));
        assert!(
            matches!(system.read(&path, 1 << 20), Err(FileError::Hidden(_))),
            "{entry}"
        );
        assert!(matches!(system.open_read(&path), Err(FileError::Hidden(_))));
    }
    assert!(matches!(
        Root::open(&PathBuf::from(format!("/proc/{pid}")), Arc::new(Unguarded)),
        Err(FileError::Hidden(_))
    ));
    // The machine's own files are read; the table lists only them.
    assert!(
        !system
            .read(Path::new("proc/cpuinfo"), 1 << 20)
            .expect("cpuinfo")
            .is_empty()
    );
    let table = Root::open(Path::new("/proc"), Arc::new(Unguarded)).expect("table");
    let names: Vec<_> = table.as_dir().entries().expect("list");
    assert!(!names.is_empty());
    assert!(
        names
            .iter()
            .all(|(name, _)| crate::MACHINE_FILES.iter().any(|m| name == *m)),
        "{names:?}"
    );
    assert!(matches!(
        table.as_dir().read("self".as_ref(), 100),
        Err(FileError::Hidden(_))
    ));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_process_table_is_told_by_what_it_is_at_any_path() {
    assert!(crate::in_process_table(Path::new("/proc/1/environ")));
    assert!(crate::in_process_table(Path::new("/proc/self")));
    assert!(crate::in_process_table(Path::new(
        "/proc/sys/kernel/hostname"
    )));
    assert!(!crate::in_process_table(Path::new("/proc")));
    assert!(!crate::in_process_table(Path::new("/proc/cpuinfo")));
    assert!(!crate::in_process_table(Path::new("/procs/1/environ")));
    // The table reached through a bind of `/`: the file system says what it is.
    let Ok(fd) = crate::open_resolved(Path::new("/proc/cpuinfo"), OFlags::RDONLY) else {
        return;
    };
    let file = std::fs::File::from(fd);
    let stat = crate::Stat::of(&rustix::fs::fstat(&file).expect("stat"));
    assert!(
        super::root::judge_opened_for_test(&Unguarded, &file, &stat, Path::new("/x/cpuinfo"))
            .is_err()
    );
    assert!(
        super::root::judge_opened_for_test(&Unguarded, &file, &stat, Path::new("/proc/cpuinfo"))
            .is_ok()
    );
    // A file of the table's top that is not one of the machine's own is refused there too.
    assert!(
        super::root::judge_opened_for_test(&Unguarded, &file, &stat, Path::new("/proc/kcore"))
            .is_err()
    );
}
