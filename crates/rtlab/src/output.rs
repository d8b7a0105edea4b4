//! Progress on the terminal, and what happens after a run: verdict, files, the final table.

use crate::cli::FailLevel;
use crate::{BadInput, Status};
use rtlab_lab::{LiveSeries, Observer, RunRecord};
use rtlab_report::{
    check_writable_dir, check_writable_file, printable, Exporter, HgrmExporter, JsonExporter,
};
use rtlab_stats::result::{ResultDoc, Tool, Unit, Verdict, SCHEMA_VERSION};
use rtlab_stats::Nanos;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Prints warnings at once and, on a terminal, a live status that redraws in place;
/// elsewhere (a CI or pod log) one status line every `status_every`.
#[derive(Debug)]
pub struct Console {
    quiet: bool,
    live: bool,
    drawn: usize,
    /// Off a terminal: how often a status line is printed (None: never).
    status_every: Option<Nanos>,
    /// Monotonic time of the last status line (or of the start).
    last_status_ns: u64,
    /// The survey's current stage, named in status lines.
    stage: Option<String>,
    /// Where interval histograms go (`--hlog`).
    hlog: Option<crate::hlog::HlogWriter>,
}

/// How often a long run says it is alive when stderr is not a terminal, by default.
pub const STATUS_EVERY: Nanos = Nanos::from_secs(60);

impl Console {
    pub fn new(quiet: bool) -> Self {
        Console {
            quiet,
            live: !quiet && std::io::stderr().is_terminal(),
            drawn: 0,
            status_every: (!quiet).then_some(STATUS_EVERY),
            last_status_ns: rtlab_sys::time::monotonic_now_ns(),
            stage: None,
            hlog: None,
        }
    }

    /// Interval histograms ([`Observer::interval`]) go to this log.
    pub fn hlog(mut self, log: Option<crate::hlog::HlogWriter>) -> Self {
        self.hlog = log;
        self
    }

    /// Closes the interval log, if any, with everything written.
    pub fn finish_hlog(&mut self) -> anyhow::Result<()> {
        match self.hlog.take() {
            Some(log) => log.finish(),
            None => Ok(()),
        }
    }

    /// Status lines off a terminal every `every` instead of every [`STATUS_EVERY`].
    pub fn status_every(mut self, every: Nanos) -> Self {
        if !self.quiet {
            self.status_every = Some(every);
        }
        self
    }

    /// Off a terminal, prints the status line when one is due.
    fn status_line(&mut self, elapsed: Nanos, total: Nanos, live: &[LiveSeries]) {
        let Some(every) = self.status_every.filter(|_| !self.live) else {
            return;
        };
        let now = rtlab_sys::time::monotonic_now_ns();
        if now.saturating_sub(self.last_status_ns) < every.get() {
            return;
        }
        self.last_status_ns = now;
        let views: Vec<(&str, &rtlab_stats::LiveHistogram)> =
            live.iter().map(|l| (l.name.as_str(), &*l.hist)).collect();
        let line = rtlab_report::table::status_line(
            self.stage.as_deref(),
            elapsed,
            (total != crate::cli::FOREVER).then_some(total),
            &views,
        );
        eprintln!("{}", printable(&line));
    }

    fn clear(&mut self) {
        if self.drawn > 0 {
            // Up to the first status line, erase from there to the end of the screen.
            eprint!("\x1b[{}F\x1b[J", self.drawn);
            self.drawn = 0;
        }
    }

    /// Removes the live status before the final output.
    pub fn finish(&mut self) {
        self.clear();
    }

    /// An informational line (suppressed by --quiet).
    pub fn note(&mut self, text: &str) {
        if !self.quiet {
            self.clear();
            eprintln!("{}", printable(text));
        }
    }

    /// Live lines for things that are not latency series (load progress).
    pub fn draw(&mut self, lines: &[String]) {
        if !self.live {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.drawn > 0 {
            let _ = write!(err, "\x1b[{}F", self.drawn);
        }
        for line in lines {
            let _ = writeln!(err, "\x1b[2K{line}");
        }
        let _ = err.flush();
        self.drawn = lines.len();
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Observer for Console {
    fn warn(&mut self, message: &str) {
        self.clear();
        eprintln!("warning: {}", printable(message));
    }

    fn tick(&mut self, elapsed: Nanos, total: Nanos, live: &[LiveSeries]) {
        if !self.live {
            self.status_line(elapsed, total, live);
            return;
        }
        let views: Vec<(&str, &rtlab_stats::LiveHistogram)> =
            live.iter().map(|l| (l.name.as_str(), &*l.hist)).collect();
        let lines = rtlab_report::table::live_status(elapsed, total, &views);
        self.draw(&lines);
    }

    fn interval(
        &mut self,
        series: &str,
        from: Nanos,
        to: Nanos,
        hist: &rtlab_stats::LatencyHistogram,
    ) {
        if let Some(log) = &self.hlog {
            log.write(
                series,
                std::time::Duration::from_nanos(from.get()),
                std::time::Duration::from_nanos(to.get().saturating_sub(from.get())),
                hist.hdr(),
            );
        }
    }

    fn stage(&mut self, name: &str, index: usize, count: usize) {
        self.stage = Some(format!("{name} ({}/{count})", index + 1));
        self.note(&format!("[{}/{count}] {name}", index + 1));
    }
}

/// Where a run's results go, checked before the run starts.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    pub json: Option<PathBuf>,
    pub hgrm: Option<PathBuf>,
    pub fail_above: Option<Nanos>,
    /// Gates besides `--fail-above` (exit 3 when one trips).
    pub gates: Vec<Gate>,
}

/// A CI gate of `check` and `survey`: exit 3 when it trips, one line on stderr saying why.
#[derive(Debug, Clone)]
pub enum Gate {
    /// A latency distribution of one survey stage (`<stage>/...`) over a bound; `flag` names
    /// the option in the line.
    AreaAbove {
        flag: &'static str,
        stage: rtlab_stats::area::SurveyStage,
        limit: Nanos,
    },
    /// A check (`check/<id>`) at a level or worse.
    CheckAt(FailLevel),
}

impl Gate {
    /// One line per thing that trips the gate in `doc`.
    fn tripped(&self, doc: &ResultDoc) -> Vec<String> {
        match self {
            Gate::AreaAbove { flag, stage, limit } => doc
                .series
                .iter()
                .filter(|s| s.is_distribution() && s.unit == Unit::Ns)
                .filter(|s| s.name.starts_with(&stage.prefix()))
                .filter_map(|s| {
                    let max = Nanos(s.max.unwrap_or(0.0) as u64);
                    (max > *limit).then(|| format!("{flag}: {} max {max} exceeds {limit}", s.name))
                })
                .collect(),
            Gate::CheckAt(level) => doc
                .series
                .iter()
                .filter_map(|s| Some((s.name.strip_prefix("check/")?, s.value?)))
                .filter_map(|(id, value)| {
                    let status = match value as i64 {
                        2 => rtlab_lab::check::Status::Fail,
                        1 => rtlab_lab::check::Status::Warn,
                        _ => return None,
                    };
                    level.tripped_by(status).then(|| {
                        format!(
                            "fail-on: check {id} is {} (--fail-on {})",
                            status.as_str(),
                            level.name()
                        )
                    })
                })
                .collect(),
        }
    }
}

impl Outputs {
    /// Fails (bad input) now rather than after a long run if a destination is unwritable.
    pub fn validate(&self) -> Result<(), BadInput> {
        if let Some(path) = self.json.as_ref().filter(|p| p.as_os_str() != "-") {
            check_writable_file(path).map_err(|e| BadInput(format!("--json {e}")))?;
        }
        if let Some(dir) = &self.hgrm {
            check_writable_dir(dir).map_err(|e| BadInput(format!("--hgrm {e}")))?;
        }
        Ok(())
    }

    fn json_to_stdout(&self) -> bool {
        self.json.as_ref().is_some_and(|p| p.as_os_str() == "-")
    }

    /// Applies `--fail-above`, writes the files, prints the final table. The table goes to
    /// stdout, or to stderr when stdout carries the JSON.
    pub fn finish(&self, doc: &mut ResultDoc, table: &str) -> anyhow::Result<Status> {
        let mut status = Status::Ok;
        let mut gate_lines = Vec::new();
        if let Some(limit) = self.fail_above {
            for s in doc
                .series
                .iter()
                .filter(|s| s.is_distribution() && s.unit == Unit::Ns)
            {
                let max = Nanos(s.max.unwrap_or(0.0) as u64);
                if max > limit {
                    gate_lines.push(format!("fail-above: {} max {max} exceeds {limit}", s.name));
                }
            }
            doc.verdict.fail_above_exceeded = Some(!gate_lines.is_empty());
            if !gate_lines.is_empty() {
                status = Status::GateHit;
            }
        }
        for gate in &self.gates {
            let lines = gate.tripped(doc);
            if !lines.is_empty() {
                status = Status::GateHit;
            }
            gate_lines.extend(lines);
        }
        if let Some(path) = &self.json {
            JsonExporter { path: path.clone() }.export(doc)?;
        }
        if let Some(dir) = &self.hgrm {
            HgrmExporter { dir: dir.clone() }.export(doc)?;
        }
        // Names in the table come from result files, peers and the kernel's task names.
        let table = printable(table);
        if self.json_to_stdout() {
            eprint!("{table}");
        } else {
            print_table(&table)?;
        }
        for line in gate_lines {
            eprintln!("{}", printable(&line));
        }
        Ok(status)
    }
}

/// The final table on stdout: a write that fails (a full disk, a closed terminal) fails the
/// run, one whose reader went away (`| head`) does not.
fn print_table(table: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(table.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write the results to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

/// The explained outliers, one readable line each, largest first (empty without any).
pub fn outlier_lines(doc: &ResultDoc) -> String {
    if doc.outliers.is_empty() {
        return String::new();
    }
    let mut out = format!("outliers ({}, worst first):\n", doc.outliers.len());
    out.push_str(&described(&doc.outliers));
    out
}

/// What an outlier of series `name` measures: a watched thread's lock waits (its series
/// `<thread>/lock`) are waits, every other figure a lateness.
fn measure_of(name: &str) -> rtlab_report::cause::Measure {
    use rtlab_report::cause::Measure;
    let lock = rtlab_watch::DelayKind::Lock.name();
    match name.rsplit_once('/') {
        Some((_, last)) if last == lock => Measure::Wait,
        _ => Measure::Lateness,
    }
}

/// One indented line per outlier: what it was and its causes.
pub fn described(outliers: &[rtlab_stats::result::Outlier]) -> String {
    let mut out = String::new();
    for o in outliers {
        for line in rtlab_report::cause::describe_lines(o, measure_of(&o.series), 2, 120) {
            out.push_str(&line);
            out.push('\n');
        }
        for s in &o.stacks {
            out.push_str(&format!(
                "      kernel stack of {} {}, {}:\n",
                rtlab_report::printable(&s.task),
                s.pid,
                match s.role {
                    rtlab_stats::result::StackRole::Late => "as it left its CPU before the delay",
                    rtlab_stats::result::StackRole::Waker => "where the thread was woken",
                    rtlab_stats::result::StackRole::RanInstead => "as it gave the CPU back",
                }
            ));
            for f in &s.frames {
                out.push_str(&format!("        {f}\n"));
            }
        }
    }
    out
}

/// Turns a run record into the result document.
pub fn result_doc(command: &str, record: RunRecord) -> ResultDoc {
    ResultDoc {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "rtlab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        command: command.into(),
        argv: std::env::args().collect(),
        started_at: rtlab_stats::result::rfc3339_utc(record.started_at_ns),
        duration_s: record.duration.as_secs_f64(),
        system: record.system,
        load: record.load,
        warnings: record.warnings,
        series: record.series,
        outliers: record.outliers,
        verdict: Verdict {
            interrupted: record.interrupted,
            ..Verdict::default()
        },
    }
}

/// The result document of a command that does not go through the experiment harness.
pub fn standalone_doc(
    command: &str,
    started_at_ns: u64,
    duration: Nanos,
    load: Vec<rtlab_stats::result::LoadEntry>,
    warnings: Vec<String>,
    series: Vec<rtlab_stats::result::Series>,
) -> ResultDoc {
    let system = rtlab_lab::harness::system_info(rtlab_sys::probe::probe_privileges());
    result_doc(
        command,
        RunRecord {
            started_at_ns,
            duration,
            system,
            load,
            warnings,
            series,
            outliers: vec![],
            interrupted: rtlab_sys::signal::interrupted(),
            load_reports: vec![],
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_report::cause::Measure;

    #[test]
    fn a_watched_threads_lock_series_measures_waits_and_every_other_lateness() {
        assert_eq!(measure_of("app/1234/lock"), Measure::Wait);
        assert_eq!(measure_of("app/lock"), Measure::Wait);
        for name in [
            "app/1234/wakeup",
            "lock/rtlab-pi/handoff",
            "mmap/shared/mlock",
            "lock",
        ] {
            assert_eq!(measure_of(name), Measure::Lateness, "{name}");
        }
    }
}
