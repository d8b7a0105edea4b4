//! End-to-end tests of `rtlab lock`.

mod common;

use common::*;

#[test]
fn lock_emits_both_modes_of_every_implementation() {
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&["lock", "--duration", "600ms", "--no-dma-latency"]);
    let names = series_names(&doc);
    let rt = doc["system"]["privileges"]["rt_sched"].as_bool().unwrap();
    for imp in [
        "rtlab-pi",
        "glibc-normal",
        "glibc-pi",
        "glibc-pp",
        "glibc-robust",
        "std",
        "parking_lot",
        "sysv-sem",
    ] {
        if imp == "glibc-pp" && !rt {
            continue; // skipped with a warning without SCHED_FIFO
        }
        for mode in ["uncontended", "handoff"] {
            let name = format!("{imp}/{mode}");
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
    }
    for imp in ["rtlab-pi", "glibc-normal", "std", "parking_lot"] {
        let name = format!("{imp}/condvar_wake");
        let series = doc["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name.as_str());
        let series = series.unwrap_or_else(|| panic!("{name} missing from {names:?}"));
        assert!(series["count"].as_u64().unwrap() >= 100, "{series}");
        assert!(series["p50"].as_f64().unwrap() > 0.0);
    }
    assert!(
        stdout.contains("rtlab-pi/handoff / glibc-pi/handoff = "),
        "{stdout}"
    );
}

#[test]
fn lock_rejects_unknown_implementations() {
    let out = rtlab()
        .args(["lock", "--impl", "rtlab-pi,spinlock9000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--impl") && stderr.contains("spinlock9000"),
        "{stderr}"
    );
}

#[test]
fn lock_under_sched_other_skips_glibc_pp_and_says_so() {
    let _serial = realtime_serial();
    let (doc, stderr) = rtlab_json_stdout(&[
        "lock",
        "--duration",
        "200ms",
        "--policy",
        "other",
        "--impl",
        "glibc-pp,rtlab-pi",
    ]);
    assert_eq!(
        series_names(&doc),
        vec![
            "rtlab-pi/uncontended",
            "rtlab-pi/handoff",
            "rtlab-pi/condvar_wake"
        ]
    );
    assert!(stderr.contains("warning: glibc-pp: skipped"));
}

#[test]
fn invert_shows_inversion_without_a_protocol_and_bounds_it_with_one() {
    let _serial = realtime_serial();
    if !is_root() {
        return skip(
            "invert_shows_inversion_without_a_protocol_and_bounds_it_with_one",
            "needs SCHED_FIFO (root)",
        );
    }
    let (doc, stdout) = rtlab_json(&[
        "invert",
        "--duration",
        "4s",
        "--variant",
        "none/rtlab,inherit/rtlab,protect/rtlab",
        "--no-dma-latency",
    ]);
    let find = |name: &str| series_named(&doc, name).clone();
    let (none, pi) = (find("none/rtlab"), find("inherit/rtlab"));
    assert_eq!(none["metric"], "lock_wait");
    assert_eq!(
        none["config"]["bounded"], false,
        "no protocol: a hog preempting the owner blocks the high thread"
    );
    // Not `bounded` itself: that bound (hold + wakeup p99) is tight by definition, and one
    // hypervisor hiccup among ~100 samples may pass it. The protocol's effect is the point,
    // judged on PI's p99: this VM's host stalls a vCPU for up to 30 ms now and then, which
    // lands in a single wait's max (seen once on 2026-11-24: PI max over 0.2x the no-PI max),
    // while the hogs' effect without a protocol is in every hog run.
    let (pi_p99, none_max) = (pi["p99"].as_f64().unwrap(), none["max"].as_f64().unwrap());
    assert!(
        pi_p99 <= 0.2 * none_max,
        "PI p99 {pi_p99} vs no-PI max {none_max}"
    );
    assert!(
        pi_p99 < 1_000_000.0 + 5_000_000.0,
        "PI p99 {pi_p99} ns: more than the 1 ms hold + 5 ms"
    );
    assert!(find("high/wakeup_latency")["count"].as_u64().unwrap() > 100);
    assert!(stdout.contains("inherit/rtlab max / none/rtlab max"));
}

#[test]
fn invert_explain_names_the_inversion_and_with_pi_the_boosted_holder() {
    let _serial = realtime_serial();
    if !is_root() {
        return skip(
            "invert --explain",
            "needs SCHED_FIFO and bpf/tracefs (root)",
        );
    }
    let (doc, stdout) = rtlab_json(&[
        "invert",
        "--duration",
        "4s",
        "--variant",
        "none/rtlab,inherit/rtlab",
        "--explain",
        "--threshold",
        "500us",
        "--no-dma-latency",
    ]);
    let outliers = doc["outliers"].as_array().unwrap();
    let of = |series: &str| -> Vec<&serde_json::Value> {
        outliers.iter().filter(|o| o["series"] == series).collect()
    };
    // Without a protocol: the waits over 5 ms are a hog running while the owner holds the lock.
    let long: Vec<_> = of("none/rtlab")
        .into_iter()
        .filter(|o| o["latency_ns"].as_u64().unwrap() > 5_000_000)
        .collect();
    assert!(long.len() >= 3, "hogs spin 30 ms of 50 ms: {outliers:?}");
    let inversions = long
        .iter()
        .filter(|o| {
            let top = &o["causes"][0];
            top["kind"] == "preemption"
                && top["task"].as_str().unwrap().starts_with("rtlab-inv-hog")
                && top["detail"]
                    .as_str()
                    .unwrap()
                    .contains("held by rtlab-owner")
                && top["duration_ns"].as_f64().unwrap() >= 0.7 * o["latency_ns"].as_f64().unwrap()
        })
        .count();
    assert!(
        inversions * 10 >= long.len() * 9,
        "{inversions} of {}: {long:?}",
        long.len()
    );
    // With PI the owner runs at the waiter's priority: the wait is the holder's own work.
    // Judged on the waits the lock caused: one led by a host gap (the vCPU idle past the
    // deadline while the host held its timer back; seen in a soak, 2 of 9) is what the VM
    // did, not what the test injected, and at most half may be that.
    let all_pi = of("inherit/rtlab");
    let pi: Vec<_> = all_pi
        .iter()
        .filter(|o| o["causes"][0]["kind"] != "hypervisor_gap")
        .collect();
    assert!(
        pi.len() * 2 >= all_pi.len(),
        "most PI waits led by a host gap: {all_pi:?}"
    );
    let boosted =
        pi.iter()
            .filter(|o| {
                o["causes"].as_array().unwrap().iter().any(|c| {
                    c["kind"] == "blocking" && c["task"] == "rtlab-owner" && c["prio"] == 30
                })
            })
            .count();
    assert!(
        !pi.is_empty() && boosted * 10 >= pi.len() * 8,
        "{boosted} of {} name the boosted holder: {pi:?}",
        pi.len()
    );
    assert!(stdout.contains("priority inversion"), "{stdout}");
}

#[test]
fn invert_check_passes_with_priority_inheritance() {
    let _serial = realtime_serial();
    if !is_root() {
        return skip(
            "invert_check_passes_with_priority_inheritance",
            "needs SCHED_FIFO (root)",
        );
    }
    let (doc, _) = rtlab_json_stdout(&["invert", "--check", "--duration", "2s"]);
    let value = |n: &str| {
        doc["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .unwrap()["value"]
            .as_f64()
            .unwrap()
    };
    assert!(
        value("check/groups") > 10.0,
        "groups {}, warnings {}",
        value("check/groups"),
        doc["warnings"]
    );
    assert_eq!(
        value("check/stalls"),
        0.0,
        "warnings {}; running: {}",
        doc["warnings"],
        String::from_utf8_lossy(
            &std::process::Command::new("ps")
                .args(["-eo", "pid,cls,rtprio,pcpu,etime,args"])
                .output()
                .unwrap()
                .stdout
        )
    );
}

#[test]
fn invert_refuses_sched_other() {
    let out = rtlab()
        .args(["invert", "--policy", "other"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy"));
}

#[test]
fn mmap_compares_every_waiter_under_every_disturbance() {
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&[
        "mmap",
        "--duration",
        "2400ms",
        "--size",
        "8MiB",
        "--no-dma-latency",
    ]);
    let names = series_names(&doc);
    let warnings: Vec<&str> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    for waiter in ["private", "shared", "glibc-private", "glibc-shared"] {
        for disturbance in ["idle", "mmap", "mlock"] {
            let name = format!("{waiter}/{disturbance}");
            // A slice a busy machine left empty is said (a storm of context switches beside
            // the suite did that once), never left out in silence.
            let said = format!("{name}: skipped: no wakeup measured");
            if let Some(w) = warnings.iter().find(|w| w.starts_with(&said)) {
                skip("mmap_compares_every_waiter", w);
                continue;
            }
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
    }
    let reading = doc["verdict"]["reading"].as_str().unwrap();
    assert!(reading.starts_with("mmap effect"), "{reading}");
    assert!(stdout.contains("mmap/idle"));
}

#[test]
fn mmap_explain_attributes_its_worst_wakeups() {
    let _serial = realtime_serial();
    if !is_root() {
        return skip("mmap --explain", "needs bpf/tracefs (root)");
    }
    let (doc, stdout) = rtlab_json(&[
        "mmap",
        "--duration",
        "2s",
        "--size",
        "8MiB",
        "--waiter",
        "private,shared",
        "--explain",
        "--top",
        "3",
        "--no-dma-latency",
    ]);
    for w in doc["warnings"].as_array().unwrap() {
        let w = w.as_str().unwrap();
        assert!(
            !w.contains("no kernel tracer") && !w.contains("failed"),
            "{w}"
        );
    }
    let outliers = doc["outliers"].as_array().unwrap();
    assert_eq!(outliers.len(), 3, "the 3 worst wakeups: {outliers:?}");
    let names = series_names(&doc);
    for o in outliers {
        assert!(
            names.contains(&o["series"].as_str().unwrap().to_string()),
            "{o}"
        );
        let causes: u64 = o["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["duration_ns"].as_u64().unwrap())
            .sum();
        assert!(causes <= o["latency_ns"].as_u64().unwrap() + 1_000, "{o}");
    }
    assert!(stdout.contains("outliers (3, worst first)"), "{stdout}");
}

#[test]
fn ipc_compares_every_mechanism_and_names_the_ratios() {
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&[
        "ipc",
        "--duration",
        "1500ms",
        "--size",
        "64",
        "--no-dma-latency",
    ]);
    for m in [
        "rtlab-shm",
        "rtlab-shm-mpsc",
        "rtlab-shm-mutex-condvar",
        "rtlab-shm-mutex-semaphore",
        "posix-mq",
        "sysv-msg",
        "pipe",
        "unix-stream",
        "unix-dgram",
        "eventfd-shm",
    ] {
        assert!(
            series_named(&doc, &format!("{m}/rtt"))["count"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert_eq!(
            series_named(&doc, &format!("{m}/throughput"))["unit"],
            "ops/s"
        );
    }
    assert!(
        stdout.contains("rtlab-shm/rtt p50 / posix-mq p50 = "),
        "{stdout}"
    );
    let (doc, _) = rtlab_json(&[
        "ipc",
        "--duration",
        "600ms",
        "--size",
        "64,1KiB",
        "--mechanism",
        "rtlab-shm,pipe",
    ]);
    series_named(&doc, "rtlab-shm/rtt/1KiB");
    series_named(&doc, "pipe/throughput/64B");
    assert!(
        series_names(&doc).iter().all(|n| !n.contains("-busy")),
        "busy-polling variants only on request"
    );
    let (doc, _) = rtlab_json(&[
        "ipc",
        "--duration",
        "400ms",
        "--mechanism",
        "rtlab-shm",
        "--busy-poll",
    ]);
    let busy = series_named(&doc, "rtlab-shm-busy/rtt");
    assert_eq!(busy["config"]["busy_poll"], true);
    assert_eq!(
        series_named(&doc, "rtlab-shm/rtt")["config"]["busy_poll"],
        false
    );
}

/// `rtlab ipc --explain` of posix-mq, parent on CPU 0 and child on CPU 1, with a FIFO 99 hog
/// on `hog_cpu` (None: skipped).
fn ipc_explained_with_a_hog_on(hog_cpu: u32) -> Option<(serde_json::Value, String)> {
    if !is_root() {
        skip("ipc --explain", "needs SCHED_FIFO and bpf/tracefs (root)");
        return None;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        skip("ipc --explain", "needs two CPUs");
        return None;
    }
    let hog = format!("hog:99:3ms/200ms:{hog_cpu}");
    Some(rtlab_json(&[
        "ipc",
        "--mechanism",
        "posix-mq",
        "--cpus",
        "0,1",
        "--duration",
        "4s",
        "--explain",
        "--threshold",
        "1ms",
        "--load",
        &hog,
        "--no-dma-latency",
    ]))
}

/// `doc` with only the outliers the run could attribute. Every CPU is measured in these ipc
/// runs, so the trace reader competes with the ends (the run warns so) and is named where it
/// delayed one, and at tens of thousands of round trips a second it may fall behind and lose
/// events (the run counts them): an outlier whose events were lost says its cause is not
/// known. This VM also pauses now and then (no event on any CPU for milliseconds), which the
/// run calls a hypervisor gap or a silence. None of that is what the tests inject.
fn attributable(doc: &serde_json::Value) -> serde_json::Value {
    let mut rest = doc.clone();
    rest["outliers"] = doc["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            let top = &o["causes"][0];
            top["task"] != "rtlab-explain"
                && top["kind"] != "hypervisor_gap"
                && !top["stall_ns"].is_number()
                && !top["detail"].as_str().is_some_and(|d| {
                    d.contains("not known") || d.contains("lost") || d.contains("no event for")
                })
        })
        .cloned()
        .collect();
    rest
}

/// The outliers the hog made that the run could attribute (at least 3), or None, said as
/// skipped, where fewer are left only because the run says the others' events were lost or
/// not read (a storm of other tasks' events beside the test overflowed the trace): of the
/// outliers over 2 ms that overlap the hog's runs, those the run attributes and those it says
/// it cannot together make at least 3, and the run counted events lost or unread.
fn hog_outliers_attributed(doc: &serde_json::Value, test: &str) -> Option<Vec<serde_json::Value>> {
    let kept = hog_outliers(&attributable(doc), 2_000_000);
    let unknown_hog = hog_outliers_not_known(doc, 2_000_000);
    let run_lost = doc["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("trace events")))
    });
    if kept.len() < 3 && kept.len() + unknown_hog >= 3 && run_lost {
        skip(
            test,
            &format!(
                "{} of the hog's outliers left to check: the run says it cannot know {unknown_hog} (events lost or not read beside this load)",
                kept.len()
            ),
        );
        return None;
    }
    Some(hog_named_in(&attributable(doc), 2_000_000, 3))
}

#[test]
fn ipc_explain_names_a_hog_on_the_measured_cpu() {
    let _serial = realtime_serial();
    let Some((doc, stdout)) = ipc_explained_with_a_hog_on(0) else {
        return;
    };
    // The parent measures on CPU 0, where the hog runs; its peer is on CPU 1.
    // A 3 ms hog every 200 ms.
    let Some(big) = hog_outliers_attributed(&doc, "ipc_explain_names_a_hog_on_the_measured_cpu")
    else {
        return;
    };
    assert!(
        big.iter().any(|o| o["series"] == "posix-mq/rtt")
            && big.iter().any(|o| o["series"] == "posix-mq/oneway"),
        "round trips and one-way messages both explained: {big:?}"
    );
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
}

#[test]
fn ipc_sizes_over_a_kernel_limit_are_skipped_with_the_sysctl_to_raise() {
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/mqueue/msgsize_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if limit >= 64 << 10 {
        return skip(
            "ipc_sizes_over_a_kernel_limit",
            "fs.mqueue.msgsize_max is already >= 64KiB here",
        );
    }
    let _serial = realtime_serial();
    let out = rtlab()
        .args([
            "ipc",
            "--duration",
            "300ms",
            "--size",
            "64KiB",
            "--mechanism",
            "posix-mq,rtlab-shm",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("posix-mq: skipped: message size 65536 > fs.mqueue.msgsize_max"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sysctl -w fs.mqueue.msgsize_max="),
        "{stderr}"
    );
}

#[test]
fn ipc_explain_follows_a_round_trip_to_the_peers_cpu() {
    let _serial = realtime_serial();
    // The hog runs on CPU 1, the peer's: the parent on CPU 0 sleeps through each late round
    // trip, and only the peer's CPU says why.
    let Some((doc, stdout)) = ipc_explained_with_a_hog_on(1) else {
        return;
    };
    let Some(big) =
        hog_outliers_attributed(&doc, "ipc_explain_follows_a_round_trip_to_the_peers_cpu")
    else {
        return;
    };
    let rtt: Vec<_> = big
        .iter()
        .filter(|o| o["series"] == "posix-mq/rtt")
        .collect();
    assert!(!rtt.is_empty(), "round trips explained: {big:?}");
    for o in &rtt {
        let detail = o["causes"][0]["detail"].as_str().unwrap();
        assert!(detail.contains("on CPU 1"), "{o}");
    }
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
}

#[test]
fn impossible_experiment_settings_exit_2_naming_the_flag() {
    // The lab says which configuration field is wrong; the command line names its flag.
    let cases: &[(&[&str], &str)] = &[
        (&["invert", "--prio", "99"], "--prio 99 leaves no room"),
        (
            &["invert", "--hog-run", "60ms", "--hog-period", "50ms"],
            "--hog-run must be below",
        ),
        (
            &["invert", "--hold", "20ms", "--period", "10ms"],
            "--hold must be",
        ),
        (
            &["mmap", "--interval", "20us"],
            "--interval must be at least 50us",
        ),
        (&["mmap", "--size", "1KiB"], "--size must be at least 4KiB"),
        (&["ipc", "--size", "8"], "--size 8"),
    ];
    for (args, says) in cases {
        let out = rtlab()
            .args(*args)
            .args(["--duration", "100ms"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
