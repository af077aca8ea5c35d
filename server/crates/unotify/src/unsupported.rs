//! Where the gate is not built: the same API, every call answering `Unsupported`.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use crate::Notice;

/// The listening end of the filter (never installed here).
#[derive(Debug)]
pub struct Listener(());

fn unsupported<T>() -> io::Result<T> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no connect gate on this system or architecture",
    ))
}

impl Listener {
    pub fn install_for_connect() -> io::Result<Listener> {
        unsupported()
    }

    pub fn receive(&self) -> io::Result<Notice> {
        unsupported()
    }

    pub fn still_waiting(&self, _id: u64) -> bool {
        false
    }

    pub fn respond(&self, _id: u64, _result: Result<(), i32>) {}
}

pub fn connect_bytes(_socket: BorrowedFd<'_>, _bytes: &[u8]) -> io::Result<()> {
    unsupported()
}

pub fn connect_unix_path(_socket: BorrowedFd<'_>, _path: &Path) -> io::Result<()> {
    unsupported()
}
