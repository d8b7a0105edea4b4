//! The tracefs source: a private instance (`instances/rtlab-<pid>`, CLOCK_MONOTONIC
//! timestamps, only the traced CPUs) whose ring buffers the reader consumes raw ([`Pages`]).

use crate::error::TraceError;
use std::path::{Path, PathBuf};

mod pages;
pub(crate) use pages::Pages;
#[cfg(test)]
pub(crate) use pages::PAGES_PER_POLL;

/// Events the explainer enables (category/name); missing ones are listed, not fatal. Each
/// costs the measured CPU a few hundred ns per occurrence on a VM, so only those the
/// attribution uses are on (not `timer/hrtimer_expire_entry` nor `power/cpu_idle`, which
/// would add three events to every wakeup of an idle CPU).
pub(crate) const EVENTS: &[&str] = &[
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
    pub(crate) missing: Vec<crate::error::Missing>,
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
            .join(format!("rtlab-{}", rtlab_sys::tracefs::run_tag()));
        // An instance of a crashed run with our pid cannot exist (pids are unique while
        // alive), but stale ones of dead pids are removed.
        rtlab_sys::tracefs::remove_stale_instances();
        let _ = rtlab_sys::tracefs::remove_stale_uprobes();
        std::fs::create_dir(&dir).map_err(|e| TraceError::io(&dir, e))?;
        let mut inst = Instance {
            dir,
            mounted_here,
            missing: Vec::new(),
        };
        write(&inst.dir.join("trace_clock"), "mono")?;
        write(&inst.dir.join("buffer_size_kb"), &buffer_kb.to_string())?;
        write(&inst.dir.join("tracing_cpumask"), &cpumask_text(cpus))?;
        for (i, ev) in EVENTS.iter().enumerate() {
            let enable = inst.dir.join("events").join(ev).join("enable");
            if write(&enable, "1").is_err() {
                if i == SCHED_SWITCH {
                    return Err(TraceError::Unsupported(
                        "the sched_switch event is unavailable".into(),
                    ));
                }
                inst.missing
                    .push(crate::error::Missing::Event(ev.to_string()));
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
        // The kernel refuses to remove an instance while a reader holds a pipe of it open;
        // the reader is joined before this runs.
        let _ = std::fs::remove_dir(&self.dir);
        rtlab_sys::tracefs::remove_uprobe_group(&uprobe_group());
        if self.mounted_here {
            let _ = rtlab_sys::tracefs::unmount();
        }
    }
}

/// A CPU mask as the kernel reads one: hex, in groups of 32 CPUs separated by commas (it
/// refuses a group of more than eight digits).
fn cpumask_text(cpus: &[usize]) -> String {
    let groups = cpus.iter().max().map_or(1, |&c| c / 32 + 1);
    let mut words = vec![0u32; groups];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    let text: Vec<String> = words.iter().rev().map(|w| format!("{w:08x}")).collect();
    text.join(",")
}

/// The group of this run's uprobe events (a JVM's probes), removed with the instance.
fn uprobe_group() -> String {
    format!("rtlab_{}", rtlab_sys::tracefs::run_tag())
}

/// A register's name in a uprobe event's fetch arguments, by its offset in x86-64's
/// `struct pt_regs` (as a USDT note's argument gives it).
fn register_name(regs_offset: i16) -> Option<&'static str> {
    const NAMES: [&str; 21] = [
        "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si",
        "di", "orig_ax", "ip", "cs", "flags", "sp", "ss",
    ];
    (regs_offset >= 0 && regs_offset % 8 == 0)
        .then(|| NAMES.get(regs_offset as usize / 8).copied())
        .flatten()
}

/// The uprobe event line for `site` of `libjvm`, named `name` in this run's group: a VM
/// operation's name fetched as a string from the process's memory.
fn uprobe_line(
    name: &str,
    libjvm: &Path,
    probe: crate::event::JvmProbe,
    site: &crate::usdt::Site,
) -> String {
    use crate::event::JvmProbe;
    let mut line = format!(
        "p:{}/{name} {}:0x{:x}",
        uprobe_group(),
        libjvm.display(),
        site.offset
    );
    if matches!(probe, JvmProbe::VmopBegin | JvmProbe::VmopEnd) {
        if let Some(crate::usdt::Arg::Register { regs_offset, .. }) = site.args.first() {
            if let Some(r) = register_name(*regs_offset) {
                line.push_str(&format!(" op=+0(%{r}):ustring"));
            }
        }
    }
    line
}

/// Attaches uprobe events at the HotSpot safepoint, VM operation and collection probes of
/// `libjvm`, traced by instance `dir` (as `hotspot_<probe>_<n>` events); returns how many.
/// All or none: a safepoint's begin without its end would hold delays for ever.
/// A uprobe event fires in every process that maps the file: a file of root's only.
pub(crate) fn probe_jvm(
    dir: &Path,
    libjvm: &crate::usdt::Library,
) -> Result<usize, crate::usdt::ProbeError> {
    use crate::event::JvmProbe;
    use crate::usdt::ProbeError;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    if !libjvm.root_owned {
        return Err(ProbeError::NotRoots(libjvm.shown.clone()));
    }
    let sites = libjvm.sites(&JvmProbe::PROVIDERS)?;
    let wanted: Vec<(crate::event::JvmProbe, crate::usdt::Site)> = sites
        .into_iter()
        .filter(|s| s.semaphore == 0)
        .filter_map(|s| {
            // Not a thread's parks and sleeps: they fire at every wait of every Java thread
            // of every JVM of the file, which a uprobe event cannot filter by process.
            let (p, _) = JvmProbe::ALL
                .into_iter()
                .find(|(p, n)| *n == s.name && !p.of_thread())?;
            Some((p, s))
        })
        .collect();
    let stops = [JvmProbe::SafepointBegin, JvmProbe::SafepointEnd];
    if !stops.iter().all(|p| wanted.iter().any(|(w, _)| w == p)) {
        return Err(ProbeError::NoSafepointProbes(libjvm.shown.clone()));
    }
    let group = uprobe_group();
    // Through rtlab's descriptor: the very file the offsets were read from.
    let path = libjvm.kernel_path();
    let mut names = Vec::new();
    for (probe, site) in &wanted {
        let name = format!(
            "hotspot_{}_{}",
            probe.name(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let defined = rtlab_sys::tracefs::define_uprobe(&uprobe_line(&name, &path, *probe, site))
            .map_err(ProbeError::Attach)
            .and_then(|()| {
                let path = dir.join("events").join(&group).join(&name).join("enable");
                std::fs::write(&path, "1").map_err(|error| ProbeError::Enable { path, error })
            });
        if let Err(why) = defined {
            for n in names.iter().chain([&name]) {
                let _ = std::fs::write(dir.join(format!("events/{group}/{n}/enable")), "0");
                let _ = rtlab_sys::tracefs::define_uprobe(&format!("-:{group}/{n}"));
            }
            return Err(why);
        }
        names.push(name);
    }
    Ok(names.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_mask_is_written_in_groups_of_32_cpus() {
        assert_eq!(cpumask_text(&[0]), "00000001");
        assert_eq!(cpumask_text(&[1, 3]), "0000000a");
        assert_eq!(cpumask_text(&[0, 33, 64]), "00000001,00000002,00000001");
        assert_eq!(cpumask_text(&[]), "00000000");
    }

    #[test]
    fn a_vm_operations_name_is_fetched_from_the_register_its_note_gives() {
        assert_eq!(register_name(8), Some("r14"));
        assert_eq!(register_name(80), Some("ax"));
        assert_eq!(register_name(4), None);
        let site = crate::usdt::Site {
            provider: "hotspot".into(),
            name: "vmops__begin".into(),
            offset: 0x129a072,
            semaphore: 0,
            args: vec![crate::usdt::Arg::Register {
                regs_offset: 8,
                size: 8,
            }],
        };
        let line = uprobe_line(
            "hotspot_vmops__begin_3",
            Path::new("/lib/libjvm.so"),
            crate::event::JvmProbe::VmopBegin,
            &site,
        );
        assert_eq!(
            line,
            format!(
                "p:rtlab_{}/hotspot_vmops__begin_3 /lib/libjvm.so:0x129a072 op=+0(%r14):ustring",
                rtlab_sys::tracefs::run_tag()
            )
        );
    }
}
