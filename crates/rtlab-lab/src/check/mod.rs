//! `rtlab check`: an audit of the settings that decide worst-case latency on this machine.
//! Each check reads /proc or /sys only (nothing is changed) and gives a status, the value it
//! found, why it matters (with the seed experiment it relates to) and the command that fixes
//! it.

use rtlab_sys::affinity::CpuList;
use std::path::Path;

mod net_stack;
pub use net_stack::net_stack;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Fine for real-time work.
    Ok,
    /// Costs latency; worth fixing.
    Warn,
    /// Rules out bounded latency.
    Fail,
    /// Could not be checked here.
    Skipped,
}

impl Status {
    /// `ok`, `warn`, `fail`, `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skipped => "skipped",
        }
    }
}

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

/// The CPU rtlab suggests for real-time work: the last usable one (CPU 0 takes most
/// housekeeping).
fn rt_cpu() -> usize {
    let cpus = rtlab_sys::affinity::usable_cpus();
    *cpus.as_slice().last().unwrap_or(&0)
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

fn preempt_model() -> Check {
    let model = rtlab_sys::sysinfo::system_facts().preempt_model;
    let (status, fix) = if model.contains("rt") {
        (Status::Ok, String::new())
    } else if model.contains("full") {
        (
            Status::Warn,
            "use a PREEMPT_RT kernel (Debian: apt install linux-image-rt-amd64)".to_string(),
        )
    } else if model.starts_with("dynamic") {
        (
            Status::Fail,
            "add preempt=full to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot), or use a PREEMPT_RT kernel".to_string(),
        )
    } else {
        (
            Status::Fail,
            "use a PREEMPT_RT kernel (Debian: apt install linux-image-rt-amd64)".to_string(),
        )
    };
    check(
        "preempt_model",
        status,
        model,
        "without a preemptible kernel a low-priority task in a system call holds the CPU for milliseconds (seed 000; rtlab --explain shows it as preemption by a lower-priority task)",
        fix,
        100,
    )
}

fn rt_throttling() -> Check {
    let runtime = read("/proc/sys/kernel/sched_rt_runtime_us").unwrap_or_default();
    let period = read("/proc/sys/kernel/sched_rt_period_us").unwrap_or_default();
    let unlimited = runtime == "-1";
    check(
        "rt_throttling",
        if unlimited { Status::Ok } else { Status::Warn },
        format!("sched_rt_runtime_us={runtime} of {period}"),
        "real-time threads that run longer than the budget are stopped for the rest of the period: a hard stall of up to 50 ms",
        if unlimited {
            String::new()
        } else {
            "sysctl -w kernel.sched_rt_runtime_us=-1 (only with a watchdog for runaway RT threads: \
             rtlab runs have one; your own application needs one too, e.g. rtkit's)"
                .into()
        },
        60,
    )
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
        "on a shared CPU every other task, timer tick and RCU callback can delay the RT thread (seed 001 fixed its outliers with processor sets)",
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
    let mut on_rt = Vec::new();
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir("/proc/irq") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.parse::<u32>().is_err() {
                continue;
            }
            // Where it is delivered now, and where it may be: on x86 a new affinity takes
            // effect at the IRQ's next interrupt, so one moved off the RT CPU (allowed set
            // without it) counts as moved even while its effective CPU still lags.
            let allowed = read(e.path().join("smp_affinity_list"));
            let Some(list) = read(e.path().join("effective_affinity_list")).or(allowed.clone())
            else {
                continue;
            };
            let may = |l: &str| {
                rtlab_sys::affinity::CpuList::parse(l)
                    .map(|l| l.as_slice().contains(&cpu))
                    .unwrap_or(false)
            };
            // Only IRQs that have a handler (a directory inside) matter.
            let active = std::fs::read_dir(e.path())
                .map(|d| d.flatten().any(|x| x.path().is_dir()))
                .unwrap_or(false);
            if !active {
                continue;
            }
            total += 1;
            if may(&list) && allowed.as_deref().is_none_or(may) {
                on_rt.push(name);
            }
        }
    }
    if total == 0 {
        return check(
            "irq_affinity",
            Status::Skipped,
            "no readable /proc/irq",
            "device interrupts on the RT CPU preempt the RT thread",
            "",
            50,
        );
    }
    check(
        "irq_affinity",
        if on_rt.is_empty() {
            Status::Ok
        } else {
            Status::Warn
        },
        format!("{} of {total} device IRQs may run on CPU {cpu}", on_rt.len()),
        "device interrupts on the RT CPU preempt the RT thread (seed 001 moved them away: psrset -f)",
        if on_rt.is_empty() {
            String::new()
        } else {
            format!(
                "for i in {}; do echo {} > /proc/irq/$i/smp_affinity_list; done (and stop irqbalance or set IRQBALANCE_BANNED_CPULIST={cpu})",
                on_rt.join(" "),
                others(cpu)
            )
        },
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
        "with THP always, page faults may compact memory for milliseconds (the mmap experiment of seed 000 is the same family)",
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

fn steal_ticks() -> u64 {
    read("/proc/stat")
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(8))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn virtualization(sample: std::time::Duration) -> Check {
    let virt = rtlab_sys::sysinfo::system_facts().virtualized;
    let before = steal_ticks();
    std::thread::sleep(sample);
    let stolen_ms = (steal_ticks() - before) * 10;
    check(
        "virtualization",
        if !virt {
            Status::Ok
        } else if stolen_ms > 0 {
            Status::Fail
        } else {
            Status::Warn
        },
        if virt {
            format!("virtual machine; {stolen_ms} ms stolen by the host in {} ms", sample.as_millis())
        } else {
            "bare metal".into()
        },
        "on a VM the host may not run a vCPU when the RT thread is due: gaps no guest setting removes (rtlab --explain names them hypervisor_gap)",
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
        "SCHED_OTHER threads sleep up to the slack longer than asked: parkNanos(10 us) takes ~60 us (seed 004)",
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
        "rtlab --explain needs tracefs to name the cause of each outlier (seed 002: trace the whole chain of the rare events)",
        if privs.tracefs {
            ""
        } else {
            "run rtlab as root (tracefs is mounted at /sys/kernel/tracing when needed)"
        },
        10,
    )
}

/// Runs every check (about `steal_sample` long: the steal-time sample).
pub fn run_checks(steal_sample: std::time::Duration) -> Vec<Check> {
    vec![
        preempt_model(),
        rt_throttling(),
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
        virtualization(steal_sample),
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
            status: c.status.as_str().to_string(),
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
                status: c.status.as_str().to_string(),
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
        let checks = run_checks(std::time::Duration::from_millis(10));
        assert_eq!(checks.len(), 17);
        let mut ids: Vec<&str> = checks.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 17, "ids are unique");
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
