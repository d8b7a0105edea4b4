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
    eprintln!("{test}: skipped: {reason}");
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
/// trace events the kernel lost (the run itself says it cannot explain them: the reader fell
/// behind, e.g. when a compile shares its CPU).
pub fn hog_outliers(doc: &Value, over_ns: u64) -> Vec<Value> {
    let runs = hog_runs(doc);
    assert!(
        !runs.is_empty(),
        "the hog recorded no runs: {:?}",
        doc["load"]
    );
    doc["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            let late = o["latency_ns"].as_u64().unwrap();
            let lost = o["causes"].as_array().unwrap().iter().any(|c| {
                c["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("trace events lost here"))
            });
            late > over_ns && overlap_ns(o, &runs) * 2 >= late && !lost
        })
        .cloned()
        .collect()
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
