//! `--explain`: a known cause (a FIFO 99 hog on the measured CPU) is named with its share of
//! the lateness, from either event source (the eBPF recorder and tracefs); the tracefs instance
//! is gone afterwards; without privileges it says so.

mod common;

use common::*;

#[test]
fn a_hog_on_the_measured_cpu_is_named_as_the_cause_from_ebpf() {
    hog_is_named("bpf");
}

#[test]
fn a_hog_on_the_measured_cpu_is_named_as_the_cause_from_tracefs() {
    hog_is_named("tracefs");
}

fn hog_is_named(source: &str) {
    if !is_root() {
        return skip("explain hog", "needs root (bpf/tracefs, SCHED_FIFO)");
    }
    if source == "bpf" && !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return skip("explain hog from ebpf", "the kernel has no BTF");
    }
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let trace_out = dir.path().join("windows");
    let trace_arg = trace_out.to_string_lossy().to_string();
    let (doc, stdout) = rtlab_json(&[
        "wakeup",
        "--cpus",
        "0",
        "--threshold",
        "1ms",
        "--load",
        "hog:99:3ms/200ms:0",
        "--duration",
        "3s",
        "--trace-out",
        &trace_arg,
        "--explain-with",
        source,
    ]);
    // The source asked for ran (no fallback). Lost events (a reader starved by other work on
    // its CPU) are the machine's doing: the outliers they touch say so and are left out below.
    for w in doc["warnings"].as_array().unwrap() {
        let w = w.as_str().unwrap();
        assert!(
            !["could not start", "no kernel tracer", "failed"]
                .iter()
                .any(|bad| w.contains(bad)),
            "{source}: {w}"
        );
    }
    let outliers = doc["outliers"].as_array().unwrap();
    // The outliers over 2 ms that the hog's recorded runs overlap (a host stall elsewhere in
    // the run is real, but not what this test injected).
    let big = hog_outliers(&doc, 2_000_000);
    // Beside a storm of other tasks' events the reader may fall behind: the outliers whose
    // events it lost or had not read say so (and are not checked for the hog); too few left
    // to check is said as skipped, not passed.
    let not_known = hog_outliers_not_known(&doc, 2_000_000);
    assert!(
        big.len() + not_known >= 5,
        "a 3 ms hog every 200 ms for 3 s: {outliers:?}"
    );
    if big.len() < 5 {
        check_windows_and_instance(source, &doc, &trace_out);
        return skip(
            &format!("explain hog from {source}"),
            &format!(
                "{} of the hog's outliers left to check: the run says it cannot know {not_known} (events lost or not read beside this load)",
                big.len()
            ),
        );
    }
    // The acceptance: >= 90 % of the outliers over 2 ms name rtlab-hog (FIFO 99) as
    // the preempting task, for 70-110 % of the lateness. This VM's host may stop the vCPU
    // during a hog's run (a host gap of its own, over 30 % of the lateness): such an outlier
    // is left out, but no more than half of them.
    let clean: Vec<_> = big.iter().filter(|o| host_gap_share(o) <= 0.3).collect();
    assert!(clean.len() * 2 >= big.len(), "host gaps: {big:?}");
    let big = clean;
    let named: Vec<_> = big
        .iter()
        .filter(|o| {
            let top = &o["causes"][0];
            let share = top["duration_ns"].as_f64().unwrap() / o["latency_ns"].as_f64().unwrap();
            top["kind"] == "preemption"
                && top["task"] == "rtlab-hog"
                && top["prio"] == 99
                && (0.7..=1.1).contains(&share)
        })
        .collect();
    assert!(
        named.len() * 10 >= big.len() * 9,
        "{} of {} named: {big:?}",
        named.len(),
        big.len()
    );
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
    check_windows_and_instance(source, &doc, &trace_out);
}

/// Every outlier's causes sum to no more than its lateness, one raw window per outlier names
/// the tasks as the kernel does, and the tracefs instance is gone.
fn check_windows_and_instance(source: &str, doc: &serde_json::Value, trace_out: &std::path::Path) {
    let outliers = doc["outliers"].as_array().unwrap();
    for o in outliers {
        let attributed: u64 = o["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["duration_ns"].as_u64().unwrap())
            .sum();
        assert!(
            attributed <= o["latency_ns"].as_u64().unwrap() + 1_000,
            "{o}"
        );
    }
    let windows: Vec<_> = std::fs::read_dir(trace_out).unwrap().flatten().collect();
    assert_eq!(windows.len(), outliers.len(), "one raw window per outlier");
    // Each line names the task current on its CPU as the kernel's own text does: the hog by
    // its name somewhere, never a made-up `task-<pid>`.
    let text: String = (windows.iter())
        .map(|w| std::fs::read_to_string(w.path()).unwrap())
        .collect();
    assert!(
        !text.contains(" task-") && text.contains("rtlab-hog-"),
        "{source}: {}",
        &text[..text.len().min(3000)]
    );
    let instances = std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rtlab-"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(instances, 0, "the tracefs instance is removed");
}

#[test]
fn without_a_tracer_it_says_so_and_falls_back_to_proc() {
    if !is_root() {
        return skip("explain fallback", "needs root to drop privileges");
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = rtlab_unprivileged(
        &[
            "wakeup",
            "--explain",
            "--policy",
            "other",
            "--duration",
            "500ms",
            "--no-mlock",
            "--no-dma-latency",
            "--json",
            "r.json",
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("explain: no kernel tracer"), "{stderr}");
    assert!(stderr.contains("stolen by the host"), "{stderr}");
    let doc = load_valid_document(&dir.path().join("r.json"));
    assert_eq!(doc["outliers"].as_array().map_or(0, Vec::len), 0);
}

#[test]
fn net_run_explains_late_sends() {
    if !is_root() {
        return skip("explain net", "needs root (tracefs, SCHED_FIFO)");
    }
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&[
        "net",
        "run",
        "--cpus",
        "0",
        "--stream",
        "100B@7ms",
        "--load",
        "hog:99:3ms/200ms:0",
        "--threshold",
        "500us",
        "--warmup",
        "0s",
        "--duration",
        "6s",
    ]);
    // 7 ms does not divide the hog's 200 ms period, so the two drift through each other.
    let big = hog_named_in(&doc, 1_000_000, 3);
    assert!(big.iter().all(|o| o["series"] == "100B@7ms/send_lateness"));
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
}

#[test]
fn slack_explains_sleeps_late_beyond_their_slack() {
    if !is_root() {
        return skip("explain slack", "needs root (bpf/tracefs)");
    }
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&[
        "slack",
        "--cpus",
        "0",
        "--sleeps",
        "100us",
        "--slacks",
        "200us",
        "--mechanism",
        "futex,clock_nanosleep_abs",
        "--load",
        "hog:99:2ms/50ms:0",
        "--threshold",
        "500us",
        "--duration",
        "4s",
    ]);
    // A 2 ms hog every 50 ms.
    hog_named_in(&doc, 1_000_000, 5);
    let outliers = doc["outliers"].as_array().unwrap();
    // Lateness counts from requested + slack (the slack is by design), so no outlier is later
    // than its series' worst oversleep minus the 200 us slack (SCHED_FIFO rows: no slack).
    for o in outliers {
        let series = doc["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == o["series"])
            .unwrap_or_else(|| panic!("{o}"));
        let slack = if o["series"].as_str().unwrap().starts_with("fifo/") {
            0.0
        } else {
            200_000.0
        };
        let worst = series["max"].as_f64().unwrap();
        let late = o["latency_ns"].as_f64().unwrap();
        assert!(
            late <= worst - slack + worst * 0.01 + 1_000.0,
            "{o} vs max {worst}"
        );
    }
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
}

#[test]
fn net_pingpong_explains_slow_round_trips() {
    if !is_root() {
        return skip(
            "explain net pingpong",
            "needs root (bpf/tracefs, SCHED_FIFO)",
        );
    }
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&[
        "net",
        "pingpong",
        "--cpus",
        "0",
        "--load",
        "hog:99:2ms/100ms:0",
        "--threshold",
        "1ms",
        "--duration",
        "4s",
    ]);
    // A 2 ms hog every 100 ms on the measuring thread's CPU.
    let big = hog_named_in(&doc, 1_500_000, 5);
    assert!(big.iter().all(|o| o["series"] == "pingpong/rtt"));
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
}
