//! The tracefs source: a private instance (`instances/rtlab-<pid>`, CLOCK_MONOTONIC
//! timestamps, only the traced CPUs) whose `trace_pipe` the reader consumes as text.

use crate::TraceError;
use std::path::{Path, PathBuf};

/// Events the explainer enables (category/name); missing ones are listed, not fatal. Each
/// costs the measured CPU a few hundred ns per occurrence on a VM, so only those the
/// attribution uses are on (not `timer/hrtimer_expire_entry` nor `power/cpu_idle`, which
/// would add three events to every wakeup of an idle CPU).
const EVENTS: &[&str] = &[
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_migrate_task",
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "irq_vectors/local_timer_entry",
    "irq_vectors/local_timer_exit",
    "irq_vectors/reschedule_entry",
    "irq_vectors/reschedule_exit",
    "irq_vectors/call_function_entry",
    "irq_vectors/call_function_exit",
    "irq_vectors/call_function_single_entry",
    "irq_vectors/call_function_single_exit",
    "irq_vectors/irq_work_entry",
    "irq_vectors/irq_work_exit",
    "irq_vectors/x86_platform_ipi_entry",
    "irq_vectors/x86_platform_ipi_exit",
    "nmi/nmi_handler",
];

/// The one event of [`EVENTS`] the attribution cannot do without.
const SCHED_SWITCH: usize = 0;

/// A private tracefs instance; removed (and tracefs unmounted if rtlab mounted it) on drop.
#[derive(Debug)]
pub(crate) struct Instance {
    pub(crate) dir: PathBuf,
    mounted_here: bool,
    pub(crate) missing: Vec<crate::Missing>,
}

fn write(path: &Path, value: &str) -> Result<(), TraceError> {
    std::fs::write(path, value).map_err(|e| TraceError::io(path, e))
}

impl Instance {
    pub(crate) fn create(cpus: &[usize], buffer_kb: u32) -> Result<Instance, TraceError> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err(TraceError::NotRoot("tracefs is"));
        }
        let mut mounted_here = false;
        let root = match rtlab_sys::probe::tracefs_mount() {
            Some(p) => p.to_path_buf(),
            None => {
                rtlab_sys::tracefs::mount().map_err(|e| TraceError::NoTracefs(e.to_string()))?;
                mounted_here = true;
                PathBuf::from(rtlab_sys::tracefs::MOUNT_POINT)
            }
        };
        let dir = root
            .join("instances")
            .join(format!("rtlab-{}", std::process::id()));
        // An instance of a crashed run with our pid cannot exist (pids are unique while
        // alive), but stale ones of dead pids are removed.
        rtlab_sys::tracefs::remove_stale_instances();
        std::fs::create_dir(&dir).map_err(|e| TraceError::io(&dir, e))?;
        let mut inst = Instance {
            dir,
            mounted_here,
            missing: Vec::new(),
        };
        write(&inst.dir.join("trace_clock"), "mono")?;
        write(&inst.dir.join("buffer_size_kb"), &buffer_kb.to_string())?;
        let mask: u128 = cpus.iter().fold(0, |m, &c| m | (1u128 << c.min(127)));
        write(&inst.dir.join("tracing_cpumask"), &format!("{mask:x}"))?;
        for (i, ev) in EVENTS.iter().enumerate() {
            let enable = inst.dir.join("events").join(ev).join("enable");
            if write(&enable, "1").is_err() {
                if i == SCHED_SWITCH {
                    return Err(TraceError::Unsupported(
                        "the sched_switch event is unavailable".into(),
                    ));
                }
                inst.missing.push(crate::Missing::Event(ev.to_string()));
            }
        }
        write(&inst.dir.join("tracing_on"), "1")?;
        Ok(inst)
    }

    /// Events lost by the kernel ring buffers (overruns and drops), per the per-CPU stats.
    pub(crate) fn lost(&self, cpus: &[usize]) -> u64 {
        cpus.iter()
            .filter_map(|c| {
                std::fs::read_to_string(self.dir.join(format!("per_cpu/cpu{c}/stats"))).ok()
            })
            .map(|stats| {
                stats
                    .lines()
                    .filter(|l| l.starts_with("overrun:") || l.starts_with("dropped events:"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = write(&self.dir.join("tracing_on"), "0");
        let _ = write(&self.dir.join("events/enable"), "0");
        // The kernel refuses to remove an instance while a reader holds trace_pipe open;
        // the reader is joined before this runs.
        let _ = std::fs::remove_dir(&self.dir);
        if self.mounted_here {
            let _ = rtlab_sys::tracefs::unmount();
        }
    }
}
