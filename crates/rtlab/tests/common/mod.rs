//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub fn rtlab() -> Command {
    Command::cargo_bin("rtlab").expect("binary built")
}

/// The rtlab binary's path for `std::process::Command`: `CARGO_BIN_EXE_rtlab` from the
/// environment when set (bench/soak.sh points it at a copy, so a rebuild during a soak does
/// not change what runs), else the one cargo built.
pub fn rtlab_path() -> PathBuf {
    std::env::var_os("CARGO_BIN_EXE_rtlab")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rtlab")))
}

pub fn schema_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schema/result.schema.json")
}

/// Parses `path` and fails the test with every schema violation listed.
pub fn load_valid_document(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("result is JSON");
    assert_valid(&doc);
    doc
}

pub fn assert_valid(doc: &Value) {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path()).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs `rtlab ARGS`, which must be refused as bad input: exit 2 and one line on stderr
/// that contains each of `needles`.
pub fn assert_bad_input(args: &[&str], needles: &[&str]) {
    let out = rtlab().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
    for needle in needles {
        assert!(lines[0].contains(needle), "{args:?}: {}", lines[0]);
    }
}

/// Prints the skip reason where `cargo test` shows it, so a skip never passes silently.
pub fn skip(test: &str, reason: &str) {
    rtlab_sys::testing::say_skipped(&format!("{test}: {reason}"));
}

pub fn series_names(doc: &Value) -> Vec<String> {
    doc["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// Tests that run real-time threads on the same CPUs take this lock, so they do not disturb
/// each other's timing (tests of one binary run in parallel; binaries run one at a time).
pub fn realtime_serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `rtlab ARGS` as user nobody with no capabilities (run only when root), from `dir`.
pub fn rtlab_unprivileged(args: &[&str], dir: &Path) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(assert_cmd::cargo::cargo_bin("rtlab"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("setpriv runs")
}

/// The series called `name` in a result document (fails the test if missing).
pub fn series_named<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let all = doc["series"].as_array().expect("series array");
    all.iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {:?}", series_names(doc)))
}

/// Runs `rtlab ARGS --json <tmp>`, requires success, and returns the validated document and
/// the standard output.
pub fn rtlab_json(args: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("result.json");
    let out = rtlab()
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("rtlab runs");
    assert!(
        out.status.success(),
        "rtlab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        load_valid_document(&json),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs `rtlab ARGS --json -`, requires success, and returns the validated document (parsed
/// from standard output alone) and the standard error.
pub fn rtlab_json_stdout(args: &[&str]) -> (Value, String) {
    let out = rtlab()
        .args(args)
        .args(["--json", "-"])
        .output()
        .expect("rtlab runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "rtlab {args:?}: {stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("stdout is only JSON");
    assert_valid(&doc);
    (doc, stderr)
}

/// Runs `rtlab ARGS --json DIR/NAME`, requires success, returns the path of the document.
#[allow(dead_code)]
pub fn rtlab_doc(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let out = rtlab()
        .args(args)
        .arg("--json")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// When the hog loads of `doc` ran (`load[].runs_ns`, on the outliers' `at_ns` time base).
pub fn hog_runs(doc: &Value) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = doc["load"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["runs_ns"].as_array())
        .flatten()
        .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap()))
        .collect();
    runs.sort_unstable();
    runs
}

/// How long an outlier's late stretch (`at_ns` to `at_ns + latency_ns`) overlapped `runs`.
pub fn overlap_ns(outlier: &Value, runs: &[(u64, u64)]) -> u64 {
    let from = outlier["at_ns"].as_u64().unwrap();
    let to = from + outlier["latency_ns"].as_u64().unwrap();
    runs.iter()
        .map(|&(a, b)| b.min(to).saturating_sub(a.max(from)))
        .sum()
}

/// The outliers later than `over_ns` that the injected hog caused: at least half of their
/// lateness overlaps the hog's recorded runs. Others (a host stall on this VM, say) are real
/// but not what the test injected, so they are left out of its assertions; so are those whose
/// trace events the kernel lost or the reader had not read when it explained them (the run
/// itself says it cannot explain them: the reader fell behind, e.g. when a compile or a storm
/// of context switches shares its CPU).
pub fn hog_outliers(doc: &Value, over_ns: u64) -> Vec<Value> {
    hog_caused(doc, over_ns).0
}

/// How many of the outliers later than `over_ns` that the injected hog caused the run says
/// it cannot explain (their events lost, or not read yet: the reader fell behind).
pub fn hog_outliers_not_known(doc: &Value, over_ns: u64) -> usize {
    hog_caused(doc, over_ns).1
}

/// The outliers later than `over_ns` that the hog caused: those the run could explain, and
/// how many it says it cannot.
fn hog_caused(doc: &Value, over_ns: u64) -> (Vec<Value>, usize) {
    let runs = hog_runs(doc);
    assert!(
        !runs.is_empty(),
        "the hog recorded no runs: {:?}",
        doc["load"]
    );
    let (unknown, known): (Vec<&Value>, Vec<&Value>) = doc["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            let late = o["latency_ns"].as_u64().unwrap();
            late > over_ns && overlap_ns(o, &runs) * 2 >= late
        })
        .partition(|o| {
            o["causes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["reason"] == "events_lost" || c["reason"] == "unread")
        });
    (known.into_iter().cloned().collect(), unknown.len())
}

/// The share of `outlier`'s lateness that its causes put on the host (hypervisor gaps).
pub fn host_gap_share(outlier: &Value) -> f64 {
    let gaps: u64 = outlier["causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "hypervisor_gap")
        .map(|c| c["duration_ns"].as_u64().unwrap())
        .sum();
    gaps as f64 / outlier["latency_ns"].as_f64().unwrap()
}

/// The outliers of `doc` later than `over_ns` that the hog caused (at least `at_least` of
/// them, else the test fails); >= 90 % of them must name rtlab-hog, a preemption, as their
/// largest cause besides host gaps. This VM's host now and then stops a vCPU for milliseconds
/// (the kernel counts it as steal time) while the hog runs; the run then rightly names that
/// gap first and the hog after it. At most half of them may lead with a host gap: more would
/// mean the explainer takes the hog's run for the host's.
pub fn hog_named_in(doc: &Value, over_ns: u64, at_least: usize) -> Vec<Value> {
    let big = hog_outliers(doc, over_ns);
    assert!(
        big.len() >= at_least,
        "{} outliers over {over_ns} ns overlap the hog's runs: {:?}",
        big.len(),
        doc["outliers"]
    );
    let is_gap = |c: &&Value| c["kind"] == "hypervisor_gap";
    let named = big
        .iter()
        .filter(|o| {
            let causes = o["causes"].as_array().unwrap();
            causes
                .iter()
                .find(|c| !is_gap(c))
                .is_some_and(|c| c["kind"] == "preemption" && c["task"] == "rtlab-hog")
        })
        .count();
    assert!(
        named * 10 >= big.len() * 9,
        "{named} of {} name rtlab-hog: {big:?}",
        big.len()
    );
    let gap_first = big.iter().filter(|o| is_gap(&&o["causes"][0])).count();
    assert!(
        gap_first * 2 <= big.len(),
        "{gap_first} of {} lead with a host gap: {big:?}",
        big.len()
    );
    big
}

/// `rtlab report DOCS -o OUT`, required to succeed; returns the HTML it wrote.
pub fn report_html(docs: &[&Path], out: &Path) -> String {
    let run = rtlab()
        .arg("report")
        .args(docs)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read_to_string(out.join("report.html")).unwrap()
}

/// Reads an HdrHistogram interval log with the hdrhistogram crate: the number of intervals
/// and the samples per tag.
pub fn hlog_counts(path: &Path) -> (usize, std::collections::BTreeMap<String, u64>) {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let text = std::fs::read(path).unwrap();
    let mut per_tag: std::collections::BTreeMap<String, u64> = Default::default();
    let mut intervals = 0;
    for entry in IntervalLogIterator::new(&text) {
        if let LogEntry::Interval(h) = entry.expect("a well-formed interval log") {
            intervals += 1;
            let bytes = base64_decode(h.encoded_histogram());
            let hist: hdrhistogram::Histogram<u64> =
                Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
            *per_tag
                .entry(h.tag().expect("tagged").as_str().to_string())
                .or_default() += hist.len();
        }
    }
    (intervals, per_tag)
}

/// Standard base64 (the interval log's encoding), for the test only.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        let len = chunk.len() * 6 / 8;
        out.extend_from_slice(&n.to_be_bytes()[1..1 + len]);
    }
    out
}

/// Two busy loops pinned to one CPU in this process, until dropped: `fifo-spin`, SCHED_FIFO
/// at a given priority, and `ts-loop`, SCHED_OTHER. The real-time loop starves the
/// time-sharing one until the scheduler throttles it: RT bandwidth, or on 6.12+ kernels the
/// fair server, which runs waiting SCHED_OTHER work ~50 ms of every second over real-time
/// threads. The real-time loop sleeps 1 ms every 100 ms (the fair server still takes its
/// 50 ms a second): a time-sharing thread woken on that CPU, rtlab's own main thread say,
/// then waits 0.1 s at most, not a second each time (beside `stress-ng --switch 2` a 5 s
/// `rtlab wakeup` took 34 s once with a loop that never slept). Threads of the test process:
/// they end with it, however it ends.
pub struct ThrottledCpu {
    pub cpu: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// How long the real-time loop of a [`ThrottledCpu`] spins between its 1 ms sleeps.
const SPIN_FOR: std::time::Duration = std::time::Duration::from_millis(100);

impl ThrottledCpu {
    /// On the last usable CPU, leaving the others to rtlab's own threads; Err(why) where that
    /// cannot be (one CPU only, or no SCHED_FIFO).
    pub fn start(fifo_prio: u32) -> Result<ThrottledCpu, String> {
        use rtlab_sys::sched::Policy;
        use std::sync::atomic::{AtomicBool, Ordering};
        let usable = rtlab_sys::affinity::usable_cpus();
        if usable.as_slice().len() < 2 {
            return Err("needs two usable CPUs (a starved one and one for rtlab)".into());
        }
        let cpu = *usable.as_slice().last().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let mut cpu_loop = ThrottledCpu {
            cpu,
            stop: stop.clone(),
            threads: Vec::new(),
        };
        // The time-sharing loop first: started after the real-time one, it could wait up to
        // a second for its first turn on the CPU.
        for (name, policy, prio) in [
            ("ts-loop", Policy::Other, 0),
            ("fifo-spin", Policy::Fifo, fifo_prio),
        ] {
            let (stop, ready) = (stop.clone(), ready_tx.clone());
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let one = rtlab_sys::affinity::CpuList::from(vec![cpu]);
                    let set = rtlab_sys::affinity::set_current_thread_affinity(&one)
                        .and_then(|()| rtlab_sys::sched::set_current_thread_scheduler(policy, prio))
                        .map_err(|e| e.to_string());
                    let ok = set.is_ok();
                    let _ = ready.send(set);
                    let mut since = std::time::Instant::now();
                    while ok && !stop.load(Ordering::Relaxed) {
                        if policy == Policy::Fifo && since.elapsed() >= SPIN_FOR {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                            since = std::time::Instant::now();
                        }
                        std::hint::spin_loop();
                    }
                })
                .map_err(|e| e.to_string())?;
            cpu_loop.threads.push(spawned);
        }
        for _ in 0..2 {
            ready_rx.recv().map_err(|e| e.to_string()).and_then(|r| r)?;
        }
        Ok(cpu_loop)
    }
}

/// For a test run beside a [`ThrottledCpu`] with its real-time loop at FIFO 50: the loops and
/// the real-time tests' lock (in that order, so the loops stop first), or None after saying
/// why the test is skipped.
pub fn throttled_cpu_for(test: &str) -> Option<(std::sync::MutexGuard<'static, ()>, ThrottledCpu)> {
    if !is_root() {
        skip(test, "needs root (SCHED_FIFO, eBPF or tracefs)");
        return None;
    }
    let serial = realtime_serial();
    match ThrottledCpu::start(50) {
        Ok(cpu) => Some((serial, cpu)),
        Err(why) => {
            skip(test, &why);
            None
        }
    }
}

impl Drop for ThrottledCpu {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether `cause` names a time-sharing task as preempting (a lower class never preempts a
/// real-time thread): any other sentence about such a task than throttling (`fair_server`,
/// `throttled`), its non-preemptible kernel code, or a timer interrupt late while it ran
/// before the wakeup.
pub fn names_time_sharing_preemption(cause: &Value) -> bool {
    let plain = matches!(
        cause["reason"].as_str(),
        None | Some("fair_server" | "throttled" | "non_preemptible" | "timer_late_while_running")
    );
    cause["kind"] == "preemption"
        && cause["task"].is_string()
        && cause["prio"].as_u64() == Some(0)
        && !(plain && cause["reason"].is_string())
}

/// The outliers of `doc` over 2 ms in which time-sharing tasks held the measured CPU 2.1 ms
/// or more in all after its wakeup (what throttling gives them; a host's gap is none), less
/// those whose trace events were lost (the run says it cannot explain them). The explainer
/// calls a time-sharing task's hold throttling from 2 ms while the thread is runnable; what
/// such a task ran before the wakeup (its timer late) is not that, and an interrupt's tail
/// inside the hold is counted in it (the 0.1 ms margin).
pub fn throttle_outliers(doc: &Value) -> Vec<&Value> {
    doc["outliers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["latency_ns"].as_u64().unwrap_or(0) > 2_000_000)
        .filter(|o| {
            let causes = o["causes"].as_array().unwrap();
            let time_sharing: u64 = causes
                .iter()
                .filter(|c| c["task"].is_string() && c["prio"].as_u64() == Some(0))
                .filter(|c| c["reason"] != "timer_late_while_running")
                .map(|c| c["duration_ns"].as_u64().unwrap_or(0))
                .sum();
            let lost = causes.iter().any(|c| {
                c["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("trace events lost"))
            });
            time_sharing >= 2_100_000 && !lost
        })
        .collect()
}

/// How many separate throttled stretches `outliers` fall in (starts 200 ms apart or more:
/// the fair server's are a second apart).
pub fn throttle_stretches(outliers: &[&Value]) -> usize {
    let mut at: Vec<u64> = outliers
        .iter()
        .map(|o| o["at_ns"].as_u64().unwrap_or(0))
        .collect();
    at.sort_unstable();
    at.windows(2).filter(|w| w[1] - w[0] >= 200_000_000).count() + usize::from(!at.is_empty())
}

/// Asserts that 95 % or more of `outliers` name throttling as their largest cause besides
/// host gaps, and that no cause of any names a time-sharing task as preempting.
pub fn assert_named_throttling(outliers: &[&Value]) {
    let throttled = outliers
        .iter()
        .filter(|o| {
            o["causes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["kind"] != "hypervisor_gap")
                .is_some_and(|c| matches!(c["reason"].as_str(), Some("throttled" | "fair_server")))
        })
        .count();
    assert!(
        throttled * 100 >= outliers.len() * 95,
        "{throttled} of {} outliers name throttling: {outliers:#?}",
        outliers.len()
    );
    for o in outliers {
        for c in o["causes"].as_array().unwrap() {
            assert!(
                !names_time_sharing_preemption(c),
                "a time-sharing task named as preempting: {c} in {o}"
            );
        }
    }
}

/// Asserts that no outlier of watch result `doc` names one of the watch's own threads (its
/// `verdict.observer.threads`, by TID) otherwise than as the `observer` cause: rtlab is never
/// the culprit of what it watches. (Another rtlab process's threads, a lab's running beside,
/// are fair causes.)
pub fn assert_observer_never_named(doc: &Value, what: &str) {
    let ours: Vec<i64> = doc["verdict"]["observer"]["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_i64())
        .collect();
    assert!(
        !ours.is_empty(),
        "{what}: no observer threads in the result"
    );
    for c in doc["outliers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|o| o["causes"].as_array().into_iter().flatten())
        .filter(|c| c["kind"] != "observer")
    {
        assert!(
            !c["pid"].as_i64().is_some_and(|p| ours.contains(&p)),
            "{what}: rtlab named as a cause: {c}"
        );
        // Nor by name, in any wording (its own threads' names; the observer's own phrase
        // about what ran on a CPU meanwhile, and a command to run, are not a cause).
        let task = c["task"].as_str().unwrap_or("");
        let detail = c["detail"]
            .as_str()
            .unwrap_or("")
            .replace("the observer (rtlab itself)", "")
            // (Advice names rtlab's commands: `rtlab check fair_server`.)
            .replace("rtlab check", "");
        assert!(
            !is_rtlab_thread_name(task)
                && !detail.split([' ', '(', ',', ';']).any(is_rtlab_thread_name),
            "{what}: rtlab named as a cause: {c}"
        );
    }
}

/// The names of rtlab's own observing threads (its main thread, reader, log writer,
/// watchdog, metrics server and canaries).
pub fn is_rtlab_thread_name(name: &str) -> bool {
    matches!(
        name,
        "rtlab" | "rtlab-explain" | "rtlab-hlog" | "rtlab-watchdog" | "rtlab-jvmlog"
    ) || name.starts_with("rtlab-metrics")
        || name.starts_with("rtlab-canary")
}

/// The anonymous kB (pages copied to hold a uprobe's breakpoint) in process `pid`'s
/// executable mapping of libjvm.so.
pub fn probed_code_kb(pid: u32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut in_code = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let is_header = line
            .split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-'))
            && line.split_whitespace().nth(1).is_some_and(|p| p.len() == 4);
        if is_header {
            in_code = line.contains(" r-xp ") && line.ends_with("libjvm.so");
        } else if in_code {
            if let Some(v) = line.strip_prefix("Anonymous:") {
                kb += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
    }
    kb
}

/// The tracing instance of rtlab process `pid` under `instances` (`rtlab-<pid>_<start>_<boot>`),
/// if there is one.
pub fn instance_of(instances: &Path, pid: u32) -> Option<PathBuf> {
    std::fs::read_dir(instances)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("rtlab-{pid}_")))
        })
}

/// A child process killed (and reaped) when the test ends, however it ends.
pub struct KilledOnDrop(pub std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
