//! `rtlab watch`: the scheduling delays of a running program's threads, explained.

use super::watch_status::{Interval, Row, StatusView};
use crate::cli::WatchArgs;
use crate::output::{standalone_doc, Outputs};
use crate::{BadInput, Status};
use hdrhistogram::serialization::interval_log::{IntervalLogWriter, IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use rtlab_report::table::Table;
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::affinity::CpuList;
use rtlab_sys::time::monotonic_now_ns;
use rtlab_trace::{Explainer, Options, TraceError};
use rtlab_watch::{DelayKind, ThreadPattern, WatchSpec, WatchState};
use std::process::Child;
use std::sync::Mutex;
use std::time::Duration;

mod report;
mod target;
use report::*;
use target::*;

/// How often the loop looks at the clock, the signal flag and the process.
const TICK: Duration = Duration::from_millis(100);

/// What is checked before anything starts: the thread patterns, the outputs, the metrics
/// address (bound now: an address in use is bad input, said at once), the privilege.
fn checked(
    args: &WatchArgs,
) -> anyhow::Result<(Vec<ThreadPattern>, Outputs, Option<std::net::TcpListener>)> {
    let patterns = args
        .threads
        .iter()
        .map(|t| ThreadPattern::parse(t).map_err(|e| BadInput(format!("--thread {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = Outputs {
        json: args.json.clone(),
        ..Outputs::default()
    };
    outputs.validate()?;
    if let Some(path) = &args.hlog {
        rtlab_report::check_writable_file(path).map_err(|e| BadInput(format!("--hlog {e}")))?;
    }
    if let Some(path) = &args.samples {
        rtlab_report::check_writable_file(path).map_err(|e| BadInput(format!("--samples {e}")))?;
    }
    if let Some(dir) = &args.trace_out {
        rtlab_report::check_writable_dir(dir).map_err(|e| BadInput(format!("--trace-out {e}")))?;
    }
    let listener = args
        .metrics
        .map(|addr| {
            std::net::TcpListener::bind(addr)
                .map_err(|e| BadInput(format!("--metrics {addr}: {e}")))
        })
        .transpose()?;
    if rtlab_sys::process::effective_uid() != 0 {
        return Err(BadInput(
            "rtlab watch needs root (it traces the kernel's scheduler events with eBPF or tracefs)"
                .into(),
        )
        .into());
    }
    Ok((patterns, outputs, listener))
}

pub fn run(args: WatchArgs) -> anyhow::Result<Status> {
    let (patterns, outputs, listener) = checked(&args)?;
    let target = target(&args)?;
    let started_ns = monotonic_now_ns();
    let started_realtime = rtlab_sys::time::realtime_now_ns();
    let options = options(&args, started_ns)?;
    // Every CPU online: the watched threads may run where rtlab itself may not (`taskset -c 0
    // rtlab watch ...`); the kernel's programs run there all the same.
    let cpus: Vec<usize> = rtlab_sys::affinity::online_cpus().as_slice().to_vec();
    let spec = spec(&args, &target, patterns);
    if rtlab_sys::process::in_initial_pid_namespace() == Some(false) {
        anyhow::bail!(
            "cannot watch: rtlab runs in a PID namespace of its own (a container without the \
             host's PIDs), where no task the kernel reports can be matched; run it in the \
             host's PID namespace (Kubernetes: hostPID: true; docker/podman: --pid=host)"
        );
    }
    let (explainer, state) = rtlab_watch::start(&cpus, options, spec).map_err(|e| match e {
        TraceError::NotRoot(_) => anyhow::Error::from(BadInput(e.to_string())),
        e => anyhow::anyhow!("cannot watch: {e}"),
    })?;
    // The samples, from the first delay measured (appended, never through a link, like the log).
    if let Some(path) = &args.samples {
        let file = rtlab_sys::fs::open_append(path)
            .map_err(|e| anyhow::anyhow!("--samples {}: {e}", path.display()))?;
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.write_samples(file)
            .map_err(|e| anyhow::anyhow!("--samples {}: {e}", path.display()))?;
    }
    // With the JSON on stdout, the command's stdout goes to stderr: the two never mix.
    let json_on_stdout = args.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let (child, pid) = attach(target, &state, json_on_stdout)?;
    let mut warnings = announce(
        &state,
        pid,
        (&cpus, explainer.backend()),
        &args,
        child.is_none(),
    );
    let _server = listener
        .map(|l| serve(l, metrics_page(state.clone(), pid)))
        .transpose()?;
    let mut watching = Watching {
        state: &state,
        child,
        started_ns,
        end_ns: args.duration.map(|d| started_ns.saturating_add(d.get())),
        interval_ns: args.interval_log.get(),
        quiet: args.quiet,
        lost: explainer.lost_so_far(),
        status: StatusView::new(),
    };
    // Written as it goes (a log to follow while it runs), so not through a temporary file;
    // appended to (a new section) when already there, never through a link.
    let (why, exit_status, findings) = match &args.hlog {
        Some(path) => {
            let mut file = crate::hlog::open_log(path)
                .map_err(|e| anyhow::anyhow!("--hlog {}: {e}", path.display()))?;
            let mut serializer = V2DeflateSerializer::new();
            let mut log = IntervalLogWriterBuilder::new()
                .add_comment("rtlab watch: delays (ns) per series, tag = series (<thread>[/<tid>]/<wakeup|timer|lock>)")
                .with_start_time(std::time::SystemTime::now())
                .begin_log_with(&mut file, &mut serializer)
                .map_err(|e| anyhow::anyhow!("--hlog: {e}"))?;
            watching.until_end(Some(&mut log), explainer)?
        }
        None => watching.until_end(None, explainer)?,
    };
    if let Some(path) = &args.samples {
        let flushed = state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush_samples();
        if let Err(e) = flushed {
            warnings.push(format!("--samples {}: {e}", path.display()));
        }
    }
    warnings.extend(shortfalls(
        &state.lock().unwrap_or_else(|p| p.into_inner()),
        pid,
        &findings,
    ));
    let ended = Run {
        started_realtime,
        started_ns,
        duration: Nanos(monotonic_now_ns().saturating_sub(started_ns)),
        why,
        warnings,
    };
    let (mut doc, mut text) = report(&state, pid, findings.backend, ended)?;
    if args.histogram {
        text.push_str(&histograms(
            &state.lock().unwrap_or_else(|p| p.into_inner()),
        ));
    }
    let status = outputs.finish(&mut doc, &text)?;
    let lost_watched = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .lost_watched();
    if args.fail_on_loss && lost_watched > 0 {
        eprintln!(
            "rtlab watch: {lost_watched} trace events of the watched threads were lost (--fail-on-loss)"
        );
        return Ok(Status::GateHit);
    }
    Ok(match exit_status {
        Some(code) => Status::Exit(code.clamp(0, 255) as u8),
        None => status,
    })
}

/// How the explainer runs for `args` (the run started at `started_ns`).
fn options(args: &WatchArgs, started_ns: u64) -> anyhow::Result<Options> {
    Ok(Options {
        backend: args.explain_with,
        threshold_ns: args.threshold.map(|t| t.get()),
        top: args.top.map_or(10, usize::from),
        trace_out: args.trace_out.clone(),
        reader_cpus: args
            .reader_cpu
            .as_ref()
            .map_or_else(Vec::new, |c| c.as_slice().to_vec()),
        series_names: Vec::new(),
        started_ns,
        waits: Vec::new(),
        rings: args
            .ring_slots
            .map(|n| {
                rtlab_trace::Rings::forced(n).map_err(|e| BadInput(format!("--ring-slots {e}")))
            })
            .transpose()?,
        stacks: args.stacks,
    })
}

/// What `args` watch: `target`'s threads that `patterns` choose.
fn spec(args: &WatchArgs, target: &Target, patterns: Vec<ThreadPattern>) -> WatchSpec {
    WatchSpec {
        // A command's process is attached once it is started, after tracing is ready.
        pid: match target {
            Target::Pid(pid) => *pid,
            _ => 0,
        },
        scope: match &target {
            Target::Pid(_) | Target::Command(_) => rtlab_watch::Scope::Process {
                children: !args.no_children,
            },
            Target::Cgroup(dir) => rtlab_watch::Scope::Cgroup(dir.clone()),
            Target::All => rtlab_watch::Scope::All,
        },
        threads: patterns,
        rt_only: args.rt_only,
        threshold_ns: args.threshold.map_or(0, |t| t.get()),
        locks: if args.locks {
            rtlab_trace::LockWaits::Any
        } else {
            rtlab_trace::LockWaits::IfCheap
        },
        keep: args.top.map_or(10, usize::from),
        all_cpus: args.all_cpus,
        user_view: !args.until_running,
        java_clock_limit: if args.no_java_clock {
            0
        } else {
            args.java_clock_limit
        },
        jvm_log: args.jvm_log,
    }
}

/// The watch attached to its target: `--pid`'s process, or the command started now (after a
/// JVM it runs is probed; its stdout sent to stderr if `stdout_taken`); the command's child,
/// and the process watched (0: a cgroup's or the machine's).
fn attach(
    target: Target,
    state: &std::sync::Mutex<rtlab_watch::WatchState>,
    stdout_taken: bool,
) -> anyhow::Result<(Option<std::process::Child>, i32)> {
    Ok(match target {
        Target::Pid(pid) => (None, pid),
        Target::Cgroup(_) | Target::All => (None, 0),
        Target::Command(command) => {
            // A JVM started here: its probes attached before it starts (its first
            // safepoint can come within a few hundred milliseconds).
            if let Some(libjvm) = command.iter().find_map(|a| libjvm_of(a.as_ref())) {
                let s = || state.lock().unwrap_or_else(|p| p.into_inner());
                s().expect_jvm(&libjvm);
                let until = monotonic_now_ns() + 2_000_000_000;
                while s().jvm_pending() && monotonic_now_ns() < until {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
            let child = start(command, stdout_taken)?;
            let pid = child.id() as i32;
            state.lock().unwrap_or_else(|p| p.into_inner()).attach(pid);
            (Some(child), pid)
        }
    })
}

/// Starts the command (its stdout on rtlab's stderr if `stdout_taken`).
fn start(command: &[std::ffi::OsString], stdout_taken: bool) -> anyhow::Result<Child> {
    let program = &command[0];
    let mut cmd = std::process::Command::new(program);
    cmd.args(&command[1..]);
    if stdout_taken {
        use std::os::fd::AsFd;
        cmd.stdout(std::io::stderr().as_fd().try_clone_to_owned()?);
    }
    cmd.spawn()
        .map_err(|e| BadInput(format!("cannot start '{}': {e}", program.to_string_lossy())).into())
}

/// Says what is watched (unless quiet) and warns of patterns that match nothing yet.
fn announce(
    state: &Mutex<WatchState>,
    pid: i32,
    (cpus, backend): (&[usize], rtlab_trace::Backend),
    args: &WatchArgs,
    running: bool,
) -> Vec<String> {
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    let mut warnings = Vec::new();
    let filtered = backend == rtlab_trace::Backend::Bpf;
    if !filtered {
        // Said once, before the run: no system call events, so no wait's deadline.
        let w = format!(
            "the {} source measures wakeup delays only: no timer or lock series{} (the eBPF \
             source, the default, has them)",
            backend.name(),
            if args.stacks {
                ", and no kernel stacks"
            } else {
                ""
            }
        );
        eprintln!("warning: {w}");
        warnings.push(w);
    }
    // (A command started here has no threads of its own yet.)
    for p in s.unmatched().into_iter().filter(|_| running) {
        // (pid 0: every process, or a cgroup's.)
        let of = match pid {
            0 => String::new(),
            pid => format!(" of process {pid}"),
        };
        let w = format!("--thread {p}: no thread{of} matches now; watching for one to appear");
        eprintln!("warning: {w}");
        warnings.push(w);
    }
    if !args.quiet {
        let wanted = s.cpus_wanted().filter(|_| filtered);
        let traced: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|&c| wanted.is_none_or(|m| m.contains(c)))
            .collect();
        let what = match &s.spec().scope {
            rtlab_watch::Scope::Process { children: true } => {
                format!("process {pid} and those it starts")
            }
            rtlab_watch::Scope::Process { children: false } => format!("process {pid}"),
            rtlab_watch::Scope::Cgroup(dir) => format!(
                "cgroup {}, {} now",
                dir.display(),
                counted(s.watched_processes().len(), "process", "processes")
            ),
            rtlab_watch::Scope::All => format!(
                "every process ({} now{})",
                s.watched_processes().len(),
                if args.rt_only {
                    ", real-time threads only"
                } else {
                    ""
                }
            ),
        };
        let until = if args.duration.is_some() {
            "until --duration ends, or Ctrl-C"
        } else if pid == 0 {
            "until Ctrl-C or SIGTERM"
        } else {
            "until it exits, or Ctrl-C"
        };
        eprintln!(
            "rtlab watch: {what}, {} now; {until}",
            counted(s.watched_threads(), "thread", "threads")
        );
        eprintln!(
            "  tracing CPU {}{}",
            CpuList::from(traced),
            if wanted.is_some() {
                ": where the watched threads may run (--all-cpus for every CPU)"
            } else {
                ""
            }
        );
    }
    warnings
}

type HlogWriter<'a, 'b> = IntervalLogWriter<'a, 'b, std::fs::File, V2DeflateSerializer>;

/// The run's loop: intervals until an end.
struct Watching<'a> {
    state: &'a Mutex<WatchState>,
    child: Option<Child>,
    started_ns: u64,
    end_ns: Option<u64>,
    interval_ns: u64,
    quiet: bool,
    /// Events lost so far.
    lost: std::sync::Arc<std::sync::atomic::AtomicU64>,
    status: StatusView,
}

impl Watching<'_> {
    /// Runs until Ctrl-C/SIGTERM, `--duration` or the process's exit, closing an interval
    /// every `interval_ns`, then stops the explainer and closes the last interval (after the
    /// reader's last events: the intervals add up to the totals); returns why it ended, for a
    /// command rtlab started its exit status, and the explainer's findings.
    fn until_end(
        &mut self,
        mut log: Option<&mut HlogWriter<'_, '_>>,
        explainer: Explainer,
    ) -> anyhow::Result<(&'static str, Option<i32>, rtlab_trace::Findings)> {
        let mut interval_start = self.started_ns;
        let mut exit_status: Option<i32> = None;
        let why = loop {
            std::thread::sleep(TICK);
            let now = monotonic_now_ns();
            let ended = if rtlab_sys::signal::interrupted() {
                Some("interrupted")
            } else if self.end_ns.is_some_and(|e| now >= e) {
                Some("duration reached")
            } else if let Some(c) = self.child.as_mut() {
                c.try_wait().ok().flatten().map(|status| {
                    exit_status = Some(exit_code(status));
                    "the command exited"
                })
            } else if self.state.lock().unwrap_or_else(|p| p.into_inner()).gone() {
                Some("the process exited")
            } else {
                None
            };
            if let Some(why) = ended {
                break why;
            }
            if now >= interval_start + self.interval_ns {
                self.close_interval(log.as_deref_mut(), interval_start, now)?;
                interval_start = now;
            }
        };
        // A command rtlab started does not outlive the watch: asked to end (SIGTERM), then
        // killed if it has not within 5 s; rtlab ends with its status either way.
        if let (Some(c), None) = (self.child.as_mut(), exit_status) {
            exit_status = Some(end_child(c));
        }
        let findings = explainer.finish()?;
        self.close_interval(log, interval_start, monotonic_now_ns())?;
        Ok((why, exit_status, findings))
    }

    /// Takes the interval's histograms: to the log, and shown on stderr (`StatusView`).
    fn close_interval(
        &mut self,
        log: Option<&mut HlogWriter<'_, '_>>,
        from: u64,
        to: u64,
    ) -> anyhow::Result<()> {
        let (taken, interval) = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let taken = s.take_interval();
            // Real-time series first, the worst of the interval first.
            let mut named: Vec<_> = taken
                .iter()
                .map(|(i, h)| (&s.series()[*i], h))
                .filter(|(w, _)| w.tid.is_none())
                .collect();
            named.sort_by_key(|(w, h)| (std::cmp::Reverse(w.rt), std::cmp::Reverse(h.max())));
            let rows = named
                .into_iter()
                .map(|(w, h)| Row {
                    series: w.name.clone(),
                    interval: h.clone(),
                    max_ever: w.total.max(),
                })
                .collect();
            let interval = Interval {
                at_ns: to.saturating_sub(self.started_ns),
                threads: s.watched_threads(),
                rows,
                outliers: s.book().summary().clone(),
                lost: self.lost.load(std::sync::atomic::Ordering::Relaxed),
            };
            let taken: Vec<(String, LatencyHistogram)> = taken
                .into_iter()
                .map(|(i, h)| (s.series()[i].name.clone(), h))
                .collect();
            (taken, interval)
        };
        if let Some(log) = log {
            let start = Duration::from_nanos(from.saturating_sub(self.started_ns));
            let length = Duration::from_nanos(to.saturating_sub(from));
            for (name, h) in &taken {
                let tag_text = crate::hlog::hlog_tag(name);
                log.write_histogram(h.hdr(), start, length, Tag::new(&tag_text))
                    .map_err(|e| anyhow::anyhow!("--hlog: {e}"))?;
            }
        }
        if !self.quiet {
            self.status.show(interval);
        }
        Ok(())
    }
}

/// The libjvm.so of a `java` launcher named by command argument `arg` (a path, or a name on
/// the PATH): `<java home>/lib/server/libjvm.so` beside it, where that exists.
fn libjvm_of(arg: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    let arg = std::path::Path::new(arg);
    if arg.file_name()? != "java" {
        return None;
    }
    let exe = match arg.components().count() {
        1 => std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(arg))
            .find(|p| p.is_file())?,
        _ => arg.to_path_buf(),
    };
    let home = std::fs::canonicalize(exe)
        .ok()?
        .parent()?
        .parent()?
        .to_path_buf();
    let lib = home.join("lib/server/libjvm.so");
    lib.is_file().then_some(lib)
}

/// A series' class: of real-time or time-sharing threads, or a JVM's (its safepoints).
fn class_of(w: &rtlab_watch::WatchSeries) -> &'static str {
    match (w.kind, w.rt) {
        (DelayKind::Safepoint, _) => "jvm",
        (_, true) => "realtime",
        (_, false) => "time-sharing",
    }
}

/// The `/metrics` page: the figures copied under the watcher's lock, the text made outside it.
fn metrics_page(state: std::sync::Arc<Mutex<WatchState>>, pid: i32) -> crate::metrics::Page {
    use rtlab_report::prometheus::{lost_on_cpus, render, DelayMetric, WatchMetrics};
    let online = rtlab_sys::affinity::online_cpus();
    std::sync::Arc::new(move || {
        let metrics = {
            let s = state.lock().unwrap_or_else(|p| p.into_inner());
            WatchMetrics {
                delays: s
                    .series()
                    .iter()
                    .filter(|w| w.tid.is_none() && !w.total.is_empty())
                    .map(|w| DelayMetric {
                        process: one_label(owners(&s, w).0),
                        cgroup: one_label(owners(&s, w).1),
                        thread: w.thread.clone(),
                        class: class_of(w),
                        kind: w.kind.name(),
                        total: w.total.clone(),
                        last_interval_max_ns: w.last_interval_max.get(),
                        unmeasured: w.unmeasured,
                    })
                    .collect(),
                outliers: s.book().summary().clone(),
                events_lost: lost_on_cpus(online.as_slice(), s.lost_by_cpu()),
                delays_abandoned: s.shortfalls().1,
                threads_refused: s.shortfalls().0,
                threads: s.watched_threads(),
                pid,
                version: env!("CARGO_PKG_VERSION").into(),
            }
        };
        render(&metrics)
    })
}

/// Starts the `--metrics` server on `listener` and says where, however quiet the run (a
/// port the kernel chose, `--metrics 127.0.0.1:0`, can be found no other way).
fn serve(
    listener: std::net::TcpListener,
    page: crate::metrics::Page,
) -> anyhow::Result<crate::metrics::MetricsServer> {
    let server = crate::metrics::MetricsServer::start(listener, page)
        .map_err(|e| anyhow::anyhow!("--metrics: {e}"))?;
    eprintln!("rtlab watch: metrics at http://{}/metrics", server.addr());
    Ok(server)
}

/// In place of an empty table: why no delay was measured, and what to try.
fn nothing_measured(s: &WatchState) -> String {
    let patterns: Vec<String> = s.spec().threads.iter().map(|p| p.to_string()).collect();
    match (s.most_threads(), patterns.is_empty()) {
        (0, false) => format!(
            "no delay measured: no thread matched --thread {}\n  name a thread, a glob such as \
             'rt-*' or a TID (`ps -L -o tid,comm -p PID` lists a process's threads),\n  or \
             leave --thread out to watch every thread\n",
            patterns.join(", ")
        ),
        (0, true) => "no delay measured: the watch found no thread to watch\n".to_string(),
        _ => "no delay measured: the watched threads never slept and woke while watched\n"
            .to_string(),
    }
}

fn end_child(child: &mut std::process::Child) -> i32 {
    let _ = rtlab_sys::process::terminate(child.id());
    let deadline = monotonic_now_ns() + 5_000_000_000;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return exit_code(status);
        }
        if monotonic_now_ns() > deadline {
            let _ = child.kill();
            return child.wait().map_or(128 + 9, exit_code);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shell's view of an exit status: the code, or 128 + the signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// `n` and the word for one or for many (`1 thread`, `3 threads`).
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The run's worst outliers, explained, and every explained one counted by main cause.
fn summary_lines(
    summary: &rtlab_stats::result::OutlierSummary,
    worst: &[rtlab_stats::result::Outlier],
) -> String {
    if summary.explained == 0 {
        return String::new();
    }
    let mut out = format!(
        "worst outliers ({} of {} explained):\n",
        worst.len(),
        summary.explained
    );
    out.push_str(&crate::output::described(worst));
    out.push_str("explained outliers by main cause:\n");
    let mut by_cause: Vec<_> = summary
        .by_cause
        .iter()
        .filter(|(_, t)| t.outliers > 0)
        .collect();
    by_cause.sort_by_key(|(_, t)| std::cmp::Reverse(t.outliers));
    for (kind, t) in by_cause {
        let line = format!(
            "{}: {} (max {})",
            rtlab_report::cause::kind_named(*kind),
            t.outliers,
            Nanos(t.max_ns)
        );
        for l in rtlab_report::cause::wrapped(&line, 2, 120) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    if !summary.by_task.is_empty() {
        let mut tasks: Vec<_> = summary.by_task.iter().collect();
        tasks.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
        let named: Vec<String> = tasks
            .iter()
            .take(8)
            .map(|(task, n)| format!("{} {n}", rtlab_report::printable(task)))
            .collect();
        let line = format!("by task: {}", named.join(", "));
        for l in rtlab_report::cause::wrapped(&line, 2, 120) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}
