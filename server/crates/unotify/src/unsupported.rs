//! Where the watcher is not built: the same API, every call answering `Unsupported`.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use crate::{Call, IpcKind, Notice, Watch};

/// Nothing is ever stopped here.
pub(crate) fn classify(_nr: i32, _args: &[u64; 6]) -> Call {
    Call::Other
}

/// The listening end of the filter (never installed here).
#[derive(Debug)]
pub struct Listener(());

fn unsupported<T>() -> io::Result<T> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no seccomp watcher on this system or architecture",
    ))
}

impl Listener {
    pub fn install(_watch: &Watch) -> io::Result<Listener> {
        unsupported()
    }

    pub fn receive(&self) -> io::Result<Notice> {
        unsupported()
    }

    pub fn still_waiting(&self, _id: u64) -> bool {
        false
    }

    pub fn respond(&self, _id: u64, _result: Result<(), i32>) {}

    pub fn let_continue(&self, _id: u64) {}

    pub fn respond_value(&self, _id: u64, _value: i64) {}
}

pub fn sysv_get(_kind: IpcKind, _key: i32, _size: u64, _flags: i32) -> io::Result<i32> {
    unsupported()
}

pub fn opens_to_write(_flags: u64) -> bool {
    false
}

pub fn claim_inherited(_fd: i32) -> io::Result<std::os::fd::OwnedFd> {
    unsupported()
}

pub fn connect_bytes(_socket: BorrowedFd<'_>, _bytes: &[u8]) -> io::Result<()> {
    unsupported()
}

pub fn connect_unix_path(_socket: BorrowedFd<'_>, _path: &Path) -> io::Result<()> {
    unsupported()
}
