//! Ctrl-C handling: the first SIGINT/SIGTERM/SIGHUP sets a flag that measuring loops poll, so a run
//! ends early but still reports; a second one terminates the process the default way.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Relaxed is enough: the flag carries no data, readers only need to see it eventually.
    INTERRUPTED.store(true, Ordering::Relaxed);
    // SAFETY: signal() is async-signal-safe; restoring SIG_DFL lets a second Ctrl-C kill.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Installs the handler for SIGINT and SIGTERM. Idempotent.
///
/// C: `sigaction(SIGINT/SIGTERM, {sa_handler, flags 0})`. Without `SA_RESTART`, a thread
/// blocked in a sleep returns `EINTR`; rtlab's sleeps restart with the same absolute
/// deadline, so delivery never perturbs a schedule.
pub fn install_interrupt_handler() {
    install(on_signal);
}

fn install(handler: extern "C" fn(libc::c_int)) {
    // SIGHUP too: a closed terminal ends the run like Ctrl-C, results written, cleanup done.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: zeroed sigaction is a valid "no flags, empty mask" value; the handler is an
        // extern "C" fn that only does async-signal-safe work (an atomic store and signal()).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// True once SIGINT or SIGTERM was received.
#[inline]
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Marks the run as interrupted from inside the program (used by tests and by `--duration`
/// watchdogs that must stop every loop the same way Ctrl-C does).
pub fn request_stop() {
    INTERRUPTED.store(true, Ordering::Relaxed);
}
