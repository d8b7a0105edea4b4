//! The load threads.

use crate::spec::{LoadKind, LoadSpec};
use rtlab_stats::Nanos;
use rtlab_sys::affinity::{set_current_thread_affinity, usable_cpus, CpuList};
use rtlab_sys::mem::AnonMapping;
use rtlab_sys::sched::{set_current_thread_scheduler, Policy};
use rtlab_sys::time::{monotonic_now_ns, sleep_until_monotonic_ns};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Load threads need little stack; small stacks keep RSS low under mlockall(MCL_FUTURE).
const LOAD_STACK: usize = 256 * 1024;

/// A load that could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Starting `spec` failed.
    #[error("load '{spec}': {reason}")]
    Start {
        /// The load as written.
        spec: String,
        /// Why.
        reason: StartError,
    },
}

impl LoadError {
    /// The load as written cannot run on this machine (a CPU it may not use, a size it cannot
    /// map): the user's input, not a failure of the run.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            LoadError::Start {
                reason: StartError::CpuUnavailable(_) | StartError::SizeTooLarge,
                ..
            }
        )
    }
}

/// Why one load did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A thread, or a loopback connection of the net load, could not be made.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A mapping of the mmap load's size cannot be addressed here.
    #[error("SIZE too large")]
    SizeTooLarge,
    /// The CPU the load is pinned to is not one this process may use (which, and those it
    /// may).
    #[error(transparent)]
    CpuUnavailable(rtlab_sys::affinity::CpuListError),
    /// The io load's temporary directory is not one to write in.
    #[error("cannot write in {}: {source}", dir.display())]
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The io load's temporary file could not be created.
    #[error("cannot create a file in {}: {source}", dir.display())]
    NoTempFile {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A load thread (named) ended before it said how its placement went.
    #[error("the {0} thread died while starting")]
    DiedStarting(&'static str),
}

/// What one load did while it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// The load as written.
    pub spec: String,
    /// Units of work done.
    pub work: u64,
    /// What a unit of work is (`spin rounds`, `mmap cycles`, `bytes` ...).
    pub unit: &'static str,
    /// When a `hog` ran: `(from, to)` in CLOCK_MONOTONIC ns, the first [`MAX_RECORDED_RUNS`]
    /// runs (empty for the other loads). What was injected, for attributing against it.
    pub runs: Vec<(u64, u64)>,
}

/// How many hog runs are kept for [`LoadReport::runs`] (about 33 minutes of a 200 ms period);
/// later runs are counted in `work` only, so memory stays bounded on long runs.
pub const MAX_RECORDED_RUNS: usize = 10_000;

/// Shared by one load's threads.
#[derive(Clone)]
struct Ctx {
    stop: Arc<AtomicBool>,
    deadline_ns: u64,
    work: Arc<AtomicU64>,
    runs: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Ctx {
    /// Relaxed: the stop flag carries no data; seeing it a little late only delays the stop.
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && monotonic_now_ns() < self.deadline_ns
    }

    fn add(&self, n: u64) {
        self.work.fetch_add(n, Ordering::Relaxed);
    }

    /// Records one hog run (outside the spin: the lock is never contended while it spins).
    fn ran(&self, from: u64, to: u64) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.len() < MAX_RECORDED_RUNS {
            runs.push((from, to));
        }
    }
}

/// One load's published results.
#[derive(Debug)]
struct Counter {
    spec: String,
    unit: &'static str,
    work: Arc<AtomicU64>,
    runs: Arc<Mutex<Vec<(u64, u64)>>>,
}

/// Loads that are running. Stopping (or dropping) sets the stop flag and joins every thread.
#[derive(Debug)]
pub struct RunningLoads {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    counters: Vec<Counter>,
    warnings: Vec<String>,
}

impl RunningLoads {
    /// Degradations noticed while starting (e.g. a hog that could not get SCHED_FIFO).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Work done so far, per load.
    /// (Without the hogs' runs: those come with [`RunningLoads::stop`].)
    pub fn progress(&self) -> Vec<LoadReport> {
        self.reports(false)
    }

    /// Stops every load, waits for its threads, and reports the work done and the hogs' runs.
    pub fn stop(mut self) -> Vec<LoadReport> {
        self.shutdown();
        self.reports(true)
    }

    fn reports(&self, with_runs: bool) -> Vec<LoadReport> {
        self.counters
            .iter()
            .map(|c| LoadReport {
                spec: c.spec.clone(),
                work: c.work.load(Ordering::Relaxed),
                unit: c.unit,
                runs: if with_runs {
                    std::mem::take(&mut *c.runs.lock().unwrap_or_else(|p| p.into_inner()))
                } else {
                    Vec::new()
                },
            })
            .collect()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            // A panicking load thread already printed its panic; the others still stop.
            let _ = t.join();
        }
    }

    fn spawn(
        &mut self,
        name: &str,
        ctx: &Ctx,
        body: impl FnOnce(Ctx) + Send + 'static,
    ) -> std::io::Result<()> {
        let ctx = ctx.clone();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .stack_size(LOAD_STACK)
            .spawn(move || {
                // Loads are ordinary time-sharing work unless they say otherwise (hog).
                let _ = set_current_thread_scheduler(Policy::Other, 0);
                body(ctx)
            })?;
        self.threads.push(handle);
        Ok(())
    }
}

impl RunningLoads {
    /// Starts a thread that places itself (priority, CPU) and says how that went on the
    /// channel it is given (a warning, or None) before its work; a warning is kept once.
    fn spawn_placed(
        &mut self,
        name: &'static str,
        body: impl FnOnce(mpsc::Sender<Option<String>>) + Send + 'static,
    ) -> Result<(), StartError> {
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .stack_size(LOAD_STACK)
            .spawn(move || body(tx))?;
        self.threads.push(handle);
        match rx.recv() {
            Ok(Some(warning)) => {
                if !self.warnings.contains(&warning) {
                    self.warnings.push(warning)
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(_) => Err(StartError::DiedStarting(name)),
        }
    }
}

impl Drop for RunningLoads {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts every load. Each stops by itself after `hard_limit` at the latest.
/// On error, loads already started are stopped again before returning.
pub fn start(specs: &[LoadSpec], hard_limit: Nanos) -> Result<RunningLoads, LoadError> {
    let stop = Arc::new(AtomicBool::new(false));
    let deadline_ns = monotonic_now_ns().saturating_add(hard_limit.get());
    let mut loads = RunningLoads {
        stop: stop.clone(),
        threads: vec![],
        counters: vec![],
        warnings: vec![],
    };
    for spec in specs {
        let ctx = Ctx {
            stop: stop.clone(),
            deadline_ns,
            work: Arc::new(AtomicU64::new(0)),
            runs: Arc::default(),
        };
        let err = |reason| LoadError::Start {
            spec: spec.text.clone(),
            reason,
        };
        let unit = start_one(&mut loads, &spec.kind, &ctx).map_err(err)?;
        loads.counters.push(Counter {
            spec: spec.text.clone(),
            unit,
            work: ctx.work,
            runs: ctx.runs,
        });
    }
    Ok(loads)
}

fn start_one(
    loads: &mut RunningLoads,
    kind: &LoadKind,
    ctx: &Ctx,
) -> Result<&'static str, StartError> {
    match *kind {
        LoadKind::Cpu { threads } => {
            for _ in 0..threads.unwrap_or_else(|| usable_cpus().len()) {
                loads.spawn("rtlab-load-cpu", ctx, spin)?;
            }
            Ok("spin rounds")
        }
        LoadKind::Utilisation { percent } => {
            let period = Nanos::from_millis(10);
            let run = Nanos(period.get() * percent as u64 / 200);
            // Far enough ahead for every thread to be placed (a real-time spinner started
            // first must not delay the starting of the others).
            let first = monotonic_now_ns() + 50_000_000;
            for cpu in usable_cpus().as_slice().iter().copied() {
                for (name, fifo, offset) in [
                    ("rtlab-util-rt", Some(1), 0),
                    ("rtlab-util", None, period.get() / 2),
                ] {
                    let ctx = ctx.clone();
                    let shape = Periodic {
                        load: kind.clone(),
                        fifo,
                        run,
                        period,
                        cpu: Some(cpu),
                        first_ns: Some(first + offset),
                    };
                    loads.spawn_placed(name, move |tx| periodic(ctx, shape, tx))?;
                }
            }
            Ok("periods")
        }
        LoadKind::Mmap { size, mlock } => {
            let size = usize::try_from(size).map_err(|_| StartError::SizeTooLarge)?;
            loads.spawn("rtlab-load-mmap", ctx, move |c| mmap_cycles(c, size, mlock))?;
            Ok("mmap cycles")
        }
        LoadKind::Alloc { rate } => {
            loads.spawn("rtlab-load-alloc", ctx, move |c| alloc_churn(c, rate))?;
            Ok("bytes allocated")
        }
        LoadKind::Gc {
            prio,
            burst,
            period,
        } => {
            let ctx = ctx.clone();
            loads.spawn_placed("rtlab-gc", move |tx| {
                gc_bursts(ctx, prio, burst, period, tx)
            })?;
            Ok("bytes allocated")
        }
        LoadKind::Fork { threads } => {
            for _ in 0..threads {
                loads.spawn("rtlab-load-fork", ctx, forks)?;
            }
            Ok("forks")
        }
        LoadKind::Net { streams } => {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            for _ in 0..streams {
                let client = TcpStream::connect(addr)?;
                let (server, _) = listener.accept()?;
                loads.spawn("rtlab-load-net", ctx, move |c| net_send(c, client))?;
                loads.spawn("rtlab-load-net", ctx, move |c| net_receive(c, server))?;
            }
            Ok("bytes sent")
        }
        LoadKind::Io => {
            // A new file under an unguessable name (never a link planted in a shared /tmp),
            // created here so that a failure is reported instead of a load doing nothing.
            let dir = std::env::temp_dir();
            let prefix = format!("rtlab-io-{}-", std::process::id());
            if let Err(source) = rtlab_sys::fs::check_dir_owner(&dir) {
                return Err(StartError::UnsafeDir { dir, source });
            }
            let (file, path) = match rtlab_sys::fs::create_unique(&dir, &prefix, ".tmp", 0o600) {
                Ok(made) => made,
                Err(source) => return Err(StartError::NoTempFile { dir, source }),
            };
            let guard = TempFile(path);
            loads.spawn("rtlab-load-io", ctx, move |c| io_fsync(c, file, guard))?;
            Ok("fsyncs")
        }
        LoadKind::Hog {
            prio,
            run,
            period,
            cpu,
        } => {
            if let Some(cpu) = cpu {
                CpuList::from(vec![cpu])
                    .check_within(&usable_cpus())
                    .map_err(StartError::CpuUnavailable)?;
            }
            let ctx = ctx.clone();
            let shape = Periodic {
                load: kind.clone(),
                fifo: Some(prio),
                run,
                period,
                cpu,
                first_ns: None,
            };
            loads.spawn_placed("rtlab-hog", move |tx| periodic(ctx, shape, tx))?;
            Ok("periods")
        }
    }
}

fn spin(ctx: Ctx) {
    let mut x = 0u64;
    while ctx.running() {
        for i in 0..20_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        ctx.add(1);
    }
}

fn mmap_cycles(ctx: Ctx, size: usize, mlock: bool) {
    while ctx.running() {
        let Ok(mut mapping) = AnonMapping::new(size) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if mlock {
            // Without privilege the mapping is still touched, just not locked.
            let _ = mapping.lock();
        }
        mapping.touch_pages();
        drop(mapping);
        ctx.add(1);
    }
}

fn alloc_churn(ctx: Ctx, rate: Option<u64>) {
    const LIVE: usize = 32;
    const MAX_LEN: usize = 16 << 20;
    let started = monotonic_now_ns();
    let mut live: Vec<String> = Vec::with_capacity(LIVE);
    let mut target = 64usize;
    let mut allocated = 0u64;
    let mut slot = 0;
    while ctx.running() {
        // Ahead of the rate: wait until what was allocated so far is due (in steps of at
        // most 100 ms, to stop in time), before the next string, not after it.
        if let Some(rate) = rate {
            let done = ctx.work.load(Ordering::Relaxed) as f64;
            let due = started + (done / rate as f64 * 1e9) as u64;
            let now = monotonic_now_ns();
            if due > now {
                let _ = sleep_until_monotonic_ns(due.min(now + 100_000_000));
                continue;
            }
        }
        // Grow one string by pushing, as a program building text does: every reallocation is
        // a new, larger block (and past the mmap threshold, a fresh mapping).
        let mut s = String::new();
        while s.len() < target {
            s.push_str("rtlab-garbage-");
        }
        allocated += s.capacity() as u64;
        if live.len() < LIVE {
            live.push(s);
        } else {
            live[slot] = s;
            slot = (slot + 1) % LIVE;
        }
        target = if target >= MAX_LEN { 64 } else { target * 2 };
        ctx.add(allocated);
        allocated = 0;
    }
}

/// A collector's shape at real-time priority: every `period`, for `burst`, build a heap of
/// small boxed nodes, walk it (the marking), drop every other one and replace it (the
/// sweeping and the mutator's next allocations), then free it all; records each burst as
/// a run, as the hog does.
fn gc_bursts(
    ctx: Ctx,
    prio: u32,
    burst: Nanos,
    period: Nanos,
    ready: mpsc::Sender<Option<String>>,
) {
    let warning = set_current_thread_scheduler(Policy::Fifo, prio)
        .err()
        .map(|e| format!("gc: cannot use SCHED_FIFO {prio} ({e}); it runs as SCHED_OTHER"));
    let _ = ready.send(warning);
    let mut next = monotonic_now_ns();
    while ctx.running() {
        let from = monotonic_now_ns();
        let until = next + burst.get();
        let mut now = from;
        let mut bytes = 0u64;
        while now < until && !ctx.stop.load(Ordering::Relaxed) {
            let mut heap: Vec<Box<[u64; 32]>> = (0..4096u64).map(|i| Box::new([i; 32])).collect();
            let marked: u64 = heap.iter().map(|n| std::hint::black_box(n[0])).sum();
            for (i, node) in heap.iter_mut().enumerate().step_by(2) {
                // A new allocation in place of the old (not a write into it: the point).
                drop(std::mem::replace(node, Box::new([marked ^ i as u64; 32])));
            }
            bytes += 6144 * 256;
            drop(std::hint::black_box(heap));
            now = monotonic_now_ns();
        }
        ctx.ran(from, now);
        ctx.add(bytes);
        next += period.get();
        while ctx.running() && monotonic_now_ns() < next {
            let _ = sleep_until_monotonic_ns(next.min(monotonic_now_ns() + 50_000_000));
        }
    }
}

fn forks(ctx: Ctx) {
    while ctx.running() {
        if rtlab_sys::process::fork_and_reap_trivial_child().is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
        ctx.add(1);
    }
}

fn net_send(ctx: Ctx, mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let buf = vec![0x5au8; 64 * 1024];
    while ctx.running() {
        match stream.write(&buf) {
            Ok(n) => ctx.add(n as u64),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
}

fn net_receive(ctx: Ctx, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = vec![0u8; 64 * 1024];
    while ctx.running() {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
}

/// Removes the temporary file however the thread ends.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes and fsyncs `file` until stopped; `_guard` removes it when the thread ends.
fn io_fsync(ctx: Ctx, mut file: std::fs::File, _guard: TempFile) {
    const BLOCK: usize = 1 << 20;
    const WRAP: u64 = 64 << 20;
    let block = vec![0xa5u8; BLOCK];
    let mut written = 0u64;
    while ctx.running() {
        if file.write_all(&block).is_err() || file.sync_all().is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        written += BLOCK as u64;
        if written >= WRAP {
            let _ = file.set_len(0);
            let _ = std::io::Seek::rewind(&mut file);
            written = 0;
        }
        ctx.add(1);
    }
}

/// A periodic spinner's shape: SCHED_FIFO at a priority (else SCHED_OTHER), RUN every
/// PERIOD from OFFSET on, maybe pinned.
#[derive(Debug, Clone)]
struct Periodic {
    /// The load it is a thread of: its messages name it, and only a hog records its runs
    /// (the document's `runs_ns`: what was injected, to attribute against).
    load: LoadKind,
    fifo: Option<u32>,
    run: Nanos,
    period: Nanos,
    cpu: Option<usize>,
    /// The first run's start (CLOCK_MONOTONIC; None: at once). The threads of `cpu:P%` share
    /// one start and differ by half a period, so on each CPU their runs never overlap.
    first_ns: Option<u64>,
}

/// Spins `run` every `period` (the hog, and each thread of `cpu:P%`); sends a warning (or
/// None) on `ready` once placed.
fn periodic(ctx: Ctx, shape: Periodic, ready: mpsc::Sender<Option<String>>) {
    let Periodic {
        load,
        fifo,
        run,
        period,
        cpu,
        first_ns,
    } = shape;
    let what = load.name();
    let records_runs = matches!(load, LoadKind::Hog { .. });
    let mut warning = None;
    if let Some(cpu) = cpu {
        if let Err(e) = set_current_thread_affinity(&CpuList::from(vec![cpu])) {
            warning = Some(format!(
                "{what}: cannot pin to CPU {cpu} ({e}); it runs unpinned"
            ));
        }
    }
    if let Some(prio) = fifo {
        if let Err(e) = set_current_thread_scheduler(Policy::Fifo, prio) {
            warning = Some(format!(
                "{what}: cannot use SCHED_FIFO {prio} ({e}); it runs as SCHED_OTHER"
            ));
        }
    }
    let _ = ready.send(warning);
    if let (true, Ok(mut runs)) = (records_runs, ctx.runs.lock()) {
        let expected = ctx.deadline_ns.saturating_sub(monotonic_now_ns()) / period.get().max(1);
        runs.reserve(MAX_RECORDED_RUNS.min(expected as usize + 1));
    }
    let mut next = first_ns.unwrap_or_else(monotonic_now_ns);
    while ctx.running() && monotonic_now_ns() < next {
        let _ = sleep_until_monotonic_ns(next);
    }
    while ctx.running() {
        let spin_until = next + run.get();
        // The run starts when the thread got the CPU, which may be after `next`.
        let from = monotonic_now_ns();
        let mut now = from;
        // The stop flag is read inside the spin: a long RUN at FIFO 99 still stops at once.
        while now < spin_until && !ctx.stop.load(Ordering::Relaxed) {
            std::hint::spin_loop();
            now = monotonic_now_ns();
        }
        if records_runs {
            ctx.ran(from, now);
        }
        ctx.add(1);
        next += period.get();
        // Stop promptly even with a long period.
        while ctx.running() && monotonic_now_ns() < next {
            let _ = sleep_until_monotonic_ns(next.min(monotonic_now_ns() + 50_000_000));
        }
    }
}

#[cfg(test)]
mod tests;
