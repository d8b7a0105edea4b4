//! `rtlab noise`: the busy-loop's gaps as a schema-valid document; bad input refused; with a
//! FIFO 99 hog on the measured CPU, the hog's runs are gaps and the explainer names it.

mod common;

use common::*;

#[test]
fn bad_noise_input_is_one_line_and_exit_2() {
    assert_bad_input(&["noise", "--threshold", "10ns"], &["threshold", "100ns"]);
    assert_bad_input(&["noise", "--threshold", "soon"], &["--threshold"]);
    assert_bad_input(&["noise", "--policy", "other", "--prio", "5"], &["--prio"]);
    assert_bad_input(&["noise", "--duration", "forever"], &["forever"]);
    assert_bad_input(&["noise", "--top", "0"], &["--top"]);
    // Regression (hardening, second review, #9): spinners at FIFO 99 on every CPU with RT
    // throttling off froze the machine, the watchdog (99 too) included.
    assert_bad_input(&["noise", "--prio", "99"], &["--prio", "98", "watchdog"]);
    assert_bad_input(
        &["ipc", "--busy-poll", "--prio", "99"],
        &["--prio", "98", "watchdog"],
    );
}

#[test]
fn a_time_sharing_spinner_gives_one_series_per_cpu_with_its_interruptions() {
    let (doc, stdout) = rtlab_json(&[
        "noise",
        "--cpus",
        "0",
        "--policy",
        "other",
        "--duration",
        "300ms",
        "--threshold",
        "20us",
    ]);
    assert_eq!(doc["command"], "noise");
    let s = series_named(&doc, "cpu0");
    assert_eq!(s["metric"], "loop_gap");
    assert_eq!(s["config"]["policy"], "other");
    assert_eq!(s["config"]["threshold_ns"], 20_000);
    // Every loop is a sample: far more than one per microsecond of the run would be absurd,
    // far fewer than one per ten would mean the loop does something else.
    let count = s["count"].as_u64().unwrap();
    let spun = s["config"]["spun_ns"].as_u64().unwrap();
    assert!(
        count > spun / 10_000 && count < spun,
        "{count} loops in {spun} ns"
    );
    let lost = s["config"]["lost_ns"].as_u64().unwrap();
    let n = s["config"]["interruptions"].as_u64().unwrap();
    assert!(
        lost >= n * 20_000,
        "{n} interruptions over 20 us lost only {lost} ns"
    );
    assert!(
        stdout.contains("cpu0:") && stdout.contains("interruptions over 20.0 us"),
        "{stdout}"
    );
    // Regression: a spinner has no periods, yet its table had an always-zero `missed`
    // column; and the share kept read `92.4944 %`.
    assert!(s.get("missed").is_none(), "{s}");
    let head = stdout.lines().next().unwrap();
    assert!(
        head.starts_with("series") && !head.contains("missed"),
        "{stdout}"
    );
    let share = stdout
        .split(" lost, ")
        .nth(1)
        .and_then(|t| t.split(" % of the CPU").next())
        .unwrap_or_else(|| panic!("{stdout}"));
    let decimals = share.split('.').nth(1).map_or(0, str::len);
    assert!((1..=4).contains(&decimals), "{share} %");
}

#[test]
fn one_measured_cpu_is_named_in_the_singular() {
    let out = rtlab()
        .args([
            "noise",
            "--cpus",
            "0",
            "--policy",
            "other",
            "--duration",
            "200ms",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("noise: spinning on CPU 0 for"), "{stderr}");
}

#[test]
fn a_hog_on_the_measured_cpu_makes_gaps_that_the_explainer_names() {
    if !is_root() {
        return skip("noise hog", "needs root (SCHED_FIFO, bpf/tracefs)");
    }
    let _serial = realtime_serial();
    let (doc, stdout) = rtlab_json(&[
        "noise",
        "--cpus",
        "0",
        "--threshold",
        "2ms",
        "--explain",
        "--load",
        "hog:99:3ms/200ms:0",
        "--duration",
        "3s",
    ]);
    let s = series_named(&doc, "cpu0");
    // Each hog run that fell inside the run is a gap over 2 ms: counted ...
    let runs = hog_runs(&doc);
    let inside = runs
        .iter()
        .filter(|&&(a, b)| b - a >= 2_500_000 && b < 2_900_000_000)
        .count();
    assert!(inside >= 10, "3 ms every 200 ms for 3 s: {runs:?}");
    let n = s["config"]["interruptions"].as_u64().unwrap() as usize;
    assert!(n >= inside, "{n} interruptions for {inside} hog runs");
    assert!(s["max"].as_f64().unwrap() >= 2.5e6, "{s}");
    // ... and >= 90 % of those the hog caused name rtlab-hog.
    hog_named_in(&doc, 2_000_000, inside * 9 / 10);
    assert!(stdout.contains("preempted by rtlab-hog"), "{stdout}");
    // Regression: outliers were timed from the explainer's start, before the spinners began,
    // and one read `at 5.3 s` in a 5 s run.
    for o in doc["outliers"].as_array().unwrap() {
        assert!(o["at_ns"].as_u64().unwrap() <= 3_000_000_000, "{o}");
    }
}

#[test]
fn a_time_sharing_loop_beside_a_real_time_spinner_is_named_throttling_never_preemption() {
    // Regression: a SCHED_OTHER busy loop on the spinner's CPU took ~50 ms a second (RT
    // bandwidth, or the fair server of 6.12+ kernels), named "preempted by sh
    // (time-sharing)": a lower class cannot preempt a real-time thread.
    if !is_root() {
        return skip(
            "throttling named",
            "needs root (SCHED_FIFO, eBPF or tracefs)",
        );
    }
    let _serial = realtime_serial();
    let cpu = *rtlab_sys::affinity::usable_cpus()
        .as_slice()
        .last()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let one = rtlab_sys::affinity::CpuList::from(vec![cpu]);
            rtlab_sys::affinity::set_current_thread_affinity(&one).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let (doc, _) = rtlab_json(&[
        "noise",
        "--cpus",
        &cpu.to_string(),
        "--duration",
        "3s",
        "--explain",
        "--threshold",
        "2ms",
        "--top",
        "50",
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
    let outliers: Vec<&serde_json::Value> = doc["outliers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["latency_ns"].as_u64().unwrap_or(0) > 2_000_000)
        // Those in which a time-sharing task held the CPU for 2 ms or more (a gap of the
        // host's, say, is no throttling).
        .filter(|o| {
            o["causes"].as_array().into_iter().flatten().any(|c| {
                c["task"].is_string()
                    && c["prio"].as_u64() == Some(0)
                    && c["duration_ns"].as_u64().unwrap_or(0) >= 2_000_000
            })
        })
        .collect();
    if outliers.is_empty() {
        return skip(
            "throttling named",
            "no gap over 2 ms: no RT throttling here",
        );
    }
    let throttled = outliers
        .iter()
        .filter(|o| {
            matches!(
                o["causes"][0]["reason"].as_str(),
                Some("throttled" | "fair_server")
            )
        })
        .count();
    assert!(
        throttled * 100 >= outliers.len() * 95,
        "{throttled} of {} gaps over 2 ms named throttling: {outliers:?}",
        outliers.len()
    );
    for o in &outliers {
        for c in o["causes"].as_array().into_iter().flatten() {
            let plain_preemption = c["kind"] == "preemption"
                && c["prio"].as_u64() == Some(0)
                && c["task"].is_string()
                && c["reason"].is_null();
            assert!(!plain_preemption, "preempted by a time-sharing task: {c}");
        }
    }
}
