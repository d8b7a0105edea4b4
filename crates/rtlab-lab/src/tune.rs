//! `rtlab tune`: applies the run-time fixes `rtlab check` prints, and takes them back.
//!
//! A plan is a list of writes to /proc and /sys files, each with the value found there now.
//! [`apply`] saves the whole plan (every prior value) to a state file *before* it changes
//! anything, then writes the new values one by one; [`revert`] writes every prior value back,
//! the last change first, and checks each one reads back as it was. Boot-time fixes (kernel
//! command line) and what needs a service manager (irqbalance) are printed, never applied.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The fixes `tune` can apply, by the id of the check they answer.
pub const TUNABLE: &[&str] = &[
    "rt_throttling",
    "irq_affinity",
    "transparent_hugepages",
    "damon",
    "cpufreq_governor",
    "c_states",
    "timer_slack",
];

/// The state file's format version.
pub const STATE_VERSION: u32 = 1;

/// One write: `path` held `before`, gets `after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The check it answers.
    pub id: String,
    /// The file.
    pub path: PathBuf,
    /// What it held (as read, trimmed; for a selector file like THP's, the selected word).
    pub before: String,
    /// What tune writes.
    pub after: String,
    /// The write succeeded.
    #[serde(default)]
    pub applied: bool,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `--state FILE` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// [`STATE_VERSION`].
    pub rtlab_tune_state: u32,
    /// The real-time CPUs the plan was made for.
    pub rt_cpus: Vec<usize>,
    /// Every change, in the order applied.
    pub changes: Vec<Change>,
}

/// What to tune.
#[derive(Debug, Clone)]
pub struct TuneConfig {
    /// The CPUs the real-time threads run on.
    pub rt_cpus: Vec<usize>,
    /// Only these check ids (None: every tunable one).
    pub only: Option<Vec<String>>,
    /// Set the timer slack of every thread of this process to 1 ns.
    pub slack_pid: Option<u32>,
}

/// A plan: the writes, and the fixes only printed (with why).
#[derive(Debug, Default)]
pub struct Plan {
    /// The writes.
    pub changes: Vec<Change>,
    /// Fixes that are not applied: (check id, what to do).
    pub printed: Vec<(String, String)>,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The selected word of a selector file ("always [madvise] never" -> "madvise"), or the value.
fn selected(text: &str) -> String {
    text.split_whitespace()
        .find(|w| w.starts_with('['))
        .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
        .unwrap_or_else(|| text.trim().to_string())
}

/// What `path` holds now, in the form tune compares and writes.
pub fn current(path: &Path) -> Option<String> {
    read(path).map(|v| selected(&v))
}

fn numbered_dirs(dir: &str, prefix: &str) -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    out
}

fn cpu_list(cpus: &[usize]) -> String {
    rtlab_sys::affinity::CpuList::from(cpus.to_vec()).to_string()
}

impl Plan {
    fn change(&mut self, id: &str, path: PathBuf, after: impl Into<String>) {
        let after = after.into();
        if let Some(before) = current(&path) {
            if before != after {
                self.changes.push(Change {
                    id: id.into(),
                    path,
                    before,
                    after,
                    applied: false,
                    error: None,
                });
            }
        }
    }
}

/// The writes that would apply the run-time fixes to this machine now (reading only).
pub fn plan(cfg: &TuneConfig) -> Plan {
    let wanted = |id: &str| cfg.only.as_ref().is_none_or(|o| o.iter().any(|x| x == id));
    let mut plan = Plan::default();
    let rt = &cfg.rt_cpus;
    let housekeeping: Vec<usize> = rtlab_sys::affinity::usable_cpus()
        .as_slice()
        .iter()
        .copied()
        .filter(|c| !rt.contains(c))
        .collect();
    if wanted("rt_throttling") {
        plan.change(
            "rt_throttling",
            "/proc/sys/kernel/sched_rt_runtime_us".into(),
            "-1",
        );
    }
    if wanted("irq_affinity") {
        if housekeeping.is_empty() {
            plan.printed.push((
                "irq_affinity".into(),
                "every usable CPU is a real-time CPU: no CPU to move interrupts to".into(),
            ));
        } else {
            let target = cpu_list(&housekeeping);
            for (_, dir) in numbered_dirs("/proc/irq", "") {
                // Only IRQs with a handler (a directory inside) that may run on an RT CPU.
                let active = std::fs::read_dir(&dir)
                    .map(|d| d.flatten().any(|x| x.path().is_dir()))
                    .unwrap_or(false);
                let path = dir.join("smp_affinity_list");
                let on_rt = current(&path)
                    .and_then(|l| rtlab_sys::affinity::CpuList::parse(&l).ok())
                    .is_some_and(|l| l.as_slice().iter().any(|c| rt.contains(c)));
                if active && on_rt {
                    plan.change("irq_affinity", path, target.clone());
                }
            }
            if !rtlab_sys::procfs::pids_named("irqbalance").is_empty() {
                plan.printed.push((
                    "irq_affinity".into(),
                    format!(
                        "irqbalance is running and will move interrupts back: set \
                         IRQBALANCE_BANNED_CPULIST={} in /etc/default/irqbalance and restart it",
                        cpu_list(rt)
                    ),
                ));
            }
        }
    }
    if wanted("transparent_hugepages") {
        let path = PathBuf::from("/sys/kernel/mm/transparent_hugepage/enabled");
        if current(&path).as_deref() == Some("always") {
            plan.change("transparent_hugepages", path, "madvise");
        }
    }
    if wanted("damon") {
        for (_, dir) in numbered_dirs("/sys/kernel/mm/damon/admin/kdamonds", "") {
            let path = dir.join("state");
            if current(&path).as_deref() == Some("on") {
                plan.change("damon", path, "off");
            }
        }
    }
    for &cpu in rt {
        let base = PathBuf::from(format!("/sys/devices/system/cpu/cpu{cpu}"));
        if wanted("cpufreq_governor") {
            let avail = read(&base.join("cpufreq/scaling_available_governors")).unwrap_or_default();
            if avail.split_whitespace().any(|g| g == "performance") {
                plan.change(
                    "cpufreq_governor",
                    base.join("cpufreq/scaling_governor"),
                    "performance",
                );
            }
        }
        if wanted("c_states") {
            for (_, state) in numbered_dirs(&format!("{}/cpuidle", base.display()), "state") {
                let latency: u64 = read(&state.join("latency"))
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0);
                if latency > 10 {
                    plan.change("c_states", state.join("disable"), "1");
                }
            }
        }
    }
    if wanted("timer_slack") {
        match cfg.slack_pid {
            Some(pid) => {
                // Each thread's own file is /proc/<tid>/timerslack_ns (none under task/).
                for (tid, _) in numbered_dirs(&format!("/proc/{pid}/task"), "") {
                    plan.change(
                        "timer_slack",
                        PathBuf::from(format!("/proc/{tid}/timerslack_ns")),
                        "1",
                    );
                }
            }
            None => plan.printed.push((
                "timer_slack".into(),
                "a process's own setting: pass --pid PID to set its threads' slack to 1 ns, or \
                 start it with rtlab exec --slack 1us -- CMD"
                    .into(),
            )),
        }
    }
    plan
}

/// The boot-time and other fixes of `checks` that tune does not apply, as (id, fix).
pub fn not_applied(checks: &[crate::check::Check]) -> Vec<(String, String)> {
    checks
        .iter()
        .filter(|c| {
            matches!(
                c.status,
                crate::check::Status::Fail | crate::check::Status::Warn
            ) && !c.fix.is_empty()
                && !TUNABLE.contains(&c.id)
        })
        .map(|c| (c.id.to_string(), c.fix.clone()))
        .collect()
}

/// Writes `value` to `path` (one write, as `echo value > path` does).
fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, format!("{value}\n")).map_err(|e| e.to_string())
}

fn save(state: &State, file: &Path) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(state).map_err(|e| e.to_string())?;
    rtlab_sys::fs::write_atomically(file, &bytes)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Saves `plan` to `file` (which must not exist: it would hold another run's prior values),
/// then applies it; `file` is rewritten with each write's outcome. Returns the state.
pub fn apply(plan: Plan, rt_cpus: &[usize], file: &Path) -> Result<State, String> {
    let mut state = State {
        rtlab_tune_state: STATE_VERSION,
        rt_cpus: rt_cpus.to_vec(),
        changes: plan.changes,
    };
    // Every prior value is on disk before the first change.
    save(&state, file)?;
    for c in &mut state.changes {
        match write(&c.path, &c.after) {
            Ok(()) => c.applied = true,
            Err(e) => c.error = Some(e),
        }
    }
    save(&state, file)?;
    Ok(state)
}

/// Reads a state file.
pub fn load(file: &Path) -> Result<State, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let state: State = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not an rtlab tune state file: {e}", file.display()))?;
    if state.rtlab_tune_state != STATE_VERSION {
        return Err(format!(
            "{}: state version {} (this rtlab reads {STATE_VERSION})",
            file.display(),
            state.rtlab_tune_state
        ));
    }
    Ok(state)
}

/// One change taken back.
#[derive(Debug)]
pub struct Reverted {
    /// The change.
    pub change: Change,
    /// What the file holds now (None: gone, e.g. a thread that exited).
    pub now: Option<String>,
    /// The write's error, if any.
    pub error: Option<String>,
}

impl Reverted {
    /// The file holds its prior value again (or is gone with what it belonged to).
    pub fn restored(&self) -> bool {
        match &self.now {
            Some(v) => *v == self.change.before,
            None => true,
        }
    }
}

/// Writes every prior value of `state` back, the last change first (also those recorded as
/// not applied: a crash may have come between a write and its record; writing a value that
/// is already there changes nothing).
pub fn revert(state: &State) -> Vec<Reverted> {
    state
        .changes
        .iter()
        .rev()
        .map(|c| {
            let error = if current(&c.path).as_deref() == Some(c.before.as_str()) {
                None
            } else {
                write(&c.path, &c.before).err()
            };
            Reverted {
                change: c.clone(),
                now: current(&c.path),
                error,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_file_reads_as_its_selected_word() {
        assert_eq!(selected("always [madvise] never"), "madvise");
        assert_eq!(selected("950000"), "950000");
        assert_eq!(selected(" 0-1\n"), "0-1");
    }

    #[test]
    fn apply_saves_before_it_writes_and_revert_restores_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "950000\n").unwrap();
        std::fs::write(&b, "always [madvise] never\n").unwrap();
        let mut plan = Plan::default();
        plan.change("rt_throttling", a.clone(), "-1");
        plan.change("transparent_hugepages", b.clone(), "madvise"); // already: no change
        plan.change("missing", dir.path().join("nope"), "1"); // unreadable: no change
        assert_eq!(plan.changes.len(), 1, "{plan:?}");
        let file = dir.path().join("state.json");
        let state = apply(plan, &[1], &file).unwrap();
        assert!(state.changes[0].applied);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "-1\n");
        let saved = load(&file).unwrap();
        assert_eq!(saved.changes, state.changes);
        assert_eq!(saved.changes[0].before, "950000");
        let back = revert(&saved);
        assert!(back.iter().all(Reverted::restored), "{back:?}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "950000\n");
        // A file that no longer takes the old value says so.
        std::fs::remove_file(&a).unwrap();
        std::fs::create_dir(&a).unwrap();
        let back = revert(&saved);
        assert!(back[0].error.is_some() || !back[0].restored(), "{back:?}");
    }

    #[test]
    fn a_state_file_of_another_kind_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.json");
        std::fs::write(&f, "{\"schema_version\": 1}").unwrap();
        assert!(load(&f)
            .unwrap_err()
            .contains("not an rtlab tune state file"));
        std::fs::write(
            &f,
            "{\"rtlab_tune_state\": 9, \"rt_cpus\": [], \"changes\": []}",
        )
        .unwrap();
        assert!(load(&f).unwrap_err().contains("version 9"));
    }
}
