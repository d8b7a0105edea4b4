//! End-to-end tests of `rtlab slack get|set` and `rtlab exec`.

mod common;

use common::*;
use predicates::prelude::*;

#[test]
fn exec_passes_slack_and_affinity_and_the_exit_status() {
    let out = rtlab()
        .args(["exec", "--slack", "1us", "--cpus", "0", "--"])
        .args([
            "sh",
            "-c",
            "cat /proc/self/timerslack_ns; grep Cpus_allowed_list /proc/self/status; exit 7",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "exit status passes through");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("1000\n"), "slack inherited: {stdout}");
    assert!(
        stdout.contains("Cpus_allowed_list:\t0\n"),
        "affinity inherited: {stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rtlab exec: CPUs 0, timer slack 1.00 us")
    );
}

#[test]
fn exec_sets_a_realtime_policy_when_allowed() {
    if !is_root() {
        return skip(
            "exec_sets_a_realtime_policy_when_allowed",
            "needs CAP_SYS_NICE (root)",
        );
    }
    rtlab()
        .args([
            "exec",
            "--policy",
            "rr",
            "--prio",
            "7",
            "--",
            "sh",
            "-c",
            "cut -d' ' -f41,18 /proc/self/stat",
        ])
        .assert()
        .success()
        // Field 18 (priority) is -1 - 7 = -8; field 41 (policy) is 2 = SCHED_RR.
        .stdout(predicate::str::contains("-8 2"));
}

#[test]
fn exec_refuses_bad_input_in_one_line() {
    for args in [
        vec!["exec", "--", "/nonexistent/program"],
        vec!["exec", "--policy", "fifo", "--", "true"],
        vec!["exec", "--slack", "5s", "--", "true"],
        vec!["exec", "--cpus", "4096", "--", "true"],
        vec!["exec", "true"],
    ] {
        let out = rtlab().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(
            stderr.lines().filter(|l| !l.trim().is_empty()).count(),
            1,
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn slack_get_and_set_round_trip_on_a_child_process() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    // Regression: right after spawn the child may not have exec'd `sleep` yet (its name is
    // still this test's), and `--thread sleep` then matched nothing.
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim() != "sleep")
        .unwrap_or(true)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("slack.json");
    rtlab()
        .args(["slack", "set", "--pid", &pid, "--thread", "sleep", "3us"])
        .assert()
        .success()
        .stdout(predicate::str::contains("-> 3.00 us"));
    rtlab()
        .args(["slack", "get", "--pid", &pid, "--json"])
        .arg(&json)
        .assert()
        .success();
    let doc = load_valid_document(&json);
    assert_eq!(doc["series"][0]["value"], 3000.0);
    assert_eq!(doc["series"][0]["tags"]["name"], "sleep");
    let raw = std::fs::read_to_string(format!("/proc/{pid}/timerslack_ns")).unwrap();
    assert_eq!(raw.trim(), "3000", "the kernel holds what rtlab reported");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn slack_errors_are_one_clear_line() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    for (args, code, needle) in [
        (
            vec!["slack", "get", "--pid", "999999999"],
            2,
            "no such process",
        ),
        (
            vec![
                "slack",
                "set",
                "--pid",
                pid.as_str(),
                "--thread",
                "nomatch",
                "1us",
            ],
            2,
            "no thread",
        ),
        (
            vec!["slack", "set", "--pid", pid.as_str(), "1us"],
            2,
            "--all",
        ),
        (
            vec!["slack", "set", "--pid", pid.as_str(), "--all", "-1us"],
            2,
            "negative",
        ),
    ] {
        let out = rtlab().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(
            stderr.lines().filter(|l| !l.trim().is_empty()).count(),
            1,
            "{args:?}: {stderr}"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn slack_set_without_privilege_says_why() {
    if !is_root() {
        return skip(
            "slack_set_without_privilege_says_why",
            "needs root to switch to an unprivileged user",
        );
    }
    let args = ["slack", "set", "--pid", "1", "--all", "1us"];
    let out = rtlab_unprivileged(&args, &std::env::temp_dir());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("permission denied") && stderr.contains("CAP_SYS_NICE"),
        "{stderr}"
    );
}

#[test]
fn sweep_shows_the_slack_step_and_validates() {
    let (doc, stdout) = rtlab_json(&[
        "slack",
        "--duration",
        "1s",
        "--sleeps",
        "10us",
        "--slacks",
        "1us,100us",
        "--mechanism",
        "futex,nanosleep",
        "--no-dma-latency",
    ]);
    let p50 = |name: &str| series_named(&doc, name)["p50"].as_f64().unwrap();
    for m in ["futex", "nanosleep"] {
        let (tight, loose) = (
            p50(&format!("{m}/10us/1us")),
            p50(&format!("{m}/10us/100us")),
        );
        assert!(
            loose > tight + 50_000.0,
            "{m}: 100us slack p50 {loose} vs 1us slack p50 {tight}"
        );
    }
    if is_root() {
        // The FIFO row runs with the largest slack, which does not apply to it.
        assert!(p50("fifo/futex/10us/100us") < 50_000.0);
    }
    assert!(stdout.contains("p50 oversleep"));
}
