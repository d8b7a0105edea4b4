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
//! second; a task that ended before the reader saw it is named by its end record for two
//! seconds, or by its fork or exec record where the end record comes later, or, where all
//! were lost, `ended task`, where ftrace writes `<...>`), IRQ names in
//! `/proc/interrupts`, NMI handlers and timer functions in `/proc/kallsyms`.
//!
//! What one event costs here (a pipe ping-pong on one CPU, measured while building this):
//! ~90 ns to dispatch the program at all, ~70 ns for `bpf_ktime_get_ns`, ~20 ns for the rest.
//! So the fewer events on the measured path the better: the timer interrupt is marked by one
//! event (the timer's expiry) instead of the local-timer vector's entry and exit, and where
//! every wait is a timer wait, the expiry of the thread's sleep timer names the woken task and
//! `sched_waking` is left out: a timer wakeup of a busy CPU crosses two events, not four.

use crate::btf::Btf;
use crate::error::TraceError;
use crate::event::{Event, JvmProbe, Kind, Task, TaskState, SOFTIRQS};
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
/// A watched thread's entry into, and return from, a system call it waits in.
const K_WAIT_ENTER: i32 = 12;
const K_WAIT_EXIT: i32 = 13;
/// A USDT probe (a JVM's), A the attached probe's index.
const K_USDT: i32 = 14;
/// A task's end (`sched_process_exit`), its name in the 16 bytes from `OFF_PID1`: a task that
/// ended before its events were read has no /proc entry to name it by.
const K_EXIT: i32 = 15;
/// A task made (`sched_process_fork`, A the child's TID) and a program started
/// (`sched_process_exec`), the name the task then has in the 16 bytes from `OFF_PID1` (at a
/// fork the parent's, which the child carries until it execs or renames itself): a task
/// that ended before its other events were read, and whose end record came later, is still
/// named.
const K_FORK: i32 = 16;
const K_EXEC: i32 = 17;
/// Vector `i` entry is `K_VECTOR + 2i`, its exit `K_VECTOR + 2i + 1`.
const K_VECTOR: i32 = 18;

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

/// Slots per CPU (a power of two), 3.5 MiB: a fifth of a second of a CPU saturated by a
/// message ping-pong (~300 k events/s), seconds of an ordinary busy CPU. A watch sizes its
/// rings from the machine's event rate instead ([`Rings::for_rate`]).
pub(crate) const SLOTS: u32 = 65536;
/// Slots per CPU in the watched processes' rings ([`programs::OwnRings`]), 1.75 MiB: at a
/// thousand wakeups a second of four watched threads on one CPU (a few events each), seconds.
pub(crate) const OWN_SLOTS: u32 = 32768;

/// Slots per CPU of each ring (powers of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rings {
    /// Of the ring for every task's events.
    pub slots: u32,
    /// Of the watched processes' rings, where they have them.
    pub own_slots: u32,
}

impl Default for Rings {
    fn default() -> Rings {
        Rings {
            slots: SLOTS,
            own_slots: OWN_SLOTS,
        }
    }
}

impl Rings {
    /// The smallest and largest ring sizes chosen or accepted.
    pub const MIN: u32 = 64;
    pub const MAX: u32 = 1 << 22;
    /// Rings that hold a second of `events_per_cpu_s` (at least the default, at most 1 Mi
    /// slots (56 MiB) per CPU, and `memory_cap` bytes in all over `cpus` CPUs).
    pub fn for_rate(events_per_cpu_s: u64, cpus: usize, memory_cap: u64) -> Rings {
        let per_cpu_cap = memory_cap / (REC as u64 * cpus.max(1) as u64);
        let want = events_per_cpu_s
            .clamp(SLOTS as u64, 1 << 20)
            .min(per_cpu_cap.max(SLOTS as u64));
        // The largest power of two not over it, at least the default.
        let slots = (1u64 << (63 - want.leading_zeros())).max(SLOTS as u64) as u32;
        Rings {
            slots,
            own_slots: OWN_SLOTS,
        }
    }

    /// Both rings of `slots` each (a forced size, `--ring-slots`).
    pub fn forced(slots: u32) -> Result<Rings, BadRingSize> {
        if !slots.is_power_of_two() || !(Rings::MIN..=Rings::MAX).contains(&slots) {
            return Err(BadRingSize(slots));
        }
        Ok(Rings {
            slots,
            own_slots: slots,
        })
    }
}

/// A ring size that is not a power of two from [`Rings::MIN`] to [`Rings::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadRingSize(pub u32);

impl std::fmt::Display for BadRingSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: a power of two from {} to {}",
            self.0,
            Rings::MIN,
            Rings::MAX
        )
    }
}

impl std::error::Error for BadRingSize {}

/// How to set the recorder up.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Setup {
    /// Record `sched_waking` even where timer expiries name the woken sleepers.
    pub wakings: bool,
    pub locks: LockWaits,
    /// Record the wait calls of the watched processes (their return ends a delay).
    pub wait_calls: bool,
    /// A set of watched processes whose events get rings of their own.
    pub watched: bool,
    /// Processes a watched one starts are watched from their start (in the kernel).
    pub follow_forks: bool,
    pub rings: Rings,
    /// Each switch records the kernel stack the task leaving the CPU left it with
    /// ([`Kind::Stack`], [`Recorder::stack`]).
    pub stacks: bool,
}

/// Return addresses kept per kernel stack, and stacks kept (distinct ones: a stack seen
/// again reuses its entry; one whose entry is taken by another is not kept).
const STACK_DEPTH: u32 = 32;
const STACK_ENTRIES: u32 = 32768;
/// How often the stacks no event kept refers to any more are removed from the stack map.
const STACK_SWEEP_NS: u64 = 100_000_000;
/// A record read, or (Err) a loss before the next one of its CPU: (CPU, how many, from when
/// the lost ones may have been written, of the watched processes' own ring).
type Drained = Result<[u8; REC as usize], (u16, u64, u64, bool)>;

/// Records read from one ring of every task's events per drain, where the watched
/// processes have rings of their own (which are read in full every drain).
const DRAIN_BUDGET: u64 = 16384;
/// Processes whose wait calls can be recorded at once.
const MAX_WATCHED: u32 = 65536;
/// Bytes per head counter: one cache line each, so CPUs never share one.
const HEAD_BYTES: u32 = 64;

mod attach;
mod call_programs;
mod decode;
mod jvm;
mod names;
mod optional;
mod programs;
mod record;
use attach::*;
use call_programs::*;
use optional::*;
use programs::*;
pub use programs::{LockProbes, LockWaits};
use record::*;

/// A running recorder; detaches everything on drop.
#[derive(Debug)]
pub(crate) struct Recorder {
    heads: MappedArray,
    slots: MappedArray,
    /// The watched processes' rings' slots, when they have rings of their own.
    own_slots: Option<MappedArray>,
    /// Per ring (in ring order; the watched processes' rings, if any, after the others):
    /// (its CPU, next index to read, records lost since the last one read).
    next: Vec<(usize, u64, u64)>,
    /// Per ring: when a drain last read it to its head (records lost later were written
    /// after that: the time a loss is placed at).
    read_to_head_ns: Vec<u64>,
    /// Per ring: the time of the last record read from it (records lost after it were
    /// written after it: where their loss is marked, when the ring is read a lap behind and
    /// never to its end).
    last_read_ns: Vec<u64>,
    /// Records lost, of all rings, and of the watched processes' own.
    lost: u64,
    lost_own: u64,
    _links: Vec<OwnedFd>,
    _programs: Vec<Program>,
    /// Per CPU: traced, and its ring ([`CPU_TRACED`], [`CPU_RING`]); the traced set as last set.
    cpus_map: Map,
    traced: CpuMask,
    rings: CpuMask,
    /// CPUs with rings.
    n_rings: usize,
    /// The records of a drain, or (Err) losses: (CPU, how many, since when, of the watched
    /// processes' own rings).
    records: Vec<Drained>,
    sizes: Rings,
    _maps: [Option<Map>; 3],
    /// Tracepoints that could not be attached.
    pub missing: Vec<crate::error::Missing>,
    /// The processes whose threads' wait calls are recorded (`None`: not probed), and that
    /// set as last written.
    watched_map: Option<Map>,
    watched: std::collections::HashSet<u32>,
    /// The wait calls of the watched processes are recorded.
    records_waits: bool,
    /// How PI lock waits are recorded, if they are.
    pub lock_probes: Option<LockProbes>,
    /// The timer program names the task each sleep timer wakes.
    #[cfg_attr(not(test), allow(dead_code))]
    pub names_timer_wakeups: bool,
    irq_names: HashMap<u32, String>,
    /// Kernel text symbols, sorted by address.
    symbols: Vec<(u64, String)>,
    /// The switches' kernel stacks, where recorded ([`Setup::stacks`]).
    stack_map: Option<Map>,
    /// Each stack's key in it, with the latest event that referred to it; and when the map
    /// was last swept of those no event kept refers to ([`Recorder::forget_stacks`]).
    stacks_seen: HashMap<u32, u64>,
    stacks_swept_ns: u64,
    /// The stack of the switch just decoded, delivered after it.
    stack_after: Option<Event>,
    /// The maps the programs write (for probes attached later: a JVM's).
    maps: Maps,
    /// JVM probes attached: by index, what each is; the
    /// files probed; their programs and perf events; VM operations' names by address.
    usdt: Vec<JvmProbe>,
    /// (By device and inode: one file seen through two processes' roots is probed once; and
    /// by the process probed, 0: every process.)
    usdt_files: std::collections::HashSet<(u64, u64, u32)>,
    /// Files (device, inode) whose probes could not be read: not read again for another
    /// process that maps them.
    usdt_refused: std::collections::HashSet<(u64, u64)>,
    /// Each probe's program and perf event, with the process it is for (0: every process).
    usdt_links: Vec<(u32, Program, OwnedFd)>,
    /// The JVM processes' clock probes, each with its process.
    clock_links: Vec<(u32, Program, OwnedFd)>,
    /// Each libjvm.so's clock function, as a file offset (by device and inode; None: none).
    jvm_clocks: HashMap<(u64, u64), Option<u64>>,
    vmop_names: HashMap<u64, std::sync::Arc<str>>,
    names: names::Names,
    /// Timer functions' names by address (a few, each named on every expiry).
    timer_functions: HashMap<u64, std::sync::Arc<str>>,
    /// Other clocks' lead over CLOCK_MONOTONIC (`clock_offsets_ns`), refreshed with the names.
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
    #[cfg(test)]
    pub fn start(
        cpus: &[usize],
        traced: &CpuMask,
        wakings: bool,
        locks: LockWaits,
        waits: bool,
    ) -> Result<Recorder, TraceError> {
        Recorder::start_with(
            cpus,
            traced,
            Setup {
                wakings,
                locks,
                wait_calls: waits,
                watched: waits,
                follow_forks: false,
                rings: Rings::default(),
                stacks: false,
            },
        )
    }

    /// [`Recorder::start`] with every choice in `setup`.
    pub(crate) fn start_with(
        cpus: &[usize],
        traced: &CpuMask,
        setup: Setup,
    ) -> Result<Recorder, TraceError> {
        let Setup {
            wakings,
            locks,
            wait_calls,
            watched,
            follow_forks,
            rings: sizes,
            stacks,
        } = setup;
        // The reader trusts a record once its sequence number is there: that needs the CPU
        // to make the programs' stores visible in order, which x86-64 does (TSO). Elsewhere a
        // release store would be needed (BPF has one only since 6.15): use tracefs there.
        if !cfg!(target_arch = "x86_64") {
            return Err(TraceError::Unsupported(
                "the eBPF recorder needs x86-64 store ordering on this build".into(),
            ));
        }
        let btf = Btf::vmlinux()?;
        let symbols = rtlab_sys::procfs::kernel_text_symbols();
        let offsets = TaskOffsets::from_btf(&btf, &symbols)?;
        let mut cpus = cpus.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        let opened = open_maps(
            &cpus,
            traced,
            sizes,
            (watched || wait_calls, offsets.tgid.is_some(), stacks),
        )?;
        let maps = opened.maps;
        let mut attached = Attached {
            missing: opened.missing,
            ..Attached::default()
        };
        let names_sleepers = attach_scheduler_probes(&btf, &offsets, maps, wakings, &mut attached)?;
        let (lock_probes, watched_map, records_waits) = attach_watch_probes(
            (&btf, &offsets, maps),
            opened.watched_set,
            (locks, follow_forks, wait_calls),
            &mut attached,
        );
        let Attached {
            programs,
            links,
            missing,
        } = attached;
        let mut next: Vec<(usize, u64, u64)> = cpus.iter().map(|&c| (c, 0, 0)).collect();
        if opened.own_slots.is_some() {
            next.extend(cpus.iter().map(|&c| (c, 0, 0)));
        }
        Ok(Recorder {
            watched_map,
            records_waits,
            watched: std::collections::HashSet::new(),
            heads: opened.heads,
            slots: opened.slots,
            own_slots: opened.own_slots,
            read_to_head_ns: vec![0; next.len()],
            last_read_ns: vec![0; next.len()],
            next,
            lost: 0,
            lost_own: 0,
            _links: links,
            _programs: programs,
            cpus_map: opened.cpus_map,
            traced: traced.and(&CpuMask::of(&cpus)),
            rings: CpuMask::of(&cpus),
            n_rings: cpus.len(),
            sizes,
            records: Vec::new(),
            _maps: [
                Some(opened.heads_map),
                Some(opened.slots_map),
                opened.own_slots_map,
            ],
            missing,
            lock_probes,
            names_timer_wakeups: names_sleepers,
            irq_names: rtlab_sys::procfs::irq_names(),
            symbols,
            stack_map: opened.stack_map,
            stacks_seen: HashMap::new(),
            stacks_swept_ns: 0,
            stack_after: None,
            maps,
            usdt: Vec::new(),
            usdt_files: std::collections::HashSet::new(),
            usdt_refused: std::collections::HashSet::new(),
            usdt_links: Vec::new(),
            clock_links: Vec::new(),
            jvm_clocks: HashMap::new(),
            vmop_names: HashMap::new(),
            names: names::Names::default(),
            timer_functions: HashMap::new(),
            clock_offsets: rtlab_sys::time::clock_offsets_ns(),
        })
    }

    /// Records the CPUs of `traced` (of those with rings) from now on.
    pub fn set_traced(&mut self, traced: &CpuMask) -> Result<(), TraceError> {
        let rings = self.n_rings;
        for (ring, &(cpu, _, _)) in self.next.iter().take(rings).enumerate() {
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

    /// Whether the returns of wait calls are recorded (for the processes of
    /// [`Recorder::set_watched`]).
    pub fn records_wait_calls(&self) -> bool {
        self.records_waits
    }

    /// Whether the recorder takes a set of watched processes ([`Recorder::set_watched`]):
    /// their events go to rings of their own, and their wait calls are recorded where the
    /// kernel allows.
    pub fn takes_watched(&self) -> bool {
        self.watched_map.is_some()
    }

    /// Whether the watched processes' events have rings of their own (losses elsewhere do
    /// not touch them: [`Kind::LostOthers`]).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn has_own_rings(&self) -> bool {
        self.own_slots.is_some()
    }

    /// Records the wait calls of these processes' threads from now on (and of no others).
    pub fn set_watched(&mut self, tids: &std::collections::HashSet<u32>) -> Result<(), TraceError> {
        let Some(map) = &self.watched_map else {
            return Ok(());
        };
        for gone in self.watched.difference(tids) {
            map.remove(&gone.to_ne_bytes()).map_err(TraceError::Sys)?;
        }
        for new in tids.difference(&self.watched) {
            map.insert(&new.to_ne_bytes(), &[1])
                .map_err(TraceError::Sys)?;
        }
        self.watched = tids.clone();
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

    /// When `cpu`'s rings were all last read to their head (its events written before then
    /// have all been drained, or counted lost); 0: not yet; `u64::MAX`: it has none.
    pub fn read_until(&self, cpu: u16) -> u64 {
        (self.next.iter().zip(&self.read_to_head_ns))
            .filter(|((c, _, _), _)| *c as u16 == cpu)
            .map(|(_, &t)| t)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Records overwritten before the reader copied them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Of them, the watched processes' own.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn lost_own(&self) -> u64 {
        self.lost_own
    }

    /// Decodes every complete record not read yet, ring by ring (the watched processes'
    /// rings first: they must never fall behind).
    pub fn drain(&mut self, mut f: impl FnMut(Event)) -> usize {
        // A record, or (Err) a count of records lost before the next one of that CPU, the
        // time from which they may have been written, and whether they were the watched
        // processes' own.
        // The buffer is kept from drain to drain: no memory given back to the kernel and
        // taken again (an munmap is a stretch in the kernel a watched thread may wait for).
        let mut records = std::mem::take(&mut self.records);
        records.clear();
        let drain_started = rtlab_sys::time::monotonic_now_ns();
        let rings = self.n_rings;
        let order = (rings..self.next.len()).chain(0..rings);
        for ring in order {
            // A ring of every task's events is read at most this far per drain, so the
            // watched processes' rings are read again soon however far behind it is.
            let mut budget = if ring >= rings || self.own_slots.is_none() {
                u64::MAX
            } else {
                DRAIN_BUDGET
            };
            let own = ring >= rings;
            let (slots_map, slots) = match (own, &self.own_slots) {
                (true, Some(m)) => (m, self.sizes.own_slots as u64),
                _ => (&self.slots, self.sizes.slots as u64),
            };
            let (cpu, next, gap) = &mut self.next[ring];
            let head = self.heads.load_u64(ring * HEAD_BYTES as usize);
            let mut lost_since = self.read_to_head_ns[ring].max(self.last_read_ns[ring]);
            let mut lost = 0;
            // Fallen a whole ring behind: skip to what is still there, with a margin for
            // the slots being overwritten while we copy (an eighth of the ring, at most 64
            // slots: a margin as large as the ring would skip to the head every time, and
            // nothing would ever be read from a small ring under a storm).
            if head > *next + slots {
                let resume = head - slots + (slots / 8).min(64);
                lost += resume - *next;
                *gap += resume - *next;
                *next = resume;
            }
            let base = ring.checked_sub(rings).unwrap_or(ring) as u64 * slots;
            while *next < head && budget > 0 {
                budget -= 1;
                let at = (base + *next % slots) as usize * REC as usize;
                let want = *next + 1;
                let seq_at = at + OFF_SEQ as usize;
                let before = slots_map.load_u64(seq_at);
                if before < want {
                    break; // claimed, still being written: next time
                }
                let mut rec = [0u8; REC as usize];
                slots_map.copy(at, &mut rec);
                if before != want || slots_map.load_u64(seq_at) != want {
                    lost += 1; // overwritten by a later lap
                    *gap += 1;
                } else {
                    if *gap > 0 {
                        records.push(Err((*cpu as u16, *gap, lost_since, own)));
                        *gap = 0;
                    }
                    lost_since = lost_since.max(u64_at(&rec, OFF_TS));
                    records.push(Ok(rec));
                }
                *next += 1;
            }
            if *next >= head && *gap == 0 {
                self.read_to_head_ns[ring] = drain_started;
            }
            self.last_read_ns[ring] = lost_since;
            self.lost += lost;
            if own {
                self.lost_own += lost;
            }
        }
        let n = records.len();
        let now = rtlab_sys::time::monotonic_now_ns();
        if self.names.refresh(now) {
            self.clock_offsets = rtlab_sys::time::clock_offsets_ns();
        }
        self.learn_names(&records, now);
        let others_only = self.own_slots.is_some();
        // The loss sits where the lost records may begin: just after the last record read
        // from its ring (or the ring was last read to its head; before the first event after
        // it), so that whatever consumes the events in time order forgets what the lost ones
        // might have ended before it meets any later event. A loss no decoded event follows
        // (the rest of its ring's records were task starts and ends, or none) is still said.
        let lost_event = |(cpu, n, since, own): (u16, u64, u64, bool), next_ns: u64| Event {
            cpu,
            ts_ns: (since + 1).min(next_ns.saturating_sub(1)).max(1),
            current_pid: -1,
            kind: match others_only && !own {
                true => Kind::LostOthers(n),
                false => Kind::Lost(n),
            },
        };
        let mut lost_before: Option<(u16, u64, u64, bool)> = None;
        for r in records.iter() {
            match r {
                Err(lost) => {
                    if let Some(earlier) = lost_before.replace(*lost) {
                        f(lost_event(earlier, u64::MAX));
                    }
                }
                Ok(r) => {
                    if let Some(e) = self.decode(r) {
                        if let Some(lost) = lost_before.take() {
                            f(lost_event(lost, e.ts_ns));
                        }
                        f(e);
                        if let Some(stack) = self.stack_after.take() {
                            f(stack);
                        }
                    }
                }
            }
        }
        if let Some(lost) = lost_before.take() {
            f(lost_event(lost, u64::MAX));
        }
        self.records = records;
        n
    }

    /// Empties the stack map of the stacks that no event since `before_ns` refers to (at
    /// most every [`STACK_SWEEP_NS`]). A stack trace map keeps one stack per bucket and
    /// refuses any other that hashes there for as long as the first stays: never emptied, on
    /// a busy machine (a parallel build's thousands of distinct stacks) it ends up refusing
    /// the very stacks an explanation needs, the same ones again and again (a timer
    /// interrupt's, which is one stack every time). Returns how many were removed.
    pub fn forget_stacks(&mut self, before_ns: u64, now_ns: u64) -> usize {
        let Some(map) = &self.stack_map else {
            return 0;
        };
        if now_ns < self.stacks_swept_ns + STACK_SWEEP_NS {
            return 0;
        }
        self.stacks_swept_ns = now_ns;
        let before = self.stacks_seen.len();
        self.stacks_seen.retain(|id, seen| {
            let keep = *seen >= before_ns;
            if !keep {
                let _ = map.remove(&id.to_ne_bytes());
            }
            keep
        });
        before - self.stacks_seen.len()
    }

    /// Kernel stack `id` ([`Kind::Stack`]), innermost frame first, as `function+0xoffset`,
    /// from the code that hit the tracepoint down (the tracing frames above it left out); None when
    /// not recorded or since replaced.
    pub fn stack(&self, id: u32) -> Option<Vec<String>> {
        let value = self.stack_map.as_ref()?.lookup(&id.to_ne_bytes()).ok()??;
        let frames: Vec<String> = value
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .take_while(|&a| a != 0)
            .map(|a| self.symbol_offset(a))
            .collect();
        Some(below_the_tracepoint(frames))
    }

    fn symbol_offset(&self, addr: u64) -> String {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).and_then(|i| self.symbols.get(i)) {
            Some((at, name)) => format!("{name}+{:#x}", addr - at),
            None => format!("{addr:#x}"),
        }
    }

    fn symbol(&self, addr: u64) -> String {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).and_then(|i| self.symbols.get(i)) {
            Some((_, name)) => name.clone(),
            None => format!("{addr:#x}"),
        }
    }
}

/// A stack from the code that hit the tracepoint down: the frames above it left out (the
/// recorder's program, outside the kernel's text, and the tracepoint's own).
fn below_the_tracepoint(frames: Vec<String>) -> Vec<String> {
    let tracing = |f: &String| {
        ["_einittext+", "0x", "bpf_", "__bpf_", "__traceiter_"]
            .iter()
            .any(|p| f.starts_with(p))
    };
    frames.into_iter().skip_while(tracing).collect()
}

#[cfg(test)]
mod tests;
