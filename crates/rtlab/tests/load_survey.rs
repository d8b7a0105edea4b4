//! End-to-end tests of `rtlab load` and `rtlab survey`.

mod common;

use common::*;
use predicates::prelude::*;

#[test]
fn load_runs_every_kind_and_reports_work() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("load.json");
    rtlab()
        .args([
            "load",
            "cpu:1",
            "mmap:8MiB",
            "alloc:20MiB",
            "fork",
            "net",
            "io",
            "hog:20:1ms/10ms",
            "--duration",
            "600ms",
        ])
        .arg("--json")
        .arg(&json)
        .assert()
        .success()
        .stdout(predicate::str::contains("mmap cycles"));
    let doc = load_valid_document(&json);
    assert_eq!(doc["command"], "load");
    for s in doc["series"].as_array().unwrap() {
        assert!(s["value"].as_f64().unwrap() > 0.0, "load did no work: {s}");
    }
    assert_eq!(doc["series"].as_array().unwrap().len(), 7);
}

#[test]
fn load_needs_a_spec() {
    let out = rtlab().arg("load").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "{stderr}"
    );
}

#[test]
fn survey_writes_report_with_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    // With gates: one that must trip (no wakeup is 1 ns late or less), two that cannot.
    let run = rtlab()
        .args(["survey", "--duration", "300ms", "--no-dma-latency", "--out"])
        .arg(&out)
        .args(["--fail-area", "wakeup-idle=1ns", "--fail-area", "net=1h"])
        .args(["--fail-above", "1h"])
        .assert()
        .code(3)
        .stdout(predicate::str::contains("loaded/idle").and(predicate::str::contains("wakeup:")));
    let stderr = String::from_utf8_lossy(&run.get_output().stderr).to_string();
    assert!(
        stderr.contains("fail-area: wakeup-idle/thread0 max "),
        "{stderr}"
    );
    assert!(
        !stderr.contains("fail-above:") && !stderr.contains("fail-area: net/"),
        "{stderr}"
    );
    let doc = load_valid_document(&out.join("report.json"));
    assert_eq!(doc["command"], "survey");
    let names = series_names(&doc);
    assert!(
        names.iter().any(|n| n == "wakeup-idle/thread0"),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "wakeup-loaded/thread0"),
        "{names:?}"
    );
    let loads: Vec<&str> = doc["load"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["spec"].as_str().unwrap())
        .collect();
    assert_eq!(loads, vec!["cpu", "mmap"]);
    for name in [
        "lock/rtlab-pi/uncontended",
        "lock/rtlab-robust/handoff",
        "lock/glibc-pi/handoff",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from {names:?}"
        );
    }
    let row = &doc["verdict"]["survey"][0];
    assert_eq!(row["area"], "wakeup");
    assert!(row["loaded_max_ns"].as_u64().unwrap() > 0);
    let areas: Vec<&str> = doc["verdict"]["survey"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["area"].as_str().unwrap())
        .collect();
    if is_root() {
        assert_eq!(
            areas,
            vec!["wakeup", "lock", "invert", "slack", "ipc", "net", "noise", "mmap"]
        );
        // Its series, or its row saying the stage measured too little (a busy machine).
        let invert_row = &doc["verdict"]["survey"][2]["reading"];
        assert!(
            names.iter().any(|n| n == "invert/inherit/rtlab")
                || invert_row
                    .as_str()
                    .is_some_and(|r| r.starts_with("not measured")),
            "{names:?} {invert_row}"
        );
        assert!(names.iter().any(|n| n == "mmap/shared/mlock"), "{names:?}");
        assert!(names.iter().any(|n| n == "net/all/rtt"), "{names:?}");
        assert!(
            names.iter().any(|n| n.starts_with("noise/cpu")),
            "{names:?}"
        );
    } else {
        assert!(
            areas.starts_with(&["wakeup", "lock"]) && areas.contains(&"slack"),
            "{areas:?}"
        );
    }
    let distributions = doc["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.get("histogram").is_some());
    for name in distributions.map(|s| s["name"].as_str().unwrap().to_string()) {
        assert!(
            out.join(format!("{}.hgrm", name.replace('/', "_")))
                .exists(),
            "{name}.hgrm missing"
        );
    }
}

#[test]
fn survey_refuses_a_gate_on_an_unknown_area() {
    assert_bad_input(
        &["survey", "--fail-area", "wakeup=1ms"],
        &["unknown area 'wakeup'", "wakeup-loaded"],
    );
}

#[test]
fn survey_refuses_an_unwritable_out_dir_before_measuring() {
    let out = rtlab()
        .args(["survey", "--out", "/proc/rtlab-cannot-write-here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rtlab-cannot-write-here"));
}
