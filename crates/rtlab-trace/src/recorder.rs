//! The eBPF flight recorder: small programs, assembled here at run time, on the raw
//! tracepoints the attribution needs. Each writes one fixed-size record per event on a
//! measured CPU into that CPU's ring of slots in an array map (a per-CPU head counter picks
//! the slot; the record's sequence number, written last, says it is complete), which the
//! reader maps and copies without system calls. No lock, no wakeup, nothing shared between
//! CPUs on the measured side; a reader that falls a whole ring behind counts the overwritten
//! records as lost.
//!
//! Why not tracefs: on this kind of VM a tracefs event costs the measured CPU ~200-300 ns
//! (ring-buffer reserve/commit, the generic event layout, cmdline recording), and a wakeup of a
//! busy CPU crosses four of them; a raw tracepoint calling a few BPF helpers costs a fraction
//! of that (bench/RESULTS.md, issue 8). The programs record numbers only: TIDs and priorities
//! read from `struct task_struct` at the offsets the kernel's BTF gives. Names are looked up in
//! user space, off the measured CPUs: task names in `/proc/<tid>/comm` (cached, refreshed every
//! second; a task that exited before the reader saw it is `<...>`, as in ftrace), IRQ names in
//! `/proc/interrupts`, NMI handlers and timer functions in `/proc/kallsyms`.
//!
//! What one event costs here (a pipe ping-pong on one CPU, measured while building this):
//! ~90 ns to dispatch the program at all, ~70 ns for `bpf_ktime_get_ns`, ~20 ns for the rest.
//! So the fewer events on the measured path the better: the timer interrupt is marked by one
//! event (the timer's expiry) instead of the local-timer vector's entry and exit, and where
//! every wait is a timer wait, the expiry of the thread's sleep timer names the woken task and
//! `sched_waking` is left out: a timer wakeup of a busy CPU crosses two events, not four.

use crate::btf::Btf;
use crate::event::{Event, Kind, Task, TaskState};
use crate::TraceError;
use rtlab_sys::affinity::CpuMask;
use rtlab_sys::bpf::asm::{self, helper, R0, R1, R10, R2, R3, R4, R6, R7, R8, R9};
use rtlab_sys::bpf::{Insn, Map, MappedArray, Program};
use std::collections::HashMap;
use std::os::fd::OwnedFd;

/// Bytes per record.
const REC: i32 = 56;
// Record layout.
const OFF_TS: i16 = 0;
const OFF_KIND: i16 = 8;
const OFF_CPU: i16 = 12;
const OFF_CUR: i16 = 16;
const OFF_A: i16 = 20;
const OFF_PID1: i16 = 24;
const OFF_PRIO1: i16 = 28;
const OFF_PID2: i16 = 32;
const OFF_PRIO2: i16 = 36;
const OFF_X: i16 = 40;
/// Index + 1 of the record in its CPU's ring, written last.
const OFF_SEQ: i16 = 48;

const K_SWITCH: i32 = 1;
const K_WAKING: i32 = 2;
const K_MIGRATE: i32 = 3;
const K_IRQ_ENTRY: i32 = 4;
const K_IRQ_EXIT: i32 = 5;
const K_SOFTIRQ_ENTRY: i32 = 6;
const K_SOFTIRQ_EXIT: i32 = 7;
const K_NMI: i32 = 8;
const K_TIMER: i32 = 9;
/// `futex_lock_pi`'s entry and return (function probes, for `rtlab watch`'s `lock` kind).
const K_LOCK_PI: i32 = 10;
const K_LOCK_PI_DONE: i32 = 11;
/// Vector `i` entry is `K_VECTOR + 2i`, its exit `K_VECTOR + 2i + 1`.
const K_VECTOR: i32 = 16;

/// The IRQ vectors traced (x86 names; absent elsewhere, which is reported, not fatal). Not
/// `local_timer`: its entry and exit would be two of the four events on every timer wakeup
/// of a busy CPU; `hrtimer_expire_entry`, one event, marks the timer interrupt instead (it
/// carries the timer, the tick's or the sleeping thread's), and the rest of the interrupt
/// counts to the task it interrupted.
const VECTORS: &[&str] = &[
    "reschedule",
    "call_function",
    "call_function_single",
    "irq_work",
    "x86_platform_ipi",
];

const SOFTIRQS: &[&str] = &[
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// Slots per CPU (a power of two), 3.5 MiB: a fifth of a second of a CPU saturated by a
/// message ping-pong (~300 k events/s), seconds of an ordinary busy CPU.
const SLOTS: u32 = 65536;
/// Bytes per head counter: one cache line each, so CPUs never share one.
const HEAD_BYTES: u32 = 64;

/// Where the programs find what they record, in this kernel's structures.
#[derive(Debug, Clone, Copy)]
struct TaskOffsets {
    /// `task_struct.pid`, `.prio`.
    pid: i32,
    prio: i32,
    /// The CPU a task last ran on (`task_struct.thread_info.cpu`, `sched_waking`'s
    /// `target_cpu`), where BTF has it.
    cpu: Option<i32>,
    /// `hrtimer.function`.
    timer_function: i32,
    /// `hrtimer._softexpires`: the requested expiry; `hrtimer.node.expires`: the hard one,
    /// later by the timer slack.
    timer_expires: Option<i32>,
    timer_hard_expires: Option<i32>,
    /// How to name the task a sleep timer wakes, where this kernel allows it.
    sleeper: Option<Sleeper>,
}

/// A timer whose function is `hrtimer_wakeup` sits in a `struct hrtimer_sleeper`, next to the
/// task it wakes; `bpf_rdonly_cast` (a kfunc the verifier turns into nothing) lets a typed
/// program read it with plain loads.
#[derive(Debug, Clone, Copy)]
struct Sleeper {
    /// `hrtimer_wakeup`'s address (from /proc/kallsyms).
    wakeup: u64,
    /// BTF ids of `struct hrtimer_sleeper` and of the kfunc.
    type_id: i32,
    cast: i32,
    /// `hrtimer_sleeper.task`.
    task: i32,
}

impl TaskOffsets {
    fn from_btf(btf: &Btf, symbols: &[(u64, String)]) -> Result<TaskOffsets, TraceError> {
        let need = |s: &str, f: &str| {
            btf.offset_of(s, f)
                .map(|o| o as i32)
                .ok_or_else(|| TraceError::Unsupported(format!("BTF has no {s}.{f}")))
        };
        let sleeper = (|| {
            Some(Sleeper {
                wakeup: symbols.iter().find(|(_, n)| n == "hrtimer_wakeup")?.0,
                type_id: btf.struct_id("hrtimer_sleeper")? as i32,
                cast: btf.func_id("bpf_rdonly_cast")? as i32,
                task: btf.offset_of("hrtimer_sleeper", "task")? as i32,
            })
        })();
        Ok(TaskOffsets {
            pid: need("task_struct", "pid")?,
            prio: need("task_struct", "prio")?,
            cpu: btf
                .offset_of("task_struct", "thread_info.cpu")
                .or_else(|| btf.offset_of("task_struct", "cpu"))
                .map(|o| o as i32),
            timer_function: need("hrtimer", "function")?,
            timer_expires: btf.offset_of("hrtimer", "_softexpires").map(|o| o as i32),
            timer_hard_expires: btf.offset_of("hrtimer", "node.expires").map(|o| o as i32),
            sleeper,
        })
    }
}

/// The maps a program uses: per CPU, whether it is traced and which ring it writes (user
/// space may change the first while the programs run), the rings' heads and their slots.
#[derive(Debug, Clone, Copy)]
struct Maps {
    cpus: i32,
    heads: i32,
    slots: i32,
}

/// A CPU's entry in the `cpus` map: traced (u32, 0 or 1), then its ring's index + 1 (u32,
/// 0: no ring; rings are dense, so a CPU numbered 200 costs one ring, not 201).
const CPU_TRACED: i16 = 0;
const CPU_RING: i16 = 4;
const CPU_ENTRY: u32 = 8;

/// Besides an event on a traced CPU, which events of other CPUs a program records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AlsoIf {
    /// None.
    No,
    /// Those whose CPU argument `ctx->args[n]` is traced (a migration to a traced CPU).
    ArgCpu(i16),
    /// Those whose task (`ctx->args[0]`) last ran on a traced CPU, its CPU read at this
    /// `task_struct` offset (typed programs): a wakeup, from anywhere, of a task there.
    TaskCpu(i32),
    /// All of them (a wakeup where the task's CPU cannot be read cheaply).
    Any,
}

/// Builds one program: the common prologue (CPU filter, timestamp, claim a slot, kind, CPU),
/// `body` (with r6 = ctx, r7 = the slot), then the sequence number.
struct Builder {
    insns: Vec<Insn>,
    /// Jumps past the record (before a slot is claimed) ...
    to_end: Vec<usize>,
    /// ... and to its sequence number (after: a claimed slot must always be completed).
    to_finish: Vec<usize>,
    /// BTF-typed program: task fields are plain loads; else `bpf_probe_read_kernel`.
    direct: bool,
}

/// Stack slots: the lookup key (u32), the ring's index + 1 (u32) and the claimed index (u64).
const FP_KEY: i16 = -4;
const FP_RING: i16 = -8;
const FP_INDEX: i16 = -16;

impl Builder {
    fn new(kind: i32, maps: Maps, also: AlsoIf, direct: bool) -> Builder {
        let mut b = Builder::start(direct);
        b.prologue(kind, maps, also);
        b
    }

    /// An empty program with r6 = ctx: checks that end it without a record (`jump_end`)
    /// may come before the [`Builder::prologue`].
    fn start(direct: bool) -> Builder {
        let mut b = Builder {
            insns: Vec::new(),
            to_end: Vec::new(),
            to_finish: Vec::new(),
            direct,
        };
        b.push(asm::mov(R6, R1));
        b
    }

    /// CPU filter, timestamp, claim a slot, kind, CPU (r7 = the slot from here on). The
    /// filter reads this CPU's entry of the `cpus` map (an array's lookup, which the verifier
    /// turns into an address computation; a CPU past its end or without a ring records
    /// nothing) on every event, so the traced set can change at run time.
    fn prologue(&mut self, kind: i32, maps: Maps, also: AlsoIf) {
        let b = self;
        b.push(asm::call(helper::GET_SMP_PROCESSOR_ID));
        b.push(asm::mov(R8, R0));
        b.lookup(maps.cpus, R8);
        b.push(asm::ldx32(R1, R0, CPU_RING));
        b.jump_end(asm::jeq_imm(R1, 0, 0));
        b.push(asm::stx32(R10, FP_RING, R1));
        if also != AlsoIf::Any {
            b.push(asm::ldx32(R1, R0, CPU_TRACED));
            let other = match also {
                AlsoIf::ArgCpu(n) => vec![asm::ldx64(R2, R6, n * 8)],
                AlsoIf::TaskCpu(field) => {
                    vec![asm::ldx64(R3, R6, 0), asm::ldx32(R2, R3, field as i16)]
                }
                AlsoIf::No | AlsoIf::Any => Vec::new(),
            };
            if other.is_empty() {
                b.jump_end(asm::jeq_imm(R1, 0, 0));
            } else {
                // Traced here: on to the record; else the other CPU's entry decides.
                let at = b.insns.len();
                b.push(asm::jne_imm(R1, 0, 0));
                b.insns.extend(other);
                b.lookup(maps.cpus, R2);
                b.push(asm::ldx32(R1, R0, CPU_TRACED));
                b.jump_end(asm::jeq_imm(R1, 0, 0));
                b.insns[at].off = (b.insns.len() - at - 1) as i16;
            }
        }
        b.push(asm::call(helper::KTIME_GET_NS));
        b.push(asm::mov(R9, R0));
        // index = heads[ring]++ (atomic: an NMI's program may interrupt this one).
        b.push(asm::ldx32(R1, R10, FP_RING));
        b.push(asm::add_imm(R1, -1));
        b.lookup(maps.heads, R1);
        b.push(asm::mov_imm(R1, 1));
        b.push(asm::atomic_fetch_add64(R0, 0, R1));
        b.push(asm::stx64(R10, FP_INDEX, R1));
        // slot = slots[ring * SLOTS + index % SLOTS]
        b.push(asm::and_imm(R1, SLOTS as i32 - 1));
        b.push(asm::ldx32(R2, R10, FP_RING));
        b.push(asm::add_imm(R2, -1));
        b.push(asm::mul_imm(R2, SLOTS as i32));
        b.push(asm::add(R1, R2));
        b.lookup(maps.slots, R1);
        b.push(asm::mov(R7, R0));
        b.push(asm::stx64(R7, OFF_TS, R9));
        b.push(asm::st32(R7, OFF_KIND, kind));
        b.push(asm::stx32(R7, OFF_CPU, R8));
    }

    /// `r0 = &map[key register]`, or exit when out of range.
    fn lookup(&mut self, map: i32, key: u8) {
        self.push(asm::stx32(R10, FP_KEY, key));
        self.extend(asm::ld_map_fd(R1, map));
        self.push(asm::mov(R2, R10));
        self.push(asm::add_imm(R2, FP_KEY as i32));
        self.push(asm::call(helper::MAP_LOOKUP_ELEM));
        self.jump_end(asm::jeq_imm(R0, 0, 0));
    }

    /// `record.cur = current TID` (only where the attribution uses it).
    fn current(&mut self) {
        self.push(asm::call(helper::GET_CURRENT_PID_TGID));
        self.push(asm::stx32(R7, OFF_CUR, R0));
    }

    fn push(&mut self, i: Insn) {
        self.insns.push(i);
    }

    fn extend(&mut self, i: [Insn; 2]) {
        self.insns.extend_from_slice(&i);
    }

    fn jump_end(&mut self, i: Insn) {
        self.to_end.push(self.insns.len());
        self.insns.push(i);
    }

    fn jump_finish(&mut self, i: Insn) {
        self.to_finish.push(self.insns.len());
        self.insns.push(i);
    }

    /// `record[dst] = ctx->args[arg]` (32 or 64 bits).
    fn arg(&mut self, arg: i16, dst: i16, wide: bool) {
        self.push(asm::ldx64(R1, R6, arg * 8));
        self.push(if wide {
            asm::stx64(R7, dst, R1)
        } else {
            asm::stx32(R7, dst, R1)
        });
    }

    /// `record[dst..dst+size] = *(task in ctx->args[arg] + field)` (size 4 when direct).
    fn task_field(&mut self, arg: i16, field: i32, dst: i16, size: i32) {
        if self.direct {
            self.push(asm::ldx64(R3, R6, arg * 8));
            self.push(asm::ldx32(R1, R3, field as i16));
            self.push(asm::stx32(R7, dst, R1));
            return;
        }
        self.push(asm::mov(R1, R7));
        self.push(asm::add_imm(R1, dst as i32));
        self.push(asm::mov_imm(R2, size));
        self.push(asm::ldx64(R3, R6, arg * 8));
        self.push(asm::add_imm(R3, field));
        self.push(asm::call(helper::PROBE_READ_KERNEL));
    }

    /// `hrtimer_expire_entry(struct hrtimer *, ktime_t *now)`: the function (in X), and for
    /// a sleep timer the task it wakes (slot 1, A = 1), the requested expiry (slot 2's
    /// eight bytes; 0 where BTF does not place it) and the slack (CUR: hard - requested).
    fn timer(&mut self, t: &TaskOffsets) {
        self.push(asm::st32(R7, OFF_A, 0));
        self.push(asm::st32(R7, OFF_PID2, 0));
        self.push(asm::st32(R7, OFF_PRIO2, 0));
        self.push(asm::st32(R7, OFF_CUR, 0));
        if !self.direct {
            self.task_field(0, t.timer_function, OFF_X, 8);
            return;
        }
        self.push(asm::ldx64(R3, R6, 0));
        self.push(asm::ldx64(R2, R3, t.timer_function as i16));
        self.push(asm::stx64(R7, OFF_X, R2));
        if let Some(expires) = t.timer_expires {
            self.push(asm::ldx64(R1, R3, expires as i16));
            self.push(asm::stx64(R7, OFF_PID2, R1));
            if let Some(hard) = t.timer_hard_expires {
                self.push(asm::ldx64(R4, R3, hard as i16));
                self.push(asm::sub(R4, R1));
                self.push(asm::stx32(R7, OFF_CUR, R4));
            }
        }
        let Some(s) = t.sleeper else { return };
        self.extend(asm::ld_imm64(R1, s.wakeup));
        self.jump_finish(asm::jne(R2, R1, 0));
        self.push(asm::mov(R1, R3));
        self.push(asm::mov_imm(R2, s.type_id));
        self.push(asm::kfunc_call(s.cast));
        self.push(asm::ldx64(R3, R0, s.task as i16));
        self.jump_finish(asm::jeq_imm(R3, 0, 0));
        self.push(asm::ldx32(R1, R3, t.pid as i16));
        self.push(asm::stx32(R7, OFF_PID1, R1));
        self.push(asm::ldx32(R1, R3, t.prio as i16));
        self.push(asm::stx32(R7, OFF_PRIO1, R1));
        self.push(asm::st32(R7, OFF_A, 1));
    }

    /// TID and priority of the task in `ctx->args[arg]` into slot 1 or 2.
    fn task(&mut self, arg: i16, t: &TaskOffsets, second: bool) {
        let (pid, prio) = if second {
            (OFF_PID2, OFF_PRIO2)
        } else {
            (OFF_PID1, OFF_PRIO1)
        };
        self.task_field(arg, t.pid, pid, 4);
        self.task_field(arg, t.prio, prio, 4);
    }

    fn finish(mut self) -> Vec<Insn> {
        // The sequence number last: the record is complete (x86-64 keeps stores in order).
        let finish = self.insns.len();
        for &at in &self.to_finish {
            self.insns[at].off = (finish - at - 1) as i16;
        }
        self.push(asm::ldx64(R1, R10, FP_INDEX));
        self.push(asm::add_imm(R1, 1));
        self.push(asm::stx64(R7, OFF_SEQ, R1));
        let end = self.insns.len();
        self.push(asm::mov_imm(R0, 0));
        self.push(asm::exit());
        for &at in &self.to_end {
            self.insns[at].off = (end - at - 1) as i16;
        }
        self.insns
    }
}

/// A raw tracepoint, its kind, and the number of arguments its BTF prototype must have.
struct Probe {
    tracepoint: String,
    kind: i32,
    args: usize,
}

/// The probes, the timer's before `sched_waking` (which may be left out once it loaded).
fn probes() -> Vec<Probe> {
    let p = |tp: &str, kind, args| Probe {
        tracepoint: tp.to_string(),
        kind,
        args,
    };
    let mut v = vec![
        p("sched_switch", K_SWITCH, 4),
        p("hrtimer_expire_entry", K_TIMER, 2),
        p("sched_waking", K_WAKING, 1),
        p("sched_migrate_task", K_MIGRATE, 2),
        p("irq_handler_entry", K_IRQ_ENTRY, 2),
        p("irq_handler_exit", K_IRQ_EXIT, 3),
        p("softirq_entry", K_SOFTIRQ_ENTRY, 1),
        p("softirq_exit", K_SOFTIRQ_EXIT, 1),
        p("nmi_handler", K_NMI, 3),
    ];
    for (i, name) in VECTORS.iter().enumerate() {
        v.push(p(&format!("{name}_entry"), K_VECTOR + 2 * i as i32, 1));
        v.push(p(&format!("{name}_exit"), K_VECTOR + 2 * i as i32 + 1, 1));
    }
    v
}

/// The kernel function whose entry and return bound a thread's wait for a PI futex
/// (`FUTEX_LOCK_PI`, `FUTEX_LOCK_PI2`, `FUTEX_TRYLOCK_PI`): `(u32 __user *uaddr, unsigned int
/// flags, ktime_t *time, int trylock)`. Only the contended path enters the kernel, so probes
/// there run only when a thread has to wait (the uncontended lock is an atomic in user
/// space). Plain futex waits are not recorded: a lock's wait cannot be told from a condition
/// variable's or a parker's there.
const LOCK_PI_FN: &str = "futex_lock_pi";
const LOCK_PI_ARGS: usize = 4;
/// x86-64's `futex` system call, and the operations that wait for a PI futex (after
/// `FUTEX_CMD_MASK`): `FUTEX_LOCK_PI`, `FUTEX_LOCK_PI2`.
const SYS_FUTEX: i32 = 202;
const FUTEX_CMD_MASK: i32 = 0x7f;
const FUTEX_LOCK_PI: i32 = 6;
const FUTEX_LOCK_PI2: i32 = 13;

/// Whether to record PI lock waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockWaits {
    /// No.
    No,
    /// Only where function probes make it cheap ([`LockProbes::Function`]).
    #[default]
    IfCheap,
    /// Also on the system calls where they do not ([`LockProbes::Syscalls`]).
    Any,
}

/// How the PI lock waits are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockProbes {
    /// Programs at `futex_lock_pi`'s entry and return (BPF trampolines): they run only for
    /// contended PI locks.
    Function,
    /// Programs on every system call's entry and exit (`raw_syscalls`), which keep the
    /// `futex` calls that lock a PI futex: a cost on every system call of the traced CPUs.
    Syscalls,
}

/// A function probe's program: the calling thread, and at the entry whether it only tries
/// (A = trylock), at the return the result (A).
fn lock_function_program(exit: bool, maps: Maps) -> Vec<Insn> {
    let kind = if exit { K_LOCK_PI_DONE } else { K_LOCK_PI };
    let mut b = Builder::new(kind, maps, AlsoIf::No, true);
    b.current();
    b.arg(if exit { LOCK_PI_ARGS as i16 } else { 3 }, OFF_A, false);
    b.finish()
}

/// `pt_regs` fields a system-call program reads: the call's number at its exit
/// (`orig_ax`) and its second argument (`si`, the futex operation).
#[derive(Debug, Clone, Copy)]
struct Regs {
    orig_ax: i16,
    si: i16,
}

/// `sys_enter(struct pt_regs *, long id)` / `sys_exit(struct pt_regs *, long ret)`: a record
/// only for `futex(FUTEX_LOCK_PI[2])`, the calling thread, and at the exit the result (A).
/// Every other call leaves after two compares, before the clock is read.
fn lock_syscall_program(exit: bool, regs: Regs, maps: Maps) -> Vec<Insn> {
    let mut b = Builder::start(true);
    b.push(asm::ldx64(R3, R6, 0));
    if exit {
        b.push(asm::ldx64(R1, R3, regs.orig_ax));
    } else {
        b.push(asm::ldx64(R1, R6, 8));
    }
    b.jump_end(asm::jne_imm(R1, SYS_FUTEX, 0));
    b.push(asm::ldx64(R1, R3, regs.si));
    b.push(asm::and_imm(R1, FUTEX_CMD_MASK));
    b.push(asm::jeq_imm(R1, FUTEX_LOCK_PI, 1));
    b.jump_end(asm::jne_imm(R1, FUTEX_LOCK_PI2, 0));
    let kind = if exit { K_LOCK_PI_DONE } else { K_LOCK_PI };
    b.prologue(kind, maps, AlsoIf::No);
    b.current();
    if exit {
        b.arg(1, OFF_A, false);
    } else {
        b.push(asm::st32(R7, OFF_A, 0));
    }
    b.finish()
}

fn program(probe: &Probe, t: &TaskOffsets, maps: Maps, direct: bool) -> Vec<Insn> {
    // Wakeups and migrations of tasks on traced CPUs are recorded wherever they happen: a
    // watched thread's waker may run on a CPU that is not traced.
    let also = match (probe.kind, t.cpu) {
        (K_WAKING, Some(cpu)) if direct => AlsoIf::TaskCpu(cpu),
        (K_WAKING, _) => AlsoIf::Any,
        (K_MIGRATE, _) => AlsoIf::ArgCpu(1),
        _ => AlsoIf::No,
    };
    let mut b = Builder::new(probe.kind, maps, also, direct);
    match probe.kind {
        K_SWITCH => {
            // (bool preempt, prev, next, unsigned int prev_state); prev is current: its TID
            // is a plain load where the program is typed, else the helper.
            if b.direct {
                b.task_field(1, t.pid, OFF_CUR, 4);
            } else {
                b.current();
            }
            b.arg(0, OFF_A, false);
            b.arg(3, OFF_X, true);
            b.task_field(1, t.prio, OFF_PRIO1, 4);
            b.task(2, t, true);
        }
        K_WAKING => {
            // The waker (for a lock wait: the holder), and the CPU the woken task last ran on.
            b.current();
            b.task(0, t, false);
            match t.cpu {
                Some(cpu) => b.task_field(0, cpu, OFF_A, 4),
                None => b.push(asm::st32(R7, OFF_A, -1)),
            }
        }
        K_MIGRATE => {
            b.current();
            b.task(0, t, false);
            b.arg(1, OFF_A, false);
        }
        K_IRQ_ENTRY | K_IRQ_EXIT | K_SOFTIRQ_ENTRY | K_SOFTIRQ_EXIT => b.arg(0, OFF_A, false),
        K_NMI => {
            // (void *handler, s64 delta_ns, int handled)
            b.arg(0, OFF_PID1, true);
            b.arg(1, OFF_X, true);
        }
        K_TIMER => b.timer(t),
        _ => {}
    }
    b.finish()
}

/// Loads and attaches the two PI lock probes: at `futex_lock_pi` where the kernel allows
/// function probes, else (when `syscalls`) on the system calls; or says why not.
fn attach_lock_probes(
    btf: &Btf,
    maps: Maps,
    syscalls: bool,
) -> Result<(LockProbes, Vec<(Program, OwnedFd)>), String> {
    let verifier = |e: rtlab_sys::bpf::LoadError| {
        let last = e.log.lines().rev().find(|l| !l.trim().is_empty());
        format!(
            "{}{}",
            e.error,
            last.map(|l| format!(": {l}")).unwrap_or_default()
        )
    };
    let function = (|| {
        let func = btf.func_id(LOCK_PI_FN).ok_or("not in this kernel's BTF")?;
        if btf.func_params(LOCK_PI_FN) != Some(LOCK_PI_ARGS) {
            return Err("an unexpected prototype".to_string());
        }
        [false, true]
            .into_iter()
            .map(|exit| {
                let insns = lock_function_program(exit, maps);
                let p = Program::load_function_probe(&insns, func, exit).map_err(verifier)?;
                let link = p.attach_raw_tracepoint(None).map_err(|e| e.to_string())?;
                Ok((p, link))
            })
            .collect::<Result<Vec<_>, String>>()
    })();
    let why = match function {
        Ok(v) => return Ok((LockProbes::Function, v)),
        Err(why) => format!("{LOCK_PI_FN}: {why}"),
    };
    if !syscalls {
        return Err(why);
    }
    let regs = (|| {
        Some(Regs {
            orig_ax: btf.offset_of("pt_regs", "orig_ax")? as i16,
            si: btf.offset_of("pt_regs", "si")? as i16,
        })
    })()
    .ok_or(format!("{why}; BTF has no pt_regs.orig_ax/si"))?;
    [("sys_enter", false), ("sys_exit", true)]
        .into_iter()
        .map(|(tp, exit)| {
            let id = btf
                .typedef_id(&format!("btf_trace_{tp}"))
                .ok_or(format!("{why}; no {tp} tracepoint"))?;
            let insns = lock_syscall_program(exit, regs, maps);
            let p = Program::load_btf_raw_tracepoint(&insns, id)
                .map_err(|e| format!("{why}; {tp}: {}", verifier(e)))?;
            let link = p
                .attach_raw_tracepoint(None)
                .map_err(|e| format!("{why}; {tp}: {e}"))?;
            Ok((p, link))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(|v| (LockProbes::Syscalls, v))
}

/// A CPU's entry in the `cpus` map.
fn cpu_entry(traced: bool, ring: usize) -> [u8; CPU_ENTRY as usize] {
    let mut e = [0; CPU_ENTRY as usize];
    e[CPU_TRACED as usize..][..4].copy_from_slice(&(traced as u32).to_ne_bytes());
    e[CPU_RING as usize..][..4].copy_from_slice(&(ring as u32 + 1).to_ne_bytes());
    e
}

/// A running recorder; detaches everything on drop.
#[derive(Debug)]
pub(crate) struct Recorder {
    heads: MappedArray,
    slots: MappedArray,
    /// Per ring (in ring order): (its CPU, next index to read, records lost since the last
    /// one read).
    next: Vec<(usize, u64, u64)>,
    lost: u64,
    _links: Vec<OwnedFd>,
    _programs: Vec<Program>,
    /// Per CPU: traced, and its ring ([`CPU_TRACED`], [`CPU_RING`]); the traced set as last set.
    cpus_map: Map,
    traced: CpuMask,
    rings: CpuMask,
    _maps: [Map; 2],
    /// Tracepoints that could not be attached.
    pub missing: Vec<String>,
    /// How PI lock waits are recorded, if they are.
    pub lock_probes: Option<LockProbes>,
    /// The timer program names the task each sleep timer wakes.
    #[cfg_attr(not(test), allow(dead_code))]
    pub names_timer_wakeups: bool,
    irq_names: HashMap<u32, String>,
    /// Kernel text symbols, sorted by address.
    symbols: Vec<(u64, String)>,
    comms: HashMap<i64, std::sync::Arc<str>>,
    /// Timer functions' names by address (a few, each named on every expiry).
    timer_functions: HashMap<u64, std::sync::Arc<str>>,
    comms_since: u64,
    /// Other clocks' lead over CLOCK_MONOTONIC (`clock_offsets_ns`), refreshed with `comms`.
    clock_offsets: [i64; 3],
}

impl Recorder {
    /// Attaches the programs, with rings for the CPUs in `cpus` (any numbers), recording
    /// those in `traced` ([`Recorder::set_traced`] changes them; wakeups and migrations of
    /// tasks on traced CPUs are recorded wherever they happen). Without
    /// `wakings`, `sched_waking` is left out where the timer program names the task each
    /// sleep timer wakes (enough to explain timer waits; the wakers of other waits need it).
    /// With `locks`, the entry and return of PI futex lock waits are recorded too, where the
    /// kernel allows ([`attach_lock_probes`]; else they are `missing`).
    pub fn start(
        cpus: &[usize],
        traced: &CpuMask,
        wakings: bool,
        locks: LockWaits,
    ) -> Result<Recorder, TraceError> {
        // The reader trusts a record once its sequence number is there: that needs the CPU
        // to make the programs' stores visible in order, which x86-64 does (TSO). Elsewhere a
        // release store would be needed (BPF has one only since 6.15): use tracefs there.
        if !cfg!(target_arch = "x86_64") {
            return Err(TraceError::Unsupported(
                "the eBPF recorder needs x86-64 store ordering on this build".into(),
            ));
        }
        let btf = Btf::vmlinux().map_err(TraceError::Unsupported)?;
        let symbols = rtlab_sys::procfs::kernel_text_symbols();
        let offsets = TaskOffsets::from_btf(&btf, &symbols)?;
        let mut cpus = cpus.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        let rings = cpus.len().max(1) as u32;
        let entries = cpus.last().map_or(1, |&c| c as u32 + 1);
        let sys = TraceError::Sys;
        let heads_map = Map::array(HEAD_BYTES, rings, true).map_err(sys)?;
        let slots_map = Map::array(REC as u32, rings * SLOTS, true).map_err(sys)?;
        let cpus_map = Map::array(CPU_ENTRY, entries, false).map_err(sys)?;
        for (ring, &cpu) in cpus.iter().enumerate() {
            cpus_map
                .update(cpu as u32, &cpu_entry(traced.contains(cpu), ring))
                .map_err(sys)?;
        }
        let heads = heads_map.map_read().map_err(sys)?;
        let maps = Maps {
            cpus: cpus_map.raw_fd(),
            heads: heads_map.raw_fd(),
            slots: slots_map.raw_fd(),
        };
        let slots = slots_map.map_read().map_err(sys)?;
        let mut links = Vec::new();
        let mut programs = Vec::new();
        let mut missing = Vec::new();
        let mut names_sleepers = false;
        for probe in probes() {
            if probe.kind == K_WAKING && !wakings && names_sleepers {
                continue;
            }
            // The prototype's first parameter is the context.
            let proto = btf.typedef_fn_params(&format!("btf_trace_{}", probe.tracepoint));
            if proto != Some(probe.args + 1) {
                if probe.kind == K_SWITCH {
                    return Err(TraceError::Unsupported(format!(
                        "sched_switch has an unexpected prototype on this kernel ({proto:?} parameters)"
                    )));
                }
                missing.push(probe.tracepoint);
                continue;
            }
            let typed = btf
                .typedef_id(&format!("btf_trace_{}", probe.tracepoint))
                .and_then(|id| {
                    let load = |o: &TaskOffsets| {
                        let insns = program(&probe, o, maps, true);
                        Program::load_btf_raw_tracepoint(&insns, id).ok()
                    };
                    // Naming sleepers needs the kfunc; without it, the function alone.
                    let plain = TaskOffsets {
                        sleeper: None,
                        ..offsets
                    };
                    match load(&offsets) {
                        Some(p) => Some((p, offsets.sleeper.is_some())),
                        None => load(&plain).map(|p| (p, false)),
                    }
                });
            let (prog, name) = match typed {
                Some((p, sleepers)) => {
                    if probe.kind == K_TIMER {
                        names_sleepers = sleepers;
                    }
                    (p, None)
                }
                None => {
                    let insns = program(&probe, &offsets, maps, false);
                    let p = Program::load_raw_tracepoint(&insns).map_err(|e| {
                        let last = e
                            .log
                            .lines()
                            .rev()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("");
                        TraceError::Program(format!("{} ({}): {}", e.error, probe.tracepoint, last))
                    })?;
                    (p, Some(probe.tracepoint.as_str()))
                }
            };
            match prog.attach_raw_tracepoint(name) {
                Ok(link) => links.push(link),
                Err(e) if probe.kind == K_SWITCH => return Err(TraceError::Sys(e)),
                Err(_) => {
                    if probe.kind == K_TIMER {
                        names_sleepers = false;
                    }
                    missing.push(probe.tracepoint)
                }
            }
            programs.push(prog);
        }
        let mut lock_probes = None;
        if locks != LockWaits::No {
            match attach_lock_probes(&btf, maps, locks == LockWaits::Any) {
                Ok((how, attached)) => {
                    lock_probes = Some(how);
                    for (p, link) in attached {
                        programs.push(p);
                        links.push(link);
                    }
                }
                Err(why) => missing.push(format!("PI lock waits ({why})")),
            }
        }
        Ok(Recorder {
            heads,
            slots,
            next: cpus.iter().map(|&c| (c, 0, 0)).collect(),
            lost: 0,
            _links: links,
            _programs: programs,
            cpus_map,
            traced: traced.and(&CpuMask::of(&cpus)),
            rings: CpuMask::of(&cpus),
            _maps: [heads_map, slots_map],
            missing,
            lock_probes,
            names_timer_wakeups: names_sleepers,
            irq_names: rtlab_sys::procfs::irq_names(),
            symbols,
            comms: HashMap::new(),
            timer_functions: HashMap::new(),
            comms_since: 0,
            clock_offsets: rtlab_sys::time::clock_offsets_ns(),
        })
    }

    /// Records the CPUs of `traced` (of those with rings) from now on.
    pub fn set_traced(&mut self, traced: &CpuMask) -> Result<(), TraceError> {
        for (ring, &(cpu, _, _)) in self.next.iter().enumerate() {
            let on = traced.contains(cpu);
            if on != self.traced.contains(cpu) {
                self.cpus_map
                    .update(cpu as u32, &cpu_entry(on, ring))
                    .map_err(TraceError::Sys)?;
            }
        }
        self.traced = traced.and(&self.rings);
        Ok(())
    }

    /// The CPUs with rings: those that can be traced.
    pub fn ring_cpus(&self) -> &CpuMask {
        &self.rings
    }

    /// The CPUs recorded.
    pub fn traced(&self) -> &CpuMask {
        &self.traced
    }

    /// Records overwritten before the reader copied them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Decodes every complete record not read yet, CPU by CPU.
    pub fn drain(&mut self, mut f: impl FnMut(Event)) -> usize {
        // A record, or (Err) a count of records lost before the next one of that CPU.
        let mut records: Vec<Result<[u8; REC as usize], (u16, u64)>> = Vec::new();
        let slots = SLOTS as u64;
        for (ring, (cpu, next, gap)) in self.next.iter_mut().enumerate() {
            let head = self.heads.load_u64(ring * HEAD_BYTES as usize);
            // Fallen a whole ring behind: skip to what is still there, with a margin for
            // the slots being overwritten while we copy.
            if head > *next + slots {
                let resume = head - slots + 64;
                self.lost += resume - *next;
                *gap += resume - *next;
                *next = resume;
            }
            while *next < head {
                let at = (ring as u64 * slots + *next % slots) as usize * REC as usize;
                let want = *next + 1;
                let seq_at = at + OFF_SEQ as usize;
                let before = self.slots.load_u64(seq_at);
                if before < want {
                    break; // claimed, still being written: next time
                }
                let mut rec = [0u8; REC as usize];
                self.slots.copy(at, &mut rec);
                if before != want || self.slots.load_u64(seq_at) != want {
                    self.lost += 1; // overwritten by a later lap
                    *gap += 1;
                } else {
                    if *gap > 0 {
                        records.push(Err((*cpu as u16, *gap)));
                        *gap = 0;
                    }
                    records.push(Ok(rec));
                }
                *next += 1;
            }
        }
        let n = records.len();
        let now = rtlab_sys::time::monotonic_now_ns();
        if now > self.comms_since + 1_000_000_000 {
            self.comms.clear();
            self.comms_since = now;
            self.clock_offsets = rtlab_sys::time::clock_offsets_ns();
        }
        let mut lost_before: Option<(u16, u64)> = None;
        for r in &records {
            match r {
                Err(lost) => lost_before = Some(*lost),
                Ok(r) => {
                    if let Some(e) = self.decode(r) {
                        // The loss sits just before the first event after it.
                        if let Some((cpu, n)) = lost_before.take() {
                            f(Event {
                                cpu,
                                ts_ns: e.ts_ns.saturating_sub(1),
                                current_pid: -1,
                                kind: Kind::Lost(n),
                            });
                        }
                        f(e);
                    }
                }
            }
        }
        n
    }

    fn decode(&mut self, r: &[u8; REC as usize]) -> Option<Event> {
        let u32_at = |o: i16| u32::from_ne_bytes(r[o as usize..o as usize + 4].try_into().unwrap());
        let i32_at = |o: i16| u32_at(o) as i32 as i64;
        let u64_at = |o: i16| u64::from_ne_bytes(r[o as usize..o as usize + 8].try_into().unwrap());
        let cpu = u32_at(OFF_CPU) as u16;
        let kind_code = u32_at(OFF_KIND) as i32;
        // Slots are reused: only the fields this kind wrote are meaningful.
        let current_pid = if matches!(
            kind_code,
            K_SWITCH | K_WAKING | K_MIGRATE | K_LOCK_PI | K_LOCK_PI_DONE
        ) {
            u32_at(OFF_CUR) as i64
        } else {
            -1
        };
        let function = (kind_code == K_TIMER).then(|| self.timer_function(u64_at(OFF_X)));
        let mut task = |pid: i64, prio: i64| Task {
            comm: self.comm(pid, cpu),
            pid,
            prio,
        };
        let kind = match kind_code {
            K_SWITCH => Kind::Switch {
                prev: task(current_pid, i32_at(OFF_PRIO1)),
                prev_state: TaskState::from_kernel(u32_at(OFF_A) != 0, u64_at(OFF_X)),
                next: task(i32_at(OFF_PID2), i32_at(OFF_PRIO2)),
            },
            // Where BTF does not say where the task last ran, the waker's CPU stands in (the
            // attribution does not use it).
            K_WAKING => Kind::Waking {
                task: task(i32_at(OFF_PID1), i32_at(OFF_PRIO1)),
                target_cpu: match u32_at(OFF_A) {
                    u32::MAX => cpu,
                    c => c as u16,
                },
            },
            K_MIGRATE => Kind::Migrate {
                task: task(i32_at(OFF_PID1), i32_at(OFF_PRIO1)),
                orig_cpu: cpu,
                dest_cpu: u32_at(OFF_A) as u16,
            },
            K_IRQ_ENTRY => {
                let irq = u32_at(OFF_A);
                if !self.irq_names.contains_key(&irq) {
                    self.irq_names = rtlab_sys::procfs::irq_names();
                }
                Kind::IrqEntry {
                    irq,
                    name: self
                        .irq_names
                        .get(&irq)
                        .cloned()
                        .unwrap_or_else(|| "?".into()),
                }
            }
            K_IRQ_EXIT => Kind::IrqExit,
            K_SOFTIRQ_ENTRY => Kind::SoftirqEntry {
                name: SOFTIRQS
                    .get(u32_at(OFF_A) as usize)
                    .map_or_else(|| format!("vec{}", u32_at(OFF_A)), |s| s.to_string()),
            },
            K_SOFTIRQ_EXIT => Kind::SoftirqExit,
            K_TIMER => Kind::HrtimerEntry {
                function: function.unwrap_or_else(|| "?".into()),
                task: (u32_at(OFF_A) == 1).then(|| task(i32_at(OFF_PID1), i32_at(OFF_PRIO1))),
                expires_ns: self.monotonic_expiry(u64_at(OFF_PID2), u64_at(OFF_TS)),
                slack_ns: u32_at(OFF_CUR) as u64,
            },
            K_LOCK_PI => Kind::LockPi {
                trylock: u32_at(OFF_A) != 0,
            },
            K_LOCK_PI_DONE => Kind::LockPiDone {
                ret: i32_at(OFF_A) as i32,
            },
            K_NMI => Kind::Nmi {
                handler: self.symbol(u64_at(OFF_PID1)),
                delta_ns: u64_at(OFF_X),
            },
            k if k >= K_VECTOR => {
                let i = ((k - K_VECTOR) / 2) as usize;
                if (k - K_VECTOR) % 2 == 0 {
                    Kind::VectorEntry {
                        name: VECTORS.get(i)?.to_string(),
                    }
                } else {
                    Kind::VectorExit
                }
            }
            _ => return None,
        };
        Some(Event {
            cpu,
            ts_ns: u64_at(OFF_TS),
            current_pid,
            kind,
        })
    }

    /// A task's name: `swapper/N` for the idle task, else `/proc/<tid>/comm`.
    fn comm(&mut self, pid: i64, cpu: u16) -> std::sync::Arc<str> {
        // The idle tasks' names share the cache under negative keys (no task has pid -1-N).
        let key = if pid == 0 { -1 - cpu as i64 } else { pid };
        self.comms
            .entry(key)
            .or_insert_with(|| match pid {
                0 => format!("swapper/{cpu}").into(),
                _ => rtlab_sys::procfs::task_comm(pid)
                    .unwrap_or_else(|| "<...>".into())
                    .into(),
            })
            .clone()
    }

    /// A timer's expiry `raw` as CLOCK_MONOTONIC time, given that it expired at `ts_ns`: a
    /// timer keeps its expiry in its clock's time (a sleep on CLOCK_REALTIME or CLOCK_TAI, a
    /// relative one on CLOCK_MONOTONIC), and it never expires before it, so the clock is the
    /// one that puts the expiry at most an hour before `ts_ns` (1 ms of slack for the offsets'
    /// drift). None when none does or the recorder could not read it.
    fn monotonic_expiry(&self, raw: u64, ts_ns: u64) -> Option<u64> {
        monotonic_expiry(raw, ts_ns, &self.clock_offsets)
    }

    /// The kernel function at or below `addr`.
    /// A timer function's name, shared.
    fn timer_function(&mut self, addr: u64) -> std::sync::Arc<str> {
        if let Some(name) = self.timer_functions.get(&addr) {
            return name.clone();
        }
        let name: std::sync::Arc<str> = self.symbol(addr).into();
        self.timer_functions.insert(addr, name.clone());
        name
    }

    fn symbol(&self, addr: u64) -> String {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).and_then(|i| self.symbols.get(i)) {
            Some((_, name)) => name.clone(),
            None => format!("{addr:#x}"),
        }
    }
}

fn monotonic_expiry(raw: u64, ts_ns: u64, offsets: &[i64; 3]) -> Option<u64> {
    const BEFORE: u64 = 3_600_000_000_000;
    const AFTER: u64 = 1_000_000;
    if raw == 0 || raw > i64::MAX as u64 {
        return None;
    }
    std::iter::once(0)
        .chain(offsets.iter().copied())
        .map(|off| raw as i64 - off)
        .filter(|&t| t >= 0)
        .map(|t| t as u64)
        .find(|&t| t <= ts_ns + AFTER && t + BEFORE >= ts_ns)
        .map(|t| t.min(ts_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_expiries_are_brought_to_monotonic_time_from_their_clock() {
        let ts = 5_000_000_000_000; // 5000 s since boot
        let offsets = [1_700_000_000_000_000_000, 1_700_000_037_000_000_000, 0];
        let cases = [
            (ts - 300, Some(ts - 300)),                             // monotonic
            (ts - 300 + 1_700_000_000_000_000_000, Some(ts - 300)), // realtime
            (ts - 9 + 1_700_000_037_000_000_000, Some(ts - 9)),     // TAI
            (ts + 500, Some(ts)),                                   // offset drift
            (ts + 2_000_000, None),                                 // in the future
            (0, None),                                              // not read
            (ts - 4_000_000_000_000, None),                         // over an hour before
        ];
        for (raw, want) in cases {
            assert_eq!(monotonic_expiry(raw, ts, &offsets), want, "{raw}");
        }
    }

    #[test]
    fn jumps_land_inside_the_program() {
        let with = TaskOffsets {
            pid: 100,
            prio: 104,
            cpu: Some(36),
            timer_function: 40,
            timer_expires: Some(24),
            timer_hard_expires: Some(8),
            sleeper: Some(Sleeper {
                wakeup: 0xffff_ffff_8100_0000,
                type_id: 5,
                cast: 6,
                task: 64,
            }),
        };
        let without = TaskOffsets {
            sleeper: None,
            cpu: None,
            ..with
        };
        for probe in probes() {
            for (direct, t) in [(true, &with), (true, &without), (false, &with)] {
                let maps = Maps {
                    cpus: 2,
                    heads: 3,
                    slots: 4,
                };
                let insns = program(&probe, t, maps, direct);
                assert!(insns.len() < 200, "{} instructions", insns.len());
                let len = insns.len() as i64;
                // Once the record is being written, no jump may skip the store of its
                // sequence number (the reader would wait on that slot for ever). (The slot's
                // lookup before that cannot fail: the index is always in range.)
                let claim = insns
                    .iter()
                    .position(|i| i.code == 0x7b && i.regs & 0x0f == R7 && i.off == OFF_TS)
                    .unwrap() as i64;
                let seq = insns
                    .iter()
                    .rposition(|i| i.code == 0x7b && i.off == OFF_SEQ)
                    .unwrap() as i64;
                for (i, insn) in insns.iter().enumerate() {
                    let class_jmp = insn.code & 0x07 == 0x05;
                    let is_call_or_exit = insn.code == 0x85 || insn.code == 0x95;
                    if class_jmp && !is_call_or_exit {
                        let to = i as i64 + 1 + insn.off as i64;
                        assert!(
                            to > i as i64 && to < len,
                            "{}: jump at {i} to {to}",
                            probe.tracepoint
                        );
                        if i as i64 > claim {
                            assert!(
                                to < seq - 1,
                                "{}: jump at {i} skips the sequence number",
                                probe.tracepoint
                            );
                        }
                    }
                }
                assert_eq!(insns.last().unwrap().code, 0x95, "ends with exit");
            }
        }
    }

    /// Two CPUs to pin threads to, when this runs as root on at least two (else says why not).
    fn two_cpus_as_root() -> Option<(usize, usize)> {
        if rtlab_sys::process::effective_uid() != 0 {
            eprintln!("skipped: needs root (bpf)");
            return None;
        }
        let cpus = rtlab_sys::affinity::usable_cpus();
        if cpus.len() < 2 {
            eprintln!("skipped: needs two CPUs");
            return None;
        }
        Some((cpus.as_slice()[0], cpus.as_slice()[1]))
    }

    /// This thread pinned to one CPU (`here`), and a thread asleep on another (`there`).
    fn asleep_on_another_cpu() -> Option<(usize, usize, Napper)> {
        let (here, there) = two_cpus_as_root()?;
        pin(here);
        let sleeper = Napper::on(there);
        std::thread::sleep(std::time::Duration::from_millis(5));
        Some((here, there, sleeper))
    }

    /// Pins the calling thread to `cpu`.
    fn pin(cpu: usize) {
        let one = rtlab_sys::affinity::CpuList::from(vec![cpu]);
        rtlab_sys::affinity::set_current_thread_affinity(&one).unwrap()
    }

    /// A thread pinned to a CPU that sleeps until woken (by [`Napper::wake_five`]); ends when
    /// dropped.
    struct Napper {
        go: Option<std::sync::mpsc::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
        tid: i64,
    }

    impl Napper {
        fn on(cpu: usize) -> Napper {
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                pin(cpu);
                tid_tx.send(rtlab_sys::futex::current_tid() as i64).unwrap();
                while wait.recv().is_ok() {}
            });
            Napper {
                go: Some(go),
                thread: Some(thread),
                tid: tid_rx.recv().unwrap(),
            }
        }

        /// Wakes it five times, 2 ms apart, then lets it settle for 2 ms.
        fn wake_five(&self) {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(2));
                self.go.as_ref().unwrap().send(()).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    impl Drop for Napper {
        fn drop(&mut self) {
            drop(self.go.take());
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn a_waking_names_the_cpu_the_woken_task_last_ran_on() {
        let Some((here, there, sleeper)) = asleep_on_another_cpu() else {
            return;
        };
        let tid = sleeper.tid;
        // Only this CPU is recorded: the wakings of the thread on the other are seen here.
        let mut r = match Recorder::start(&[here], &CpuMask::of(&[here]), true, LockWaits::No) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        sleeper.wake_five();
        drop(sleeper);
        let mut events = Vec::new();
        r.drain(|e| events.push(e));
        let targets: Vec<u16> = events
            .iter()
            .filter_map(|e| match &e.kind {
                Kind::Waking { task, target_cpu } if task.pid == tid => Some(*target_cpu),
                _ => None,
            })
            .collect();
        assert!(!targets.is_empty(), "no waking of {tid}: {events:?}");
        assert!(
            targets.iter().all(|&c| c as usize == there),
            "woken on CPU {there}, recorded {targets:?}"
        );
    }

    #[test]
    fn a_cpus_ring_is_found_through_its_entry_not_its_number() {
        let Some((_, there, sleeper)) = asleep_on_another_cpu() else {
            return;
        };
        // One ring (index 0), for the second CPU: its events must land there and read back
        // with their own CPU number.
        let mut r = match Recorder::start(&[there], &CpuMask::of(&[there]), true, LockWaits::No) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        assert_ne!(
            there, 0,
            "the test needs a CPU whose ring index differs from its number"
        );
        sleeper.wake_five();
        drop(sleeper);
        let mut events = Vec::new();
        r.drain(|e| events.push(e));
        let switches = events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Switch { .. }))
            .count();
        assert!(switches >= 1, "{events:?}");
        assert!(events.iter().all(|e| e.cpu as usize == there), "{events:?}");
    }

    #[test]
    fn only_traced_cpus_are_recorded_but_their_tasks_wakings_anywhere() {
        let Some((here, there, sleeper)) = asleep_on_another_cpu() else {
            return;
        };
        let tid = sleeper.tid;
        // Rings for both CPUs; only the sleeper's recorded at first.
        let both = [here, there];
        let mut r = match Recorder::start(&both, &CpuMask::of(&[there]), true, LockWaits::No) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let drained = |r: &mut Recorder| {
            let mut events = Vec::new();
            r.drain(|e| events.push(e));
            events
        };
        sleeper.wake_five();
        let first = drained(&mut r);
        let switches_on = |events: &[Event], cpu: usize| {
            events
                .iter()
                .filter(|e| e.cpu as usize == cpu && matches!(e.kind, Kind::Switch { .. }))
                .count()
        };
        let wakings_from_here = |events: &[Event]| {
            events
                .iter()
                .filter(|e| e.cpu as usize == here)
                .filter(|e| matches!(&e.kind, Kind::Waking { task, .. } if task.pid == tid))
                .count()
        };
        assert_eq!(r.traced(), &CpuMask::of(&[there]));
        // (At least one of each: on a busy machine the sleeper may still be running when the
        // next token comes, and then nothing wakes it.)
        assert_eq!(switches_on(&first, here), 0, "{first:?}");
        assert!(switches_on(&first, there) >= 1, "{first:?}");
        // The waker's CPU is not traced, but the woken thread's is.
        assert!(wakings_from_here(&first) >= 1, "{first:?}");
        // Widened while running.
        r.set_traced(&CpuMask::of(&both)).unwrap();
        sleeper.wake_five();
        drop(sleeper);
        let second = drained(&mut r);
        assert!(switches_on(&second, here) >= 1, "{second:?}");
        assert!(wakings_from_here(&second) >= 1, "{second:?}");
    }

    #[test]
    fn pi_lock_waits_are_recorded_from_entry_to_return() {
        use rtlab_sys::futex::{lock_pi, unlock_pi, Scope};
        use std::sync::atomic::AtomicU32;
        if rtlab_sys::process::effective_uid() != 0 {
            eprintln!("skipped: needs root (bpf)");
            return;
        }
        let cpus: Vec<usize> = rtlab_sys::affinity::usable_cpus().as_slice().to_vec();
        let mut r = match Recorder::start(&cpus, &CpuMask::of(&cpus), true, LockWaits::Any) {
            Ok(r) if r.lock_probes.is_some() => r,
            Ok(r) => {
                eprintln!("skipped: {:?}", r.missing);
                return;
            }
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        // This thread holds the lock for 3 ms, three times; the other waits for it each time
        // (it takes it only once the word shows this thread as the owner).
        static WORD: AtomicU32 = AtomicU32::new(0);
        let (taken_tx, taken) = std::sync::mpsc::channel::<()>();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            tid_tx.send(rtlab_sys::futex::current_tid() as i64).unwrap();
            while go_rx.recv().is_ok() {
                lock_pi(&WORD, Scope::Private, None).unwrap();
                unlock_pi(&WORD, Scope::Private).unwrap();
                taken_tx.send(()).unwrap();
            }
        });
        let tid = tid_rx.recv().unwrap();
        let mut holds = Vec::new();
        for _ in 0..3 {
            lock_pi(&WORD, Scope::Private, None).unwrap();
            go.send(()).unwrap();
            // Held 3 ms from the moment the waiter blocks in the kernel (the kernel marks the
            // word FUTEX_WAITERS then), however late that thread gets to run.
            let asked = rtlab_sys::time::monotonic_now_ns();
            while WORD.load(std::sync::atomic::Ordering::Acquire) & 0x8000_0000 == 0 {
                assert!(
                    rtlab_sys::time::monotonic_now_ns() < asked + 5_000_000_000,
                    "the waiter never blocked"
                );
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            std::thread::sleep(std::time::Duration::from_millis(3));
            let released = rtlab_sys::time::monotonic_now_ns();
            unlock_pi(&WORD, Scope::Private).unwrap();
            taken.recv().unwrap();
            holds.push(released);
        }
        drop(go);
        waiter.join().unwrap();
        let mut events = Vec::new();
        r.drain(|e| events.push(e));
        events.sort_by_key(|e| e.ts_ns);
        let mut waits = Vec::new();
        let mut since = None;
        for e in events.iter().filter(|e| e.current_pid == tid) {
            match e.kind {
                Kind::LockPi { trylock } => {
                    assert!(!trylock);
                    since = Some(e.ts_ns);
                }
                Kind::LockPiDone { ret } => {
                    assert_eq!(ret, 0, "it got the lock");
                    waits.push((since.take().expect("an entry before the return"), e.ts_ns));
                }
                _ => {}
            }
        }
        assert_eq!(waits.len(), 3, "{waits:?}");
        for ((from, to), released) in waits.iter().zip(&holds) {
            assert!(
                to - from >= 2_000_000 && *to >= *released,
                "waited {} ns, returned {} ns after the release",
                to - from,
                *to as i64 - *released as i64
            );
        }
    }

    #[test]
    fn task_states_print_as_sched_switch_does() {
        let text = |p, s| TaskState::from_kernel(p, s).to_string();
        assert_eq!(text(true, 1), "R+");
        assert_eq!(text(false, 0), "R");
        assert_eq!(text(false, 1), "S");
        assert_eq!(text(false, 2), "D");
        assert_eq!(
            text(false, 0x402),
            "D",
            "bits past the reported ones are not shown"
        );
        for t in ["R", "R+", "S", "D", "S|D", "I"] {
            assert_eq!(TaskState::parse(t).to_string(), t);
        }
        assert!(TaskState::parse("R+").is_runnable() && TaskState::parse("R").is_runnable());
        assert!(!TaskState::parse("S").is_runnable() && !TaskState::parse("?").is_runnable());
        assert_eq!(TaskState::parse("W").to_string(), "?");
    }

    /// What `twenty_sleeps` recorded: the recorder, its events, this thread's TID, the CPU,
    /// and the sleeps' deadlines.
    type Sleeps = (Recorder, Vec<Event>, i64, usize, Vec<u64>);

    /// This thread, pinned to one CPU and recorded, sleeps 200 us twenty times, to absolute
    /// CLOCK_MONOTONIC deadlines (`None`: not root, or no eBPF).
    fn twenty_sleeps(wakings: bool) -> Option<Sleeps> {
        if rtlab_sys::process::effective_uid() != 0 {
            eprintln!("skipped: needs root (bpf)");
            return None;
        }
        let cpu = rtlab_sys::affinity::usable_cpus().as_slice()[0];
        rtlab_sys::affinity::set_current_thread_affinity(&rtlab_sys::affinity::CpuList::from(
            vec![cpu],
        ))
        .unwrap();
        let mut r = match Recorder::start(&[cpu], &CpuMask::of(&[cpu]), wakings, LockWaits::No) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("skipped: {e}");
                return None;
            }
        };
        let tid = rtlab_sys::futex::current_tid() as i64;
        let mut deadlines = Vec::new();
        for _ in 0..20 {
            let deadline = rtlab_sys::time::monotonic_now_ns() + 200_000;
            rtlab_sys::time::sleep_until_monotonic_ns(deadline).unwrap();
            deadlines.push(deadline);
        }
        let mut events = Vec::new();
        r.drain(|e| events.push(e));
        Some((r, events, tid, cpu, deadlines))
    }

    #[test]
    fn records_this_threads_switches_with_names_and_priorities() {
        let Some((r, events, tid, cpu, deadlines)) = twenty_sleeps(true) else {
            return;
        };
        assert_eq!(r.lost(), 0);
        let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
        let switches_out = events
            .iter()
            .filter(|e| {
                matches!(&e.kind, Kind::Switch { prev, prev_state, .. }
                    if prev.pid == tid && &*prev.comm == me.trim_end() && *prev_state == TaskState::SLEEPING)
            })
            .count();
        assert!(
            switches_out >= 20,
            "{switches_out} of 20 sleeps seen: {events:?}"
        );
        assert!(
            events.iter().all(|e| e.cpu as usize == cpu),
            "only the recorded CPU"
        );
        // Records come in slot order. An interrupt arriving between an event's timestamp and
        // its slot takes the slot first (the reader's history sorts them): only there, and
        // by little, may a record be older than the one before it (seen under stress-ng).
        let interrupt = |e: &Event| {
            !matches!(
                e.kind,
                Kind::Switch { .. } | Kind::Waking { .. } | Kind::Migrate { .. }
            )
        };
        for w in events.windows(2).filter(|w| w[1].ts_ns < w[0].ts_ns) {
            assert!(interrupt(&w[0]) || interrupt(&w[1]), "out of order: {w:?}");
            assert!(
                w[0].ts_ns - w[1].ts_ns < 1_000_000,
                "far out of order: {w:?}"
            );
        }
        let now = rtlab_sys::time::monotonic_now_ns();
        assert!(
            events
                .iter()
                .all(|e| e.ts_ns <= now && e.ts_ns + 10_000_000_000 > now),
            "CLOCK_MONOTONIC stamps"
        );
        let wakings = events
            .iter()
            .filter(|e| matches!(&e.kind, Kind::Waking { task, .. } if task.pid == tid))
            .count();
        assert!(wakings >= 19, "{wakings} wakings of this thread");
        if r.names_timer_wakeups {
            let expiries: Vec<(u64, Option<u64>, u64)> = events
                .iter()
                .filter_map(|e| match &e.kind {
                    Kind::HrtimerEntry {
                        function,
                        task: Some(t),
                        expires_ns,
                        slack_ns,
                    } if t.pid == tid && &**function == "hrtimer_wakeup" => {
                        Some((e.ts_ns, *expires_ns, *slack_ns))
                    }
                    _ => None,
                })
                .collect();
            assert!(
                expiries.len() >= 19,
                "{expiries:?}: sleep timers of this thread"
            );
            // Each timer carries the deadline it was set for (and expired at or after it)
            // and this thread's timer slack.
            let slack = rtlab_sys::slack::current_timer_slack_ns().unwrap();
            for (at, expires, slack_ns) in &expiries {
                let expires = expires.expect("the expiry is read");
                assert!(
                    deadlines.contains(&expires),
                    "{expires} not in {deadlines:?}"
                );
                assert!(*at >= expires, "expired at {at}, before {expires}");
                assert_eq!(*slack_ns, slack, "the timer's slack");
            }
        }
    }

    #[test]
    fn timer_waits_alone_need_no_sched_waking() {
        let Some((r, events, tid, _, _)) = twenty_sleeps(false) else {
            return;
        };
        let wakings = events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Waking { .. }))
            .count();
        if !r.names_timer_wakeups {
            assert!(
                wakings > 0,
                "sched_waking stays when no timer names its task"
            );
            eprintln!("skipped: this kernel lets no program name a sleep timer's task");
            return;
        }
        assert_eq!(wakings, 0, "sched_waking left out");
        let named: Vec<&Event> = events
            .iter()
            .filter(|e| e.kind.woken().is_some_and(|t| t.pid == tid))
            .collect();
        assert!(
            named.len() >= 19,
            "{} of 20 sleeps: {events:?}",
            named.len()
        );
        assert!(named
            .iter()
            .all(|e| matches!(&e.kind, Kind::HrtimerEntry { function, .. } if &**function == "hrtimer_wakeup")));
        // Each expiry comes before the thread runs again.
        for e in &named {
            assert!(events.iter().any(|s| s.ts_ns >= e.ts_ns
                && matches!(&s.kind, Kind::Switch { next, .. } if next.pid == tid)));
        }
    }
}
