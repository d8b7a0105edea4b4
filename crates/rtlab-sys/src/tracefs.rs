//! Mounting tracefs where it is not mounted yet (root only).

use crate::error::SysError;
use std::ffi::CString;

/// Where rtlab mounts tracefs.
pub const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// C: `mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL)`.
pub fn mount() -> Result<(), SysError> {
    let (src, dst, fs) = (
        CString::new("nodev").expect("no NUL"),
        CString::new(MOUNT_POINT).expect("no NUL"),
        CString::new("tracefs").expect("no NUL"),
    );
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("mount(tracefs, {MOUNT_POINT})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// C: `umount2("/sys/kernel/tracing", MNT_DETACH)`.
pub fn unmount() -> Result<(), SysError> {
    let dst = CString::new(MOUNT_POINT).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("umount({MOUNT_POINT})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
