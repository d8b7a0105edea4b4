//! rtlab's primitives behind a C ABI: `librtlab.so` / `librtlab.a` with `include/rtlab.h`.
//!
//! Objects live in the caller's memory (also in shared memory): the header gives each one's
//! size and alignment, and `rtlab_*_init` writes a fresh one in place. Every function returns
//! 0 or a positive errno-style code (`RTLAB_E*`), checks each pointer for null and alignment,
//! and catches any panic (`RTLAB_EINTERNAL`) so none crosses into C. The contract of each
//! function (what the caller must keep alive, who may call it) is in the header, which a test
//! checks against the declarations here.
#![allow(unsafe_code)]
// The safety contract of every function is the header's: C callers read that, not rustdoc.
#![allow(clippy::missing_safety_doc)]

use rtlab_ipc::{ChannelOptions, IpcError, Receiver, Sender, ShmChannel};
use rtlab_sync::{LockError, Parker, PiCondvar, RawPiMutex, RobustError, RobustMutex};
use rtlab_sys::futex::current_tid;
use rtlab_sys::SysError;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

/// Invalid argument: a null or misaligned pointer, a bad value.
pub const RTLAB_EINVAL: c_int = libc::EINVAL;
/// The lock is held by another thread (trylock); a channel end is held by a live process.
pub const RTLAB_EBUSY: c_int = libc::EBUSY;
/// The previous owner of a robust mutex died holding it: the caller holds it now.
pub const RTLAB_EOWNERDEAD: c_int = libc::EOWNERDEAD;
/// A robust mutex was unlocked without being made consistent after an owner died.
pub const RTLAB_ENOTRECOVERABLE: c_int = libc::ENOTRECOVERABLE;
/// The deadline passed.
pub const RTLAB_ETIMEDOUT: c_int = libc::ETIMEDOUT;
/// The process at the other end of a channel died.
pub const RTLAB_EPEERDIED: c_int = libc::EPIPE;
/// The shared memory holds something this side cannot trust.
pub const RTLAB_ECORRUPT: c_int = libc::EBADMSG;
/// The calling thread already holds the lock.
pub const RTLAB_EDEADLK: c_int = libc::EDEADLK;
/// The calling thread does not hold the lock it unlocks; or no privilege.
pub const RTLAB_EPERM: c_int = libc::EPERM;
/// A message longer than the channel's maximum.
pub const RTLAB_EMSGSIZE: c_int = libc::EMSGSIZE;
/// A receive buffer smaller than the message (which stays; `*len` says how long it is).
pub const RTLAB_ENOBUFS: c_int = libc::ENOBUFS;
/// No channel of that name.
pub const RTLAB_ENOENT: c_int = libc::ENOENT;
/// The kernel lacks what the call needs.
pub const RTLAB_ENOTSUP: c_int = libc::ENOTSUP;
/// A text did not fit the caller's buffer.
pub const RTLAB_ERANGE: c_int = libc::ERANGE;
/// Any other failure of the system (creating shared memory, ...).
pub const RTLAB_EIO: c_int = libc::EIO;
/// A bug in rtlab (a panic, caught at the boundary).
pub const RTLAB_EINTERNAL: c_int = 4096;
/// A deadline that never comes.
pub const RTLAB_FOREVER: u64 = u64::MAX;

/// `rtlab_pi_mutex_t`.
pub type PiMutexC = RawPiMutex;
/// `rtlab_robust_mutex_t`.
pub type RobustMutexC = RobustMutex;
/// `rtlab_parker_t`.
pub type ParkerC = Parker;

/// `rtlab_pi_cond_t`: the condition variable and where its mutex is, as an offset from it
/// (C's signal names no mutex, and a requeue needs one; an offset is the same in every process
/// that maps the segment holding both).
#[repr(C, align(8))]
#[derive(Debug)]
pub struct PiCondC {
    cv: PiCondvar,
    mutex_offset: AtomicI64,
}

pub const RTLAB_PI_MUTEX_SIZE: usize = std::mem::size_of::<PiMutexC>();
pub const RTLAB_PI_MUTEX_ALIGN: usize = std::mem::align_of::<PiMutexC>();
pub const RTLAB_ROBUST_MUTEX_SIZE: usize = std::mem::size_of::<RobustMutexC>();
pub const RTLAB_ROBUST_MUTEX_ALIGN: usize = std::mem::align_of::<RobustMutexC>();
pub const RTLAB_PI_COND_SIZE: usize = std::mem::size_of::<PiCondC>();
pub const RTLAB_PI_COND_ALIGN: usize = std::mem::align_of::<PiCondC>();
pub const RTLAB_PARKER_SIZE: usize = std::mem::size_of::<ParkerC>();
pub const RTLAB_PARKER_ALIGN: usize = std::mem::align_of::<ParkerC>();

/// `rtlab_channel_t`: a channel and this process's ends of it, made on first use.
#[derive(Debug)]
pub struct Channel {
    ch: &'static ShmChannel,
    sender: OnceLock<Sender<'static>>,
    receiver: OnceLock<Receiver<'static>>,
}

/// Runs `f`, mapping its error and any panic to a code.
fn call(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => code,
        Err(_) => RTLAB_EINTERNAL,
    }
}

/// `p` as a reference, if it is not null and is aligned for `T`.
///
/// # Safety
/// A non-null, aligned `p` must point to a live `T` for `'a`.
unsafe fn at<'a, T>(p: *const T) -> Result<&'a T, c_int> {
    if p.is_null() || !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(RTLAB_EINVAL);
    }
    // SAFETY: non-null and aligned; the caller promises a live T.
    Ok(unsafe { &*p })
}

/// Writes `value` at `p` (checked as in [`at`]).
///
/// # Safety
/// A non-null, aligned `p` must point to writable memory for a `T`.
unsafe fn init<T>(p: *mut T, value: T) -> Result<(), c_int> {
    if p.is_null() || !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(RTLAB_EINVAL);
    }
    // SAFETY: non-null, aligned, writable (the caller's promise); nothing to drop there.
    unsafe { p.write(value) };
    Ok(())
}

fn deadline(ns: u64) -> Option<u64> {
    (ns != RTLAB_FOREVER).then_some(ns)
}

fn lock_code(e: LockError) -> c_int {
    match e {
        LockError::Deadlock => RTLAB_EDEADLK,
        LockError::TimedOut => RTLAB_ETIMEDOUT,
        LockError::WouldBlock => RTLAB_EBUSY,
        LockError::NotOwner | LockError::PermissionDenied => RTLAB_EPERM,
        LockError::Os(errno) if errno > 0 => errno,
        _ => RTLAB_EINVAL,
    }
}

fn ipc_code(e: IpcError) -> c_int {
    match e {
        IpcError::TimedOut => RTLAB_ETIMEDOUT,
        IpcError::PeerDied => RTLAB_EPEERDIED,
        IpcError::Corrupt(_) => RTLAB_ECORRUPT,
        IpcError::TooLarge { .. } => RTLAB_EMSGSIZE,
        IpcError::BufferTooSmall { .. } => RTLAB_ENOBUFS,
        IpcError::Busy(_) => RTLAB_EBUSY,
        _ => RTLAB_EIO,
    }
}

fn sys_code(e: SysError) -> c_int {
    match e {
        SysError::PermissionDenied { .. } => RTLAB_EPERM,
        SysError::Invalid { .. } => RTLAB_EINVAL,
        SysError::Io { source, .. } => source.raw_os_error().unwrap_or(RTLAB_EIO),
        _ => RTLAB_EIO,
    }
}

// ---------------------------------------------------------------------------------------
// Time and threads.

#[no_mangle]
pub extern "C" fn rtlab_now_ns() -> u64 {
    rtlab_sys::time::monotonic_now_ns()
}

#[no_mangle]
pub extern "C" fn rtlab_gettid() -> i64 {
    current_tid() as i64
}

#[no_mangle]
pub extern "C" fn rtlab_thread_set_fifo(prio: c_int) -> c_int {
    call(|| {
        let prio = u32::try_from(prio).map_err(|_| RTLAB_EINVAL)?;
        rtlab_sys::sched::set_current_thread_scheduler(rtlab_sys::sched::Policy::Fifo, prio)
            .map_err(sys_code)
    })
}

/// `policy` as Linux numbers it (0 `SCHED_OTHER`, 1 `SCHED_FIFO`, 2 `SCHED_RR`) at `prio`
/// (1-99 for FIFO and RR, 0 for OTHER).
#[no_mangle]
pub extern "C" fn rtlab_thread_set_scheduler(policy: c_int, prio: c_int) -> c_int {
    use rtlab_sys::sched::Policy;
    call(|| {
        let policy = match policy {
            0 => Policy::Other,
            1 => Policy::Fifo,
            2 => Policy::Rr,
            _ => return Err(RTLAB_EINVAL),
        };
        let prio = u32::try_from(prio).map_err(|_| RTLAB_EINVAL)?;
        let (low, high) = policy.priority_range();
        if !(low..=high).contains(&prio) {
            return Err(RTLAB_EINVAL);
        }
        rtlab_sys::sched::set_current_thread_scheduler(policy, prio).map_err(sys_code)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_thread_set_affinity(cpus: *const c_int, n: usize) -> c_int {
    call(|| {
        if n == 0 || cpus.is_null() || !(cpus as usize).is_multiple_of(4) {
            return Err(RTLAB_EINVAL);
        }
        // SAFETY: non-null and aligned; the caller promises `n` ints there.
        let cpus = unsafe { std::slice::from_raw_parts(cpus, n) };
        let list: Vec<usize> = cpus
            .iter()
            .map(|&c| usize::try_from(c).map_err(|_| RTLAB_EINVAL))
            .collect::<Result<_, _>>()?;
        rtlab_sys::affinity::set_current_thread_affinity(&list.into()).map_err(sys_code)
    })
}

#[no_mangle]
pub extern "C" fn rtlab_thread_set_timer_slack_ns(ns: u64) -> c_int {
    call(|| rtlab_sys::slack::set_current_timer_slack_ns(ns).map_err(sys_code))
}

#[no_mangle]
pub extern "C" fn rtlab_mlockall() -> c_int {
    call(|| rtlab_sys::mem::lock_all_memory().map_err(sys_code))
}

/// Copies `text` NUL-terminated into `buf` (`cap` bytes): `RTLAB_ERANGE` (and as much as
/// fits) when it does not fit.
unsafe fn write_text(text: &str, buf: *mut c_char, cap: usize) -> Result<(), c_int> {
    if buf.is_null() || cap == 0 {
        return Err(RTLAB_EINVAL);
    }
    let n = text.len().min(cap - 1);
    // SAFETY: `buf` holds `cap` bytes (the caller's promise) and n + 1 <= cap.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    if n < text.len() {
        return Err(RTLAB_ERANGE);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_probe(buf: *mut c_char, cap: usize) -> c_int {
    call(|| {
        let c = rtlab_sync::probe::probe();
        let mut text = format!(
            "pi_futex={} lock_pi2={} requeue_pi={} robust_list={}\n",
            c.pi_futex as u8, c.lock_pi2 as u8, c.requeue_pi as u8, c.robust_list as u8
        );
        for line in c.missing() {
            text.push_str(line);
            text.push('\n');
        }
        // SAFETY: forwarded: `buf` holds `cap` bytes.
        unsafe { write_text(&text, buf, cap) }
    })
}

/// A static description of a code, for messages.
#[no_mangle]
pub extern "C" fn rtlab_strerror(code: c_int) -> *const c_char {
    let text: &'static CStr = match code {
        0 => c"success",
        RTLAB_EINVAL => c"invalid argument (a null or misaligned pointer, or a bad value)",
        RTLAB_EBUSY => c"busy: held by another thread or process",
        RTLAB_EOWNERDEAD => c"the previous owner died holding the lock; the caller holds it now",
        RTLAB_ENOTRECOVERABLE => {
            c"the lock is not recoverable: an owner died and nobody made it consistent"
        }
        RTLAB_ETIMEDOUT => c"timed out",
        RTLAB_EPEERDIED => c"the peer process died",
        RTLAB_ECORRUPT => c"corrupt shared memory",
        RTLAB_EDEADLK => c"the calling thread already holds the lock",
        RTLAB_EPERM => c"not the owner, or no privilege",
        RTLAB_EMSGSIZE => c"message larger than the channel maximum",
        RTLAB_ENOBUFS => c"receive buffer smaller than the message",
        RTLAB_ENOENT => c"no such channel",
        RTLAB_ENOTSUP => c"not supported by this kernel",
        RTLAB_ERANGE => c"the text did not fit the buffer",
        RTLAB_EINTERNAL => c"internal error in rtlab (a bug: please report it)",
        _ => c"system error",
    };
    text.as_ptr()
}

// ---------------------------------------------------------------------------------------
// Priority-inheritance mutex.

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_mutex_init(m: *mut PiMutexC, shared: c_int) -> c_int {
    let value = if shared != 0 {
        RawPiMutex::new_shared()
    } else {
        RawPiMutex::new()
    };
    // SAFETY: forwarded: `m` points to writable memory for a mutex.
    call(|| unsafe { init(m, value) })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_mutex_lock(m: *mut PiMutexC) -> c_int {
    // SAFETY: forwarded: `m` points to an initialised mutex.
    call(|| unsafe { at(m) }?.lock().map_err(lock_code))
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_mutex_trylock(m: *mut PiMutexC) -> c_int {
    // SAFETY: forwarded: `m` points to an initialised mutex.
    call(|| unsafe { at(m) }?.try_lock().map_err(lock_code))
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_mutex_lock_until(m: *mut PiMutexC, deadline_ns: u64) -> c_int {
    call(|| {
        // SAFETY: forwarded: `m` points to an initialised mutex.
        let m = unsafe { at(m) }?;
        match deadline(deadline_ns) {
            Some(d) => m.lock_until(d),
            None => m.lock(),
        }
        .map_err(lock_code)
    })
}

/// `m`, if the calling thread holds it.
unsafe fn held<'a>(m: *const PiMutexC) -> Result<&'a PiMutexC, c_int> {
    // SAFETY: forwarded: `m` points to an initialised mutex.
    let m = unsafe { at(m) }?;
    if m.owner_tid() != current_tid() {
        return Err(RTLAB_EPERM);
    }
    Ok(m)
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_mutex_unlock(m: *mut PiMutexC) -> c_int {
    call(|| {
        // SAFETY: forwarded: `m` points to an initialised mutex.
        let m = unsafe { held(m) }?;
        // SAFETY: the calling thread holds it (checked).
        unsafe { m.unlock() };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Robust mutex.

/// The robust mutex at `m`, pinned.
///
/// # Safety
/// `m` points to an initialised robust mutex that does not move while any thread holds it
/// (the header's contract).
unsafe fn robust<'a>(m: *const RobustMutexC) -> Result<Pin<&'a RobustMutexC>, c_int> {
    // SAFETY: forwarded; the caller promises not to move it while held.
    Ok(unsafe { Pin::new_unchecked(at(m)?) })
}

fn robust_code(taken: Result<rtlab_sync::RobustGuard<'_>, RobustError<'_>>) -> Result<(), c_int> {
    match taken {
        // The C caller holds it until rtlab_robust_mutex_unlock: the guard is given up.
        Ok(guard) => {
            std::mem::forget(guard);
            Ok(())
        }
        Err(RobustError::OwnerDied(guard)) => {
            std::mem::forget(guard);
            Err(RTLAB_EOWNERDEAD)
        }
        Err(RobustError::NotRecoverable) => Err(RTLAB_ENOTRECOVERABLE),
        Err(RobustError::Unsupported(_)) => Err(RTLAB_ENOTSUP),
        Err(RobustError::Lock(e)) => Err(lock_code(e)),
        Err(_) => Err(RTLAB_EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_robust_mutex_init(m: *mut RobustMutexC) -> c_int {
    // SAFETY: forwarded: `m` points to writable memory for a robust mutex.
    call(|| unsafe { init(m, RobustMutex::new_shared()) })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_robust_mutex_lock(m: *mut RobustMutexC) -> c_int {
    // SAFETY: forwarded (the header's contract).
    call(|| robust_code(unsafe { robust(m) }?.lock()))
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_robust_mutex_lock_until(
    m: *mut RobustMutexC,
    deadline_ns: u64,
) -> c_int {
    call(|| {
        // SAFETY: forwarded (the header's contract).
        let m = unsafe { robust(m) }?;
        robust_code(match deadline(deadline_ns) {
            Some(d) => m.lock_until(d),
            None => m.lock(),
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_robust_mutex_make_consistent(m: *mut RobustMutexC) -> c_int {
    call(|| {
        // SAFETY: forwarded (the header's contract).
        let m = unsafe { robust(m) }?;
        m.make_consistent_held().map_err(lock_code)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_robust_mutex_unlock(m: *mut RobustMutexC) -> c_int {
    // SAFETY: forwarded (the header's contract).
    call(|| unsafe { robust(m) }?.unlock_held().map_err(lock_code))
}

// ---------------------------------------------------------------------------------------
// PI condition variable.

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_cond_init(c: *mut PiCondC, shared: c_int) -> c_int {
    let cv = if shared != 0 {
        PiCondvar::new_shared()
    } else {
        PiCondvar::new()
    };
    let value = PiCondC {
        cv,
        mutex_offset: AtomicI64::new(0),
    };
    // SAFETY: forwarded: `c` points to writable memory for a condition variable.
    call(|| unsafe { init(c, value) })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_cond_wait_until(
    c: *mut PiCondC,
    m: *mut PiMutexC,
    deadline_ns: u64,
) -> c_int {
    call(|| {
        // SAFETY: forwarded: both point to initialised objects.
        let (cond, mutex) = unsafe { (at(c)?, held(m)?) };
        if cond.cv.scope() != mutex.scope() {
            return Err(RTLAB_EINVAL);
        }
        // Every waiter of one condition variable uses one mutex (the kernel's rule too).
        let offset = m as i64 - c as i64;
        if offset == 0 {
            return Err(RTLAB_EINVAL);
        }
        match cond
            .mutex_offset
            .compare_exchange(0, offset, Ordering::Release, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(other) if other == offset => {}
            Err(_) => return Err(RTLAB_EINVAL),
        }
        // SAFETY: the calling thread holds the mutex (checked); it holds it again on return.
        match unsafe { cond.cv.wait_raw(mutex, deadline(deadline_ns)) } {
            rtlab_sync::WaitResult::Notified => Ok(()),
            rtlab_sync::WaitResult::TimedOut => Err(RTLAB_ETIMEDOUT),
        }
    })
}

/// Wakes one waiter (`all`: all of them) of the condition variable at `c`.
unsafe fn notify(c: *const PiCondC, all: bool) -> Result<(), c_int> {
    // SAFETY: forwarded: `c` points to an initialised condition variable.
    let cond = unsafe { at(c) }?;
    let offset = cond.mutex_offset.load(Ordering::Acquire);
    if offset == 0 {
        // Nobody has waited yet: no mutex to requeue onto.
        cond.cv.notify_unbound();
        return Ok(());
    }
    // The offset lives in memory a peer can write: a misaligned one is corrupt, and the rest
    // is judged by the kernel (the word is handed to FUTEX_CMP_REQUEUE_PI, never read here),
    // which refuses a word its waiters do not wait for (EINVAL) or that is not mapped.
    let mutex = (c as i64).wrapping_add(offset) as *const PiMutexC;
    if mutex.is_null() || !(mutex as usize).is_multiple_of(std::mem::align_of::<PiMutexC>()) {
        return Err(RTLAB_ECORRUPT);
    }
    // SAFETY: non-null and aligned; the address only reaches the kernel, which checks it.
    let word = unsafe { &*mutex }.futex_word();
    cond.cv.try_notify(word, all).map_err(|e| match e {
        rtlab_sys::futex::Errno::INVAL | rtlab_sys::futex::Errno::FAULT => RTLAB_ECORRUPT,
        _ => RTLAB_EINTERNAL,
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_cond_signal(c: *mut PiCondC) -> c_int {
    // SAFETY: forwarded.
    call(|| unsafe { notify(c, false) })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_pi_cond_broadcast(c: *mut PiCondC) -> c_int {
    // SAFETY: forwarded.
    call(|| unsafe { notify(c, true) })
}

// ---------------------------------------------------------------------------------------
// Parker.

#[no_mangle]
pub unsafe extern "C" fn rtlab_parker_init(p: *mut ParkerC) -> c_int {
    // SAFETY: forwarded: `p` points to writable memory for a parker.
    call(|| unsafe { init(p, Parker::new()) })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_parker_init_shared(p: *mut ParkerC) -> c_int {
    // SAFETY: forwarded: `p` points to writable memory for a parker.
    call(|| unsafe { init(p, Parker::new_shared()) })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_parker_park_until(p: *mut ParkerC, deadline_ns: u64) -> c_int {
    call(|| {
        // SAFETY: forwarded: `p` points to an initialised parker.
        let p = unsafe { at(p) }?;
        if p.park_until(deadline(deadline_ns)) {
            Ok(())
        } else {
            Err(RTLAB_ETIMEDOUT)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_parker_unpark(p: *mut ParkerC) -> c_int {
    call(|| {
        // SAFETY: forwarded: `p` points to an initialised parker.
        unsafe { at(p) }?.unpark();
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Shared-memory channel.

unsafe fn channel_name<'a>(name: *const c_char) -> Result<&'a str, c_int> {
    if name.is_null() {
        return Err(RTLAB_EINVAL);
    }
    // SAFETY: non-null; the caller promises a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| RTLAB_EINVAL)?;
    let bare = name.strip_prefix('/').unwrap_or(name);
    if bare.is_empty() || bare.contains('/') {
        return Err(RTLAB_EINVAL);
    }
    Ok(name)
}

unsafe fn hand_out(ch: ShmChannel, out: *mut *mut Channel) -> Result<(), c_int> {
    let handle = Box::new(Channel {
        ch: Box::leak(Box::new(ch)),
        sender: OnceLock::new(),
        receiver: OnceLock::new(),
    });
    // SAFETY: `out` was checked non-null and aligned by the caller of this function.
    unsafe { out.write(Box::into_raw(handle)) };
    Ok(())
}

fn check_out(out: *mut *mut Channel) -> Result<(), c_int> {
    if out.is_null() || !(out as usize).is_multiple_of(std::mem::align_of::<*mut Channel>()) {
        return Err(RTLAB_EINVAL);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_create(
    name: *const c_char,
    capacity: u32,
    out: *mut *mut Channel,
) -> c_int {
    call(|| {
        check_out(out)?;
        // SAFETY: forwarded: a NUL-terminated name.
        let name = unsafe { channel_name(name) }?;
        // The ring (a power of two, at least 4 KiB); a message may take a quarter of it.
        let ring = (capacity as usize).max(4096).next_power_of_two();
        let ch = ShmChannel::create_named(name, &ChannelOptions::new(ring, ring / 4))
            .map_err(ipc_code)?;
        // SAFETY: `out` checked above.
        unsafe { hand_out(ch, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_open(name: *const c_char, out: *mut *mut Channel) -> c_int {
    call(|| {
        check_out(out)?;
        // SAFETY: forwarded: a NUL-terminated name.
        let name = unsafe { channel_name(name) }?;
        let path = std::path::Path::new("/dev/shm").join(name.trim_start_matches('/'));
        if !path.exists() {
            return Err(RTLAB_ENOENT);
        }
        let ch = ShmChannel::open(name).map_err(ipc_code)?;
        // SAFETY: `out` checked above.
        unsafe { hand_out(ch, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_max_message(ch: *mut Channel) -> usize {
    // SAFETY: forwarded: a handle from create or open, not closed.
    match catch_unwind(|| unsafe { at(ch) }.map(|c| c.ch.max_message())) {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

/// This process's end of a channel, attached on first use.
fn end<E>(cell: &OnceLock<E>, attach: impl FnOnce() -> Result<E, IpcError>) -> Result<&E, c_int> {
    if let Some(e) = cell.get() {
        return Ok(e);
    }
    let _ = cell.set(attach().map_err(ipc_code)?);
    cell.get().ok_or(RTLAB_EINTERNAL)
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_send(
    ch: *mut Channel,
    buf: *const c_void,
    len: usize,
    deadline_ns: u64,
) -> c_int {
    call(|| {
        // SAFETY: forwarded: a handle from create or open, not closed.
        let ch = unsafe { at(ch) }?;
        if buf.is_null() && len > 0 {
            return Err(RTLAB_EINVAL);
        }
        let msg: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-null; the caller promises `len` readable bytes.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
        };
        let sender = end(&ch.sender, || ch.ch.sender())?;
        sender.send(msg, deadline(deadline_ns)).map_err(ipc_code)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_recv(
    ch: *mut Channel,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    deadline_ns: u64,
) -> c_int {
    call(|| {
        // SAFETY: forwarded: a handle from create or open, not closed.
        let ch = unsafe { at(ch) }?;
        if (buf.is_null() && cap > 0) || len.is_null() || !(len as usize).is_multiple_of(8) {
            return Err(RTLAB_EINVAL);
        }
        let out: &mut [u8] = if cap == 0 {
            &mut []
        } else {
            // SAFETY: non-null; the caller promises `cap` writable bytes.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), cap) }
        };
        let receiver = end(&ch.receiver, || ch.ch.receiver())?;
        let (result, n) = match receiver.recv(out, deadline(deadline_ns)) {
            Ok(n) => (Ok(()), n),
            Err(IpcError::BufferTooSmall { need, .. }) => (Err(RTLAB_ENOBUFS), need),
            Err(e) => (Err(ipc_code(e)), 0),
        };
        // SAFETY: checked non-null and aligned; the caller's size_t.
        unsafe { len.write(n) };
        result
    })
}

/// `end` of `rtlab_channel_layout` / `rtlab_channel_wake`: the sending end.
pub const RTLAB_CHANNEL_SEND: c_int = 1;
/// The receiving end.
pub const RTLAB_CHANNEL_RECV: c_int = 2;
/// How many words `rtlab_channel_layout` fills (at most).
pub const RTLAB_CHANNEL_LAYOUT_WORDS: usize = 13;

/// Attaches this process's `end` (as its first send or receive would) and writes the words of
/// the channel's layout for a binding that sends or receives in its own code (the Java
/// binding): format, spsc, base address, mapping length, magic, capacity, max message, then
/// the offsets of the ring, head, tail and the consumer's and producer's waiting flags, and
/// whether a consumer may leave out its fence before it reads the producer's flag.
#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_layout(
    ch: *mut Channel,
    end_: c_int,
    words: *mut u64,
    n: usize,
) -> c_int {
    call(|| {
        // SAFETY: forwarded: a handle from create or open, not closed.
        let ch = unsafe { at(ch) }?;
        if n > 0 {
            // SAFETY: only checked here (null, alignment); written below.
            unsafe { at(words) }?;
        }
        match end_ {
            RTLAB_CHANNEL_SEND => end(&ch.sender, || ch.ch.sender()).map(drop)?,
            RTLAB_CHANNEL_RECV => end(&ch.receiver, || ch.ch.receiver()).map(drop)?,
            _ => return Err(RTLAB_EINVAL),
        }
        let l = ch.ch.raw_layout();
        let all: [u64; RTLAB_CHANNEL_LAYOUT_WORDS] = [
            l.format as u64,
            l.spsc as u64,
            l.base as usize as u64,
            l.len as u64,
            l.magic,
            l.capacity,
            l.max_message,
            l.ring_at as u64,
            l.head_at as u64,
            l.tail_at as u64,
            l.consumer_waiting_at as u64,
            l.producer_waiting_at as u64,
            l.consumer_fenceless as u64,
        ];
        let n = n.min(all.len());
        // SAFETY: checked non-null and aligned; the caller promises `n` writable words.
        unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), words, n) };
        Ok(())
    })
}

/// After a record was published (`end` RTLAB_CHANNEL_SEND) or consumed (RTLAB_CHANNEL_RECV)
/// outside rtlab_channel_send/recv, wakes the other end if it sleeps.
#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_wake(ch: *mut Channel, end_: c_int) -> c_int {
    call(|| {
        // SAFETY: forwarded: a handle from create or open, not closed.
        let ch = unsafe { at(ch) }?;
        match end_ {
            RTLAB_CHANNEL_SEND => ch.ch.wake_peer_of(true),
            RTLAB_CHANNEL_RECV => ch.ch.wake_peer_of(false),
            _ => return Err(RTLAB_EINVAL),
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rtlab_channel_close(ch: *mut Channel) {
    if ch.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a handle from create or open (Box::into_raw), closed once (the header's
        // contract); its ends borrow the leaked channel, so they go first.
        let handle = unsafe { Box::from_raw(ch) };
        let Channel {
            ch,
            sender,
            receiver,
        } = *handle;
        drop(sender);
        drop(receiver);
        // SAFETY: leaked from a Box in hand_out; nothing borrows it any more.
        drop(unsafe { Box::from_raw(ch as *const ShmChannel as *mut ShmChannel) });
    }));
}

#[cfg(test)]
mod tests;
