//! `rtlab diff` (compares two runs, gates on regressions, refuses bad input) and `rtlab check`.

mod common;

use common::*;
use serde_json::json;

fn wakeup_doc(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    rtlab_doc(
        dir,
        name,
        &[
            "wakeup",
            "--policy",
            "other",
            "--threads",
            "1",
            "--duration",
            "400ms",
            "--no-dma-latency",
            "--quiet",
        ],
    )
}

#[test]
fn a_run_against_itself_is_the_same_and_a_regression_trips_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let a = wakeup_doc(dir.path(), "a.json");
    // B: the same distribution, plus a single-value series that doubled (a regression).
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let extra = |v: f64| json!({"name": "x/uncontended", "metric": "lock_unlock", "unit": "ns", "value": v});
    doc["series"].as_array_mut().unwrap().push(extra(100.0));
    std::fs::write(&a, doc.to_string()).unwrap();
    doc["series"].as_array_mut().unwrap().last_mut().unwrap()["value"] = json!(200.0);
    let b = dir.path().join("b.json");
    std::fs::write(&b, doc.to_string()).unwrap();

    let out = rtlab().arg("diff").arg(&a).arg(&a).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("thread0") && stdout.contains("same"),
        "{stdout}"
    );
    assert!(!stdout.contains("worse"), "{stdout}");

    let json_out = dir.path().join("d.json");
    let out = rtlab()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .args(["--fail-worse", "10", "--json"])
        .arg(&json_out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("fail-worse: x/uncontended/value 2.000x"),
        "{stderr}"
    );
    let d = load_valid_document(&json_out);
    assert_eq!(d["command"], "diff");
    assert_eq!(series_named(&d, "x/uncontended/value")["value"], 2.0);
    assert_eq!(series_named(&d, "thread0/p50")["value"], 1.0);
    assert_eq!(d["verdict"]["worse"][0], "x/uncontended/value");

    let out = rtlab()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .args(["--fail-worse", "150"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "a 100 % regression passes a 150 % gate"
    );
}

#[test]
fn diff_refuses_files_that_are_not_result_documents() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"not\": 1}").unwrap();
    for args in [
        vec![junk.to_str().unwrap(), junk.to_str().unwrap()],
        vec!["/nonexistent/a.json", junk.to_str().unwrap()],
    ] {
        let out = rtlab().arg("diff").args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn check_audits_the_machine_and_writes_one_series_per_check() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("check.json");
    let out = rtlab()
        .args(["check", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = load_valid_document(&json);
    assert_eq!(doc["command"], "check");
    for id in [
        "preempt_model",
        "rt_throttling",
        "irq_affinity",
        "virtualization",
        "timer_slack",
    ] {
        let s = series_named(&doc, &format!("check/{id}"));
        let status = s["config"]["status"].as_str().unwrap();
        assert!(["ok", "warn", "fail", "skipped"].contains(&status), "{s}");
        assert!(stdout.contains(id), "{stdout}");
    }
    // Every warning or failure comes with the exact fix.
    for s in doc["series"].as_array().unwrap() {
        if s["value"].as_f64().unwrap() >= 1.0 {
            assert!(!s["config"]["fix"].as_str().unwrap().is_empty(), "{s}");
        }
    }
}

#[test]
fn check_fail_on_exits_3_exactly_when_a_check_is_at_that_level() {
    let dir = tempfile::tempdir().unwrap();
    for level in ["warn", "fail"] {
        let json = dir.path().join(format!("check-{level}.json"));
        let out = rtlab()
            .args(["check", "--fail-on", level, "--json"])
            .arg(&json)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // What the gate should have found, from the document it wrote.
        let doc = load_valid_document(&json);
        let at_level: Vec<String> = doc["series"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                let v = s["value"].as_f64().unwrap();
                v >= 2.0 || (level == "warn" && v >= 1.0)
            })
            .map(|s| {
                s["name"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("check/")
                    .to_string()
            })
            .collect();
        let expected = if at_level.is_empty() { 0 } else { 3 };
        assert_eq!(
            out.status.code(),
            Some(expected),
            "--fail-on {level}: {stderr}"
        );
        for id in &at_level {
            assert!(
                stderr.contains(&format!("fail-on: check {id} is ")),
                "--fail-on {level}: {id} not named in {stderr}"
            );
        }
        assert_eq!(
            stderr.matches("fail-on: check ").count(),
            at_level.len(),
            "{stderr}"
        );
    }
    assert_bad_input(&["check", "--fail-on", "bad"], &["'bad'", "--fail-on"]);
}

#[test]
fn diff_flags_runs_of_another_length_load_or_machine_and_a_max_from_fewer_samples() {
    // A 4 s quick run against a long one: its lower max is from 15x fewer samples.
    let dir = tempfile::tempdir().unwrap();
    let a = wakeup_doc(dir.path(), "a.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    doc["duration_s"] = json!(60.0);
    std::fs::write(&a, doc.to_string()).unwrap();
    doc["duration_s"] = json!(4.0);
    doc["system"]["kernel"] = json!("6.1.0-other");
    doc["load"] = json!([{"spec": "cpu", "runs_ns": []}]);
    for s in doc["series"].as_array_mut().unwrap() {
        if let (Some(n), Some(max)) = (s["count"].as_u64(), s["max"].as_f64()) {
            s["count"] = json!((n / 15).max(1));
            s["max"] = json!(max / 2.0);
        }
    }
    let b = dir.path().join("b.json");
    std::fs::write(&b, doc.to_string()).unwrap();
    let out = rtlab().arg("diff").arg(&a).arg(&b).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    for said in [
        "A ran 60.0 s and B 4.0 s (15.0x)",
        "A ran beside no load and B beside cpu",
        "and B on kernel 6.1.0-other",
    ] {
        assert!(stderr.contains(said), "{said}: {stderr}");
    }
    let max_rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" max ")).collect();
    assert!(!max_rows.is_empty(), "{stdout}");
    for row in max_rows {
        assert!(
            row.contains("fewer samples") && !row.contains("better"),
            "{row}"
        );
    }
}

#[test]
fn check_judges_the_real_time_cpu_whatever_cpus_it_is_kept_to() {
    // Regression: with a tuned profile's isolated_cores applied every task, the shell that
    // runs rtlab too, is kept off the real-time CPU, and check judged the CPU it ran on.
    let online = rtlab_sys::affinity::online_cpus();
    let isolated = std::fs::read_to_string("/sys/devices/system/cpu/isolated").unwrap_or_default();
    if online.len() < 2
        || !isolated.trim().is_empty()
        || !std::path::Path::new("/usr/bin/taskset").exists()
    {
        return skip(
            "check's real-time CPU",
            "needs 2 CPUs, none isolated, and taskset",
        );
    }
    let first = online.as_slice()[0].to_string();
    let last = *online.as_slice().last().unwrap();
    let out = std::process::Command::new("taskset")
        .args(["-c", &first])
        .arg(rtlab_path())
        .arg("check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("irq_affinity"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains(&format!("on CPU {last} ")) || line.contains("skipped"),
        "kept to CPU {first}, check judged: {line}"
    );
}
