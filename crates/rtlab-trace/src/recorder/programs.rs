//! The recorder's eBPF programs, assembled at run time: one per raw tracepoint, each writing
//! the record layout of the parent module into its CPU's ring; and the assembler they share
//! with the programs on system calls and user-space probes (`call_programs`).

use super::*;

/// Where the programs find what they record, in this kernel's structures.
#[derive(Debug, Clone, Copy)]
pub(super) struct TaskOffsets {
    /// `task_struct.pid`, `.prio`, and `.tgid` (its process, where BTF has it).
    pub(super) pid: i32,
    pub(super) prio: i32,
    pub(super) tgid: Option<i32>,
    /// The CPU a task last ran on (`task_struct.thread_info.cpu`, `sched_waking`'s
    /// `target_cpu`), where BTF has it.
    pub(super) cpu: Option<i32>,
    /// `hrtimer.function`.
    pub(super) timer_function: i32,
    /// `hrtimer._softexpires`: the requested expiry; `hrtimer.node.expires`: the hard one,
    /// later by the timer slack.
    pub(super) timer_expires: Option<i32>,
    pub(super) timer_hard_expires: Option<i32>,
    /// How to name the task a sleep timer wakes, where this kernel allows it.
    pub(super) sleeper: Option<Sleeper>,
}

/// A timer whose function is `hrtimer_wakeup` sits in a `struct hrtimer_sleeper`, next to the
/// task it wakes; `bpf_rdonly_cast` (a kfunc the verifier turns into nothing) lets a typed
/// program read it with plain loads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sleeper {
    /// `hrtimer_wakeup`'s address (from /proc/kallsyms).
    pub(super) wakeup: u64,
    /// BTF ids of `struct hrtimer_sleeper` and of the kfunc.
    pub(super) type_id: i32,
    pub(super) cast: i32,
    /// `hrtimer_sleeper.task`.
    pub(super) task: i32,
    /// The addresses of [`crate::event::FILE_OR_SIGNAL_TIMERS`] (0: not in this kernel):
    /// their expiries go to the watched threads' rings, whose waits they end.
    pub(super) file_or_signal: [u64; 3],
}

impl TaskOffsets {
    pub(super) fn from_btf(
        btf: &Btf,
        symbols: &[(u64, String)],
    ) -> Result<TaskOffsets, TraceError> {
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
                file_or_signal: crate::event::FILE_OR_SIGNAL_TIMERS
                    .map(|f| symbols.iter().find(|(_, n)| n == f).map_or(0, |s| s.0)),
            })
        })();
        Ok(TaskOffsets {
            pid: need("task_struct", "pid")?,
            prio: need("task_struct", "prio")?,
            tgid: btf.offset_of("task_struct", "tgid").map(|o| o as i32),
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
/// space may change the first while the programs run), the rings' heads and their slots;
/// and, when a watch names its processes, their rings of their own.
#[derive(Debug, Clone, Copy)]
pub(super) struct Maps {
    pub(super) cpus: i32,
    pub(super) heads: i32,
    pub(super) slots: i32,
    pub(super) own: Option<OwnRings>,
    /// Slots per ring (a power of two).
    pub(super) size: u32,
    /// The stack map switches record the kernel stack of the task leaving the CPU into.
    pub(super) stacks: Option<i32>,
}

/// The watched processes' events go to rings of their own, one per CPU beside its ring for
/// everything else: however busy the machine, the few events that measure the watched
/// threads (their switches, wakeups, sleep timers and wait calls) are not overwritten by the
/// many that only explain (other tasks' switches and wakeups, interrupts). Heads `rings..2 *
/// rings` of the heads map; slots in a map of their own.
#[derive(Debug, Clone, Copy)]
pub(super) struct OwnRings {
    /// The set of watched processes (TGIDs).
    pub(super) watched: i32,
    pub(super) slots: i32,
    /// How many CPUs have rings.
    pub(super) rings: u32,
    /// Slots per ring (a power of two).
    pub(super) size: u32,
}

/// Whose event a record is, to choose between a CPU's two rings ([`OwnRings`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Whose {
    /// The tasks in these `ctx->args[n]` (a switch's two, a waking's one), their process at
    /// this `task_struct` offset.
    Args(&'static [i16], i32),
    /// The current task's.
    Current,
    /// The task a sleep timer (`ctx->args[0]`) wakes: the sleeper, `hrtimer.function`'s
    /// offset and `task_struct.tgid`'s.
    Sleeper(Sleeper, i32, i32),
    /// Always a watched thread's (the wait calls, recorded only for them).
    Watched,
    /// Never.
    Other,
}

/// A CPU's entry in the `cpus` map: traced (u32, 0 or 1), then its ring's index + 1 (u32,
/// 0: no ring; rings are dense, so a CPU numbered 200 costs one ring, not 201).
pub(super) const CPU_TRACED: i16 = 0;
pub(super) const CPU_RING: i16 = 4;
pub(super) const CPU_ENTRY: u32 = 8;

/// Besides an event on a traced CPU, which events of other CPUs a program records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AlsoIf {
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
pub(super) struct Builder {
    pub(super) insns: Vec<Insn>,
    /// Jumps past the record (before a slot is claimed) ...
    pub(super) to_end: Vec<usize>,
    /// ... and to its sequence number (after: a claimed slot must always be completed).
    pub(super) to_finish: Vec<usize>,
    /// BTF-typed program: task fields are plain loads; else `bpf_probe_read_kernel`.
    pub(super) direct: bool,
}

/// Stack slots: the lookup key (u32), the ring's index + 1 (u32), the claimed index (u64)
/// and whether the record goes to the watched processes' ring (u32).
pub(super) const FP_KEY: i16 = -4;
pub(super) const FP_RING: i16 = -8;
pub(super) const FP_INDEX: i16 = -16;
pub(super) const FP_OWN: i16 = -28;

impl Builder {
    pub(super) fn new(kind: i32, maps: Maps, also: AlsoIf, direct: bool, whose: Whose) -> Builder {
        let mut b = Builder::start(direct);
        b.prologue(kind, maps, also, whose);
        b
    }

    /// An empty program with r6 = ctx: checks that end it without a record (`jump_end`)
    /// may come before the [`Builder::prologue`].
    pub(super) fn start(direct: bool) -> Builder {
        let mut b = Builder {
            insns: Vec::new(),
            to_end: Vec::new(),
            to_finish: Vec::new(),
            direct,
        };
        b.push(asm::mov(R6, R1));
        b
    }

    /// A program on `sys_enter(struct pt_regs *, long id)` (`exit`: `sys_exit(struct
    /// pt_regs *, long ret)`), typed: r3 = the registers, r1 = the call's number.
    pub(super) fn syscall(exit: bool, regs: Regs) -> Builder {
        let mut b = Builder::start(true);
        b.push(asm::ldx64(R3, R6, 0));
        if exit {
            b.push(asm::ldx64(R1, R3, regs.orig_ax));
        } else {
            b.push(asm::ldx64(R1, R6, 8));
        }
        b
    }

    /// CPU filter, timestamp, claim a slot, kind, CPU (r7 = the slot from here on). The
    /// filter reads this CPU's entry of the `cpus` map (an array's lookup, which the verifier
    /// turns into an address computation; a CPU past its end or without a ring records
    /// nothing) on every event, so the traced set can change at run time.
    pub(super) fn prologue(&mut self, kind: i32, maps: Maps, also: AlsoIf, whose: Whose) {
        let b = self;
        if let Some(own) = maps.own {
            b.whose(own, whose);
        }
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
        if let Some(own) = maps.own {
            // The watched processes' heads follow the others'.
            b.push(asm::ldx32(R2, R10, FP_OWN));
            b.push(asm::jeq_imm(R2, 0, 1));
            b.push(asm::add_imm(R1, own.rings as i32));
        }
        b.lookup(maps.heads, R1);
        b.push(asm::mov_imm(R1, 1));
        b.push(asm::atomic_fetch_add64(R0, 0, R1));
        b.push(asm::stx64(R10, FP_INDEX, R1));
        let mut to_slot = None;
        if let Some(own) = maps.own {
            // slot = own_slots[ring * size + index % size]
            b.push(asm::ldx32(R2, R10, FP_OWN));
            let at = b.insns.len();
            b.push(asm::jeq_imm(R2, 0, 0));
            b.push(asm::and_imm(R1, own.size as i32 - 1));
            b.push(asm::ldx32(R2, R10, FP_RING));
            b.push(asm::add_imm(R2, -1));
            b.push(asm::mul_imm(R2, own.size as i32));
            b.push(asm::add(R1, R2));
            b.lookup(own.slots, R1);
            to_slot = Some(b.insns.len());
            b.push(asm::ja(0));
            b.insns[at].off = (b.insns.len() - at - 1) as i16;
        }
        // slot = slots[ring * size + index % size]
        b.push(asm::and_imm(R1, maps.size as i32 - 1));
        b.push(asm::ldx32(R2, R10, FP_RING));
        b.push(asm::add_imm(R2, -1));
        b.push(asm::mul_imm(R2, maps.size as i32));
        b.push(asm::add(R1, R2));
        b.lookup(maps.slots, R1);
        if let Some(at) = to_slot {
            b.insns[at].off = (b.insns.len() - at - 1) as i16;
        }
        b.push(asm::mov(R7, R0));
        b.push(asm::stx64(R7, OFF_TS, R9));
        b.push(asm::st32(R7, OFF_KIND, kind));
        b.push(asm::stx32(R7, OFF_CPU, R8));
    }

    /// Sets [`FP_OWN`]: whether `whose` task belongs to a process in `own.watched`. Typed
    /// programs only (the others' records all go to the common ring).
    pub(super) fn whose(&mut self, own: OwnRings, whose: Whose) {
        self.push(asm::st32(R10, FP_OWN, 0));
        match whose {
            Whose::Watched => {
                self.push(asm::st32(R10, FP_OWN, 1));
                return;
            }
            Whose::Other => return,
            // Task fields need plain loads.
            Whose::Args(..) | Whose::Sleeper(..) if !self.direct => return,
            _ => {}
        }
        // Jumps to the end of this check, patched below.
        let mut done = Vec::new();
        let mut marked = Vec::new();
        // One candidate task's process, in r1, looked up; a hit marks the record and ends
        // the check, a miss falls through to the next candidate (`skip` patched to here).
        let mut check = |b: &mut Builder, skips: Vec<usize>| {
            b.push(asm::stx32(R10, FP_KEY, R1));
            b.extend(asm::ld_map_fd(R1, own.watched));
            b.push(asm::mov(R2, R10));
            b.push(asm::add_imm(R2, FP_KEY as i32));
            b.push(asm::call(helper::MAP_LOOKUP_ELEM));
            b.push(asm::jeq_imm(R0, 0, 2));
            b.push(asm::st32(R10, FP_OWN, 1));
            done.push(b.insns.len());
            b.push(asm::ja(0));
            for at in skips {
                b.insns[at].off = (b.insns.len() - at - 1) as i16;
            }
        };
        match whose {
            Whose::Args(args, tgid) => {
                for &arg in args {
                    self.push(asm::ldx64(R3, R6, arg * 8));
                    self.push(asm::ldx32(R1, R3, tgid as i16));
                    check(self, Vec::new());
                }
            }
            Whose::Current => {
                self.push(asm::call(helper::GET_CURRENT_PID_TGID));
                self.push(asm::mov(R1, R0));
                self.push(asm::rsh_imm(R1, 32));
                check(self, Vec::new());
            }
            Whose::Sleeper(s, function, tgid) => {
                let mut skips = Vec::new();
                self.push(asm::ldx64(R3, R6, 0));
                self.push(asm::ldx64(R2, R3, function as i16));
                // A timer that wakes its thread through a file or a signal: whose it is shows
                // only at the waking that follows, and its expiry measures that thread's
                // wait, so it goes with the watched threads' events (a few a second: a
                // storm of other tasks' switches must not take them).
                for a in s.file_or_signal.into_iter().filter(|&a| a != 0) {
                    self.extend(asm::ld_imm64(R1, a));
                    self.push(asm::jne(R2, R1, 2));
                    self.push(asm::st32(R10, FP_OWN, 1));
                    marked.push(self.insns.len());
                    self.push(asm::ja(0));
                }
                self.extend(asm::ld_imm64(R1, s.wakeup));
                skips.push(self.insns.len());
                self.push(asm::jne(R2, R1, 0));
                self.push(asm::mov(R1, R3));
                self.push(asm::mov_imm(R2, s.type_id));
                self.push(asm::kfunc_call(s.cast));
                self.push(asm::ldx64(R3, R0, s.task as i16));
                skips.push(self.insns.len());
                self.push(asm::jeq_imm(R3, 0, 0));
                self.push(asm::ldx32(R1, R3, tgid as i16));
                check(self, skips);
            }
            Whose::Watched | Whose::Other => {}
        }
        for at in done.into_iter().chain(marked) {
            self.insns[at].off = (self.insns.len() - at - 1) as i16;
        }
    }

    /// `r0 = &map[key register]`, or exit when out of range.
    pub(super) fn lookup(&mut self, map: i32, key: u8) {
        self.push(asm::stx32(R10, FP_KEY, key));
        self.extend(asm::ld_map_fd(R1, map));
        self.push(asm::mov(R2, R10));
        self.push(asm::add_imm(R2, FP_KEY as i32));
        self.push(asm::call(helper::MAP_LOOKUP_ELEM));
        self.jump_end(asm::jeq_imm(R0, 0, 0));
    }

    /// `record.cur = current TID` (only where the attribution uses it).
    pub(super) fn current(&mut self) {
        self.push(asm::call(helper::GET_CURRENT_PID_TGID));
        self.push(asm::stx32(R7, OFF_CUR, R0));
    }

    pub(super) fn push(&mut self, i: Insn) {
        self.insns.push(i);
    }

    pub(super) fn extend(&mut self, i: [Insn; 2]) {
        self.insns.extend_from_slice(&i);
    }

    pub(super) fn jump_end(&mut self, i: Insn) {
        self.to_end.push(self.insns.len());
        self.insns.push(i);
    }

    pub(super) fn jump_finish(&mut self, i: Insn) {
        self.to_finish.push(self.insns.len());
        self.insns.push(i);
    }

    /// `record[dst] = ctx->args[arg]` (32 or 64 bits).
    pub(super) fn arg(&mut self, arg: i16, dst: i16, wide: bool) {
        self.push(asm::ldx64(R1, R6, arg * 8));
        self.push(if wide {
            asm::stx64(R7, dst, R1)
        } else {
            asm::stx32(R7, dst, R1)
        });
    }

    /// `record[dst..dst+size] = *(task in ctx->args[arg] + field)` (size 4 when direct).
    pub(super) fn task_field(&mut self, arg: i16, field: i32, dst: i16, size: i32) {
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

    /// `hrtimer_expire_entry(struct hrtimer *, ktime_t *now)`: the function (in X), the
    /// timer's address (slot 1's eight bytes), and for a sleep timer the task it wakes
    /// instead (slot 1, A = 1), the requested expiry (slot 2's
    /// eight bytes; 0 where BTF does not place it) and the slack (CUR: hard - requested).
    pub(super) fn timer(&mut self, t: &TaskOffsets) {
        self.push(asm::st64(R7, OFF_PID1, 0));
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
        // The timer itself (its address, slots 1's eight bytes: a sleep timer's task takes
        // them below): one timer's expiries told from another's.
        self.push(asm::stx64(R7, OFF_PID1, R3));
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

    /// `bpf_get_stackid(ctx, map, 0)` into `at` (i32: negative when not kept, the map's
    /// entry taken by another stack, or the unwinding failed).
    pub(super) fn stack(&mut self, map: i32, at: i16) {
        self.push(asm::mov(R1, R6));
        self.extend(asm::ld_map_fd(R2, map));
        self.push(asm::mov_imm(R3, 0));
        self.push(asm::call(helper::GET_STACKID));
        self.push(asm::stx32(R7, at, R0));
    }

    /// TID and priority of the task in `ctx->args[arg]` into slot 1 or 2.
    pub(super) fn task(&mut self, arg: i16, t: &TaskOffsets, second: bool) {
        let (pid, prio) = if second {
            (OFF_PID2, OFF_PRIO2)
        } else {
            (OFF_PID1, OFF_PRIO1)
        };
        self.task_field(arg, t.pid, pid, 4);
        self.task_field(arg, t.prio, prio, 4);
    }

    /// A program that writes no record: every early end lands on its exit.
    pub(super) fn finish_without_record(mut self) -> Vec<Insn> {
        let end = self.insns.len();
        self.push(asm::mov_imm(R0, 0));
        self.push(asm::exit());
        for &at in &self.to_end {
            self.insns[at].off = (end - at - 1) as i16;
        }
        self.insns
    }

    pub(super) fn finish(mut self) -> Vec<Insn> {
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
pub(super) struct Probe {
    pub(super) tracepoint: String,
    pub(super) kind: i32,
    pub(super) args: usize,
}

/// The probes, the timer's before `sched_waking` (which may be left out once it loaded).
pub(super) fn probes() -> Vec<Probe> {
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
        p("sched_process_exit", K_EXIT, 1),
        p("sched_process_fork", K_FORK, 2),
        p("sched_process_exec", K_EXEC, 3),
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
pub(super) const LOCK_PI_FN: &str = "futex_lock_pi";
pub(super) const LOCK_PI_ARGS: usize = 4;
/// x86-64's `futex` system call, and the operations that wait for a PI futex (after
/// `FUTEX_CMD_MASK`): `FUTEX_LOCK_PI`, `FUTEX_LOCK_PI2`.
pub(super) const SYS_FUTEX: i32 = 202;
pub(super) const FUTEX_CMD_MASK: i32 = 0x7f;
pub(super) const FUTEX_LOCK_PI: i32 = 6;
pub(super) const FUTEX_LOCK_PI2: i32 = 13;
/// The futex waits that take a timeout: `FUTEX_WAIT` (relative), `FUTEX_WAIT_BITSET`
/// (absolute, on CLOCK_MONOTONIC or, with `FUTEX_CLOCK_REALTIME`, CLOCK_REALTIME).
pub(super) const FUTEX_WAIT: i32 = 0;
pub(super) const FUTEX_WAIT_BITSET: i32 = 9;
pub(super) const FUTEX_CLOCK_REALTIME: u32 = 256;

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

pub(super) fn program(probe: &Probe, t: &TaskOffsets, maps: Maps, direct: bool) -> Vec<Insn> {
    // Wakeups and migrations of tasks on traced CPUs are recorded wherever they happen: a
    // watched thread's waker may run on a CPU that is not traced.
    let also = match (probe.kind, t.cpu) {
        (K_WAKING, Some(cpu)) if direct => AlsoIf::TaskCpu(cpu),
        (K_WAKING, _) => AlsoIf::Any,
        (K_MIGRATE, _) => AlsoIf::ArgCpu(1),
        // (A task's end, birth or new program, wherever: its events may be on a traced CPU.)
        (K_EXIT | K_FORK | K_EXEC, _) => AlsoIf::Any,
        _ => AlsoIf::No,
    };
    // Whose event it is, for the watched processes' rings.
    let whose = match (probe.kind, t.tgid) {
        (K_SWITCH, Some(tgid)) => Whose::Args(&[1, 2], tgid),
        (K_WAKING, Some(tgid)) => Whose::Args(&[0], tgid),
        (K_TIMER, Some(tgid)) => match t.sleeper {
            Some(s) => Whose::Sleeper(s, t.timer_function, tgid),
            None => Whose::Other,
        },
        _ => Whose::Other,
    };
    let mut b = Builder::new(probe.kind, maps, also, direct, whose);
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
            if let Some(map) = maps.stacks {
                b.stack(map, OFF_PID1);
            }
        }
        K_WAKING => {
            // The waker (for a lock wait: the holder), and the CPU the woken task last ran on.
            b.current();
            b.task(0, t, false);
            match t.cpu {
                Some(cpu) => b.task_field(0, cpu, OFF_A, 4),
                None => b.push(asm::st32(R7, OFF_A, -1)),
            }
            // The waker's stack (a timer's: the code its interrupt stopped), for the watched
            // threads' wakings alone.
            if let (Some(map), Some(_)) = (maps.stacks, maps.own) {
                b.push(asm::st32(R7, OFF_PID2, -1));
                b.push(asm::ldx32(R1, R10, FP_OWN));
                let at = b.insns.len();
                b.push(asm::jeq_imm(R1, 0, 0));
                b.stack(map, OFF_PID2);
                b.insns[at].off = (b.insns.len() - at - 1) as i16;
            }
        }
        K_EXIT | K_FORK | K_EXEC => {
            // The ending (forking, exec'ing) task and its name, into the record's 16 bytes
            // from OFF_PID1; a fork's child (parent, child) in A.
            b.current();
            if probe.kind == K_FORK {
                b.task_field(1, t.pid, OFF_A, 4);
            }
            b.push(asm::mov(R1, R7));
            b.push(asm::add_imm(R1, OFF_PID1 as i32));
            b.push(asm::mov_imm(R2, 16));
            b.push(asm::call(helper::GET_CURRENT_COMM));
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
