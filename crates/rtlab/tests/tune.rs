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
        return skip(
            "tune --pid",
            "needs root (writes /proc/PID/task/*/timerslack_ns)",
        );
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
    // Bad input: one line, exit 2.
    for bad in [
        &["--export", "yaml"][..],
        &["--export", "tuned"],
        &["--export", "tuned", "/no/such/dir"],
        &["--export", "cmdline", d],
    ] {
        let (code, out, err) = run(bad);
        assert_eq!(code, Some(2), "{bad:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{bad:?}: {err}");
    }
}
