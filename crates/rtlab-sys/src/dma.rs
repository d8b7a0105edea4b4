//! Holding `/dev/cpu_dma_latency` at 0 so CPUs stay out of deep C-states during a run.

use crate::SysError;
use std::fs::{File, OpenOptions};
use std::io::Write;

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
        Ok(DmaLatencyGuard { _file: file })
    }
}
