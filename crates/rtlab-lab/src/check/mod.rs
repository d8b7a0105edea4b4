//! `rtlab check`: an audit of the settings that decide worst-case latency on this machine.
//! Each check reads /proc, /sys or debugfs only (nothing is changed) and gives a status, the
//! value it found, why it matters and the command that fixes it. Each reads the machine's
//! state as it is, never a short sample of something that comes and goes, so back-to-back
//! runs on an unchanged machine give the same verdicts (a CI gate must not flip).

use rtlab_sys::affinity::CpuList;
use std::path::Path;

pub mod irq;
mod net_stack;
mod sched;
pub use net_stack::net_stack;
pub(crate) use sched::release_has_fair_server;

/// How a check came out (the result document's type).
pub use rtlab_stats::details::CheckStatus as Status;

/// One audited setting.
#[derive(Debug, Clone)]
pub struct Check {
    /// Stable identifier (`preempt_model`).
    pub id: &'static str,
    /// Status.
    pub status: Status,
    /// What was found.
    pub value: String,
    /// Why it matters, one line.
    pub why: String,
    /// The command that fixes it (empty when nothing to do).
    pub fix: String,
    /// Weight for ordering the advice: larger matters more.
    pub weight: u32,
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn cmdline() -> String {
    read("/proc/cmdline").unwrap_or_default()
}

fn cmdline_value(key: &str) -> Option<String> {
    cmdline()
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// The CPU rtlab suggests for real-time work: the last isolated one, else the last one
/// (CPU 0 takes most housekeeping); see [`rtlab_sys::affinity::suggested_rt_cpu`].
fn rt_cpu() -> usize {
    rtlab_sys::affinity::suggested_rt_cpu()
}

fn check(
    id: &'static str,
    status: Status,
    value: impl Into<String>,
    why: &str,
    fix: impl Into<String>,
    weight: u32,
) -> Check {
    Check {
        id,
        status,
        value: value.into(),
        why: why.into(),
        fix: fix.into(),
        weight,
    }
}

fn isolation() -> Check {
    let isolated = read("/sys/devices/system/cpu/isolated").unwrap_or_default();
    let nohz = read("/sys/devices/system/cpu/nohz_full").unwrap_or_default();
    let rcu = cmdline_value("rcu_nocbs").unwrap_or_default();
    let value = format!(
        "isolated=[{isolated}] nohz_full=[{nohz}] rcu_nocbs=[{rcu}]",
        nohz = if nohz == "(null)" { "" } else { nohz.as_str() }
    );
    let ok = !isolated.is_empty();
    let cpu = rt_cpu();
    check(
        "cpu_isolation",
        if ok { Status::Ok } else { Status::Warn },
        value,
        "on a shared CPU every other task, timer tick and RCU callback can delay the RT thread (a 2009 proof of concept of real-time Java on Solaris removed its outliers by reserving CPUs for the application)",
        if ok {
            String::new()
        } else {
            format!("boot with isolcpus={cpu} nohz_full={cpu} rcu_nocbs={cpu} and run the RT threads there (rtlab exec --cpus {cpu} -- CMD)")
        },
        80,
    )
}

fn irq_affinity() -> Check {
    let cpu = rt_cpu();
    let irqs = irq::device_irqs(Path::new("/"));
    let why = "device interrupts on the RT CPU preempt the RT thread (a 2009 proof of concept \
               of real-time Java on Solaris removed its outliers by moving every interrupt off \
               the RT threads' CPUs)";
    if irqs.is_empty() {
        return check(
            "irq_affinity",
            Status::Skipped,
            "no readable /proc/irq",
            why,
            "",
            50,
        );
    }
    let on_rt: Vec<&irq::DeviceIrq> = irqs.iter().filter(|i| i.allowed_on(&[cpu])).collect();
    let numbers = |movable: bool| -> Vec<String> {
        (on_rt.iter())
            .filter(|i| i.movable == movable)
            .map(|i| i.irq.to_string())
            .collect()
    };
    let (movable, kept) = (numbers(true), numbers(false));
    let delivered = irqs.iter().filter(|i| i.delivered_on(&[cpu])).count();
    let mut fix = Vec::new();
    if !movable.is_empty() {
        fix.push(format!(
            "for i in {}; do echo {} > /proc/irq/$i/smp_affinity_list; done (rtlab tune \
             --only irq_affinity does; and stop irqbalance or set \
             IRQBALANCE_BANNED_CPULIST={cpu})",
            movable.join(" "),
            others(cpu)
        ));
    }
    if !kept.is_empty() {
        fix.push(crate::tune::kept_irqs_note(&kept, &cpu.to_string()));
    }
    check(
        "irq_affinity",
        if on_rt.is_empty() {
            Status::Ok
        } else {
            Status::Warn
        },
        format!(
            "{} of {} device IRQs (those with a handler in /proc/irq) may run on CPU {cpu} \
             (smp_affinity_list){}; {delivered} are delivered there now \
             (effective_affinity_list)",
            on_rt.len(),
            irqs.len(),
            match kept.len() {
                0 => String::new(),
                n => format!(
                    ", {n} of them kept there by the kernel, which manages their CPUs (a \
                     multi-queue device's queues; their file is read-only)"
                ),
            }
        ),
        why,
        fix.join("; "),
        70,
    )
}

fn others(cpu: usize) -> String {
    let rest: Vec<String> = rtlab_sys::affinity::usable_cpus()
        .as_slice()
        .iter()
        .filter(|&&c| c != cpu)
        .map(|c| c.to_string())
        .collect();
    if rest.is_empty() {
        "0".into()
    } else {
        rest.join(",")
    }
}

fn governor() -> Check {
    let govs: Vec<String> = (0..rtlab_sys::sysinfo::system_facts().cpus)
        .filter_map(|c| {
            read(format!(
                "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
            ))
        })
        .collect();
    if govs.is_empty() {
        return check(
            "cpufreq_governor",
            Status::Skipped,
            "no cpufreq (a VM, or fixed frequency)",
            "a CPU that slows down when idle takes time to speed up for the RT thread",
            "",
            40,
        );
    }
    let all_perf = govs.iter().all(|g| g == "performance");
    let mut uniq = govs.clone();
    uniq.sort();
    uniq.dedup();
    check(
        "cpufreq_governor",
        if all_perf { Status::Ok } else { Status::Warn },
        uniq.join(","),
        "a CPU that slows down when idle takes time to speed up for the RT thread",
        if all_perf {
            String::new()
        } else {
            "cpupower frequency-set -g performance (or echo performance > /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)".into()
        },
        40,
    )
}

fn cstates() -> Check {
    let deep: Vec<String> = rtlab_sys::sysinfo::idle_states()
        .into_iter()
        .filter(|s| s.latency_us > 10 && !s.disabled)
        .map(|s| format!("{} ({} us)", s.name, s.latency_us))
        .collect();
    let driver =
        read("/sys/devices/system/cpu/cpuidle/current_driver").unwrap_or_else(|| "none".into());
    check(
        "c_states",
        if deep.is_empty() {
            Status::Ok
        } else {
            Status::Warn
        },
        if deep.is_empty() {
            format!("driver {driver}: no state deeper than 10 us exit latency")
        } else {
            format!("driver {driver}: {}", deep.join(", "))
        },
        "leaving a deep C-state adds its exit latency to every wakeup of an idle CPU",
        if deep.is_empty() {
            String::new()
        } else {
            "hold /dev/cpu_dma_latency at 0 while the RT program runs (rtlab does during its runs), or boot with processor.max_cstate=1 intel_idle.max_cstate=0".into()
        },
        45,
    )
}

fn thp() -> Check {
    let v = read("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let current = v
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
        .unwrap_or_else(|| "unknown".into());
    check(
        "transparent_hugepages",
        if current == "always" { Status::Warn } else { Status::Ok },
        current.clone(),
        "with THP always, page faults may compact memory for milliseconds (memory management in other threads delaying an RT thread: rtlab mmap measures the same family)",
        if current == "always" {
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"
        } else {
            ""
        },
        30,
    )
}

/// DAMON's monitoring threads (`kdamond.N`): kernel threads that sample page accesses on any
/// CPU; on a non-preemptible kernel each pass holds its CPU (rtlab's explainer saw 139-225 us
/// on this project's test VM, the worst wakeups of `rtlab mmap`).
fn damon() -> Check {
    let running: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| read(e.path().join("comm")))
        .map(|c| c.trim().to_string())
        .filter(|c| c.starts_with("kdamond"))
        .collect();
    let admin = "/sys/kernel/mm/damon/admin/kdamonds";
    let on_by_sysfs: Vec<String> = std::fs::read_dir(admin)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| read(e.path().join("state")).is_some_and(|s| s.trim() == "on"))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let fix = if running.is_empty() {
        String::new()
    } else if !on_by_sysfs.is_empty() {
        on_by_sysfs
            .iter()
            .map(|k| format!("echo off > {admin}/{k}/state"))
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        "stop the DAMON user (e.g. echo N > /sys/module/damon_reclaim/parameters/enabled, or the \
         same for damon_lru_sort)"
            .into()
    };
    check(
        "damon",
        if running.is_empty() {
            Status::Ok
        } else {
            Status::Warn
        },
        if running.is_empty() {
            "not running".to_string()
        } else {
            format!("{} running", running.join(", "))
        },
        "DAMON's kdamond threads sample memory accesses on any CPU; on a non-preemptible kernel \
         each pass holds the CPU for 100+ us (rtlab mmap --explain names them)",
        fix,
        30,
    )
}

fn swap() -> Check {
    let swaps = read("/proc/swaps").unwrap_or_default();
    let active = swaps.lines().skip(1).count();
    check(
        "swap",
        if active == 0 {
            Status::Ok
        } else {
            Status::Warn
        },
        format!("{active} swap area(s)"),
        "a swapped-out page of the RT process costs a disk read; lock its memory (mlockall)",
        if active == 0 {
            ""
        } else {
            "mlockall(MCL_CURRENT|MCL_FUTURE) in the RT process (rtlab exec --mlock -- CMD), or swapoff -a"
        },
        20,
    )
}

fn limits() -> Check {
    let root = rtlab_sys::process::effective_uid() == 0;
    let fmt = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let (memlock, rtprio) = rtlab_sys::process::rt_limits();
    let ok = root || (memlock.is_none() && rtprio.unwrap_or(0) >= 90);
    check(
        "rlimits",
        if ok { Status::Ok } else { Status::Warn },
        format!(
            "RLIMIT_MEMLOCK={} RLIMIT_RTPRIO={}{}",
            fmt(memlock),
            fmt(rtprio),
            if root { " (root: not needed)" } else { "" }
        ),
        "without them a non-root RT program cannot use SCHED_FIFO or lock its memory",
        if ok {
            String::new()
        } else {
            "add '@realtime - rtprio 95' and '@realtime - memlock unlimited' to /etc/security/limits.d/rt.conf and put the user in group realtime".into()
        },
        35,
    )
}

/// The container this runs in, as real-time work sees it: its cpuset against the isolated
/// CPUs, its real-time budget, a Kubernetes pod's QoS class, and irqbalance's banned CPUs.
fn cgroup() -> Check {
    use rtlab_sys::cgroup::{self, Membership};
    let m = Membership::of_self();
    let cpuset = cgroup::cpuset_effective(&m);
    let budget = m.cpu_v1.as_deref().and_then(cgroup::rt_runtime_us);
    let isolated = read("/sys/devices/system/cpu/isolated").unwrap_or_default();
    let isolated = CpuList::parse(&isolated).unwrap_or_else(|_| CpuList::from(vec![]));
    let allowed = cpuset
        .as_deref()
        .and_then(|c| CpuList::parse(c).ok())
        .unwrap_or_else(rtlab_sys::affinity::usable_cpus);
    let pod = cgroup::kubernetes_qos(m.path());
    let irqbalance = cgroup::irqbalance_banned_here();
    let version = if m.cpu_v1.is_some() { "v1" } else { "v2" };
    let value = format!(
        "cgroup {} ({version}{}), cpuset {}, real-time budget {}, irqbalance {}",
        m.path(),
        pod.map(|q| format!(", Kubernetes pod, QoS {q}"))
            .unwrap_or_default(),
        cpuset.as_deref().unwrap_or("not limited"),
        match budget {
            Some(-1) => "unlimited".to_string(),
            Some(us) => format!("{us} us per period"),
            None if m.cpu_v1.is_none() => "none (cgroup v2 has no RT budget)".to_string(),
            None => "not readable".to_string(),
        },
        match &irqbalance {
            None => "not running".to_string(),
            Some((_, Some(banned))) => format!("running, banned CPUs {banned}"),
            Some((_, None)) => "running, no CPUs banned".to_string(),
        }
    );
    let reach: Vec<usize> = isolated
        .as_slice()
        .iter()
        .copied()
        .filter(|c| allowed.as_slice().contains(c))
        .collect();
    let (status, why, fix) = if budget == Some(0) {
        (
            Status::Fail,
            "SCHED_FIFO and SCHED_RR are refused in a cgroup without a real-time budget"
                .to_string(),
            format!(
                "echo 950000 > /sys/fs/cgroup/cpu{}/cpu.rt_runtime_us (each parent first), or \
                 run the RT process in the root cgroup",
                m.path().trim_end_matches('/')
            ),
        )
    } else if !isolated.is_empty() && reach.is_empty() {
        (
            Status::Warn,
            format!("the isolated CPUs ({isolated}) are outside this cgroup's cpuset: its RT threads share CPUs with everything else"),
            format!("give the container a cpuset with the isolated CPUs (docker run --cpuset-cpus {isolated}; Kubernetes: a Guaranteed pod with integer CPUs and the static CPU manager policy, reservedSystemCPUs outside {isolated})"),
        )
    } else if matches!(pod, Some(q) if q != "guaranteed") {
        (
            Status::Warn,
            "a Kubernetes pod that is not Guaranteed never gets exclusive CPUs: its RT threads share them with other pods".to_string(),
            "make the pod Guaranteed (requests = limits, integer CPUs) on a node with the static CPU manager policy (--cpu-manager-policy=static)".to_string(),
        )
    } else if let (Some((true, banned)), false) = (&irqbalance, isolated.is_empty()) {
        let covered = banned
            .as_deref()
            .and_then(|b| CpuList::parse(b).ok())
            .is_some_and(|b| isolated.as_slice().iter().all(|c| b.as_slice().contains(c)));
        if covered {
            (Status::Ok, String::new(), String::new())
        } else {
            (
                Status::Warn,
                format!("irqbalance may move device interrupts onto the isolated CPUs ({isolated})"),
                format!("IRQBALANCE_BANNED_CPULIST={isolated} in /etc/default/irqbalance, then systemctl restart irqbalance"),
            )
        }
    } else {
        (Status::Ok, String::new(), String::new())
    };
    check(
        "cgroup",
        status,
        value,
        if why.is_empty() {
            "a container's cpuset, real-time budget and QoS decide whether its RT threads can run as RT, and where"
        } else {
            &why
        },
        fix,
        70,
    )
}

fn clocksource() -> Check {
    let cs = rtlab_sys::sysinfo::system_facts().clocksource;
    let ok = matches!(cs.as_str(), "tsc" | "kvm-clock" | "arch_sys_counter");
    check(
        "clocksource",
        if ok { Status::Ok } else { Status::Warn },
        cs.clone(),
        "a slow clocksource (hpet, acpi_pm) makes every clock read, and every latency measurement, cost microseconds",
        if ok {
            String::new()
        } else {
            "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource (if the TSC is stable)".into()
        },
        25,
    )
}

/// Steal time since boot (a window as long as the machine has run, so back-to-back checks
/// agree; a one-second sample caught the host's rare thefts in some runs and not others), in
/// ms, with the vCPU time it is out of, in s.
fn steal_since_boot() -> (f64, f64) {
    let cpus: Vec<usize> = (0..rtlab_sys::sysinfo::system_facts().cpus).collect();
    let stolen_ms = rtlab_sys::procfs::ProcSnapshot::default()
        .steal_ms_since(&rtlab_sys::procfs::ProcSnapshot::take(), &cpus);
    let uptime_s: f64 = read("/proc/uptime")
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    (stolen_ms, uptime_s * cpus.len() as f64)
}

fn virtualization() -> Check {
    let virt = rtlab_sys::sysinfo::system_facts().virtualized;
    let (stolen_ms, vcpu_s) = steal_since_boot();
    check(
        "virtualization",
        if !virt {
            Status::Ok
        } else if stolen_ms > 0.0 {
            Status::Fail
        } else {
            Status::Warn
        },
        if virt {
            format!(
                "virtual machine; the host took {stolen_ms:.0} ms of {vcpu_s:.0} s of vCPU time \
                 since boot (steal time, {:.3} %)",
                stolen_ms / 10.0 / vcpu_s.max(1e-9)
            )
        } else {
            "bare metal".into()
        },
        "on a VM the host may not run a vCPU when the RT thread is due: gaps no guest setting \
         removes; steal time counts those the host admits to (rtlab --explain names them \
         hypervisor_gap)",
        if virt {
            "pin the vCPUs to dedicated host CPUs (KVM: vcpupin, isolate them on the host, use idle=poll or haltpoll in the guest), or run on bare metal"
        } else {
            ""
        },
        if virt { 90 } else { 0 },
    )
}

fn timer_slack() -> Check {
    let slack = rtlab_sys::slack::current_timer_slack_ns().unwrap_or(50_000);
    check(
        "timer_slack",
        if slack > 1_000 { Status::Warn } else { Status::Ok },
        format!("{slack} ns (inherited by programs started from here)"),
        "SCHED_OTHER threads sleep up to the slack longer than asked: Java's LockSupport.parkNanos(10 us) takes ~60 us (rtlab slack measures it)",
        if slack > 1_000 {
            "start latency-sensitive programs with rtlab exec --slack 1us -- CMD, or change a running one with rtlab slack set --pid PID --all 1us"
        } else {
            ""
        },
        30,
    )
}

fn numa() -> Check {
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(1)
        .max(1);
    check(
        "numa",
        if nodes == 1 { Status::Ok } else { Status::Warn },
        format!("{nodes} node(s)"),
        "memory on a remote node is slower and its balancing migrates pages under the RT thread",
        if nodes == 1 {
            String::new()
        } else {
            "keep the RT process and its memory on one node (numactl --cpunodebind=N --membind=N) and sysctl -w kernel.numa_balancing=0".into()
        },
        15,
    )
}

fn tracing() -> Check {
    let privs = rtlab_sys::probe::probe_privileges();
    let paranoid = read("/proc/sys/kernel/perf_event_paranoid").unwrap_or_else(|| "?".into());
    let stale = rtlab_sys::tracefs::stale_instances();
    if !stale.is_empty() {
        let names: Vec<String> = stale.iter().map(|p| p.display().to_string()).collect();
        return check(
            "tracing",
            Status::Warn,
            format!(
                "{} tracing instance(s) left tracing by a killed rtlab run: {}",
                stale.len(),
                names.join(", ")
            ),
            "a left instance keeps its events on and its buffers allocated, tracing every \
             context switch of its CPUs",
            format!(
                "the next rtlab run removes them; or now: for d in {}; do echo 0 > $d/tracing_on; \
                 rmdir $d; done",
                names.join(" ")
            ),
            10,
        );
    }
    check(
        "tracing",
        if privs.tracefs { Status::Ok } else { Status::Warn },
        format!(
            "tracefs {}, perf_event_paranoid={paranoid}",
            if privs.tracefs { "usable" } else { "not usable" }
        ),
        "rtlab --explain needs tracefs to name the cause of each outlier (rare outliers are caught by tracing every event around each one, not by sampling)",
        if privs.tracefs {
            ""
        } else {
            "run rtlab as root (tracefs is mounted at /sys/kernel/tracing when needed)"
        },
        10,
    )
}

/// Runs every check.
pub fn run_checks() -> Vec<Check> {
    vec![
        sched::preempt_model(),
        sched::rt_throttling(),
        sched::fair_server(),
        isolation(),
        irq_affinity(),
        governor(),
        cstates(),
        thp(),
        damon(),
        swap(),
        limits(),
        cgroup(),
        net_stack(),
        clocksource(),
        virtualization(),
        timer_slack(),
        numa(),
        tracing(),
    ]
}

/// The `n` fixes that matter most here: failures before warnings, by weight.
pub fn top_actions(checks: &[Check], n: usize) -> Vec<&Check> {
    let mut v: Vec<&Check> = checks
        .iter()
        .filter(|c| matches!(c.status, Status::Fail | Status::Warn) && !c.fix.is_empty())
        .collect();
    v.sort_by(|a, b| b.status.cmp(&a.status).then(b.weight.cmp(&a.weight)));
    v.truncate(n);
    v
}

/// The checks as result-document series: `check/<id>`, value 0 ok, 1 warn, 2 fail, -1 skipped.
/// The `n` fixes that matter most, as the result document's `verdict.top_actions`.
pub fn as_top_actions(checks: &[Check], n: usize) -> Vec<rtlab_stats::details::TopAction> {
    top_actions(checks, n)
        .iter()
        .map(|c| rtlab_stats::details::TopAction {
            check: c.id.to_string(),
            status: Some(c.status),
            fix: c.fix.clone(),
        })
        .collect()
}

pub fn as_series(checks: &[Check]) -> Vec<rtlab_stats::result::Series> {
    checks
        .iter()
        .map(|c| {
            let series = rtlab_stats::result::Series::value(
                format!("check/{}", c.id),
                "status",
                rtlab_stats::result::Unit::Count,
                match c.status {
                    Status::Ok => 0.0,
                    Status::Warn => 1.0,
                    Status::Fail => 2.0,
                    Status::Skipped => -1.0,
                },
            );
            rtlab_stats::details::CheckFinding {
                status: Some(c.status),
                value: c.value.clone(),
                fix: c.fix.clone(),
                why: c.why.clone(),
            }
            .into_config_of(series)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_reports_and_actions_are_ordered() {
        let checks = run_checks();
        assert_eq!(checks.len(), 18);
        let mut ids: Vec<&str> = checks.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 18, "ids are unique");
        for c in &checks {
            assert!(!c.value.is_empty() && !c.why.is_empty(), "{c:?}");
            if matches!(c.status, Status::Warn | Status::Fail) {
                assert!(!c.fix.is_empty() || c.id == "irq_affinity", "{c:?}");
            }
        }
        let top = top_actions(&checks, 3);
        assert!(top.len() <= 3);
        for w in top.windows(2) {
            assert!(w[0].status >= w[1].status);
        }
        let series = as_series(&checks);
        assert!(series.iter().all(|s| s.name.starts_with("check/")));
    }
}
