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

/// What to watch: `--pid`'s process (checked now), a command, started once tracing is
/// ready (so its first wakeups are seen), a cgroup's processes or the machine's.
enum Target<'a> {
    Pid(i32),
    Command(&'a [std::ffi::OsString]),
    Cgroup(std::path::PathBuf),
    All,
}

fn target(args: &WatchArgs) -> anyhow::Result<Target<'_>> {
    let given = [
        args.pid.is_some(),
        !args.command.is_empty(),
        args.cgroup.is_some(),
        args.all,
    ];
    match given.iter().filter(|&&g| g).count() {
        0 => {
            return Err(BadInput(
                "say what to watch: --pid PID, a command after -- (rtlab watch -- ./app), --cgroup PATH or --all".into(),
            )
            .into())
        }
        1 => {}
        _ => {
            return Err(BadInput(
                "give one of --pid, a command after --, --cgroup or --all".into(),
            )
            .into())
        }
    }
    if args.no_children && (args.cgroup.is_some() || args.all) {
        return Err(BadInput("--no-children goes with --pid or a command".into()).into());
    }
    if let Some(pid) = args.pid {
        if rtlab_sys::procfs::threads_of(pid).is_err() {
            return Err(BadInput(format!("--pid {pid}: no such process")).into());
        }
        return Ok(Target::Pid(pid));
    }
    if let Some(cg) = &args.cgroup {
        return cgroup_dir(cg)
            .map(Target::Cgroup)
            .map_err(|e| BadInput(format!("--cgroup {cg}: {e}")).into());
    }
    if args.all {
        return Ok(Target::All);
    }
    Ok(Target::Command(&args.command))
}

/// The cgroup (v2) directory `text` names: a path (absolute, or under /sys/fs/cgroup), or a
/// Kubernetes pod's UID (its directory, `...pod<uid>.slice` with `_` for `-`, or `pod<uid>`,
/// found under /sys/fs/cgroup).
fn cgroup_dir(text: &str) -> Result<std::path::PathBuf, NoCgroup> {
    let roots: Vec<std::path::PathBuf> = rtlab_sys::procfs::cgroup2_mount()
        .into_iter()
        .chain([std::path::PathBuf::from("/sys/fs/cgroup")])
        .collect();
    let path = std::path::Path::new(text);
    let candidates: Vec<std::path::PathBuf> = match path.is_absolute() {
        true => vec![path.to_path_buf()],
        false => roots.iter().map(|r| r.join(path)).collect(),
    };
    if let Some(dir) = candidates
        .into_iter()
        .find(|d| d.join("cgroup.procs").is_file())
    {
        return Ok(dir);
    }
    let uid = text.strip_prefix("pod").unwrap_or(text);
    if !is_pod_uid(uid) {
        return Err(NoCgroup::NoSuchDir);
    }
    let mut found = pod_dirs(&roots, uid);
    found.dedup();
    match found.len() {
        0 => Err(NoCgroup::NoSuchPod(uid.to_string())),
        1 => Ok(found.remove(0)),
        _ => Err(NoCgroup::Ambiguous(uid.to_string(), found)),
    }
}

/// A whole pod UID: a UUID (`-` or `_` between its groups, as cgroup names spell it), or a
/// static pod's 32 hex digits. Never a prefix.
fn is_pod_uid(uid: &str) -> bool {
    let groups: Vec<&str> = uid.split(['-', '_']).collect();
    let hex = |g: &str| g.chars().all(|c| c.is_ascii_hexdigit());
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    groups.iter().all(|g| hex(g)) && (lens == [8, 4, 4, 4, 12] || lens == [32])
}

/// The cgroups of the pod `uid` under `roots`: only in Kubernetes' own subtrees (a
/// directory named `kubepods*` at the top, or one level down under the kubelet's cgroup
/// root), and only a directory named exactly as the kubelet names a pod's (`pod<uid>`, or
/// `kubepods[-<qos>]-pod<uid with _>.slice`). A user's delegated subtree is not searched.
fn pod_dirs(roots: &[std::path::PathBuf], uid: &str) -> Vec<std::path::PathBuf> {
    let (dashed, underscored) = (uid.replace('_', "-"), uid.replace('-', "_"));
    let is_pod = |name: &str| {
        name == format!("pod{dashed}")
            || name.strip_prefix("kubepods").is_some_and(|rest| {
                rest.ends_with(&format!("-pod{underscored}.slice"))
                    && rest
                        .trim_end_matches(&format!("-pod{underscored}.slice"))
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c == '-')
            })
    };
    let dirs = |d: &std::path::Path| -> Vec<(String, std::path::PathBuf)> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect()
    };
    // Kubernetes' subtrees: `kubepods*` at the top or one level down.
    let mut stack: Vec<(std::path::PathBuf, usize)> = Vec::new();
    for root in roots {
        for (name, top) in dirs(root) {
            if name.starts_with("kubepods") {
                stack.push((top, 0));
            } else if !name.contains("user") {
                let under = dirs(&top)
                    .into_iter()
                    .filter(|(n, _)| n.contains("kubepods"));
                stack.extend(under.map(|(_, p)| (p, 0)));
            }
        }
    }
    let mut found = Vec::new();
    while let Some((d, depth)) = stack.pop() {
        for (name, path) in dirs(&d) {
            if is_pod(&name) {
                found.push(path);
            } else if depth < 3 {
                stack.push((path, depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// Why `--cgroup` names no cgroup.
#[derive(Debug)]
enum NoCgroup {
    /// Neither a cgroup's directory nor a pod UID.
    NoSuchDir,
    /// A pod UID (as written, without `pod`) that no cgroup's name holds.
    NoSuchPod(String),
    /// A pod UID that more than one cgroup is named for.
    Ambiguous(String, Vec<std::path::PathBuf>),
}

impl std::fmt::Display for NoCgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoCgroup::NoSuchDir => f.write_str(
                "no such cgroup (a directory with cgroup.procs, under /sys/fs/cgroup or absolute, or a pod UID)",
            ),
            NoCgroup::NoSuchPod(uid) => write!(f, "no pod with UID {uid} under /sys/fs/cgroup"),
            NoCgroup::Ambiguous(uid, dirs) => write!(
                f,
                "{} cgroups are named for pod {uid} ({}): give the directory",
                dirs.len(),
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl std::error::Error for NoCgroup {}

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
        let w = format!(
            "--thread {p}: no thread of process {pid} matches now; watching for one to appear"
        );
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
                "cgroup {} ({} process(es) now)",
                dir.display(),
                s.watched_processes().len()
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
        eprintln!(
            "rtlab watch: {what}, {} thread(s) now, CPU(s) {} traced{} ({}); Ctrl-C ends",
            s.watched_threads(),
            CpuList::from(traced),
            if wanted.is_some() {
                " (where the watched threads may run; --all-cpus for all)"
            } else {
                ""
            },
            if args.duration.is_some() {
                "until --duration"
            } else if pid == 0 {
                "until Ctrl-C or SIGTERM"
            } else {
                "until it exits"
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

/// How the run went, for its report.
struct Run {
    started_realtime: u64,
    /// CLOCK_MONOTONIC at the start (the time base of the events).
    started_ns: u64,
    duration: Nanos,
    why: &'static str,
    warnings: Vec<String>,
}

/// The result document and the final text: the series, the outliers kept, the summary by
/// cause, why it ended.
fn report(
    state: &Mutex<WatchState>,
    pid: i32,
    backend: rtlab_trace::Backend,
    run: Run,
) -> anyhow::Result<(rtlab_stats::result::ResultDoc, String)> {
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    let (series, table) = results(&s, pid, backend)?;
    let book = s.book();
    let mut doc = standalone_doc(
        "watch",
        run.started_realtime,
        run.duration,
        vec![],
        run.warnings,
        series,
    );
    doc.outliers = book.outliers();
    // Where the recorder looked: the watched threads' CPUs, as they changed.
    let (_, ever) = s.traced();
    let traced: Vec<usize> = rtlab_sys::affinity::online_cpus()
        .as_slice()
        .iter()
        .copied()
        .filter(|&c| ever.contains(c))
        .collect();
    doc.verdict.details.insert(
        "traced_cpus".into(),
        CpuList::from(traced).to_string().into(),
    );
    doc.verdict.details.insert(
        "outlier_summary".into(),
        serde_json::to_value(book.summary())?,
    );
    jvm_details(&s, run.started_ns, &mut doc.verdict.details);
    // rtlab's own threads: never a cause, their time counted as the observer's.
    doc.verdict.details.insert(
        "observer".into(),
        serde_json::json!({
            "threads": s.observer_threads().collect::<Vec<i64>>(),
            "ns": s.observer_ns(),
        }),
    );
    if s.wakeups_unseen() > 0 {
        doc.verdict
            .details
            .insert("wakeups_unseen".into(), s.wakeups_unseen().into());
    }
    let deadline_notes = s.deadline_notes();
    if !deadline_notes.is_empty() {
        doc.verdict
            .details
            .insert("deadline_notes".into(), deadline_notes.into());
    }
    let mut text = match table.is_empty() {
        false => table.render(),
        true => nothing_measured(&s),
    };
    text.push_str(&format!("ended: {}\n", run.why));
    let secs = (run.duration.get() as f64 / 1e9).max(1e-9);
    text.push_str(&observer_line(&s, book.summary(), secs));
    if s.ends_in_user_space() {
        text.push_str(
            "delays end where each wait returned to user space (the program's own view)\n",
        );
    }
    text.push_str(&lost_line(&s));
    for note in s.deadline_notes() {
        text.push_str(&note);
        text.push('\n');
    }
    let (notes, more) = s.jvm_notes();
    for note in notes {
        text.push_str(&note);
        text.push('\n');
    }
    if more > 0 {
        text.push_str(&format!("JVM: {more} more notes like these not shown\n"));
    }
    text.push_str(&summary_lines(book.summary(), book.worst()));
    Ok((doc, text))
}

/// A watched JVM's safepoints one by one (the latest thousand), as HotSpot's probes (or its
/// log) told them: -Xlog:safepoint's figures, from outside; with --jvm-log, the JVMs' own
/// logs beside the probes, stop by stop.
fn jvm_details(
    s: &WatchState,
    started_ns: u64,
    details: &mut serde_json::Map<String, serde_json::Value>,
) {
    let at = |ns: u64| ns.saturating_sub(started_ns);
    let (stops, seen) = s.jvm_stops();
    let stops: Vec<serde_json::Value> = stops
        .map(|st| {
            serde_json::json!({
                "process": st.process,
                "operation": st.operation.as_deref(),
                "cause": st.cause.as_deref(),
                "at_ns": at(st.begin_ns),
                "reaching_ns": st.reached_ns.map(|r| r.saturating_sub(st.begin_ns)),
                "total_ns": st.end_ns.saturating_sub(st.begin_ns),
                "log_total_ns": s.jvm_log_total(st.process, st.begin_ns),
            })
        })
        .collect();
    if seen > 0 {
        let latest = serde_json::json!({ "count": seen, "latest": stops });
        details.insert("jvm_safepoints".into(), latest);
    }
    if !s.jvm_log_asked() {
        return;
    }
    let ((compared, differing), flagged) = s.jvm_witnesses();
    let flagged: Vec<serde_json::Value> = (flagged.iter())
        .map(|p| {
            serde_json::json!({
                "process": p.process,
                "operation": p.operation.as_deref(),
                "at_ns": at(p.begin_ns),
                "probes_total_ns": p.probes_ns,
                "log_total_ns": p.log_ns,
            })
        })
        .collect();
    details.insert(
        "jvm_witnesses".into(),
        serde_json::json!({
            "compared": compared,
            "differing": differing,
            "differ_above": {"share": rtlab_watch::DIFFER_SHARE, "ns": rtlab_watch::DIFFER_MIN_NS},
            "differing_stops": flagged,
        }),
    );
}

/// What watching cost: rtlab's own time on the watched CPUs, and the delays it had a part
/// in (counted as the observer's, never blamed on the program or another task).
fn observer_line(
    s: &WatchState,
    summary: &rtlab_stats::result::OutlierSummary,
    secs: f64,
) -> String {
    let ran = format!(
        "observer: rtlab's own threads ran {} on the watched CPUs ({} a second)",
        Nanos(s.observer_ns()),
        Nanos((s.observer_ns() as f64 / secs) as u64)
    );
    let ours = summary
        .by_cause
        .get(&rtlab_stats::result::CauseKind::Observer);
    match ours.filter(|t| t.outliers > 0) {
        None => format!("{ran}; no delay explained was theirs\n"),
        Some(t) => format!(
            "{ran}\n  they were the main cause of {} delay(s) explained (max {}): the cost of watching\n",
            t.outliers,
            Nanos(t.max_ns)
        ),
    }
}

/// Trace events lost, in the final text: never silent.
fn lost_line(s: &WatchState) -> String {
    let (watched, others) = s
        .lost_by_cpu()
        .values()
        .fold((0, 0), |(w, o), l| (w + l[0], o + l[1]));
    let unmeasured: u64 = s
        .series()
        .iter()
        .filter(|w| w.tid.is_none())
        .map(|w| w.unmeasured)
        .sum();
    let cpus = |i: usize| {
        let list: Vec<usize> = s
            .lost_by_cpu()
            .iter()
            .filter(|(_, l)| l[i] > 0)
            .map(|(&c, _)| c as usize)
            .collect();
        CpuList::from(list).to_string()
    };
    let mut out = String::new();
    if watched == 0 && others == 0 {
        out.push_str("events lost: none\n");
    }
    let unseen = s.wakeups_unseen();
    if unseen > 0 {
        out.push_str(&format!(
            "wakeups not in the trace: {unseen}, counted as unmeasured (a watched thread came \
             back from a wait with no\n  wakeup seen and no event counted lost: its CPU's \
             events then were not recorded)\n"
        ));
    }
    if watched > 0 {
        out.push_str(&format!(
            "events lost: {watched} of the watched threads' (CPU {}): the delays within them are missing from the figures, and {unmeasured} delay(s) a loss cut short are counted as unmeasured\n",
            cpus(0)
        ));
    }
    if others > 0 {
        out.push_str(&format!(
            "events lost: {others} of other tasks' (CPU {}): {}explanations near the losses are incomplete\n",
            cpus(1),
            if watched == 0 {
                "the watched threads' figures are complete (their events have rings of their own); "
            } else {
                ""
            }
        ));
    }
    out
}

/// What the run could not watch or measure, as warnings.
fn shortfalls(s: &WatchState, pid: i32, findings: &rtlab_trace::Findings) -> Vec<String> {
    let (refused, abandoned) = s.shortfalls();
    let lost_events = findings.lost_events;
    let mut warnings = Vec::new();
    if findings.backend == rtlab_trace::Backend::Bpf {
        let (locks, others): (Vec<_>, Vec<_>) = findings
            .missing_events
            .iter()
            .partition(|m| matches!(m, rtlab_trace::Missing::LockWaits(_)));
        if !others.is_empty() {
            let names: Vec<String> = others.iter().map(|m| m.to_string()).collect();
            warnings.push(format!("not traced on this kernel: {}", names.join(", ")));
        }
        if let Some(why) = locks.first() {
            warnings.push(format!(
                "no lock series: {why}{}",
                if s.spec().locks == rtlab_trace::LockWaits::Any {
                    ""
                } else {
                    "; --locks records them on the system calls instead, at a cost to every system call"
                }
            ));
        }
    }
    if refused > 0 {
        warnings.push(format!(
            "{refused} thread(s) or timer/lock series not watched: at most {} series",
            rtlab_watch::MAX_SERIES
        ));
    }
    if lost_events > 0 || abandoned > 0 {
        warnings.push(format!(
            "{lost_events} trace events lost; {abandoned} delay(s) left unmeasured across the losses"
        ));
    }
    if s.series().iter().all(|w| w.total.is_empty()) {
        warnings.push(format!(
            "no watched thread of process {pid} was woken while watched"
        ));
    }
    warnings
}

/// Each series of the table (a name's, and its threads' when it has several) as a log2
/// histogram.
fn histograms(s: &WatchState) -> String {
    let mut out = String::new();
    for w in table_order(s.series()) {
        out.push_str(&format!("\n{}:\n", rtlab_report::printable(&w.name)));
        out.push_str(&rtlab_report::table::log2_histogram(&w.total));
    }
    out
}

/// The names and cgroups of the processes a series is of: its thread's, or its threads'.
fn owners(s: &WatchState, w: &rtlab_watch::WatchSeries) -> (Vec<String>, Vec<String>) {
    let procs: std::collections::BTreeSet<u32> = match w.process {
        Some(p) => [p].into(),
        // Kept on the name's series: its threads' own series may have given way since.
        None => w.owners.iter().copied().collect(),
    };
    let of = |f: fn(&(String, String)) -> &String| -> Vec<String> {
        let set: std::collections::BTreeSet<String> = procs
            .iter()
            .filter_map(|&p| s.process(p).map(|x| f(x).clone()))
            .collect();
        set.into_iter().collect()
    };
    (of(|p| &p.0), of(|p| &p.1))
}

/// One label value for a list: its only member, `(several)`, or empty.
fn one_label(v: Vec<String>) -> String {
    match v.len() {
        0 => String::new(),
        1 => v.into_iter().next().unwrap_or_default(),
        _ => "(several)".into(),
    }
}

/// The table's rows: the series of each name and class, real-time ones first, the worst
/// (longest delay) first, each followed by its threads' own series when it sums more than
/// one (a name with one thread is one row).
fn table_order(series: &[rtlab_watch::WatchSeries]) -> Vec<&rtlab_watch::WatchSeries> {
    let worst_first = |v: &mut Vec<&rtlab_watch::WatchSeries>| {
        v.sort_by_key(|w| (std::cmp::Reverse(w.rt), std::cmp::Reverse(w.total.max())));
    };
    let mut names: Vec<_> = series
        .iter()
        .filter(|w| w.tid.is_none() && !w.total.is_empty())
        .collect();
    worst_first(&mut names);
    let mut rows = Vec::new();
    for n in names {
        rows.push(n);
        if n.members.len() > 1 {
            let mut threads: Vec<_> = n
                .members
                .iter()
                .filter_map(|&i| series.get(i as usize))
                .filter(|w| !w.total.is_empty())
                .collect();
            worst_first(&mut threads);
            rows.extend(threads);
        }
    }
    rows
}

/// Where a timer series' deadlines came from, the most frequent first (two at most, and how
/// many others): `timerfd`, `java-park, java-period`.
fn deadline_sources(w: &rtlab_watch::WatchSeries) -> String {
    let mut by_count: Vec<_> = w.deadlines.iter().collect();
    by_count.sort_by_key(|(source, n)| (std::cmp::Reverse(**n), **source));
    let mut names: Vec<&str> = by_count.iter().take(2).map(|(s, _)| s.name()).collect();
    let more = format!("+{}", by_count.len().saturating_sub(2));
    if by_count.len() > 2 {
        names.push(&more);
    }
    names.join(", ")
}

/// The result's series (each with samples, and `watch/threads`) and the table.
fn results(
    s: &WatchState,
    pid: i32,
    backend: rtlab_trace::Backend,
) -> anyhow::Result<(Vec<Series>, Table)> {
    let mut series = Vec::new();
    // A column for the delays not measured, when any was not.
    let unmeasured = s.series().iter().any(|w| w.unmeasured > 0);
    let mut columns = vec!["series", "n", "p50", "p99", "p99.9", "max"];
    if unmeasured {
        columns.push("unmeasured");
    }
    // Where the timer delays' deadlines came from, when there are any.
    let deadlines = s.series().iter().any(|w| !w.deadlines.is_empty());
    if deadlines {
        columns.push("deadline");
    }
    let mut table = Table::new(&columns);
    for w in table_order(s.series()) {
        let sum = w.total.summary();
        let mut row = vec![
            w.name.clone(),
            sum.count.to_string(),
            Nanos(sum.p50).to_string(),
            Nanos(sum.p99).to_string(),
            Nanos(sum.p999).to_string(),
            Nanos(sum.max).to_string(),
        ];
        if unmeasured {
            row.push(w.unmeasured.to_string());
        }
        if deadlines {
            row.push(deadline_sources(w));
        }
        table.row(row);
    }
    for w in s.series().iter().filter(|w| !w.total.is_empty()) {
        let metric = match w.kind {
            DelayKind::Wakeup => "wakeup_latency",
            DelayKind::Timer => "timer_latency",
            DelayKind::Lock => "lock_wait",
            DelayKind::Safepoint => "safepoint_duration",
        };
        let mut out = Series::distribution(w.name.clone(), metric, &w.total)?
            .with_config("pid", pid)
            .with_config("kind", w.kind.name())
            .with_config("class", class_of(w));
        let (processes, cgroups) = owners(s, w);
        out = out
            .with_config("process", processes)
            .with_config("cgroup", cgroups);
        if let Some(p) = w.process {
            out = out.with_config("process_pid", p);
        }
        if !w.deadlines.is_empty() {
            let sources: serde_json::Map<String, serde_json::Value> = (w.deadlines.iter())
                .map(|(source, n)| (source.name().to_string(), (*n).into()))
                .collect();
            out = out.with_config("deadlines", serde_json::Value::Object(sources));
        }
        if let Some(t) = w.timeline.timeline() {
            out = t.into_config_of(out);
        }
        out.unmeasured = Some(w.unmeasured);
        out.tags.insert("source".into(), backend.name().into());
        series.push(out);
    }
    series.push(
        Series::value(
            "watch/threads",
            "threads_watched",
            rtlab_stats::result::Unit::Count,
            s.most_threads() as f64,
        )
        .with_config("pid", pid),
    );
    // What watching cost the watched CPUs: rtlab's own threads' time there (never a cause).
    series.push(
        Series::value(
            "watch/observer",
            "observer_time",
            rtlab_stats::result::Unit::Ns,
            s.observer_ns() as f64,
        )
        .with_config("pid", pid)
        .with_config("ends_in_user_space", s.ends_in_user_space()),
    );
    Ok((series, table))
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
    out.push_str("explained outliers by main cause:");
    let mut by_cause: Vec<_> = summary
        .by_cause
        .iter()
        .filter(|(_, t)| t.outliers > 0)
        .collect();
    by_cause.sort_by_key(|(_, t)| std::cmp::Reverse(t.outliers));
    for (kind, t) in by_cause {
        out.push_str(&format!(
            " {} {} (max {});",
            kind.as_str(),
            t.outliers,
            Nanos(t.max_ns)
        ));
    }
    out.pop();
    out.push('\n');
    if !summary.by_task.is_empty() {
        let mut tasks: Vec<_> = summary.by_task.iter().collect();
        tasks.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
        out.push_str("  by task:");
        for (task, n) in tasks.iter().take(8) {
            out.push_str(&format!(" {} {n},", rtlab_report::printable(task)));
        }
        out.pop();
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_its_whole_uid_in_kubernetes_own_subtrees_and_never_two() {
        // Regression (hardening, third review, #6): the first directory holding `pod<uid>`
        // anywhere (a user's delegated subtree too) was taken, from an 8-digit prefix.
        let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        assert!(is_pod_uid(uid) && is_pod_uid(&uid.replace('-', "_")));
        assert!(is_pod_uid("0123456789abcdef0123456789abcdef"));
        for not in [
            "0f1e2d3c",
            "0f1e2d3c-4b5a",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fz",
        ] {
            assert!(!is_pod_uid(not), "{not}");
        }
        let root = tempfile::tempdir().unwrap();
        let mk = |p: &str| std::fs::create_dir_all(root.path().join(p)).unwrap();
        let u = uid.replace('-', "_");
        // A user's subtree naming the pod first: never searched.
        mk(&format!("user.slice/user-1000.slice/kubepods-pod{u}.slice"));
        mk(&format!("user.slice/evil/pod{uid}"));
        let roots = [root.path().to_path_buf()];
        assert_eq!(pod_dirs(&roots, uid), Vec::<std::path::PathBuf>::new());
        let pod =
            format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice");
        mk(&pod);
        mk(&format!(
            "kubepods.slice/kubepods-burstable.slice/x-pod{u}.slice.bak"
        ));
        assert_eq!(pod_dirs(&roots, uid), vec![root.path().join(&pod)]);
        // Under the kubelet's own cgroup root too, in the cgroupfs form.
        mk(&format!("kubelet.slice/kubepods/besteffort/pod{uid}"));
        assert_eq!(pod_dirs(&roots, uid).len(), 2, "two: ambiguous, refused");
    }
}
