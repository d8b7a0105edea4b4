//! `perf_event_open(2)`, as much as a uprobe needs: a probe at an offset of an ELF file (a
//! USDT probe site of a shared library), on one CPU for every process that maps the file,
//! running a BPF program at each hit.
//!
//! C: `syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)` with
//! `attr.type` from `/sys/bus/event_source/devices/uprobe/type`, `config1` the path and
//! `config2` the offset; then `ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog_fd)` and
//! `PERF_EVENT_IOC_ENABLE`.

use crate::SysError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `_IO('$', 0)` and `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
/// `PERF_ATTR_SIZE_VER5`: through `config2` and the fields after it this module leaves 0.
const ATTR_SIZE: usize = 112;
/// `attr.flags` bit: created disabled.
const DISABLED: u64 = 1;

/// The uprobe PMU's type, where the kernel has it.
pub fn uprobe_type() -> Result<u32, SysError> {
    let path = "/sys/bus/event_source/devices/uprobe/type";
    let text = std::fs::read_to_string(path).map_err(|e| SysError::from_io(path, e))?;
    text.trim().parse().map_err(|_| SysError::Invalid {
        what: format!("{path}: {text:?}"),
    })
}

/// A disabled uprobe at byte `offset` of `path` (the file offset of the probed
/// instruction): in process `pid` only (its threads, on any CPU; the probe is placed in no
/// other process's memory), or with None in every process, counted on `cpu`. Either way a
/// BPF program attached to it runs at every hit it takes, on any CPU. With `ret`, a return
/// probe: `offset` is a function's entry, and the program runs where the function returns
/// (its registers then: the value returned in `%rax`).
#[allow(unsafe_code)]
pub fn uprobe(
    path: &Path,
    offset: u64,
    pid: Option<i32>,
    cpu: usize,
    ret: bool,
) -> Result<OwnedFd, SysError> {
    let pmu = uprobe_type()?;
    let c_path =
        CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| SysError::Invalid {
            what: format!("{}: a NUL in the path", path.display()),
        })?;
    let mut attr = [0u64; ATTR_SIZE / 8];
    attr[0] = pmu as u64 | ((ATTR_SIZE as u64) << 32);
    attr[1] = ret as u64; // config: bit 0 a return probe (the PMU's `retprobe` format); no reference counter
    attr[2] = 1; // sample_period
    attr[5] = DISABLED;
    attr[7] = c_path.as_ptr() as u64; // config1: uprobe_path
    attr[8] = offset; // config2: probe_offset
                      // SAFETY: attr is a valid perf_event_attr of ATTR_SIZE bytes, the path outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            pid.unwrap_or(-1) as libc::pid_t,
            if pid.is_some() {
                -1
            } else {
                cpu as libc::c_int
            },
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(SysError::from_io(
            "perf_event_open(uprobe)",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Runs the BPF program `prog_fd` (a kprobe program) at each hit of perf event `event`, and
/// enables the event; the program stays attached until the event is closed.
#[allow(unsafe_code)]
pub fn attach_bpf(event: &OwnedFd, prog_fd: i32) -> Result<(), SysError> {
    // SAFETY: ioctls on a perf event descriptor we own, with an integer argument.
    let r = unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF as _, prog_fd) };
    if r < 0 {
        return Err(SysError::from_io(
            "ioctl(PERF_EVENT_IOC_SET_BPF)",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: as above.
    let r = unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) };
    if r < 0 {
        return Err(SysError::from_io(
            "ioctl(PERF_EVENT_IOC_ENABLE)",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Reads `len` bytes at `addr` in process (or thread) `pid`'s memory.
#[allow(unsafe_code)]
pub fn read_process_memory(pid: i32, addr: u64, len: usize) -> Result<Vec<u8>, SysError> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: one local iovec over our own buffer; the remote one is only read by the kernel.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(SysError::from_io(
            "process_vm_readv",
            std::io::Error::last_os_error(),
        ));
    }
    buf.truncate(n as usize);
    Ok(buf)
}
