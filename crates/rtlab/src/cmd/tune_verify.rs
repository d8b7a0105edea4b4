//! `rtlab tune --apply --verify`: each fix measured before it is kept (the engine is
//! `rtlab_lab::tune::verify`); the blocks are `rtlab wakeup` or `rtlab watch -- CMD` runs of
//! this same executable, a guard process reverts the state file should this one die, and
//! Ctrl-C or SIGTERM revert before exiting.

use crate::cli::TuneArgs;
use crate::output::{standalone_doc, Outputs};
use crate::{BadInput, Status};
use rtlab_lab::tune::verify::{self, Block, Causes, Changes, Effect, Figures, Fix, Progress};
use rtlab_lab::tune::{self, Change, State};
use rtlab_report::table::Table;
use rtlab_stats::result::{Series, Unit};
use rtlab_stats::Nanos;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The shortest explained block: the tracing's own start takes a part of a second, and the
/// worst outliers of a short block are few.
const EXPLAINED: Nanos = Nanos(2_000_000_000);

/// Fewer rounds give no 95 % interval, so nothing could be kept.
const MIN_ROUNDS: u32 = 6;

/// Checks what `--verify` needs beyond `--apply`'s own.
pub fn validate(args: &TuneArgs) -> Result<(), BadInput> {
    match (args.verify_with, args.command.is_empty()) {
        (true, true) => {
            return Err(BadInput(
                "--verify-with needs the program after --: --verify-with -- CMD ARGS".into(),
            ))
        }
        (false, false) if args.verify => {
            return Err(BadInput(format!(
                "a command after -- ({}) is measured only with --verify-with",
                args.command.join(" ")
            )))
        }
        (false, false) => {
            return Err(BadInput(format!(
                "unexpected command after -- ({}): only --verify-with runs one",
                args.command.join(" ")
            )))
        }
        _ => {}
    }
    if args.verify && args.rounds < MIN_ROUNDS && !args.keep_all {
        return Err(BadInput(format!(
            "--rounds {}: at least {MIN_ROUNDS} are needed for a 95 % interval (with fewer \
             no fix could be kept)",
            args.rounds
        )));
    }
    outputs(args).validate()
}

fn outputs(args: &TuneArgs) -> Outputs {
    Outputs {
        json: args.json.clone(),
        ..Outputs::default()
    }
}

/// Measures the plan's fixes and keeps those that helped; `file` (new) holds every prior
/// value while it runs, then the kept changes only (removed when none was kept).
pub fn run(
    args: &TuneArgs,
    changes: Vec<Change>,
    rt_cpus: &[usize],
    file: &Path,
) -> anyhow::Result<Status> {
    let started = rtlab_sys::time::realtime_now_ns();
    let clock = std::time::Instant::now();
    let mut state = State {
        rtlab_tune_state: tune::STATE_VERSION,
        rt_cpus: rt_cpus.to_vec(),
        changes,
        verifying: true,
    };
    // Every prior value is on disk, marked as being verified, before the first change.
    tune::save(&state, file).map_err(anyhow::Error::msg)?;
    let work = WorkDir::new()?;
    let guard = Guard::start(file, &work.0).inspect_err(|_| {
        // Nothing was changed yet: no prior values to keep.
        let _ = std::fs::remove_file(file);
    })?;
    rtlab_sys::signal::install_interrupt_handler();
    let load = start_load(&args.loads)?;
    let mut groups = Changes::grouped(std::mem::take(&mut state.changes));
    let unmeasured: Vec<Option<String>> = groups.iter().map(|g| unmeasured(g.id, args)).collect();
    let mut measure = BlockRun::new(args, rt_cpus, work.0.clone());
    eprintln!("{}", intro(args, &groups, &unmeasured));
    let result = {
        let mut fixes: Vec<&mut dyn Fix> = groups.iter_mut().map(|g| g as &mut dyn Fix).collect();
        let settings = verify::Settings {
            rounds: args.rounds as usize,
            keep_all: args.keep_all,
        };
        verify::verify(
            &mut fixes,
            &unmeasured,
            &mut measure,
            settings,
            &rtlab_sys::signal::interrupted,
            &mut |p| eprintln!("{}", progress_line(&p)),
        )
    };
    drop(load);
    // A block ended by the same Ctrl-C may have left no result: still an interruption.
    let result = match result {
        Err(_) if rtlab_sys::signal::interrupted() => Ok(verify::Verification {
            interrupted: true,
            ..Default::default()
        }),
        r => r,
    };
    let kept: Vec<String> = match &result {
        Ok(v) if !v.interrupted => v.kept().into_iter().map(String::from).collect(),
        _ => vec![],
    };
    let kept: Vec<&str> = kept.iter().map(String::as_str).collect();
    state.changes = groups.into_iter().flat_map(|g| g.changes).collect();
    let not_restored = settle(&state, &kept, file)?;
    guard.finish();
    let v = result.map_err(anyhow::Error::msg)?;
    if !not_restored.is_empty() {
        anyhow::bail!(
            "{} change(s) not restored; kept in {} (rtlab tune --revert {1} once fixed)",
            not_restored.len(),
            file.display()
        );
    }
    let took = Nanos(clock.elapsed().as_nanos() as u64);
    report(args, &v, &state, &kept, file, (started, took))
}

/// What the blocks measure: timed wakeups, the user's program started anew in each, or the
/// running process --pid names (the one whose timer slack the plan changes).
#[derive(Debug, Clone, PartialEq)]
enum Measured {
    Wakeups,
    Command(Vec<String>),
    Process(u32),
}

impl Measured {
    fn of(args: &TuneArgs) -> Measured {
        match (args.verify_with, args.pid) {
            (true, _) => Measured::Command(args.command.clone()),
            (false, Some(pid)) => Measured::Process(pid),
            (false, None) => Measured::Wakeups,
        }
    }

    /// Its threads' delays, through `rtlab watch`.
    fn watched(&self) -> bool {
        *self != Measured::Wakeups
    }
}

/// Why a fix cannot be measured by the blocks (None: it can).
fn unmeasured(id: &str, args: &TuneArgs) -> Option<String> {
    let pid = args.pid.unwrap_or(0);
    (id == "timer_slack" && Measured::of(args) != Measured::Process(pid)).then(|| {
        format!(
            "it changes the threads of process {pid}, which the measurement does not run \
             (without --verify-with, --verify measures that process itself)"
        )
    })
}

/// What the run will do, before it starts.
fn intro(args: &TuneArgs, groups: &[Changes], unmeasured: &[Option<String>]) -> String {
    let measured = unmeasured.iter().filter(|u| u.is_none()).count();
    let blocks = args.rounds as u64 * (measured as u64 + 1) + 2;
    // Each block's own start and end take about a third of a second.
    let secs = blocks as f64 * (args.block.0 as f64 / 1e9 + 0.35);
    let ids: Vec<&str> = groups.iter().map(|g| g.id).collect();
    format!(
        "rtlab tune --verify: {} fixes ({}), {} rounds of {} blocks of {} ({}), about {} min; \
         Ctrl-C reverts every change",
        groups.len(),
        ids.join(", "),
        args.rounds,
        measured + 1,
        args.block,
        match Measured::of(args) {
            Measured::Command(c) => format!("{} under rtlab watch", c.join(" ")),
            Measured::Process(pid) => format!("process {pid} under rtlab watch --pid"),
            Measured::Wakeups => "rtlab wakeup on the real-time CPUs".into(),
        },
        (secs / 60.0).ceil()
    )
}

fn progress_line(p: &Progress) -> String {
    let f = |x: &Figures| format!("p99 {} max {}", Nanos(x.p99 as u64), Nanos(x.max as u64));
    match p {
        Progress::Before(x) => format!("  as found (causes named): {}", f(x)),
        Progress::After(x) => format!("  with the kept fixes (causes named): {}", f(x)),
        Progress::Round(n, base, fixes) => {
            let mut line = format!("  round {n}: as found {}", f(base));
            for (id, x) in fixes.iter() {
                line.push_str(&format!("; {id} {}", f(x)));
            }
            line
        }
    }
}

/// Leaves the kept changes in `file` (or removes it when none is kept) and checks that
/// every other change reads back as it was; returns those that do not (kept in `file`).
fn settle(state: &State, kept: &[&str], file: &Path) -> anyhow::Result<Vec<Change>> {
    let (keep, back): (Vec<Change>, Vec<Change>) = state
        .changes
        .iter()
        .cloned()
        .partition(|c| kept.contains(&c.id()));
    let back = State {
        changes: back,
        ..state.clone()
    };
    let failed: Vec<Change> = tune::revert(&back)
        .into_iter()
        .filter(|r| !r.restored())
        .map(|r| r.change)
        .collect();
    let keep: Vec<Change> = keep.into_iter().filter(|c| c.applied).collect();
    let left: Vec<Change> = keep.iter().chain(&failed).cloned().collect();
    if left.is_empty() {
        std::fs::remove_file(file)
            .map_err(|e| anyhow::anyhow!("cannot remove {}: {e}", file.display()))?;
    } else {
        let final_state = State {
            changes: left,
            verifying: false,
            ..state.clone()
        };
        tune::save(&final_state, file).map_err(anyhow::Error::msg)?;
    }
    Ok(failed)
}

/// The tables, the result document and the exit status (3 when no fix helped).
fn report(
    args: &TuneArgs,
    v: &verify::Verification,
    state: &State,
    kept: &[&str],
    file: &Path,
    (started, took): (u64, Nanos),
) -> anyhow::Result<Status> {
    let mut out = effects_table(v, args.rounds);
    out.push_str(&causes_table(v));
    out.push_str(&closing(v, state, kept, file));
    let mut doc = standalone_doc("tune", started, took, vec![], vec![], series_of(v));
    doc.verdict
        .details
        .insert("verify".into(), serde_json::to_value(v)?);
    doc.verdict
        .details
        .insert("kept".into(), serde_json::to_value(kept)?);
    let status = outputs(args).finish(&mut doc, &out)?;
    Ok(match (v.interrupted, kept.is_empty(), status) {
        (false, true, Status::Ok) => Status::GateHit,
        (_, _, s) => s,
    })
}

/// The document's series: the machine as found (the median of its blocks' p99 and max) and
/// each measured fix's two ratios (the median, its interval, the effect and whether kept in
/// the config).
fn series_of(v: &verify::Verification) -> Vec<Series> {
    let median = |pick: fn(&Figures) -> f64| {
        let xs: Vec<f64> = v.baseline.iter().map(pick).collect();
        rtlab_stats::Interval::of(&xs).map_or(0.0, |i| i.median)
    };
    let mut out = vec![
        Series::value(
            "as_found/p99",
            "wakeup_latency_p99",
            Unit::Ns,
            median(|f| f.p99),
        ),
        Series::value(
            "as_found/max",
            "wakeup_latency_max",
            Unit::Ns,
            median(|f| f.max),
        ),
    ];
    for f in &v.fixes {
        for (what, r) in [("p99", &f.p99_ratio), ("max", &f.max_ratio)] {
            let Some(r) = r else { continue };
            let mut s = Series::value(
                format!("{}/{what}_ratio", f.id),
                format!("fix_{what}_ratio"),
                Unit::Ratio,
                r.median,
            )
            .with_config("effect", f.effect.as_str())
            .with_config("kept", f.kept);
            if let (Some(low), Some(high)) = (r.low, r.high) {
                s = s.with_config("low", low).with_config("high", high);
            }
            out.push(s);
        }
    }
    out
}

/// Each fix: its effect, its two ratios and whether it stays.
fn effects_table(v: &verify::Verification, rounds: u32) -> String {
    let mut out = format!(
        "rtlab tune --verify: {} of {rounds} rounds; each ratio is with the fix over without it, \
         the median and its 95 % interval\n",
        v.rounds
    );
    let mut t = Table::new(&["fix", "effect", "p99 ratio", "max ratio", "result"]).left_aligned();
    let ratio = |r: &Option<rtlab_stats::Interval>| r.map(|i| i.to_string()).unwrap_or("-".into());
    for f in &v.fixes {
        let result = match (f.kept, f.effect) {
            (true, _) => "kept".to_string(),
            (false, Effect::Unmeasured) => format!(
                "not applied: {}",
                f.unmeasured.as_deref().unwrap_or("not measured")
            ),
            (false, _) => "reverted".to_string(),
        };
        t.row(vec![
            f.id.clone(),
            f.effect.as_str().to_string(),
            ratio(&f.p99_ratio),
            ratio(&f.max_ratio),
            result,
        ]);
    }
    out.push_str(&t.render());
    out
}

/// The causes of the worst outliers as found and, when a fix was kept, with the kept fixes,
/// kind by kind.
fn causes_table(v: &verify::Verification) -> String {
    let both = verify::compared(&v.causes_before, &v.causes_after);
    if both.is_empty() {
        return String::new();
    }
    let fig = |f: &Option<Figures>| {
        f.map(|x| format!(" (max {})", Nanos(x.max as u64)))
            .unwrap_or_default()
    };
    let said = |x: &verify::Tally| match x.main {
        0 if x.total_ns == 0 => "-".to_string(),
        n => format!("{n} main, {} in all", Nanos(x.total_ns)),
    };
    let Some(after) = v.after else {
        let mut out = format!(
            "\nthe causes of the worst outliers as found{}:\n",
            fig(&v.before)
        );
        let mut t = Table::new(&["cause", "as found"]).left_aligned();
        for (kind, a, _) in both {
            t.row(vec![kind, said(&a)]);
        }
        out.push_str(&t.render());
        return out;
    };
    let mut out = format!(
        "\nthe causes of the worst outliers, as found{} and with the kept fixes{}:\n",
        fig(&v.before),
        fig(&Some(after))
    );
    let mut t = Table::new(&["cause", "as found", "with the kept fixes", ""]).left_aligned();
    for (kind, a, b) in both {
        let change = match (a.total_ns, b.total_ns) {
            (_, 0) => "went away",
            (0, _) => "came",
            _ => "stayed",
        };
        t.row(vec![kind, said(&a), said(&b), change.into()]);
    }
    out.push_str(&t.render());
    out
}

fn closing(v: &verify::Verification, state: &State, kept: &[&str], file: &Path) -> String {
    if v.interrupted {
        return "interrupted: every change reverted\n".into();
    }
    let failed: Vec<String> = state
        .changes
        .iter()
        .filter(|c| kept.contains(&c.id()) && !c.applied)
        .map(|c| format!("{} {}", c.id(), c.path.display()))
        .collect();
    let mut out = match kept.is_empty() {
        true => "\nno fix measurably helped: every change reverted (nothing left to revert)\n"
            .to_string(),
        false => format!(
            "\nkept: {}; prior values in {} (rtlab tune --revert {1}; rtlab tune --export \
             tuned DIR --state {1} carries them to the next boot)\n",
            kept.join(", "),
            file.display()
        ),
    };
    if !failed.is_empty() {
        out.push_str(&format!(
            "not changed (the kernel refused): {}\n",
            failed.join(", ")
        ));
    }
    out
}

/// Runs one block: `rtlab wakeup` on the real-time CPUs, `rtlab watch -- CMD` or `rtlab watch
/// --pid PID`.
struct BlockRun {
    exe: PathBuf,
    args: Vec<String>,
    /// How long a block measures (an explained one at least [`EXPLAINED`]).
    block: Nanos,
    dir: PathBuf,
    watch: bool,
    /// The program `--verify-with` runs.
    command: Vec<String>,
    /// The running process --pid names, when it is what is measured.
    pid: Option<u32>,
    n: usize,
}

impl BlockRun {
    fn new(args: &TuneArgs, rt_cpus: &[usize], dir: PathBuf) -> BlockRun {
        let exe = std::env::current_exe().unwrap_or_else(|_| "rtlab".into());
        let measured = Measured::of(args);
        let mut a: Vec<String> = match &measured {
            Measured::Command(_) => vec!["watch".into()],
            Measured::Process(pid) => vec!["watch".into(), "--pid".into(), pid.to_string()],
            Measured::Wakeups => vec![
                "wakeup".into(),
                "--cpus".into(),
                rtlab_sys::affinity::CpuList::from(rt_cpus.to_vec()).to_string(),
            ],
        };
        a.push("--quiet".into());
        BlockRun {
            exe,
            args: a,
            block: args.block,
            dir,
            watch: measured.watched(),
            pid: match measured {
                Measured::Process(pid) => Some(pid),
                _ => None,
            },
            command: match measured {
                Measured::Command(c) => c,
                _ => vec![],
            },
            n: 0,
        }
    }
}

impl verify::Measure for BlockRun {
    fn block(&mut self, explain: bool) -> Result<Block, String> {
        self.n += 1;
        let json = self.dir.join(format!("block-{}.json", self.n));
        let err = self.dir.join("stderr.txt");
        let mut cmd = Command::new(&self.exe);
        let duration = match explain {
            true => self.block.max(EXPLAINED),
            false => self.block,
        };
        cmd.args(&self.args)
            .arg("--duration")
            .arg(duration.to_string());
        cmd.arg("--json").arg(&json);
        if explain && !self.watch {
            cmd.args(["--top", "10"]);
        }
        if !self.command.is_empty() {
            cmd.arg("--").args(&self.command);
        }
        let stderr = std::fs::File::create(&err).map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        rtlab_sys::process::terminate_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        let status = wait_or_stop(child)?;
        if let Some(pid) = self.pid {
            // A block whose process ended part-way measured less than a block.
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(format!("process {pid} exited during the measurement"));
            }
        }
        let text = std::fs::read_to_string(&json).map_err(|_| {
            let said = std::fs::read_to_string(&err).unwrap_or_default();
            format!(
                "the measurement ({}) ended with {status} and no result: {}",
                self.args[0],
                said.lines().last().unwrap_or("no message")
            )
        })?;
        let _ = std::fs::remove_file(&json);
        parse_block(&text, self.watch, explain)
    }
}

/// Waits for a block's process; Ctrl-C or SIGTERM to this one ends it early (it still
/// writes its result, which the engine then drops with the round).
fn wait_or_stop(mut child: Child) -> Result<std::process::ExitStatus, String> {
    let mut told = false;
    loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(s);
        }
        if rtlab_sys::signal::interrupted() && !told {
            // It ends as at Ctrl-C (its result still written); not yet reaped, so the pid is
            // still its.
            let _ = rtlab_sys::process::terminate(child.id());
            told = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The worst series' p99 and max of a block's result document, and with `explain` the
/// causes of its outliers. A watch's series of a thread's name (`<name>/<kind>`) count; its
/// per-thread and safepoint series repeat them.
fn parse_block(text: &str, watch: bool, explain: bool) -> Result<Block, String> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let series = doc["series"].as_array().cloned().unwrap_or_default();
    let ours = series.iter().filter(|s| match watch {
        true => {
            let name = s["name"].as_str().unwrap_or("");
            name.matches('/').count() == 1 && !name.starts_with("jvm:") && s["p99"].is_number()
        }
        false => s["metric"] == "wakeup_latency",
    });
    let mut f = Figures {
        p99: 0.0,
        max: 0.0,
        count: 0,
    };
    for s in ours {
        f.p99 = f.p99.max(s["p99"].as_f64().unwrap_or(0.0));
        f.max = f.max.max(s["max"].as_f64().unwrap_or(0.0));
        f.count += s["count"].as_u64().unwrap_or(0);
    }
    if f.count == 0 {
        return Err(match watch {
            true => "the watched program's threads had no measured delay in a block (does it \
                     wait for timers, and run as long as a block; with --pid, is it still \
                     running?)"
                .into(),
            false => "a block measured no wakeup".into(),
        });
    }
    let causes = explain.then(|| causes_of(&doc));
    Ok(Block { figures: f, causes })
}

fn causes_of(doc: &serde_json::Value) -> Causes {
    let mut c = Causes::new();
    for o in doc["outliers"].as_array().into_iter().flatten() {
        for (i, cause) in o["causes"].as_array().into_iter().flatten().enumerate() {
            let kind = cause["kind"].as_str().unwrap_or("unknown").to_string();
            let t = c.entry(kind).or_default();
            t.main += u64::from(i == 0);
            t.total_ns += cause["duration_ns"].as_u64().unwrap_or(0);
        }
    }
    c
}

/// The load beside every block: `rtlab load SPEC...` until the run ends (it dies with this
/// process, however that dies).
struct Load(Option<Child>);

fn start_load(specs: &[rtlab_load::LoadSpec]) -> anyhow::Result<Load> {
    if specs.is_empty() {
        return Ok(Load(None));
    }
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("load")
        .args(specs.iter().map(|s| s.to_string()))
        .args(["--duration", "1000d", "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    rtlab_sys::process::terminate_with_parent(&mut cmd);
    let child = cmd.spawn()?;
    // Let it reach its steady state before the first block.
    std::thread::sleep(std::time::Duration::from_millis(500));
    Ok(Load(Some(child)))
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = rtlab_sys::process::terminate(c.id());
            let _ = c.wait();
        }
    }
}

/// A private directory for the blocks' result files, removed at the end.
struct WorkDir(PathBuf);

impl WorkDir {
    const PREFIX: &str = "rtlab-verify-";

    fn new() -> anyhow::Result<WorkDir> {
        use std::os::unix::fs::DirBuilderExt;
        let suffix = rtlab_sys::fs::random_suffix()?;
        let dir = std::env::temp_dir().join(format!("{}{suffix}", Self::PREFIX));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(WorkDir(dir))
    }

    /// Whether `dir` is such a directory (the guard removes nothing else).
    fn is_one(dir: &Path) -> bool {
        dir.parent() == Some(std::env::temp_dir().as_path())
            && dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(Self::PREFIX))
            && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A second process that reverts the state file should this one die before it is settled
/// (SIGKILL, a crash): it waits for the end of a pipe only this process holds.
struct Guard(Option<Child>);

impl Guard {
    fn start(file: &Path, dir: &Path) -> anyhow::Result<Guard> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .args(["tune", "--guard"])
            .arg(file)
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Out of the terminal's process group: a Ctrl-C reaches this process, not it.
            .process_group(0)
            .spawn()?;
        Ok(Guard(Some(child)))
    }

    /// The state file is settled: the guard sees the pipe close and finds nothing to do.
    fn finish(mut self) {
        if let Some(mut c) = self.0.take() {
            drop(c.stdin.take());
            let _ = c.wait();
        }
    }
}

/// `--guard FILE [DIR]`: waits until the pipe on standard input closes, then removes the
/// run's directory DIR (one of its own, under the temporary directory) and reverts FILE if
/// it is still being verified (its run died before settling it).
pub fn guard(file: &Path, dir: Option<&PathBuf>) -> anyhow::Result<Status> {
    use std::io::Read;
    rtlab_sys::signal::ignore_interrupts();
    let mut sink = [0u8; 64];
    while std::io::stdin()
        .read(&mut sink)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
    if let Some(dir) = dir.filter(|d| WorkDir::is_one(d)) {
        let _ = std::fs::remove_dir_all(dir);
    }
    let Ok(state) = tune::load(file) else {
        return Ok(Status::Ok);
    };
    if !state.verifying {
        return Ok(Status::Ok);
    }
    let back = tune::revert(&state);
    let failed = back.iter().filter(|r| !r.restored()).count();
    if failed == 0 {
        let _ = std::fs::remove_file(file);
    }
    eprintln!(
        "rtlab tune --verify ended before it finished: reverted {} of {} changes from {}{}",
        back.len() - failed,
        back.len(),
        file.display(),
        match failed {
            0 => String::new(),
            _ => format!(" (kept: rtlab tune --revert {} once fixed)", file.display()),
        }
    );
    Ok(Status::Ok)
}
