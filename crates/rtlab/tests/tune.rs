//! `rtlab tune`: the plan changes nothing; `--apply` saves every prior value and changes the
//! machine; `--revert` leaves every /proc and /sys file it may touch exactly as it was.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file `rtlab tune` may write on this machine, with its content now.
fn snapshot() -> BTreeMap<PathBuf, String> {
    let mut files: Vec<PathBuf> = vec![
        "/proc/sys/kernel/sched_rt_runtime_us".into(),
        "/sys/kernel/mm/transparent_hugepage/enabled".into(),
        "/sys/kernel/debug/sched/preempt".into(),
    ];
    let glob = |dir: &str, file: &str| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join(file))
            .collect()
    };
    files.extend(glob("/proc/irq", "smp_affinity_list"));
    files.extend(glob("/sys/kernel/mm/damon/admin/kdamonds", "state"));
    files.extend(glob("/sys/kernel/debug/sched/fair_server", "runtime"));
    for cpu in glob("/sys/devices/system/cpu", "") {
        files.push(cpu.join("cpufreq/scaling_governor"));
        files.extend(glob(&cpu.join("cpuidle").to_string_lossy(), "disable"));
    }
    files
        .into_iter()
        .filter_map(|f| Some((f.clone(), std::fs::read_to_string(&f).ok()?)))
        .collect()
}

/// `rtlab ARGS STATE`, required to succeed.
fn tune_with_state(args: &[&str], state: &Path) {
    let out = rtlab().args(args).arg(state).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// Reverts `state` when dropped, so a failing assertion does not leave the machine tuned.
struct RevertOnDrop<'a>(&'a Path);

impl Drop for RevertOnDrop<'_> {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = rtlab().args(["tune", "--revert"]).arg(self.0).output();
        }
    }
}

#[test]
fn bad_tune_input_is_one_line_and_exit_2() {
    assert_bad_input(&["tune", "--apply"], &["--state"]);
    assert_bad_input(
        &["tune", "--only", "cpu_isolation"],
        &["not a fix tune applies"],
    );
    assert_bad_input(&["tune", "--revert", "x.json", "--cpus", "0"], &["--cpus"]);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.json");
    let out = rtlab()
        .args(["tune", "--revert"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    if is_root() {
        // An existing state file may hold an earlier apply's prior values: never overwritten.
        let existing = dir.path().join("t.json");
        std::fs::write(&existing, "keep").unwrap();
        let out = rtlab()
            .args(["tune", "--apply", "--state"])
            .arg(&existing)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep");
    }
}

#[test]
fn the_plan_changes_nothing_and_needs_no_root() {
    // Not while the apply/revert test changes the machine.
    let _serial = realtime_serial();
    let before = snapshot();
    let out = rtlab().arg("tune").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("nothing changed"), "{text}");
    // What is left to do by hand names each fix once.
    let left: Vec<&str> = text
        .split("not applied (do these yourself):")
        .nth(1)
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.strip_prefix("  ")?.split_once(": ").map(|(id, _)| id))
        .filter(|id| !id.starts_with(' '))
        .collect();
    let unique: std::collections::BTreeSet<&&str> = left.iter().collect();
    assert_eq!(unique.len(), left.len(), "{text}");
    assert_eq!(snapshot(), before);
    if is_root() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let out = rtlab_unprivileged(&["tune", "--apply", "--state", "t.json"], dir.path());
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("needs root"));
        assert!(!dir.path().join("t.json").exists());
    }
}

#[test]
fn apply_then_revert_leaves_every_touched_value_as_it_was() {
    if !is_root() {
        return skip("tune apply/revert", "needs root (writes /proc and /sys)");
    }
    let _serial = realtime_serial();
    let before = snapshot();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("tune.json");
    let guard = RevertOnDrop(&state);
    // RT throttling is on by default (and off after apply): at least that one changes.
    let was_throttled = before
        .get(Path::new("/proc/sys/kernel/sched_rt_runtime_us"))
        .is_some_and(|v| v.trim() != "-1");
    let out = rtlab()
        .args(["tune", "--apply", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    let changes = saved["changes"].as_array().unwrap();
    for c in changes {
        // Every prior value saved is what the file held before apply.
        let path = PathBuf::from(c["path"].as_str().unwrap());
        let was = before
            .get(&path)
            .unwrap_or_else(|| panic!("{path:?} not in the snapshot"));
        // A selector file's selected word: [sysfs] or (debugfs).
        let word = was
            .split_whitespace()
            .find(|w| w.starts_with('[') || w.starts_with('('))
            .map(|w| w.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')')))
            .unwrap_or(was.trim());
        assert_eq!(c["before"].as_str().unwrap(), word, "{c}");
        if c["applied"] == true {
            let now = std::fs::read_to_string(&path).unwrap();
            assert!(now.contains(c["after"].as_str().unwrap()), "{c}: now {now}");
        } else if c["knob"]["kind"] == "irq_affinity" {
            // An interrupt the kernel refuses to move says so and what moves it.
            let error = c["error"].as_str().unwrap_or("");
            assert!(
                error.contains("does not let this interrupt be moved")
                    && error.contains("isolcpus=managed_irq"),
                "{c}"
            );
        }
        if c["knob"]["kind"] == "irq_affinity" {
            // Those whose file the kernel made read-only (a virtio disk queue's on this VM)
            // are not planned at all.
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_ne!(mode & 0o200, 0, "{c}");
        }
    }
    if was_throttled {
        assert_eq!(
            std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us")
                .unwrap()
                .trim(),
            "-1"
        );
        assert!(changes.iter().any(|c| c["knob"]["kind"] == "rt_sysctl"));
    }
    tune_with_state(&["tune", "--revert"], &state);
    assert!(
        !state.exists(),
        "the state file is removed after a full revert"
    );
    drop(guard);
    let after = snapshot();
    for (path, was) in &before {
        assert_eq!(
            after.get(path),
            Some(was),
            "{} not restored",
            path.display()
        );
    }
    assert_eq!(after.len(), before.len());
}

#[test]
fn a_process_timer_slack_is_set_and_given_back() {
    if !is_root() {
        return skip("tune --pid", "needs root (writes /proc/TID/timerslack_ns)");
    }
    let _serial = realtime_serial();
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let slack = format!("/proc/{pid}/timerslack_ns");
    let before = std::fs::read_to_string(&slack).unwrap();
    assert_ne!(before.trim(), "1", "a fresh process has the default slack");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("t.json");
    let guard = RevertOnDrop(&state);
    tune_with_state(
        &[
            "tune",
            "--apply",
            "--only",
            "timer_slack",
            "--pid",
            &pid,
            "--state",
        ],
        &state,
    );
    assert_eq!(std::fs::read_to_string(&slack).unwrap().trim(), "1");
    tune_with_state(&["tune", "--revert"], &state);
    drop(guard);
    assert_eq!(std::fs::read_to_string(&slack).unwrap(), before);
    let _ = child.kill();
    let _ = child.wait();
    // A process that is not there is bad input.
    assert_bad_input(
        &["tune", "--pid", "999999999"],
        &["--pid", "no such process"],
    );
}

#[test]
fn export_carries_the_fixes_to_tuned_systemd_and_the_kernel_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = rtlab().arg("tune").args(args).output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let d = dir.path().to_str().unwrap();
    // A tuned profile of this machine's plan.
    let (code, _, err) = run(&["--export", "tuned", d]);
    assert_eq!(code, Some(0), "{err}");
    let conf = std::fs::read_to_string(dir.path().join("tuned.conf")).unwrap();
    assert!(
        conf.contains("[main]\nsummary=rtlab: real-time fixes for CPUs ")
            && conf.contains("[variables]\nisolated_cores="),
        "{conf}"
    );
    assert!(err.contains("wrote") && err.contains("tuned.conf"), "{err}");
    // The kernel command line, alone on stdout.
    let (code, out, _) = run(&["--export", "cmdline"]);
    assert_eq!(code, Some(0));
    let line = out.trim();
    assert!(
        line.starts_with("isolcpus=") && line.contains(" nohz_full=") && line.contains(" preempt="),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    // A unit systemd accepts, where systemd-analyze is here.
    let (code, _, err) = run(&["--export", "systemd", d]);
    assert_eq!(code, Some(0), "{err}");
    let unit = dir.path().join("rtlab-tune.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(
        text.contains("ExecStart=") && text.contains(" tune --apply --state /run/"),
        "{text}"
    );
    match std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
    {
        Ok(v) => assert!(
            v.status.success(),
            "{}{}",
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr)
        ),
        Err(_) => rtlab_sys::testing::say_skipped("the unit's check: no systemd-analyze"),
    }
    // A profile's own directory is made where it does not exist yet (as `mkdir` makes it).
    let profile = dir.path().join("rtlab-rt");
    let (code, _, err) = run(&["--export", "tuned", profile.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(profile.join("tuned.conf").is_file());
    // Bad input: one line, exit 2.
    let unit = unit.to_str().unwrap();
    for bad in [
        &["--export", "yaml"][..],
        &["--export", "tuned"],
        &["--export", "tuned", "/no/such/dir"],
        &["--export", "tuned", unit],
        &["--export", "cmdline", d],
    ] {
        let (code, out, err) = run(bad);
        assert_eq!(code, Some(2), "{bad:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{bad:?}: {err}");
    }
}

#[test]
fn bad_verify_input_is_one_line_and_exit_2() {
    assert_bad_input(&["tune", "--verify"], &["--apply"]);
    assert_bad_input(
        &["tune", "--apply", "--state", "s.json", "--verify-with"],
        &["--verify"],
    );
    assert_bad_input(
        &[
            "tune",
            "--apply",
            "--state",
            "s.json",
            "--verify",
            "--verify-with",
        ],
        &["--verify-with -- CMD"],
    );
    assert_bad_input(
        &[
            "tune", "--apply", "--state", "s.json", "--verify", "--", "app",
        ],
        &["--verify-with"],
    );
    assert_bad_input(
        &[
            "tune", "--apply", "--state", "s.json", "--verify", "--rounds", "3",
        ],
        &["--rounds 3", "interval"],
    );
    assert_bad_input(
        &[
            "tune", "--apply", "--state", "s.json", "--verify", "--load", "nope",
        ],
        &["nope"],
    );
}

/// A fix that hurts, planted: a SCHED_FIFO 99 hog on the measured CPU, busy 2 ms of every
/// 20, for as long as the fix is on.
struct PlantedHog {
    cpu: usize,
    hog: Option<std::process::Child>,
}

impl rtlab_lab::tune::verify::Fix for PlantedHog {
    fn id(&self) -> &str {
        "planted_hog"
    }
    fn set(&mut self, on: bool) -> Result<(), String> {
        if let Some(mut h) = self.hog.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        if on {
            let spec = format!("hog:99:2ms/20ms:{}", self.cpu);
            let child = std::process::Command::new(rtlab_path())
                .args(["load", &spec, "--duration", "1h", "--quiet"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?;
            self.hog = Some(child);
            // Its thread at work before the block starts.
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Ok(())
    }
}

/// Blocks of `rtlab wakeup` on one CPU, as `tune --verify` measures.
struct Wakeups {
    cpu: usize,
    dir: PathBuf,
    n: usize,
}

impl rtlab_lab::tune::verify::Measure for Wakeups {
    fn block(&mut self, _explain: bool) -> Result<rtlab_lab::tune::verify::Block, String> {
        self.n += 1;
        let json = self.dir.join(format!("b{}.json", self.n));
        let out = rtlab()
            .args([
                "wakeup",
                "--cpus",
                &self.cpu.to_string(),
                "--duration",
                "1s",
                "--quiet",
            ])
            .arg("--json")
            .arg(&json)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("{out:?}"));
        }
        let doc = load_valid_document(&json);
        let s = &doc["series"][0];
        Ok(rtlab_lab::tune::verify::Block {
            figures: rtlab_lab::tune::verify::Figures {
                p99: s["p99"].as_f64().unwrap(),
                max: s["max"].as_f64().unwrap(),
                count: s["count"].as_u64().unwrap(),
            },
            causes: None,
        })
    }
}

#[test]
fn verify_takes_back_a_planted_fix_that_hurts() {
    use rtlab_lab::tune::verify::{verify, Effect, Fix, Settings};
    if !is_root() {
        return skip(
            "tune --verify's engine",
            "needs root (SCHED_FIFO hog and wakeups)",
        );
    }
    let _serial = realtime_serial();
    let cpu = *rtlab_sys::affinity::usable_cpus()
        .as_slice()
        .last()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut hog = PlantedHog { cpu, hog: None };
    let mut fixes: Vec<&mut dyn Fix> = vec![&mut hog];
    let mut measure = Wakeups {
        cpu,
        dir: dir.path().into(),
        n: 0,
    };
    // Ten rounds of 1 s blocks: the interval then leaves out the most extreme round on each
    // side, and a block's p99 (its 10th-worst wakeup) outlasts one host stall of a few
    // milliseconds (this VM's host stops a vCPU that long now and then, in any block).
    let settings = Settings {
        rounds: 10,
        keep_all: false,
    };
    let v = verify(
        &mut fixes,
        &[None],
        &mut measure,
        settings,
        &|| false,
        &mut |_| {},
    )
    .unwrap();
    drop(fixes);
    let hogged = &v.fixes[0];
    // Taken back whatever the host did meanwhile: "hurt" on a quiet host, "unclear" when
    // the host's stalls of milliseconds hit baseline blocks too (its verdict on a quiet
    // machine is the engine's unit tests'); never "helped".
    assert_ne!(hogged.effect, Effect::Helped, "{v:#?}");
    assert!(hogged.p99_ratio.unwrap().median > 2.0, "{v:#?}");
    assert!(!hogged.kept);
    assert!(hog.hog.is_none(), "the planted hog is stopped");
    assert!(v.kept().is_empty());
    // The blocks alternated: 10 baselines and 10 of the fix.
    assert_eq!((v.baseline.len(), hogged.blocks.len()), (10, 10));
}

/// `rtlab tune --apply --verify --rounds 6 ARGS --state STATE --json JSON`, to its end.
fn verify_run(args: &[&str], state: &Path, json: &Path) -> std::process::Output {
    rtlab()
        .args(["tune", "--apply", "--verify", "--rounds", "6"])
        .args(args)
        .arg("--state")
        .arg(state)
        .arg("--json")
        .arg(json)
        .output()
        .unwrap()
}

/// `rtlab tune --apply --verify --only IDS` on the machine, in the background.
fn verify_in_background(only: &str, state: &Path) -> std::process::Child {
    std::process::Command::new(rtlab_path())
        .args([
            "tune", "--apply", "--verify", "--rounds", "6", "--block", "1s", "--only", only,
        ])
        .arg("--state")
        .arg(state)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The fixes this machine's plan has of those that toggle nothing a test beside depends on
/// (interrupts moved off the last CPU, DAMON stopped).
fn harmless_fixes() -> Option<String> {
    let out = rtlab()
        .args(["tune", "--only", "irq_affinity,damon"])
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = ["irq_affinity", "damon"]
        .into_iter()
        .filter(|id| plan.lines().any(|l| l.starts_with(id)))
        .collect();
    (!ids.is_empty()).then(|| ids.join(","))
}

/// The directories `--verify` runs keep their blocks' results in.
fn work_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("rtlab-verify-"))
        })
        .collect();
    dirs.sort();
    dirs
}

/// What a test of a real `--verify` run needs: root, fixes that toggle nothing a test beside
/// depends on, the real-time tests' turn and the machine as found (None: skipped, said why).
fn verify_setup(
    test: &str,
) -> Option<(
    String,
    std::sync::MutexGuard<'static, ()>,
    BTreeMap<PathBuf, String>,
)> {
    if !is_root() {
        skip(test, "needs root (writes /proc and /sys)");
        return None;
    }
    let Some(only) = harmless_fixes() else {
        skip(
            test,
            "this machine's plan moves no interrupt and stops no DAMON",
        );
        return None;
    };
    let serial = realtime_serial();
    Some((only, serial, snapshot()))
}

#[test]
fn verify_stopped_or_killed_mid_run_leaves_every_value_as_it_was() {
    let Some((only, _serial, before)) = verify_setup("tune --verify interrupted") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dirs_before = work_dirs();
    for name in ["SIGTERM", "SIGKILL"] {
        let state = dir.path().join(format!("{name}.json"));
        let _revert = RevertOnDrop(&state);
        let mut run = verify_in_background(&only, &state);
        // Killed while a fix is on: some value differs from the snapshot.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while snapshot() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: no fix was ever on"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            state.exists(),
            "{name}: the state file is written before any change"
        );
        match name {
            "SIGTERM" => rtlab_sys::process::terminate(run.id()).unwrap(),
            _ => run.kill().unwrap(),
        }
        // The guard shares the run's stderr: its end is the guard's too.
        let out = run.wait_with_output().unwrap();
        assert!(!state.exists(), "{name}: the state file is left: {out:?}");
        assert_eq!(
            work_dirs(),
            dirs_before,
            "{name}: the run's directory is left"
        );
        let after = snapshot();
        for (path, was) in &before {
            assert_eq!(
                after.get(path),
                Some(was),
                "{name}: {} not restored",
                path.display()
            );
        }
        let (said, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        match name {
            "SIGTERM" => assert!(
                said.contains("interrupted: every change reverted"),
                "{said}"
            ),
            _ => assert!(err.contains("ended before it finished: reverted"), "{err}"),
        }
    }
}

#[test]
fn verify_reports_each_fix_in_one_valid_document_and_keeps_only_what_it_says() {
    let Some((only, _serial, before)) = verify_setup("tune --verify's document") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("verify.json");
    let json = dir.path().join("doc.json");
    let _revert = RevertOnDrop(&state);
    let out = verify_run(&["--block", "300ms", "--only", &only], &state, &json);
    let code = out.status.code();
    assert!(code == Some(0) || code == Some(3), "{out:?}");
    let doc = load_valid_document(&json);
    let v = &doc["verdict"]["verify"];
    let ids: Vec<&str> = v["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.join(","), only, "{v}");
    assert_eq!(v["rounds"], 6);
    for f in v["fixes"].as_array().unwrap() {
        assert_eq!(f["blocks"].as_array().unwrap().len(), 6, "{f}");
        assert!(f["p99_ratio"]["median"].as_f64().unwrap() > 0.0, "{f}");
        // Kept exactly when it helped (no --keep-all).
        assert_eq!(f["kept"] == true, f["effect"] == "helped", "{f}");
    }
    let kept = doc["verdict"]["kept"].as_array().unwrap();
    assert_eq!(code == Some(3), kept.is_empty(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("p99 ratio") && table.contains("max ratio"),
        "{table}"
    );
    if kept.is_empty() {
        assert!(!state.exists(), "nothing kept, nothing to revert");
        assert_eq!(snapshot(), before);
    } else {
        // The state file holds the kept changes only, ready for --revert and --export.
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        for c in saved["changes"].as_array().unwrap() {
            let id = match c["knob"]["kind"].as_str().unwrap() {
                "irq_affinity" => "irq_affinity",
                _ => "damon",
            };
            assert!(kept.iter().any(|k| k == id), "{c}");
        }
        assert!(saved.get("verifying").is_none(), "{saved}");
        tune_with_state(&["tune", "--revert"], &state);
        assert_eq!(snapshot(), before);
    }
}

/// The timer slack of every thread of `pid` (ns), as /proc shows it (each thread's own file is
/// /proc/<tid>/timerslack_ns: there is none under task/).
fn slacks(pid: u32) -> Vec<String> {
    let mut s: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_string_lossy().into_owned();
            std::fs::read_to_string(format!("/proc/{tid}/timerslack_ns")).ok()
        })
        .map(|v| v.trim().to_string())
        .collect();
    s.sort();
    s
}

#[test]
fn verify_with_a_pid_measures_that_process_and_so_its_timer_slack() {
    let test = "tune --verify --pid";
    if !is_root() {
        return skip(test, "needs root (writes /proc/TID/timerslack_ns)");
    }
    // A program that waits on timers: 1 ms sleeps (Debian's Python, as a user's would be).
    let Ok(app) = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import time\nwhile True:\n    time.sleep(0.001)"])
        .spawn()
    else {
        return skip(test, "no /usr/bin/python3");
    };
    let app = KilledOnDrop(app);
    let _serial = realtime_serial();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = slacks(app.0.id());
    assert!(
        !before.is_empty() && !before.contains(&"1".to_string()),
        "{before:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (state, json) = (dir.path().join("s.json"), dir.path().join("doc.json"));
    let _revert = RevertOnDrop(&state);
    let pid = app.0.id().to_string();
    let args = ["--block", "500ms", "--only", "timer_slack", "--pid", &pid];
    // Looked at while it runs: the fix's blocks set the process's own threads.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (out, seen_on) = std::thread::scope(|s| {
        let looker = s.spawn(|| {
            let mut on = false;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let now = slacks(app.0.id());
                on |= !now.is_empty() && now.iter().all(|v| v == "1");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            on
        });
        let out = verify_run(&args, &state, &json);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, looker.join().unwrap())
    });
    let code = out.status.code();
    let fix = if code == Some(0) || code == Some(3) {
        load_valid_document(&json)["verdict"]["verify"]["fixes"][0].clone()
    } else {
        serde_json::Value::Null
    };
    let kept = fix["kept"] == true;
    let during = slacks(app.0.id());
    if kept {
        tune_with_state(&["tune", "--revert"], &state);
    }
    let after = slacks(app.0.id());
    drop(app);
    assert!(code == Some(0) || code == Some(3), "{out:?}");
    assert!(seen_on, "the process's threads never had the fix's 1 ns");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(" under rtlab watch --pid"), "{said}");
    // Measured, in every round, by watching the process it changes.
    assert_eq!(fix["id"], "timer_slack", "{fix}");
    assert_ne!(fix["effect"], "not measured", "{fix}");
    assert_eq!(fix["blocks"].as_array().map(Vec::len), Some(6), "{fix}");
    assert!(fix["p99_ratio"]["median"].as_f64().unwrap() > 0.0, "{fix}");
    // What it kept is on until reverted, what it did not is as found.
    match kept {
        true => assert!(during.iter().all(|s| s == "1"), "{during:?}"),
        false => assert_eq!(during, before),
    }
    assert_eq!(after, before);
}
