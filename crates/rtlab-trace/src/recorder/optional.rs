//! The programs the recorder can do without, loaded and attached or said why not: the PI lock
//! probes, the watched processes' wait calls, the fork probe.

use super::*;

/// Why a program the recorder can do without was not attached (said in the run's list of
/// what is missing).
#[derive(Debug)]
pub(crate) enum AttachError {
    /// The PI lock function is not in the kernel's BTF.
    NotInBtf,
    /// It is, with another prototype than the program reads.
    Prototype,
    /// No such tracepoint in this kernel.
    NoTracepoint(&'static str),
    /// BTF lacks the registers the program reads (which).
    NoRegs(&'static str),
    /// The kernel refused the program (on tracepoint `tp`, if one), with the verifier's
    /// last line.
    Load {
        tp: Option<&'static str>,
        error: rtlab_sys::SysError,
        verifier: Option<String>,
    },
    /// It could not be attached.
    Attach {
        tp: Option<&'static str>,
        error: rtlab_sys::SysError,
    },
    /// The PI lock function's probes, and why not.
    LockFunction(Box<AttachError>),
    /// Neither the function's probes nor the system calls'.
    LockSyscalls {
        function: Box<AttachError>,
        syscalls: Box<AttachError>,
    },
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |tp: &Option<&str>| tp.map(|t| format!("{t}: ")).unwrap_or_default();
        match self {
            AttachError::NotInBtf => f.write_str("not in this kernel's BTF"),
            AttachError::Prototype => f.write_str("an unexpected prototype"),
            AttachError::NoTracepoint(tp) => write!(f, "no {tp} tracepoint"),
            AttachError::NoRegs(which) => write!(f, "BTF has no pt_regs.{which}"),
            AttachError::Load {
                tp,
                error,
                verifier,
            } => {
                let last = verifier.as_ref().map(|l| format!(": {l}"));
                write!(f, "{}{error}{}", at(tp), last.unwrap_or_default())
            }
            AttachError::Attach { tp, error } => write!(f, "{}{error}", at(tp)),
            AttachError::LockFunction(why) => write!(f, "{LOCK_PI_FN}: {why}"),
            AttachError::LockSyscalls { function, syscalls } => {
                write!(f, "{function}; {syscalls}")
            }
        }
    }
}

/// A refused program's error, with the verifier's last line.
fn refused(tp: Option<&'static str>, e: rtlab_sys::bpf::LoadError) -> AttachError {
    let last = e.log.lines().rev().find(|l| !l.trim().is_empty());
    AttachError::Load {
        tp,
        error: e.error,
        verifier: last.map(str::to_string),
    }
}

/// Loads and attaches the two PI lock probes: at `futex_lock_pi` where the kernel allows
/// function probes, else (when `syscalls`) on the system calls; or says why not.
pub(super) fn attach_lock_probes(
    btf: &Btf,
    maps: Maps,
    syscalls: bool,
) -> Result<(LockProbes, Vec<(Program, OwnedFd)>), AttachError> {
    let function = (|| {
        let func = btf.func_id(LOCK_PI_FN).ok_or(AttachError::NotInBtf)?;
        if btf.func_params(LOCK_PI_FN) != Some(LOCK_PI_ARGS) {
            return Err(AttachError::Prototype);
        }
        [false, true]
            .into_iter()
            .map(|exit| {
                let insns = lock_function_program(exit, maps);
                let p = Program::load_function_probe(&insns, func, exit)
                    .map_err(|e| refused(None, e))?;
                let link = p
                    .attach_raw_tracepoint(None)
                    .map_err(|error| AttachError::Attach { tp: None, error })?;
                Ok((p, link))
            })
            .collect::<Result<Vec<_>, AttachError>>()
    })();
    let function = match function {
        Ok(v) => return Ok((LockProbes::Function, v)),
        Err(why) => Box::new(AttachError::LockFunction(Box::new(why))),
    };
    if !syscalls {
        return Err(*function);
    }
    let attached = match Regs::from_btf(btf) {
        Some(regs) => attach_syscall_programs(btf, |exit| lock_syscall_program(exit, regs, maps)),
        None => Err(AttachError::NoRegs("orig_ax/si")),
    };
    attached
        .map(|v| (LockProbes::Syscalls, v))
        .map_err(|syscalls| AttachError::LockSyscalls {
            function,
            syscalls: Box::new(syscalls),
        })
}

/// Loads `program(false)` on `sys_enter` and `program(true)` on `sys_exit` and attaches them.
fn attach_syscall_programs(
    btf: &Btf,
    program: impl Fn(bool) -> Vec<Insn>,
) -> Result<Vec<(Program, OwnedFd)>, AttachError> {
    [("sys_enter", false), ("sys_exit", true)]
        .into_iter()
        .map(|(tp, exit)| attach_typed(btf, tp, &program(exit)))
        .collect()
}

/// Loads `insns` as a typed program on raw tracepoint `tp` and attaches it, or says why not.
fn attach_typed(
    btf: &Btf,
    tp: &'static str,
    insns: &[Insn],
) -> Result<(Program, OwnedFd), AttachError> {
    let id = btf
        .typedef_id(&format!("btf_trace_{tp}"))
        .ok_or(AttachError::NoTracepoint(tp))?;
    let p = Program::load_btf_raw_tracepoint(insns, id).map_err(|e| refused(Some(tp), e))?;
    let link = p
        .attach_raw_tracepoint(None)
        .map_err(|error| AttachError::Attach {
            tp: Some(tp),
            error,
        })?;
    Ok((p, link))
}

/// The system calls a thread waits in, whose return to user space ends a watched thread's
/// delay (its own view: the program sees its lateness when its wait returns): x86-64's
/// numbers. Programs on every system call's entry and exit (`raw_syscalls`; function probes
/// would cost other calls nothing, but not every kernel allows them) keep these calls and,
/// through a set of processes in the kernel (`watched`), only the watched processes' (a
/// thread they start is seen from its first call): any other call leaves after a few
/// compares, before the clock is read.
pub(super) const WAIT_CALLS: &[i32] = &[
    SYS_CLOCK_NANOSLEEP,
    SYS_NANOSLEEP,
    SYS_FUTEX,
    449,                 // futex_waitv
    232,                 // epoll_wait
    281,                 // epoll_pwait
    441,                 // epoll_pwait2
    7,                   // poll
    271,                 // ppoll
    23,                  // select
    270,                 // pselect6
    0,                   // read: a timerfd's (or a pipe's, a socket's) reader waits in it
    SYS_RT_SIGTIMEDWAIT, // sigwaitinfo, sigtimedwait (a POSIX timer's signal)
];
pub(super) const SYS_CLOCK_NANOSLEEP: i32 = 230;
pub(super) const SYS_NANOSLEEP: i32 = 35;
pub(super) const SYS_RT_SIGTIMEDWAIT: i32 = 128;

/// Loads and attaches the wait-call programs, recording for the threads in map `watched`.
pub(super) fn attach_wait_probes(
    btf: &Btf,
    maps: Maps,
    watched: i32,
) -> Result<Vec<(Program, OwnedFd)>, AttachError> {
    let regs = Regs::from_btf(btf).ok_or(AttachError::NoRegs("orig_ax/di/si/dx/r10/r8"))?;
    attach_syscall_programs(btf, |exit| wait_call_program(exit, regs, maps, watched))
}

/// Loads and attaches [`fork_program`], or says why not.
pub(super) fn attach_fork_probe(
    btf: &Btf,
    watched: i32,
    tgid: i32,
) -> Result<(Program, OwnedFd), AttachError> {
    attach_typed(btf, "sched_process_fork", &fork_program(watched, tgid))
}

/// A CPU's entry in the `cpus` map.
pub(super) fn cpu_entry(traced: bool, ring: usize) -> [u8; CPU_ENTRY as usize] {
    let mut e = [0; CPU_ENTRY as usize];
    e[CPU_TRACED as usize..][..4].copy_from_slice(&(traced as u32).to_ne_bytes());
    e[CPU_RING as usize..][..4].copy_from_slice(&(ring as u32 + 1).to_ne_bytes());
    e
}
