use super::*;

/// The io tests look at the same names in the temp directory.
static IO_TESTS: Mutex<()> = Mutex::new(());

fn run_for(spec: &str, ms: u64) -> (Vec<LoadReport>, Vec<String>) {
    let specs = [spec.parse::<LoadSpec>().unwrap()];
    let loads = start(&specs, Nanos::from_secs(60)).unwrap();
    std::thread::sleep(Duration::from_millis(ms));
    let warnings = loads.warnings().to_vec();
    (loads.stop(), warnings)
}

#[test]
fn every_kind_does_work_and_stops() {
    // Its io load's temp file must not be seen by the test that looks for one left.
    let _io = IO_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    for spec in [
        "cpu:1",
        "mmap:4MiB",
        "mmap:4MiB:mlock",
        "alloc",
        "fork",
        "net",
        "io",
        "hog:10:1ms/5ms",
        "cpu:30%",
        "gc:10:2ms/20ms",
    ] {
        // Runs until it has done some work (a time-sharing load beside a busy machine,
        // or beside the real-time spinners of the tests running with this one, may get
        // no CPU for a while), then is stopped: it must stop promptly.
        let specs = [spec.parse::<LoadSpec>().unwrap()];
        let loads = start(&specs, Nanos::from_secs(60)).unwrap();
        let began = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(100));
        while loads.progress()[0].work == 0 && began.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let stopping = std::time::Instant::now();
        let reports = loads.stop();
        assert!(
            stopping.elapsed() < Duration::from_secs(5),
            "{spec} did not stop promptly"
        );
        assert_eq!(reports.len(), 1);
        assert!(
            reports[0].work > 0,
            "{spec} did no work in 20 s: {reports:?}"
        );
    }
}

#[test]
fn a_utilisation_load_puts_a_real_time_and_a_time_sharing_spinner_on_every_cpu() {
    let specs = ["cpu:40%".parse::<LoadSpec>().unwrap()];
    let loads = start(&specs, Nanos::from_secs(60)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let threads = rtlab_sys::procfs::threads_of(std::process::id() as i32).unwrap();
    let ncpu = usable_cpus().len();
    let root = rtlab_sys::process::effective_uid() == 0;
    for (name, prio) in [("rtlab-util-rt", 98), ("rtlab-util", 120)] {
        let ours: Vec<_> = threads.iter().filter(|t| t.name == name).collect();
        assert_eq!(ours.len(), ncpu, "{name}: {threads:?}");
        // One on each CPU.
        let mut cpus: Vec<usize> = ours
            .iter()
            .filter_map(|t| rtlab_sys::affinity::thread_cpus(t.tid))
            .map(|c| {
                assert_eq!(c.len(), 1, "{name} pinned to one CPU");
                c.as_slice()[0]
            })
            .collect();
        cpus.sort_unstable();
        assert_eq!(cpus, usable_cpus().as_slice());
        // SCHED_FIFO 1 (kernel priority 98) for the first where allowed.
        if root || prio == 120 {
            for t in &ours {
                let p = rtlab_sys::procfs::task_kernel_prio(t.tid as i64).unwrap();
                assert!(
                    p == prio || (prio == 120 && (100..140).contains(&p)),
                    "{name}: {p}"
                );
            }
        }
    }
    let reports = loads.stop();
    assert!(
        reports[0].work > 0 && reports[0].runs.is_empty(),
        "{reports:?}"
    );
}

#[test]
fn gc_records_its_bursts() {
    let (reports, warnings) = run_for("gc:10:2ms/20ms", 300);
    let runs = &reports[0].runs;
    assert!(
        runs.len() >= 5 && reports[0].work > 0,
        "{reports:?} {warnings:?}"
    );
    for pair in runs.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "bursts overlap: {pair:?}");
    }
}

#[test]
fn hog_records_when_it_ran() {
    let before = monotonic_now_ns();
    let (reports, _) = run_for("hog:10:1ms/5ms", 300);
    let after = monotonic_now_ns();
    let runs = &reports[0].runs;
    assert!(runs.len() >= 10, "{runs:?}");
    assert_eq!(runs.len() as u64, reports[0].work);
    for pair in runs.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "runs overlap: {pair:?}");
    }
    for &(from, to) in runs {
        assert!(before <= from && from <= to && to <= after, "{from}..{to}");
    }
    // A run ends 1 ms after its planned start (shorter when the hog woke late), so the
    // runs add up to at most 1 ms each (plus a clock read or a preemption at the end).
    let total: u64 = runs.iter().map(|(f, t)| t - f).sum();
    assert!(
        total <= runs.len() as u64 * 1_000_000 + 5_000_000,
        "{runs:?}"
    );
}

#[test]
fn a_long_hog_run_stops_at_once() {
    // Regression (hardening #8): the spin did not look at the stop flag.
    let started = std::time::Instant::now();
    let (reports, _) = run_for("hog:10:1s/2s", 200);
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "stop waited for the spin: {:?}",
        started.elapsed()
    );
    assert_eq!(reports[0].runs.len(), 1);
}

#[test]
fn threads_are_named_for_attribution() {
    let loads = start(&["hog:10:1ms/5ms".parse().unwrap()], Nanos::from_secs(60)).unwrap();
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    drop(loads);
    assert!(names.iter().any(|n| n == "rtlab-hog"), "{names:?}");
}

#[test]
fn io_load_removes_its_temp_file() {
    let _io = IO_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    let pattern = format!("rtlab-io-{}-", std::process::id());
    run_for("io", 200);
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&pattern))
        .collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
}

#[test]
fn io_load_cannot_be_pointed_at_a_planted_link() {
    let _io = IO_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    // Regression (hardening #1): the io load opened $TMPDIR/rtlab-io-<pid>-<n>.tmp with
    // O_TRUNC, following a link planted at that predictable name.
    let victim = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(victim.path(), b"precious").unwrap();
    for n in 0..4 {
        let name = format!("rtlab-io-{}-{n}.tmp", std::process::id());
        let _ = std::os::unix::fs::symlink(victim.path(), std::env::temp_dir().join(name));
    }
    run_for("io", 200);
    for n in 0..4 {
        let _ = std::fs::remove_file(
            std::env::temp_dir().join(format!("rtlab-io-{}-{n}.tmp", std::process::id())),
        );
    }
    assert_eq!(std::fs::read(victim.path()).unwrap(), b"precious");
}

#[test]
fn loads_stop_by_themselves_at_the_hard_limit() {
    let loads = start(&["cpu:1".parse().unwrap()], Nanos::from_millis(100)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let before = loads.progress()[0].work;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        loads.progress()[0].work,
        before,
        "load still working past its limit"
    );
}

#[test]
fn alloc_rate_is_respected() {
    let (reports, _) = run_for("alloc:10MiB", 500);
    // 10 MiB/s for 0.5 s is 5 MiB; allow one 16 MiB string of burst plus slack.
    assert!(reports[0].work < 30 << 20, "{reports:?}");
}

#[test]
fn hog_on_a_missing_cpu_is_refused() {
    let err = start(
        &["hog:10:1ms/5ms:4096".parse().unwrap()],
        Nanos::from_secs(1),
    )
    .unwrap_err();
    assert!(err.to_string().contains("CPU 4096"), "{err}");
}
