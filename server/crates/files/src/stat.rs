//! What a name is, as its own entry says (never what a link leads to).

/// The kind of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Link,
    /// A pipe, socket or device.
    Other,
}

/// An entry's own status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub kind: Kind,
    pub len: u64,
    /// The permission bits (`0o7777`).
    pub mode: u32,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Stat {
    pub(crate) fn of(stat: &rustix::fs::Stat) -> Self {
        let kind = match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
            rustix::fs::FileType::RegularFile => Kind::File,
            rustix::fs::FileType::Directory => Kind::Directory,
            rustix::fs::FileType::Symlink => Kind::Link,
            _ => Kind::Other,
        };
        let nanos = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
        #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)]
        Stat {
            kind,
            len: stat.st_size.max(0) as u64,
            mode: stat.st_mode & 0o7777,
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            nlink: stat.st_nlink as u64,
            uid: stat.st_uid,
            gid: stat.st_gid,
            mtime_ns: nanos(stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            ctime_ns: nanos(stat.st_ctime as i64, stat.st_ctime_nsec as i64),
        }
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        self.kind == Kind::File
    }
}
