//! Reading a stopped caller's memory for the watcher: an address, or a path (a string ending
//! in a zero byte), with `process_vm_readv`, which needs no file of the caller's to be opened
//! (so a caller that made itself undumpable is read too where the watcher holds
//! `CAP_SYS_PTRACE` in the sandbox's user namespace).

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;

/// The longest path read (the kernel's `PATH_MAX`).
const PATH_MAX: usize = 4096;

/// The size of the pages a read must not cross without checking (a string may end just
/// before an unmapped page).
const PAGE: usize = 4096;

fn pid_of(pid: u32) -> Result<Pid, i32> {
    i32::try_from(pid)
        .map(Pid::from_raw)
        .map_err(|_| libc::ESRCH)
}

/// Reads `length` bytes at `address` of process `pid`.
pub(crate) fn read(pid: u32, address: u64, length: usize) -> Result<Vec<u8>, i32> {
    let mut bytes = vec![0u8; length];
    let base = usize::try_from(address).map_err(|_| libc::EFAULT)?;
    let remote = [RemoteIoVec { base, len: length }];
    let local = &mut [std::io::IoSliceMut::new(&mut bytes)];
    match process_vm_readv(pid_of(pid)?, local, &remote) {
        Ok(read) if read == length => Ok(bytes),
        Ok(_) => Err(libc::EFAULT),
        Err(errno) => Err(errno as i32),
    }
}

/// Reads the string ending in a zero byte at `address` (at most `PATH_MAX` bytes), a page at
/// a time.
pub(crate) fn read_path(pid: u32, address: u64) -> Result<Vec<u8>, i32> {
    let mut out = Vec::new();
    let mut at = usize::try_from(address).map_err(|_| libc::EFAULT)?;
    while out.len() < PATH_MAX {
        let to_page_end = PAGE - at % PAGE;
        let chunk = read(pid, at as u64, to_page_end.min(PATH_MAX - out.len()))?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk);
        at = at.checked_add(chunk.len()).ok_or(libc::EFAULT)?;
    }
    Err(libc::ENAMETOOLONG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_read_across_a_page_boundary_and_up_to_its_end() {
        // A string that starts a few bytes before a page boundary of this process.
        let mut buffer = vec![b'x'; 3 * PAGE];
        let start = buffer.as_ptr() as usize;
        let offset = PAGE - start % PAGE + PAGE - 5;
        let text = b"/some/longer/path/than/five";
        buffer[offset..offset + text.len()].copy_from_slice(text);
        buffer[offset + text.len()] = 0;
        let address = (start + offset) as u64;
        let read = read_path(std::process::id(), address).expect("read");
        assert_eq!(read, text);
        assert_eq!(read_path(std::process::id(), 0), Err(libc::EFAULT));
    }
}
