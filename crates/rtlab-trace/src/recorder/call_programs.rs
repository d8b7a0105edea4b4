//! The programs on system calls and user-space probes: a PI lock's wait (on its kernel
//! function or its system call), the watched processes' wait calls, a JVM's USDT probes, and
//! the fork of a watched process.

use super::*;

/// A stack slot for the call's number.
const FP_CALL: i16 = -24;
/// A stack slot for the calling thread's `thread_info.status`.
const FP_STATUS: i16 = -32;
/// x86's `TS_COMPAT` in `thread_info.status`: the thread is in a 32-bit system call (a 32-bit
/// program's, or `int $0x80`), whose numbers are i386's (its 7 is `waitpid`, not `poll`).
const TS_COMPAT: i32 = 0x0002;

/// A function probe's program: the calling thread, and at the entry whether it only tries
/// (A = trylock), at the return the result (A).
pub(super) fn lock_function_program(exit: bool, maps: Maps) -> Vec<Insn> {
    let kind = if exit { K_LOCK_PI_DONE } else { K_LOCK_PI };
    let mut b = Builder::new(kind, maps, AlsoIf::No, true, Whose::Current);
    b.current();
    b.arg(if exit { LOCK_PI_ARGS as i16 } else { 3 }, OFF_A, false);
    b.finish()
}

/// `pt_regs` fields a system-call program reads: the call's number at its exit
/// (`orig_ax`) and its second argument (`si`, the futex operation).
#[derive(Debug, Clone, Copy)]
pub(super) struct Regs {
    pub(super) orig_ax: i16,
    pub(super) di: i16,
    pub(super) si: i16,
    pub(super) dx: i16,
    /// A system call's fourth argument (x86-64 passes it in r10, not cx).
    pub(super) r10: i16,
    /// Its fifth.
    pub(super) r8: i16,
    /// Where a task's `thread_info.status` lies in its `task_struct` (x86; `None` elsewhere,
    /// where there is no 32-bit call to tell apart).
    pub(super) thread_status: Option<i16>,
}

impl Regs {
    pub(super) fn from_btf(btf: &Btf) -> Option<Regs> {
        Some(Regs {
            orig_ax: btf.offset_of("pt_regs", "orig_ax")? as i16,
            di: btf.offset_of("pt_regs", "di")? as i16,
            si: btf.offset_of("pt_regs", "si")? as i16,
            dx: btf.offset_of("pt_regs", "dx")? as i16,
            r10: btf.offset_of("pt_regs", "r10")? as i16,
            r8: btf.offset_of("pt_regs", "r8")? as i16,
            thread_status: btf
                .offset_of("task_struct", "thread_info.status")
                .map(|o| o as i16),
        })
    }
}

impl Builder {
    /// Leaves when the calling thread is in a 32-bit system call: its numbers and arguments
    /// are not the ones the program matched.
    fn leave_if_32_bit_call(&mut self, thread_status: Option<i16>) {
        let Some(status) = thread_status else { return };
        self.push(asm::call(helper::GET_CURRENT_TASK));
        self.push(asm::mov(R3, R0));
        self.push(asm::add_imm(R3, status as i32));
        self.push(asm::mov(R1, R10));
        self.push(asm::add_imm(R1, FP_STATUS as i32));
        self.push(asm::mov_imm(R2, 4));
        self.push(asm::call(helper::PROBE_READ_KERNEL));
        self.push(asm::ldx32(R1, R10, FP_STATUS));
        self.push(asm::and_imm(R1, TS_COMPAT));
        self.jump_end(asm::jne_imm(R1, 0, 0));
    }
}

/// `sys_enter(struct pt_regs *, long id)` / `sys_exit(struct pt_regs *, long ret)`: a record
/// only for `futex(FUTEX_LOCK_PI[2])`, the calling thread, and at the exit the result (A).
/// Every other call leaves after two compares, before the clock is read.
pub(super) fn lock_syscall_program(exit: bool, regs: Regs, maps: Maps) -> Vec<Insn> {
    let mut b = Builder::syscall(exit, regs);
    b.jump_end(asm::jne_imm(R1, SYS_FUTEX, 0));
    b.push(asm::ldx64(R1, R3, regs.si));
    b.push(asm::and_imm(R1, FUTEX_CMD_MASK));
    b.push(asm::jeq_imm(R1, FUTEX_LOCK_PI, 1));
    b.jump_end(asm::jne_imm(R1, FUTEX_LOCK_PI2, 0));
    b.leave_if_32_bit_call(regs.thread_status);
    let kind = if exit { K_LOCK_PI_DONE } else { K_LOCK_PI };
    b.prologue(kind, maps, AlsoIf::No, Whose::Current);
    b.current();
    if exit {
        b.arg(1, OFF_A, false);
    } else {
        b.push(asm::st32(R7, OFF_A, 0));
    }
    b.finish()
}

/// `sys_enter(struct pt_regs *, long id)` / `sys_exit(struct pt_regs *, long ret)` for the
/// wait calls of the threads of the processes in map `watched`: the thread (CUR) and the call's number (A); at
/// the entry of `clock_nanosleep` its clock (PID1), flags (PRIO1) and the requested time
/// (PID2..X, a timespec read from the caller's memory), of `nanosleep` the requested time
/// (PID1 = -1: relative, CLOCK_MONOTONIC), of `futex` its operation (PID1) and, for a wait
/// (`FUTEX_WAIT`, `FUTEX_WAIT_BITSET`), its timeout (PID2..X, where it has one), of a
/// readiness wait its timeout (`epoll_wait`'s, `epoll_pwait`'s and `poll`'s milliseconds in
/// PID1; `epoll_pwait2`'s, `ppoll`'s, `pselect6`'s, `select`'s and `rt_sigtimedwait`'s
/// request in PID2..X); at the exit the result (X).
pub(super) fn wait_call_program(exit: bool, regs: Regs, maps: Maps, watched: i32) -> Vec<Insn> {
    let mut b = Builder::syscall(exit, regs);
    // One of the wait calls, or leave: a jump over the rest of the chain for each.
    let n = WAIT_CALLS.len();
    for (i, &call) in WAIT_CALLS.iter().enumerate() {
        b.push(asm::jeq_imm(R1, call, (n - i) as i16));
    }
    b.jump_end(asm::ja(0));
    b.push(asm::stx64(R10, FP_CALL, R1));
    // The calling thread's process (the upper half of pid_tgid) must be a watched one.
    b.push(asm::call(helper::GET_CURRENT_PID_TGID));
    b.push(asm::mov(R8, R0));
    b.push(asm::rsh_imm(R8, 32));
    b.lookup(watched, R8);
    b.leave_if_32_bit_call(regs.thread_status);
    let kind = if exit { K_WAIT_EXIT } else { K_WAIT_ENTER };
    b.prologue(kind, maps, AlsoIf::Any, Whose::Watched);
    b.current();
    b.push(asm::ldx64(R1, R10, FP_CALL));
    b.push(asm::stx32(R7, OFF_A, R1));
    if exit {
        b.arg(1, OFF_X, true);
        return b.finish();
    }
    b.push(asm::st32(R7, OFF_PID1, 0));
    b.push(asm::st32(R7, OFF_PRIO1, 0));
    b.push(asm::st64(R7, OFF_PID2, 0));
    b.push(asm::st64(R7, OFF_X, 0));
    b.push(asm::ldx64(R3, R6, 0));
    // A readiness wait's timeout, relative to its entry: in milliseconds (an int, negative
    // for none) to PID1, or a timespec (select's a timeval) read from the caller's memory
    // to PID2..X like a sleep's request (NULL for none: the read fails and leaves zeros).
    for (call, reg) in [(232, regs.r10), (281, regs.r10), (7, regs.dx)] {
        b.push(asm::jne_imm(R1, call, 3));
        b.push(asm::ldx64(R2, R3, reg));
        b.push(asm::stx32(R7, OFF_PID1, R2));
        b.jump_finish(asm::ja(0));
    }
    let mut to_read = Vec::new();
    for (call, reg) in [
        (441, regs.r10),
        (271, regs.dx),
        (270, regs.r8),
        (23, regs.r8),
        (SYS_RT_SIGTIMEDWAIT, regs.dx),
    ] {
        b.push(asm::jne_imm(R1, call, 2));
        b.push(asm::ldx64(R3, R3, reg));
        to_read.push(b.insns.len());
        b.push(asm::ja(0));
    }
    // futex: its operation; for a wait, its timeout (a user pointer, NULL for none: the
    // read then fails and leaves zeros) at r10; any other operation is done.
    let not_futex = b.insns.len();
    b.push(asm::jne_imm(R1, SYS_FUTEX, 0));
    b.push(asm::ldx64(R2, R3, regs.si));
    b.push(asm::stx32(R7, OFF_PID1, R2));
    b.push(asm::and_imm(R2, FUTEX_CMD_MASK));
    b.push(asm::jeq_imm(R2, FUTEX_WAIT, 1));
    b.jump_finish(asm::jne_imm(R2, FUTEX_WAIT_BITSET, 0));
    b.push(asm::ldx64(R3, R3, regs.r10));
    let futex_read = b.insns.len();
    b.push(asm::ja(0));
    b.insns[not_futex].off = (b.insns.len() - not_futex - 1) as i16;
    // nanosleep: relative, its request at di; clock_nanosleep: clock, flags, request at dx.
    b.push(asm::jne_imm(R1, SYS_NANOSLEEP, 3));
    b.push(asm::st32(R7, OFF_PID1, -1));
    b.push(asm::ldx64(R3, R3, regs.di));
    b.push(asm::ja(6));
    b.jump_finish(asm::jne_imm(R1, SYS_CLOCK_NANOSLEEP, 0));
    b.push(asm::ldx64(R2, R3, regs.di));
    b.push(asm::stx32(R7, OFF_PID1, R2));
    b.push(asm::ldx64(R2, R3, regs.si));
    b.push(asm::stx32(R7, OFF_PRIO1, R2));
    b.push(asm::ldx64(R3, R3, regs.dx));
    for at in to_read.into_iter().chain([futex_read]) {
        b.insns[at].off = (b.insns.len() - at - 1) as i16;
    }
    // Every way the request (a user pointer) is in R3.
    b.push(asm::mov(R1, R7));
    b.push(asm::add_imm(R1, OFF_PID2 as i32));
    b.push(asm::mov_imm(R2, 16));
    b.push(asm::call(helper::PROBE_READ_USER));
    b.finish()
}

/// A USDT probe's program (a uprobe's: its context the thread's registers): the thread, its
/// process (PID1), `index` (A: which attached probe), and two of its arguments where in
/// registers or constant (X, 64 bits; PID2, the low 32). Recorded on every CPU; with
/// `watched`, only in the processes of that map.
pub(super) fn usdt_program(
    index: u32,
    args: [Option<&crate::usdt::Arg>; 2],
    maps: Maps,
    watched: Option<i32>,
) -> Vec<Insn> {
    use crate::usdt::Arg;
    let mut b = Builder::start(false);
    if let Some(watched) = watched {
        b.push(asm::call(helper::GET_CURRENT_PID_TGID));
        b.push(asm::mov(R8, R0));
        b.push(asm::rsh_imm(R8, 32));
        b.lookup(watched, R8);
    }
    b.prologue(K_USDT, maps, AlsoIf::Any, Whose::Current);
    b.current();
    b.push(asm::rsh_imm(R0, 32));
    b.push(asm::stx32(R7, OFF_PID1, R0));
    b.push(asm::st32(R7, OFF_A, index as i32));
    for (arg, (dst, wide)) in args.iter().zip([(OFF_X, true), (OFF_PID2, false)]) {
        match arg.copied().unwrap_or(Arg::Unsupported) {
            Arg::Register { regs_offset, .. } => {
                b.push(asm::ldx64(R1, R6, regs_offset));
                b.push(if wide {
                    asm::stx64(R7, dst, R1)
                } else {
                    asm::stx32(R7, dst, R1)
                });
            }
            Arg::Constant(c) => {
                b.extend(asm::ld_imm64(R1, c as u64));
                b.push(if wide {
                    asm::stx64(R7, dst, R1)
                } else {
                    asm::stx32(R7, dst, R1)
                });
            }
            Arg::Unsupported => {
                b.push(asm::mov_imm(R1, 0));
                b.push(if wide {
                    asm::stx64(R7, dst, R1)
                } else {
                    asm::stx32(R7, dst, R1)
                });
            }
        }
    }
    b.finish()
}

/// `sched_process_fork(struct task_struct *parent, struct task_struct *child)`: a process
/// started by a watched one is watched from its first instruction (its process added to the
/// set in map `watched`, before it can run), so a command's children (a wrapper script's
/// program) lose no period to the time user space takes to find them. Records nothing.
pub(super) fn fork_program(watched: i32, tgid: i32) -> Vec<Insn> {
    let mut b = Builder::start(true);
    b.push(asm::ldx64(R3, R6, 0));
    b.push(asm::ldx32(R1, R3, tgid as i16));
    b.lookup(watched, R1);
    b.push(asm::ldx64(R3, R6, 8));
    b.push(asm::ldx32(R1, R3, tgid as i16));
    b.push(asm::stx32(R10, FP_KEY, R1));
    b.push(asm::st32(R10, FP_OWN, 1));
    b.extend(asm::ld_map_fd(R1, watched));
    b.push(asm::mov(R2, R10));
    b.push(asm::add_imm(R2, FP_KEY as i32));
    b.push(asm::mov(R3, R10));
    b.push(asm::add_imm(R3, FP_OWN as i32));
    b.push(asm::mov_imm(R4, 0));
    b.push(asm::call(helper::MAP_UPDATE_ELEM));
    b.finish_without_record()
}
