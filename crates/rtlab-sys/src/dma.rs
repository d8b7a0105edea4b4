//! Holding `/dev/cpu_dma_latency` at 0 so CPUs stay out of deep C-states during a run.

use crate::SysError;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// The descriptor of the request this process holds (-1: none), for a forked child to close
/// its copy: a child that outlived rtlab would otherwise keep deep C-states off system-wide.
static HELD_FD: AtomicI32 = AtomicI32::new(-1);

/// The held request's descriptor (-1 if none): what [`crate::process::fork_peer`] closes in
/// the child. Relaxed: read by the forking thread after the guard was made on any thread
/// that happened-before the fork (the experiment starts after the harness made it).
pub(crate) fn held_fd() -> i32 {
    HELD_FD.load(Ordering::Relaxed)
}

const PATH: &str = "/dev/cpu_dma_latency";

/// While this value lives, the PM QoS request "0 us exit latency" is held; dropping it closes
/// the file, which releases the request (the kernel's documented protocol, as cyclictest uses).
#[derive(Debug)]
pub struct DmaLatencyGuard {
    _file: File,
}

impl DmaLatencyGuard {
    /// C: `fd = open("/dev/cpu_dma_latency", O_WRONLY); write(fd, &(int32_t){0}, 4)`.
    /// Needs root (the device is 0600).
    pub fn hold_zero() -> Result<Self, SysError> {
        let mut file = OpenOptions::new()
            .write(true)
            .open(PATH)
            .map_err(|e| SysError::from_io(format!("open({PATH})"), e))?;
        file.write_all(&0i32.to_ne_bytes())
            .map_err(|e| SysError::from_io(format!("write({PATH}, 0)"), e))?;
        HELD_FD.store(file.as_raw_fd(), Ordering::Relaxed);
        Ok(DmaLatencyGuard { _file: file })
    }
}

impl Drop for DmaLatencyGuard {
    fn drop(&mut self) {
        HELD_FD.store(-1, Ordering::Relaxed);
    }
}
