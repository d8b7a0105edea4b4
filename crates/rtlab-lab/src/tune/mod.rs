//! `rtlab tune`: applies the run-time fixes `rtlab check` prints, and takes them back.
//!
//! A plan is a list of writes to /proc, /sys and debugfs files, each with the value found
//! there now.
//! [`apply`] saves the whole plan (every prior value) to a state file *before* it changes
//! anything, then writes the new values one by one; [`revert`] writes every prior value back,
//! the last change first, and checks each one reads back as it was. Boot-time fixes (kernel
//! command line) and what needs a service manager (irqbalance) are printed, never applied.
//!
//! A state file is input rtlab acts on as root, so it names *what* to restore, never *where*:
//! each change is a [`Knob`] (a kind tune knows and the number that picks one: an IRQ, a CPU,
//! a thread), whose file is derived from it; a value is checked against its kind before
//! anything is written, a file is never created nor reached through a link, and only the
//! kernel's own settings files are written. The file itself must be one no other user could
//! have planted or changed ([`rtlab_sys::fs::open_trusted`]).

use crate::LabError;
use rtlab_sys::debugfs::{self, DebugfsError};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The fixes `tune` can apply, by the id of the check they answer.
pub const TUNABLE: &[&str] = &[
    "preempt_model",
    "rt_throttling",
    "fair_server",
    "irq_affinity",
    "transparent_hugepages",
    "damon",
    "cpufreq_governor",
    "c_states",
    "timer_slack",
];

/// The state file's format version (2: changes name a [`Knob`], not a path).
pub const STATE_VERSION: u32 = 2;

/// The real-time bandwidth sysctls under /proc/sys/kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RtSysctl {
    /// sched_rt_runtime_us: microseconds, or -1 for no limit.
    SchedRtRuntimeUs,
    /// sched_rt_period_us: microseconds, at least 1.
    SchedRtPeriodUs,
}

/// One setting tune can change: its kind and what picks one of that kind. The file is
/// derived from it ([`Knob::path`]), never read from a state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Knob {
    /// /proc/sys/kernel/sched_rt_{runtime,period}_us.
    RtSysctl {
        /// Which one.
        name: RtSysctl,
    },
    /// /proc/irq/IRQ/smp_affinity_list.
    IrqAffinity {
        /// The IRQ number.
        irq: u32,
    },
    /// /sys/kernel/mm/transparent_hugepage/enabled.
    TransparentHugepages,
    /// /sys/kernel/mm/damon/admin/kdamonds/N/state.
    Damon {
        /// The kdamond's index.
        kdamond: u32,
    },
    /// /sys/devices/system/cpu/cpuN/cpufreq/scaling_governor.
    Governor {
        /// The CPU.
        cpu: u32,
    },
    /// /sys/devices/system/cpu/cpuN/cpuidle/stateS/disable.
    IdleState {
        /// The CPU.
        cpu: u32,
        /// The idle state's index.
        state: u32,
    },
    /// /proc/TID/timerslack_ns.
    TimerSlack {
        /// The thread.
        tid: u32,
    },
    /// /sys/kernel/debug/sched/fair_server/cpuN/runtime (Linux 6.12+): ns of each period
    /// SCHED_OTHER work may run over RT threads on that CPU; 0 turns the server off.
    FairServerRuntime {
        /// The CPU.
        cpu: u32,
    },
    /// /sys/kernel/debug/sched/preempt (PREEMPT_DYNAMIC kernels): the preemption model.
    PreemptModel,
}

/// The longest fair server period the kernel takes (`fair_server_period_max`, ~4 s): no
/// runtime can exceed it.
const FAIR_SERVER_MAX_NS: u64 = (1 << 22) * 1000;

/// The models /sys/kernel/debug/sched/preempt takes.
const PREEMPT_MODELS: &[&str] = &["none", "voluntary", "full", "lazy"];

const GOVERNORS: &[&str] = &[
    "performance",
    "powersave",
    "schedutil",
    "ondemand",
    "conservative",
    "userspace",
];

impl Knob {
    /// The check it answers.
    pub fn id(&self) -> &'static str {
        match self {
            Knob::RtSysctl { .. } => "rt_throttling",
            Knob::IrqAffinity { .. } => "irq_affinity",
            Knob::TransparentHugepages => "transparent_hugepages",
            Knob::Damon { .. } => "damon",
            Knob::Governor { .. } => "cpufreq_governor",
            Knob::IdleState { .. } => "c_states",
            Knob::TimerSlack { .. } => "timer_slack",
            Knob::FairServerRuntime { .. } => "fair_server",
            Knob::PreemptModel => "preempt_model",
        }
    }

    /// Its file, under `root` (`/` on the machine; a directory laid out like it in tests).
    pub fn path_in(&self, root: &Path) -> PathBuf {
        let rel = match *self {
            Knob::RtSysctl { name } => format!(
                "proc/sys/kernel/{}",
                match name {
                    RtSysctl::SchedRtRuntimeUs => "sched_rt_runtime_us",
                    RtSysctl::SchedRtPeriodUs => "sched_rt_period_us",
                }
            ),
            Knob::IrqAffinity { irq } => format!("proc/irq/{irq}/smp_affinity_list"),
            Knob::TransparentHugepages => "sys/kernel/mm/transparent_hugepage/enabled".into(),
            Knob::Damon { kdamond } => {
                format!("sys/kernel/mm/damon/admin/kdamonds/{kdamond}/state")
            }
            Knob::Governor { cpu } => {
                format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
            }
            Knob::IdleState { cpu, state } => {
                format!("sys/devices/system/cpu/cpu{cpu}/cpuidle/state{state}/disable")
            }
            Knob::TimerSlack { tid } => format!("proc/{tid}/timerslack_ns"),
            Knob::FairServerRuntime { cpu } => {
                return debugfs::path_in(root, &debugfs::fair_server(cpu as usize, "runtime"))
            }
            Knob::PreemptModel => return debugfs::path_in(root, debugfs::PREEMPT),
        };
        root.join(rel)
    }

    /// Its file on this machine.
    pub fn path(&self) -> PathBuf {
        self.path_in(Path::new("/"))
    }

    /// Whether `value` is one this kind of setting takes (checked before any write).
    pub fn accepts(&self, value: &str) -> bool {
        let integer = |min: i64| value.parse::<i64>().is_ok_and(|v| v >= min);
        match self {
            Knob::RtSysctl {
                name: RtSysctl::SchedRtRuntimeUs,
            } => integer(-1),
            Knob::RtSysctl {
                name: RtSysctl::SchedRtPeriodUs,
            } => integer(1),
            Knob::IrqAffinity { .. } => {
                value
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b',' || b == b'-')
                    && rtlab_sys::affinity::CpuList::parse(value).is_ok_and(|l| !l.is_empty())
            }
            Knob::TransparentHugepages => ["always", "madvise", "never"].contains(&value),
            Knob::Damon { .. } => ["on", "off"].contains(&value),
            Knob::Governor { .. } => GOVERNORS.contains(&value),
            Knob::IdleState { .. } => ["0", "1"].contains(&value),
            Knob::TimerSlack { .. } => value.parse::<u64>().is_ok(),
            Knob::FairServerRuntime { .. } => value
                .parse::<u64>()
                .is_ok_and(|ns| ns <= FAIR_SERVER_MAX_NS),
            Knob::PreemptModel => PREEMPT_MODELS.contains(&value),
        }
    }
}

/// One write: the file of `knob` held `before`, gets `after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// What is changed.
    pub knob: Knob,
    /// Its file, for the reader of the state file only: revert derives it from `knob` and
    /// refuses a file where the two differ.
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

impl Change {
    /// The check it answers.
    pub fn id(&self) -> &'static str {
        self.knob.id()
    }
}

/// What `--state FILE` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// [`STATE_VERSION`].
    pub rtlab_tune_state: u32,
    /// The real-time CPUs the plan was made for.
    pub rt_cpus: Vec<usize>,
    /// Every change, in the order applied.
    pub changes: Vec<Change>,
    /// Written while `--verify` measures: any of the changes may be on, and should the run
    /// die, its guard reverts every one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verifying: bool,
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

/// The selected word of a selector file, or the value: sysfs marks it with brackets
/// ("always [madvise] never" -> "madvise"), debugfs with parentheses ("none voluntary (full)
/// lazy" -> "full").
fn selected(text: &str) -> String {
    text.split_whitespace()
        .find(|w| w.starts_with('['))
        .map(|w| w.trim_matches(|c| c == '[' || c == ']'))
        .or_else(|| debugfs::selected(text))
        .unwrap_or(text.trim())
        .to_string()
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
    fn change(&mut self, knob: Knob, root: &Path, after: impl Into<String>) {
        let after = after.into();
        let path = knob.path_in(root);
        if let Some(before) = current(&path) {
            if before != after && knob.accepts(&before) && knob.accepts(&after) {
                self.changes.push(Change {
                    knob,
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
    plan_in(cfg, Path::new("/"))
}

impl TuneConfig {
    /// The fix `id` is asked for (`--only`, or every one).
    pub fn wants(&self, id: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.iter().any(|x| x == id))
    }
}

/// [`plan`] for a machine whose files are under `root` (a laid-out directory in tests).
pub fn plan_in(cfg: &TuneConfig, root: &Path) -> Plan {
    let mut plan = Plan::default();
    if cfg.wants("preempt_model") {
        plan_preempt_model(&mut plan, root);
    }
    if cfg.wants("rt_throttling") {
        let knob = Knob::RtSysctl {
            name: RtSysctl::SchedRtRuntimeUs,
        };
        plan.change(knob, root, "-1");
    }
    if cfg.wants("fair_server") {
        plan_fair_server(&mut plan, root, &cfg.rt_cpus);
    }
    if cfg.wants("irq_affinity") {
        plan_irq_affinity(&mut plan, root, &cfg.rt_cpus);
    }
    if cfg.wants("transparent_hugepages") {
        let knob = Knob::TransparentHugepages;
        if current(&knob.path_in(root)).as_deref() == Some("always") {
            plan.change(knob, root, "madvise");
        }
    }
    if cfg.wants("damon") {
        let kdamonds = root.join("sys/kernel/mm/damon/admin/kdamonds");
        for (kdamond, _) in numbered_dirs(&kdamonds.to_string_lossy(), "") {
            let knob = Knob::Damon { kdamond };
            if current(&knob.path_in(root)).as_deref() == Some("on") {
                plan.change(knob, root, "off");
            }
        }
    }
    plan_rt_cpus(&mut plan, root, cfg);
    if cfg.wants("timer_slack") {
        match cfg.slack_pid {
            Some(pid) => {
                // Each thread's own file is /proc/<tid>/timerslack_ns (none under task/).
                let tasks = root.join(format!("proc/{pid}/task"));
                for (tid, _) in numbered_dirs(&tasks.to_string_lossy(), "") {
                    plan.change(Knob::TimerSlack { tid }, root, "1");
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

/// A PREEMPT_DYNAMIC kernel switches its model at run time: none or voluntary become full.
fn plan_preempt_model(plan: &mut Plan, root: &Path) {
    let knob = Knob::PreemptModel;
    let dynamic =
        read(&root.join("proc/sys/kernel/version")).is_some_and(|v| v.contains("PREEMPT_DYNAMIC"));
    match debugfs::read_in(root, debugfs::PREEMPT) {
        Ok(text) if ["none", "voluntary"].contains(&selected(&text).as_str()) => {
            plan.change(knob, root, "full");
            plan.printed.push((
                knob.id().into(),
                "the run-time switch lasts until the next boot: to keep it, add preempt=full to \
                 the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then \
                 update-grub)"
                    .into(),
            ));
        }
        Err(e) if dynamic && e != DebugfsError::Absent => plan.printed.push((
            knob.id().into(),
            format!(
                "cannot switch it at run time here: {}: cannot read: {e}",
                Knob::PreemptModel.path().display()
            ),
        )),
        _ => {}
    }
}

/// Each real-time CPU's fair server off (runtime 0), where the kernel has one.
fn plan_fair_server(plan: &mut Plan, root: &Path, rt: &[usize]) {
    let mut unreadable = Vec::new();
    for &cpu in rt {
        let knob = Knob::FairServerRuntime { cpu: cpu as u32 };
        match debugfs::read_in(root, &debugfs::fair_server(cpu, "runtime")) {
            Ok(_) => plan.change(knob, root, "0"),
            Err(DebugfsError::Absent) => {}
            Err(e) => unreadable.push((knob, e)),
        }
    }
    let release = read(&root.join("proc/sys/kernel/osrelease")).unwrap_or_default();
    if let Some((_, e)) = unreadable.first() {
        if crate::check::release_has_fair_server(&release) {
            let paths: Vec<String> = unreadable
                .iter()
                .map(|(k, _)| k.path().display().to_string())
                .collect();
            plan.printed.push((
                "fair_server".into(),
                format!(
                    "cannot apply it here: cannot read: {e}; where debugfs allows it: echo 0 > \
                     {}",
                    paths.join(", ")
                ),
            ));
        }
    }
}

/// What check and tune say of the interrupts (`kept`, by number) that the kernel keeps on
/// the real-time CPUs `rt`: the boot parameter that moves them.
pub(crate) fn kept_irqs_note(kept: &[String], rt: &str) -> String {
    let (named, moved) = match kept.len() {
        1 => (
            format!("IRQ {}", kept[0]),
            "it to the other CPUs where its queue allows",
        ),
        _ => (
            format!("IRQs {}", kept.join(", ")),
            "them to the other CPUs where their queues allow",
        ),
    };
    format!(
        "the kernel places {named} itself (read-only smp_affinity_list): booting with \
         isolcpus=managed_irq,{rt} has the kernel move {moved}"
    )
}

/// Device interrupts that may run on a real-time CPU move to the other CPUs
/// ([`crate::check::irq`], the same count `rtlab check` gives).
fn plan_irq_affinity(plan: &mut Plan, root: &Path, rt: &[usize]) {
    let housekeeping: Vec<usize> = rtlab_sys::affinity::usable_cpus()
        .as_slice()
        .iter()
        .copied()
        .filter(|c| !rt.contains(c))
        .collect();
    if housekeeping.is_empty() {
        plan.printed.push((
            "irq_affinity".into(),
            "every usable CPU is a real-time CPU: no CPU to move interrupts to".into(),
        ));
        return;
    }
    let target = cpu_list(&housekeeping);
    let mut kept = Vec::new();
    for irq in crate::check::irq::device_irqs(root) {
        match (irq.allowed_on(rt), irq.movable) {
            (true, true) => plan.change(Knob::IrqAffinity { irq: irq.irq }, root, target.clone()),
            (true, false) => kept.push(irq.irq.to_string()),
            _ => {}
        }
    }
    let mut notes = Vec::new();
    if !kept.is_empty() {
        // (Written anyway, the kernel would refuse: EPERM, also to root.)
        notes.push(kept_irqs_note(&kept, &cpu_list(rt)));
    }
    if !rtlab_sys::procfs::pids_named("irqbalance").is_empty() {
        notes.push(format!(
            "irqbalance is running and will move interrupts back: set \
             IRQBALANCE_BANNED_CPULIST={} in /etc/default/irqbalance and restart it",
            cpu_list(rt)
        ));
    }
    if !notes.is_empty() {
        plan.printed.push(("irq_affinity".into(), notes.join("; ")));
    }
}

/// The real-time CPUs' governor to performance, their idle states deeper than 10 us off.
fn plan_rt_cpus(plan: &mut Plan, root: &Path, cfg: &TuneConfig) {
    for &cpu in &cfg.rt_cpus {
        let base = root.join(format!("sys/devices/system/cpu/cpu{cpu}"));
        let cpu = cpu as u32;
        if cfg.wants("cpufreq_governor") {
            let avail = read(&base.join("cpufreq/scaling_available_governors")).unwrap_or_default();
            if avail.split_whitespace().any(|g| g == "performance") {
                plan.change(Knob::Governor { cpu }, root, "performance");
            }
        }
        if cfg.wants("c_states") {
            for (state, dir) in numbered_dirs(&format!("{}/cpuidle", base.display()), "state") {
                let latency: u64 = read(&dir.join("latency"))
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0);
                if latency > 10 {
                    plan.change(Knob::IdleState { cpu, state }, root, "1");
                }
            }
        }
    }
}

/// The fixes of `checks` that the plan does not apply, as (id, fix): every warned or failed
/// check's but those the plan changes, and those of fixes left out with `--only`.
pub fn not_applied(
    checks: &[crate::check::Check],
    plan: &Plan,
    cfg: &TuneConfig,
) -> Vec<(String, String)> {
    checks
        .iter()
        .filter(|c| {
            matches!(
                c.status,
                crate::check::Status::Fail | crate::check::Status::Warn
            ) && !c.fix.is_empty()
                && !plan.changes.iter().any(|x| x.id() == c.id)
                && (!TUNABLE.contains(&c.id) || cfg.wants(c.id))
        })
        .map(|c| (c.id.to_string(), c.fix.clone()))
        .collect()
}

/// Writes `value` to the file of `knob` under `root` (one write, as `echo value > path` does),
/// never creating it, never through a link, and on the machine (root `/`) only into the
/// kernel's own settings files.
fn write(knob: &Knob, root: &Path, value: &str) -> Result<(), LabError> {
    if !knob.accepts(value) {
        return Err(LabError::NotAValue {
            value: value.into(),
            setting: knob.id(),
        });
    }
    let on_machine = root == Path::new("/");
    let mut file = rtlab_sys::fs::open_setting(&knob.path_in(root), on_machine)?;
    if !on_machine {
        // A laid-out file on a disk keeps its old tail unless cut (a kernel file replaces).
        file.set_len(0)?;
    }
    file.write_all(format!("{value}\n").as_bytes())
        .map_err(|e| match (knob, e.raw_os_error()) {
            // (The kernel's answer for an interrupt it does not let be moved: EPERM since
            // Linux 6.12, EIO before.)
            (Knob::IrqAffinity { .. }, Some(code)) if code == EPERM || code == EIO => {
                LabError::Setup(format!("{e}: {IRQ_KEPT}"))
            }
            _ => LabError::Os(e),
        })
}

const EPERM: i32 = 1;
const EIO: i32 = 5;
const ESRCH: i32 = 3;

/// `e`, from writing `knob`, says the thread it belongs to has exited (its /proc files gone).
pub(crate) fn is_gone(knob: &Knob, e: &LabError) -> bool {
    let LabError::Os(io) = e else {
        return false;
    };
    matches!(knob, Knob::TimerSlack { .. })
        && (io.kind() == std::io::ErrorKind::NotFound || io.raw_os_error() == Some(ESRCH))
}

/// Why an interrupt's CPUs could not be changed: the kernel refuses it (also to root) for
/// the interrupts it places itself: a multi-queue device's queues (a block device's or a
/// NIC's, virtio's `-req.N`), per-CPU ones, those a driver pinned.
pub const IRQ_KEPT: &str = "the kernel does not let this interrupt be moved at run time: it \
    manages its CPUs, as for a multi-queue device's queues, or the interrupt is per-CPU; for a \
    managed one, booting with isolcpus=managed_irq,CPUS has the kernel move it to the other \
    CPUs where its queue allows, and rtlab tune --export cmdline prints that line";

/// Writes `state` to `file` atomically (a reader sees the old file or the new, never a part).
pub fn save(state: &State, file: &Path) -> Result<(), LabError> {
    let bytes = serde_json::to_vec_pretty(state)?;
    rtlab_sys::fs::write_atomically(file, &bytes)
        .map_err(|e| LabError::io(format!("cannot write {}", file.display()), e))
}

/// Saves `plan` to `file` (which must not exist: it would hold another run's prior values),
/// then applies it; `file` is rewritten with each write's outcome. Returns the state.
pub fn apply(plan: Plan, rt_cpus: &[usize], file: &Path) -> Result<State, LabError> {
    apply_in(plan, rt_cpus, file, Path::new("/"))
}

/// [`apply`] on the files under `root`.
pub fn apply_in(
    plan: Plan,
    rt_cpus: &[usize],
    file: &Path,
    root: &Path,
) -> Result<State, LabError> {
    let mut state = State {
        rtlab_tune_state: STATE_VERSION,
        rt_cpus: rt_cpus.to_vec(),
        changes: plan.changes,
        verifying: false,
    };
    // Every prior value is on disk before the first change.
    save(&state, file)?;
    for c in &mut state.changes {
        match write(&c.knob, root, &c.after) {
            Ok(()) => c.applied = true,
            Err(e) => c.error = Some(e.to_string()),
        }
    }
    save(&state, file)?;
    Ok(state)
}

/// Why a state file was refused (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// It could not be read.
    #[error("cannot read {0}: {1}")]
    Unreadable(PathBuf, String),
    /// Another user could have planted or changed it.
    #[error("{0}: refused: {1} (a state file tells root what to write; only root or the invoking user may have written it)")]
    Untrusted(PathBuf, String),
    /// It is not a tune state file of this version.
    #[error("{0} is not an rtlab tune state file: {1}")]
    NotState(PathBuf, String),
    /// One of its changes is not one tune makes.
    #[error("{0}: refused: change {1} ({2}): {3}")]
    BadChange(PathBuf, usize, String, String),
}

/// Reads a state file, refusing one another user could have written and any change that
/// `apply` could not have made (a path other than its knob's, a value its kind does not take).
pub fn load(file: &Path) -> Result<State, StateError> {
    let f = rtlab_sys::fs::open_trusted(file).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            StateError::Untrusted(file.into(), e.to_string())
        } else {
            StateError::Unreadable(file.into(), e.to_string())
        }
    })?;
    let mut text = String::new();
    f.take(16 << 20)
        .read_to_string(&mut text)
        .map_err(|e| StateError::Unreadable(file.into(), e.to_string()))?;
    parse_state(file, &text, Path::new("/"))
}

/// Parses and checks a state file's text (see [`load`]) for the files under `root`.
pub fn parse_state(file: &Path, text: &str, root: &Path) -> Result<State, StateError> {
    #[derive(Deserialize)]
    struct Version {
        rtlab_tune_state: u32,
    }
    let version: Version =
        serde_json::from_str(text).map_err(|e| StateError::NotState(file.into(), e.to_string()))?;
    if version.rtlab_tune_state != STATE_VERSION {
        return Err(StateError::NotState(
            file.into(),
            format!(
                "state version {} (this rtlab reads {STATE_VERSION}; restore an older file's \
                 values by hand: it lists each file and its prior value)",
                version.rtlab_tune_state
            ),
        ));
    }
    let state: State =
        serde_json::from_str(text).map_err(|e| StateError::NotState(file.into(), e.to_string()))?;
    for (i, c) in state.changes.iter().enumerate() {
        let bad = |why: String| {
            StateError::BadChange(file.into(), i + 1, c.path.display().to_string(), why)
        };
        if c.path != c.knob.path_in(root) {
            return Err(bad(format!(
                "a {} change is made to {}, not to this file",
                c.id(),
                c.knob.path_in(root).display()
            )));
        }
        for value in [&c.before, &c.after] {
            if !c.knob.accepts(value) {
                return Err(bad(format!("'{value}' is not a value of {}", c.id())));
            }
        }
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
    pub error: Option<LabError>,
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
    revert_in(state, Path::new("/"))
}

/// [`revert`] on the files under `root`.
pub fn revert_in(state: &State, root: &Path) -> Vec<Reverted> {
    state
        .changes
        .iter()
        .rev()
        .map(|c| {
            let path = c.knob.path_in(root);
            let error = if current(&path).as_deref() == Some(c.before.as_str()) {
                None
            } else {
                write(&c.knob, root, &c.before).err()
            };
            Reverted {
                change: c.clone(),
                now: current(&path),
                error,
            }
        })
        .collect()
}

pub mod export;
#[cfg(test)]
mod tests;
pub mod verify;
