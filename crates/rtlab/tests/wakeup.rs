//! End-to-end tests of `rtlab wakeup` and the common options of the contract.

mod common;

use common::*;
use predicates::prelude::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn wakeup_writes_a_valid_document_and_hgrm_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let hgrm = dir.path().join("hgrm");
    rtlab()
        .args([
            "wakeup",
            "--duration",
            "400ms",
            "--interval",
            "1ms",
            "--no-dma-latency",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--hgrm")
        .arg(&hgrm)
        .assert()
        .success()
        .stdout(predicate::str::contains("thread0").and(predicate::str::contains("p99.99")));
    let doc = load_valid_document(&json);
    assert_eq!(doc["command"], "wakeup");
    assert_eq!(doc["verdict"]["interrupted"], false);
    let cpus = doc["system"]["cpus"].as_u64().unwrap() as usize;
    let names = series_names(&doc);
    assert_eq!(
        names,
        (0..cpus).map(|i| format!("thread{i}")).collect::<Vec<_>>()
    );
    for s in doc["series"].as_array().unwrap() {
        assert_eq!(s["metric"], "wakeup_latency");
        assert_eq!(s["unit"], "ns");
        for key in ["cpu", "interval_ns", "policy", "prio"] {
            assert!(
                s["config"].get(key).is_some(),
                "config.{key} missing in {s}"
            );
        }
        assert_eq!(s["config"]["interval_ns"], 1_000_000);
        // 400 ms at 1 ms: every period is a sample, measured or counted as missed.
        assert_eq!(s["count"], 400);
        let hgrm_file = hgrm.join(format!("{}.hgrm", s["name"].as_str().unwrap()));
        let text = std::fs::read_to_string(&hgrm_file).unwrap();
        assert!(text.contains("Total count    =          400"), "{text}");
    }
    // Atomic writes leave no temp files behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn bad_arguments_exit_2_with_one_line_naming_the_argument() {
    let cases: &[(&[&str], &str)] = &[
        (&["--duration", "-5s"], "--duration"),
        (&["--duration", "5"], "--duration"),
        (&["--cpus", "4096"], "--cpus"),
        (&["--cpus", "banana"], "--cpus"),
        (&["--load", "warpdrive"], "--load"),
        (&["--load", "hog:100:1ms/2ms"], "--load"),
        (&["--load", "hog:99:59m/1h"], "--load"),
        (&["--load", "mmap:100000GiB"], "--load"),
        (&["--prio", "500"], "--prio"),
        (&["--prio", "-3"], "--prio"),
        (&["--policy", "deadline"], "--policy"),
        (&["--policy", "other", "--prio", "5"], "--prio"),
        (&["--json", "/nonexistent-dir/x.json"], "--json"),
        (&["--interval", "1ns"], "--interval"),
        // Longer than the run, or so long that Ctrl-C would wait for it (it hung for days).
        (&["--interval", "200d"], "--interval"),
        (&["--interval", "100ms"], "--interval"),
        (&["--fail-above", "0s"], "--fail-above"),
        (&["--cpus", "-1"], "--cpus"),
        (&["--load", "alloc:0"], "--load"),
        (&["--trace-out", "/proc/no-such-dir"], "--trace-out"),
        (&["--threads", "0"], "--threads"),
        (&["--fail-above", "soon"], "--fail-above"),
        (&["--no-such-option"], "--no-such-option"),
    ];
    for (args, needle) in cases {
        let out = rtlab()
            .arg("wakeup")
            .args(*args)
            .args(["--duration", "100ms"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(
            lines.len(),
            1,
            "{args:?} should give one line, got: {stderr}"
        );
        assert!(
            lines[0].contains(needle),
            "{args:?}: '{}' does not name {needle}",
            lines[0]
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed results");
    }
}

#[test]
fn inputs_a_command_cannot_run_are_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    // A document a later rtlab wrote: this one's, its schema version raised.
    let newer = dir.path().join("newer.json");
    let made = rtlab()
        .args(["check", "--json", newer.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(newer.exists(), "{made:?}");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&newer).unwrap()).unwrap();
    doc["schema_version"] = 999.into();
    std::fs::write(&newer, doc.to_string()).unwrap();
    let newer = newer.to_str().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let cases: &[(&[&str], &[&str])] = &[
        (&["diff", newer, newer], &["schema version 999"]),
        (&["report", newer], &["schema version 999"]),
        (
            &["lock", "--processes", "--impl", "std", "--duration", "1s"],
            &["--processes", "std"],
        ),
        (
            &["load", "hog:99:3ms/200ms:4095", "--duration", "1s"],
            &["CPU 4095 is not available"],
        ),
        (&["net", "serve", "--listen", &busy], &["--listen", &busy]),
        (
            &[
                "net",
                "pingpong",
                "--topology",
                "netns",
                "--netns-sysctl",
                "net.=1",
            ],
            &["--netns-sysctl"],
        ),
        (
            &["slack", "set", "--pid", "2", "--all", "1us"],
            &["kernel thread"],
        ),
        (
            &["slack", "set", "--pid", "1", "--thread", "", "1us"],
            &["--thread"],
        ),
        (&["man", "--out-dir", newer], &["not a directory"]),
    ];
    for (args, needles) in cases {
        assert_bad_input(args, needles);
    }
}

#[test]
fn usage_errors_name_what_is_missing_or_wrong_with_clap_s_suggestion_in_one_line() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["diff", "a.json"], &["required", "<B"]),
        (&["wakup"], &["wakup", "'wakeup'"]),
        (&["wakeup", "--cpu", "0"], &["--cpu", "'--cpus'"]),
    ];
    for (args, needles) in cases {
        assert_bad_input(args, needles);
    }
}

#[test]
fn each_command_s_help_gives_its_own_defaults() {
    for (command, duration, prio) in [
        (&["wakeup"][..], "10s", "95"),
        (&["lock"][..], "6s", "10"),
        (&["invert"][..], "10s", "30"),
        (&["mmap"][..], "8s", "95"),
        (&["ipc"][..], "10s", "50"),
        (&["net", "run"][..], "10s", "80"),
        (&["net", "pingpong"][..], "10s", "80"),
    ] {
        let out = rtlab().args(command).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            help.contains(&format!("default {duration})")),
            "{command:?}: {help}"
        );
        assert!(
            help.contains(&format!("(default {prio})")),
            "{command:?}: {help}"
        );
    }
}

#[test]
fn durations_may_be_compound_and_in_days() {
    // Accepted (each stops at once: --help after the value is not needed, a bad value would
    // exit 2 before anything runs).
    for d in ["1m30s", "1h30m", "2d"] {
        let out = rtlab()
            .args(["load", "cpu", "--duration", d, "--help"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{d}");
    }
    let out = rtlab()
        .args(["load", "cpu", "--duration", "1m30"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1m30"));
}

#[test]
fn fail_above_is_a_ci_gate() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("gate.json");
    rtlab()
        .args([
            "wakeup",
            "--duration",
            "200ms",
            "--fail-above",
            "1ns",
            "--quiet",
            "--no-dma-latency",
            "--json",
        ])
        .arg(&json)
        .assert()
        .code(3)
        .stderr(predicate::str::contains("fail-above: thread0 max"));
    let doc = load_valid_document(&json);
    assert_eq!(doc["verdict"]["fail_above_exceeded"], true);
    rtlab()
        .args([
            "wakeup",
            "--duration",
            "200ms",
            "--fail-above",
            "1h",
            "--quiet",
            "--no-dma-latency",
        ])
        .assert()
        .success();
}

#[test]
fn json_to_stdout_keeps_stdout_pure() {
    let (doc, stderr) = rtlab_json_stdout(&[
        "wakeup",
        "--duration",
        "200ms",
        "--cpus",
        "0",
        "--no-dma-latency",
    ]);
    assert_eq!(series_names(&doc), vec!["thread0"]);
    assert!(stderr.contains("thread0"), "the table goes to stderr");
}

#[test]
fn ctrl_c_ends_the_run_but_keeps_the_results() {
    interrupted_run_keeps_the_results("-INT", "60s", &[]);
}

#[test]
fn a_duration_near_the_clock_limit_still_measures() {
    // Regression (hardening, low): the end of the run (now + 5 000 000 h) overflowed and
    // wrapped into the past, so the run ended before its first sample.
    interrupted_run_keeps_the_results("-INT", "5000000h", &[]);
}

#[test]
fn a_closed_terminal_ends_the_run_like_ctrl_c_and_removes_the_tracefs_instance() {
    // Regression (hardening, low): SIGHUP (the terminal closed) killed rtlab the default way,
    // leaving its tracefs instance behind and no result file. rtlab runs at a terminal of its
    // own (script's pty), which then closes (script killed): the kernel hangs it up. (Without
    // a terminal, SIGHUP is ignored: see the hostile tests.)
    let test = "a closed terminal";
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip(test, "no script (util-linux) to give rtlab a terminal");
    }
    let explain = match is_root() {
        true => "--explain --explain-with tracefs --cpus 0",
        false => "",
    };
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("hup.json");
    let command = format!(
        "exec {} wakeup --no-dma-latency --duration 60s --quiet {explain} --json {}",
        assert_cmd::cargo::cargo_bin("rtlab").display(),
        json.display()
    );
    let mut script = std::process::Command::new("script")
        .args(["-qfc", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let running = |json: &std::path::Path| {
        rtlab_sys::procfs::pids().into_iter().any(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*json.to_string_lossy()))
        })
    };
    assert!(running(&json), "rtlab runs under script");
    script.kill().unwrap();
    script.wait().unwrap();
    let started = Instant::now();
    while running(&json) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "rtlab did not stop when its terminal closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let doc = load_valid_document(&json);
    assert_eq!(doc["verdict"]["interrupted"], true);
    assert!(doc["duration_s"].as_f64().unwrap() < 30.0);
    let left = std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rtlab-"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(left, 0, "the tracefs instance is removed");
}

fn interrupted_run_keeps_the_results(signal: &str, duration: &str, extra: &[&str]) {
    let args = [&["--duration", duration, "--quiet"], extra].concat();
    interrupted_run(signal, &args);
}

/// Runs `rtlab wakeup ARGS`, sends it `signal` after 1.5 s, checks the complete, interrupted
/// result it leaves, and returns its stderr.
fn interrupted_run(signal: &str, args: &[&str]) -> String {
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("int.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rtlab"))
        .args(["wakeup", "--no-dma-latency", "--json"])
        .arg(&json)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let killed = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "rtlab did not stop on {signal}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    let doc = load_valid_document(&json);
    assert_eq!(doc["verdict"]["interrupted"], true);
    assert!(doc["duration_s"].as_f64().unwrap() < 30.0);
    for s in doc["series"].as_array().unwrap() {
        assert!(
            s["count"].as_u64().unwrap() > 100,
            "samples before the interrupt are kept: {s}"
        );
    }
    stderr
}

#[test]
fn forever_runs_until_sigterm_and_says_it_is_alive_in_a_log() {
    // stderr is a pipe here, as in a CI or pod log: a status line every --status-every.
    const FOREVER: [&str; 6] = [
        "--duration",
        "forever",
        "--status-every",
        "300ms",
        "--threads",
        "1",
    ];
    let stderr = interrupted_run("-TERM", &FOREVER);
    let status: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("status: "))
        .collect();
    assert!(
        status.len() >= 3,
        "status lines every 300 ms in 1.5 s: {stderr}"
    );
    assert!(
        status
            .iter()
            .all(|l| l.contains("(until stopped): thread0 ") && l.contains(" samples p99 ")),
        "{stderr}"
    );
    assert!(stderr.contains("until Ctrl-C or SIGTERM"), "{stderr}");
    // --quiet silences them.
    let quiet = interrupted_run("-TERM", &[&FOREVER[..], &["--quiet"]].concat());
    assert!(!quiet.contains("status: "), "{quiet}");
    // Only a command that can run until stopped takes it.
    assert_bad_input(&["lock", "--duration", "forever"], &["--duration forever"]);
}

#[test]
fn unprivileged_run_degrades_and_says_so() {
    if !is_root() {
        return skip(
            "unprivileged_run_degrades_and_says_so",
            "needs root to switch to an unprivileged user",
        );
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip(
            "unprivileged_run_degrades_and_says_so",
            "setpriv (util-linux) is not installed",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let json = dir.path().join("unpriv.json");
    let json_arg = json.to_str().unwrap();
    let out = rtlab_unprivileged(
        &["wakeup", "--duration", "300ms", "--json", json_arg],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for needle in [
        "warning: cannot use SCHED_FIFO",
        "warning: memory not locked",
        "warning: /dev/cpu_dma_latency",
    ] {
        assert!(stderr.contains(needle), "missing '{needle}' in: {stderr}");
    }
    let doc = load_valid_document(&json);
    assert_eq!(doc["system"]["privileges"]["rt_sched"], false);
    assert_eq!(doc["system"]["privileges"]["mlock"], false);
    assert_eq!(
        doc["warnings"].as_array().unwrap().len(),
        3,
        "{}",
        doc["warnings"]
    );
    assert_eq!(doc["series"][0]["config"]["policy"], "other");
}

#[test]
fn wakeup_under_load_records_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("loaded.json");
    rtlab()
        .args([
            "wakeup",
            "--duration",
            "300ms",
            "--cpus",
            "0",
            "--load",
            "cpu:1",
            "--load",
            "mmap:8MiB",
            "--quiet",
        ])
        .args(["--no-dma-latency", "--json"])
        .arg(&json)
        .assert()
        .success();
    let doc = load_valid_document(&json);
    let specs: Vec<&str> = doc["load"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["spec"].as_str().unwrap())
        .collect();
    assert_eq!(specs, vec!["cpu:1", "mmap:8MiB"]);
}

#[test]
fn help_lists_series_and_examples() {
    rtlab()
        .args(["wakeup", "--help"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("Series: thread0").and(predicate::str::contains("Examples:")),
        );
    rtlab()
        .args(["load", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("hog:PRIO:RUN/PERIOD[:CPU]"));
    rtlab().assert().code(2);
}

#[test]
fn hlog_holds_each_threads_intervals_adding_up_to_the_run() {
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let (json, hlog) = (dir.path().join("w.json"), dir.path().join("w.hlog"));
    rtlab()
        .args([
            "wakeup",
            "--duration",
            "2s",
            "--threads",
            "2",
            "--no-dma-latency",
            "--quiet",
        ])
        .args(["--interval-log", "500ms", "--hlog"])
        .arg(&hlog)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    let doc = load_valid_document(&json);
    let (intervals, per_tag) = hlog_counts(&hlog);
    assert!(
        intervals >= 6,
        "{intervals} intervals of 2 threads in 2 s at 500 ms"
    );
    for name in ["thread0", "thread1"] {
        assert_eq!(
            per_tag.get(name).copied(),
            series_named(&doc, name)["count"].as_u64(),
            "{name}: the intervals add up to the total"
        );
    }
    let text = std::fs::read_to_string(&hlog).unwrap();
    assert!(
        text.starts_with("#rtlab wakeup"),
        "{}",
        &text[..80.min(text.len())]
    );
    // A second run appends a section of its own, as the help says (it replaced the file).
    rtlab()
        .args([
            "wakeup",
            "--duration",
            "600ms",
            "--no-dma-latency",
            "--quiet",
        ])
        .args(["--interval-log", "200ms", "--hlog"])
        .arg(&hlog)
        .assert()
        .success();
    let again = std::fs::read_to_string(&hlog).unwrap();
    assert!(again.starts_with(&text), "the first run's log is kept");
    assert_eq!(again.matches("#[StartTime: ").count(), 2, "{again}");
    let (more, per_tag_after) = hlog_counts(&hlog);
    assert!(more > intervals, "{more} after {intervals}");
    assert!(per_tag_after["thread0"] > per_tag["thread0"]);
    // --interval-log without --hlog is a mistake, said as one line.
    assert_bad_input(&["wakeup", "--interval-log", "1s"], &["--hlog"]);
}

#[test]
fn a_late_worst_wakeup_suggests_explain_and_one_cpu_is_singular() {
    // Regression: a 3 ms worst wakeup printed without a word on how to find its cause, and
    // the first line read `CPUs 1`.
    if !is_root() {
        return skip(
            "wakeup hint",
            "needs root (a FIFO 99 hog above the measuring thread)",
        );
    }
    let _serial = realtime_serial();
    let args = [
        "wakeup",
        "--cpus",
        "0",
        "--duration",
        "1s",
        "--load",
        "hog:99:3ms/200ms:0",
        "--no-dma-latency",
    ];
    let out = rtlab().args(args).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wakeup: CPU 0 for 1.00 s"), "{stderr}");
    assert!(
        stdout.contains("the worst wakeup (") && stdout.contains("run again with --explain"),
        "{stdout}"
    );
    // Not when the run explains already.
    let out = rtlab()
        .args(args)
        .args(["--explain", "--top", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("run again with --explain"));
}

#[test]
fn a_thread_kept_off_its_cpu_by_the_fair_server_is_named_throttled_never_preempted() {
    // Regression: beside a SCHED_FIFO busy loop and a SCHED_OTHER one on its CPU, the
    // measuring thread (FIFO 95) waits ~50 ms once a second while the scheduler runs the
    // time-sharing loop (RT bandwidth; on 6.12+ kernels the fair server). The part after its
    // timer expired read "preempted by ts-loop (time-sharing)": a lower class cannot preempt.
    let test = "wakeup throttled";
    let Some((_serial, throttled_cpu)) = throttled_cpu_for(test) else {
        return;
    };
    let (doc, stdout) = rtlab_json(&[
        "wakeup",
        "--cpus",
        &throttled_cpu.cpu.to_string(),
        "--duration",
        "5s",
        "--threshold",
        "2ms",
        "--top",
        "100",
        "--quiet",
    ]);
    drop(throttled_cpu);
    let outliers = throttle_outliers(&doc);
    if outliers.is_empty() {
        return skip(
            test,
            "no wait over 2 ms beside ts-loop: no RT throttling here",
        );
    }
    // About one a second: the fair server's period.
    let stretches = throttle_stretches(&outliers);
    assert!(
        stretches >= 3,
        "{stretches} throttled stretches in 5 s: {outliers:#?}"
    );
    assert_named_throttling(&outliers);
    assert!(stdout.contains("throttled ("), "{stdout}");
    assert!(!stdout.contains("preempted by ts-loop"), "{stdout}");
}
