//! `rtlab watch`: the scheduling delays of a running program's threads, explained.

use crate::cli::WatchArgs;
use crate::output::{standalone_doc, Outputs};
use crate::{BadInput, Status};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use rtlab_report::table::Table;
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::time::monotonic_now_ns;
use rtlab_trace::watch::{ThreadPattern, WatchSpec};
use rtlab_trace::{Explainer, Options, TraceError};
use std::time::Duration;

/// How often the loop looks at the clock, the signal flag and the process.
const TICK: Duration = Duration::from_millis(100);

pub fn run(args: WatchArgs) -> anyhow::Result<Status> {
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
    if rtlab_sys::process::effective_uid() != 0 {
        return Err(BadInput(
            "rtlab watch needs root (it traces the kernel's scheduler events with eBPF or tracefs)"
                .into(),
        )
        .into());
    }
    let mut child = match (args.pid, args.command.is_empty()) {
        (Some(_), false) => {
            return Err(BadInput("give either --pid or a command after --, not both".into()).into())
        }
        (None, true) => {
            return Err(BadInput(
                "say what to watch: --pid PID, or a command after -- (rtlab watch -- ./app)".into(),
            )
            .into())
        }
        (Some(_), true) => None,
        (None, false) => {
            let program = &args.command[0];
            let child = std::process::Command::new(program)
                .args(&args.command[1..])
                .spawn()
                .map_err(|e| {
                    BadInput(format!("cannot start '{}': {e}", program.to_string_lossy()))
                })?;
            Some(child)
        }
    };
    let pid = match (&child, args.pid) {
        (Some(c), _) => c.id() as i32,
        (None, Some(p)) => p,
        (None, None) => unreachable!("checked above"),
    };
    if rtlab_sys::procfs::threads_of(pid).is_err() {
        return Err(BadInput(format!("--pid {pid}: no such process")).into());
    }
    let started_ns = monotonic_now_ns();
    let started_realtime = rtlab_sys::time::realtime_now_ns();
    let threshold = args.threshold.map(|t| t.get());
    let options = Options {
        backend: args.explain_with,
        threshold_ns: threshold,
        top: args.top.map_or(10, usize::from),
        trace_out: None,
        reader_cpus: Vec::new(),
        series_names: Vec::new(),
        started_ns,
        waits: Vec::new(),
    };
    let cpus: Vec<usize> = rtlab_sys::affinity::usable_cpus().as_slice().to_vec();
    let spec = WatchSpec {
        pid,
        threads: patterns,
        rt_only: args.rt_only,
    };
    let explainer = Explainer::watch(&cpus, options, spec).map_err(|e| match e {
        TraceError::NotRoot(_) => anyhow::Error::from(BadInput(e.to_string())),
        e => anyhow::anyhow!("cannot watch: {e}"),
    })?;
    let state = explainer
        .watch_state()
        .expect("a watching explainer has a state")
        .clone();
    let mut warnings = Vec::new();
    {
        let s = state.lock().unwrap_or_else(|p| p.into_inner());
        for p in s.unmatched() {
            let w = format!(
                "--thread {p}: no thread of process {pid} matches now; watching for one to appear"
            );
            eprintln!("warning: {w}");
            warnings.push(w);
        }
        if !args.quiet {
            eprintln!(
                "rtlab watch: process {pid}, {} thread(s) now, {} CPU(s) traced ({}); Ctrl-C ends",
                s.watched_threads(),
                cpus.len(),
                if args.duration.is_some() {
                    "until --duration"
                } else {
                    "until it exits"
                }
            );
        }
    }
    let end_ns = args.duration.map(|d| started_ns.saturating_add(d.get()));
    let interval = args.interval_log.get();
    // Written as it goes (a log to follow while it runs), so not through a temporary file;
    // a file already there is replaced, never written through (a planted symlink included).
    let mut hlog = match &args.hlog {
        Some(path) => {
            Some(open_log(path).map_err(|e| anyhow::anyhow!("--hlog {}: {e}", path.display()))?)
        }
        None => None,
    };
    let mut serializer = V2DeflateSerializer::new();
    let mut log = match hlog.as_mut() {
        Some(file) => Some(
            IntervalLogWriterBuilder::new()
                .add_comment("rtlab watch: scheduling delay (ns) per series, tag = series")
                .with_start_time(std::time::SystemTime::now())
                .begin_log_with(file, &mut serializer)
                .map_err(|e| anyhow::anyhow!("--hlog: {e}"))?,
        ),
        None => None,
    };
    let mut interval_start = started_ns;
    let mut exit_status: Option<i32> = None;
    let why = loop {
        std::thread::sleep(TICK);
        let now = monotonic_now_ns();
        let ended = if rtlab_sys::signal::interrupted() {
            Some("interrupted")
        } else if end_ns.is_some_and(|e| now >= e) {
            Some("duration reached")
        } else if let Some(c) = child.as_mut() {
            match c.try_wait() {
                Ok(Some(status)) => {
                    exit_status = Some(exit_code(status));
                    Some("the command exited")
                }
                _ => None,
            }
        } else if state.lock().unwrap_or_else(|p| p.into_inner()).gone() {
            Some("the process exited")
        } else {
            None
        };
        if now >= interval_start + interval || ended.is_some() {
            let taken = state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take_interval();
            let length = now.saturating_sub(interval_start);
            if let Some(log) = log.as_mut() {
                let start = Duration::from_nanos(interval_start.saturating_sub(started_ns));
                for (name, h) in &taken {
                    let tag_text = hlog_tag(name);
                    log.write_histogram(
                        h.hdr(),
                        start,
                        Duration::from_nanos(length),
                        Tag::new(&tag_text),
                    )
                    .map_err(|e| anyhow::anyhow!("--hlog: {e}"))?;
                }
            }
            if !args.quiet {
                for line in interval_lines(&taken, now.saturating_sub(started_ns)) {
                    eprintln!("{line}");
                }
            }
            interval_start = now;
        }
        if let Some(why) = ended {
            break why;
        }
    };
    drop(log);
    drop(hlog);
    // A command rtlab started does not outlive the watch: asked to end (SIGTERM), then
    // killed if it has not within 5 s; rtlab ends with its status either way.
    if let (Some(c), None) = (child.as_mut(), exit_status) {
        exit_status = Some(end_child(c));
    }
    let findings = explainer.finish()?;
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    let (refused, abandoned) = s.shortfalls();
    if refused > 0 {
        warnings.push(format!(
            "{refused} thread(s) not watched: at most {} series",
            rtlab_trace::watch::MAX_SERIES
        ));
    }
    if findings.lost_events > 0 || abandoned > 0 {
        warnings.push(format!(
            "{} trace events lost; {abandoned} delay(s) left unmeasured across the losses",
            findings.lost_events
        ));
    }
    let mut series = Vec::new();
    let mut table = Table::new(&["series", "n", "p50", "p99", "p99.9", "max"]);
    for w in s.series() {
        if w.total.is_empty() {
            continue;
        }
        let sum = w.total.summary();
        table.row(vec![
            w.name.clone(),
            sum.count.to_string(),
            Nanos(sum.p50).to_string(),
            Nanos(sum.p99).to_string(),
            Nanos(sum.p999).to_string(),
            Nanos(sum.max).to_string(),
        ]);
        let mut out = Series::distribution(w.name.clone(), "wakeup_latency", &w.total)?
            .with_config("pid", pid)
            .with_config("kind", "wakeup");
        out.tags
            .insert("source".into(), findings.backend.to_string().into());
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
    drop(s);
    if series.len() == 1 {
        warnings.push(format!(
            "no watched thread of process {pid} was woken while watched"
        ));
    }
    let duration = Nanos(monotonic_now_ns().saturating_sub(started_ns));
    let mut doc = standalone_doc(
        "watch",
        started_realtime,
        duration,
        vec![],
        warnings,
        series,
    );
    doc.outliers = findings.outliers;
    let mut text = table.render();
    text.push_str(&format!("ended: {why}\n"));
    text.push_str(&crate::output::outlier_lines(&doc));
    let status = outputs.finish(&mut doc, &text)?;
    Ok(match exit_status {
        Some(code) => Status::Exit(code.clamp(0, 255) as u8),
        None => status,
    })
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

fn open_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path)?;
    }
    rtlab_sys::fs::create_new(path, 0o644)
}

/// An interval log tag: the series name without the characters the format reserves.
fn hlog_tag(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// One line per series with samples in the interval (`at_ns`: since the start).
fn interval_lines(taken: &[(String, LatencyHistogram)], at_ns: u64) -> Vec<String> {
    taken
        .iter()
        .map(|(name, h)| {
            let s = h.summary();
            format!(
                "watch {:.0} s: {} n={} p50={} p99={} max={}",
                at_ns as f64 / 1e9,
                rtlab_report::printable(name),
                s.count,
                Nanos(s.p50),
                Nanos(s.p99),
                Nanos(s.max)
            )
        })
        .collect()
}
