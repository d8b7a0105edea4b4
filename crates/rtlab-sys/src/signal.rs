//! Ctrl-C handling: the first SIGINT/SIGTERM (SIGHUP where a terminal started the run) sets a
//! flag that measuring loops poll, so a run ends early but still reports; a second one
//! terminates the process the default way. Without a terminal SIGHUP is ignored.

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
    // SIGHUP too where a terminal started the run: its closing ends the run like Ctrl-C,
    // results written, cleanup done. Without one (a service, a pod, a pipeline) a hangup is
    // nobody's Ctrl-C: whoever hands rtlab a terminal it did not have (a file swapped for a
    // pty) could otherwise end it, and a unit that restarts on failure would not restart an
    // exit 0. There it is ignored.
    let hup = match started_at_a_terminal() {
        true => Some(libc::SIGHUP),
        false => {
            // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects.
            unsafe {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
            }
            None
        }
    };
    for sig in [libc::SIGINT, libc::SIGTERM].into_iter().chain(hup) {
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

/// Whether standard input, output or error is a terminal.
fn started_at_a_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
        || std::io::stdout().is_terminal()
        || std::io::stderr().is_terminal()
}

/// True once SIGINT or SIGTERM (or, run from a terminal, SIGHUP) was received.
#[inline]
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Marks the run as interrupted from inside the program (used by tests and by `--duration`
/// watchdogs that must stop every loop the same way Ctrl-C does).
pub fn request_stop() {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Ignores SIGINT, SIGTERM and SIGHUP for good: for a process that must outlive the run that
/// started it to clean up after it (a Ctrl-C or a hangup must not end it first).
pub fn ignore_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
}
