//! The scheduler's own limits on a real-time thread: the preemption model, RT throttling and,
//! from Linux 6.12, each CPU's fair server.
//!
//! The fair server is a SCHED_DEADLINE reservation per CPU that runs SCHED_OTHER work for its
//! `runtime` in every `period` (by default 50 ms of 1 s) once that work has waited the rest of
//! the period, above every RT thread. It replaced RT throttling on kernels without RT group
//! scheduling (`sched_rt_{runtime,period}_us` then only bound what deadline tasks may
//! reserve); with RT group scheduling both act. Either way `sched_rt_runtime_us = -1` leaves
//! it running: on a 6.18 kernel a SCHED_FIFO spinner beside a SCHED_OTHER busy loop lost a
//! 54 ms stretch every second with the sysctl at 950000 and at -1 alike. Only its runtime
//! (debugfs `sched/fair_server/cpuN/runtime`, 0 turns it off) changes that.

use super::{check, Check, Status};
use rtlab_stats::Nanos;
use rtlab_sys::debugfs::{self, DebugfsError};
use std::path::Path;

/// The first kernel with a fair server.
const FAIR_SERVER_SINCE: (u32, u32) = (6, 12);

/// `(major, minor)` of a kernel release such as `6.18.44-fc`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn this_kernel() -> Option<(u32, u32)> {
    kernel_version(&rtlab_sys::sysinfo::system_facts().kernel)
}

/// The kernel has a fair server (or may have: an unknown version counts as recent).
fn has_fair_server(kernel: Option<(u32, u32)>) -> bool {
    kernel.is_none_or(|v| v >= FAIR_SERVER_SINCE)
}

/// A kernel of this release (`/proc/sys/kernel/osrelease`) has a fair server (or may have).
pub(crate) fn release_has_fair_server(release: &str) -> bool {
    has_fair_server(kernel_version(release))
}

const BOOT_FULL: &str = "add preempt=full to the kernel command line (GRUB_CMDLINE_LINUX in \
                         /etc/default/grub, then update-grub and reboot)";
const RT_KERNEL: &str = "use a PREEMPT_RT kernel (Debian: apt install linux-image-rt-amd64)";

pub(super) fn preempt_model() -> Check {
    preempt_model_from(
        &rtlab_sys::sysinfo::system_facts().preempt_model,
        debugfs::read(debugfs::PREEMPT).map(|_| ()),
    )
}

/// `model` as rtlab's system facts give it (`dynamic(none)`, `full`, `rt`); `switch`: whether
/// the run-time switch in debugfs could be read.
fn preempt_model_from(model: &str, switch: Result<(), DebugfsError>) -> Check {
    let dynamic = model.starts_with("dynamic");
    let preemptible = model.contains("full") || model.contains("lazy");
    let status = if model.contains("rt") {
        Status::Ok
    } else if preemptible {
        Status::Warn
    } else {
        Status::Fail
    };
    let path = debugfs::path_in(Path::new("/"), debugfs::PREEMPT)
        .display()
        .to_string();
    let value = match (&switch, dynamic && status != Status::Ok) {
        (Err(e), true) => format!(
            "{model}, the boot-time choice; the run-time switch {path}: cannot read: {e}, so the \
             model in force now is not known and cannot be switched here"
        ),
        _ => model.to_string(),
    };
    let fix = match (status, dynamic, switch) {
        (Status::Ok, ..) => String::new(),
        (Status::Fail, true, Ok(())) => format!(
            "echo full > {path} switches it now, until the next boot (rtlab tune --only \
             preempt_model does, and --revert switches back); to keep it, {BOOT_FULL}; or \
             {RT_KERNEL}"
        ),
        (Status::Fail, true, Err(_)) => format!(
            "{BOOT_FULL}; where debugfs allows it, echo full > {path} switches it at run time \
             (rtlab tune does); or {RT_KERNEL}"
        ),
        _ => RT_KERNEL.into(),
    };
    check(
        "preempt_model",
        status,
        value,
        "without a preemptible kernel a lower-priority task inside a system call keeps the CPU \
         for up to milliseconds (rtlab --explain names the task that held the CPU)",
        fix,
        100,
    )
}

pub(super) fn rt_throttling() -> Check {
    let read = |name: &str| super::read(format!("/proc/sys/kernel/{name}")).unwrap_or_default();
    let (runtime, period) = (read("sched_rt_runtime_us"), read("sched_rt_period_us"));
    let unlimited = runtime == "-1";
    let why = if has_fair_server(this_kernel()) {
        "real-time threads that run longer than the budget are stopped for the rest of the \
         period, the CPU left idle if nothing else runs: a stall of up to 50 ms (where the kernel \
         has RT group scheduling; from Linux 6.12 the fair server also takes up to 50 ms a \
         second for SCHED_OTHER work, whatever this is set to: see fair_server)"
    } else {
        "real-time threads that run longer than the budget are stopped for the rest of the \
         period: a hard stall of up to 50 ms"
    };
    check(
        "rt_throttling",
        if unlimited { Status::Ok } else { Status::Warn },
        format!("sched_rt_runtime_us={runtime} of {period}"),
        why,
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

pub(super) fn fair_server() -> Check {
    fair_server_in(Path::new("/"), super::rt_cpu(), this_kernel())
}

const FAIR_WHY: &str = "from Linux 6.12 each CPU's fair server runs waiting SCHED_OTHER work for \
     its runtime in every period, above every real-time thread (default 50 ms of 1 s); \
     sched_rt_runtime_us=-1 does not stop it (rtlab noise on a 6.18 kernel: a 54 ms gap every \
     second beside a SCHED_OTHER busy loop, at 950000 and at -1 alike)";

/// The fair server of `cpu` under `root`, on a kernel of version `kernel`.
fn fair_server_in(root: &Path, cpu: usize, kernel: Option<(u32, u32)>) -> Check {
    let setting = |name: &str| debugfs::read_in(root, &debugfs::fair_server(cpu, name));
    let runtime_path = debugfs::path_in(Path::new("/"), &debugfs::fair_server(cpu, "runtime"));
    let ns = |text: &str| text.parse::<u64>().ok().map(Nanos);
    let found = setting("runtime").and_then(|r| Ok((r, setting("period")?)));
    let (status, value, fix) = match found {
        Ok((runtime, period)) => match (ns(&runtime), ns(&period)) {
            (Some(Nanos(0)), _) => (
                Status::Ok,
                format!("CPU {cpu}: runtime 0 (off): SCHED_OTHER work never runs over RT threads there"),
                String::new(),
            ),
            (Some(runtime), Some(period)) => (
                Status::Warn,
                format!("CPU {cpu}: runtime {runtime} of every {period}: waiting SCHED_OTHER work runs that long over RT threads there"),
                format!(
                    "echo 0 > {} (rtlab tune --only fair_server does, and --revert restores it; \
                     nothing then lends the CPU to SCHED_OTHER work: a runaway RT thread starves \
                     it for good, so run RT programs with a watchdog)",
                    runtime_path.display()
                ),
            ),
            _ => (
                Status::Skipped,
                format!("CPU {cpu}: unreadable settings: runtime '{runtime}', period '{period}'"),
                String::new(),
            ),
        },
        Err(_) if !has_fair_server(kernel) => (
            Status::Ok,
            "none: this kernel is older than 6.12 (RT throttling alone lends SCHED_OTHER work \
             CPU time: see rt_throttling)"
                .into(),
            String::new(),
        ),
        Err(DebugfsError::Absent) => (
            Status::Ok,
            "none: this kernel has no fair server".into(),
            String::new(),
        ),
        Err(e) => (
            Status::Skipped,
            format!(
                "cannot read: {e}; so how long waiting SCHED_OTHER work may run over RT threads \
                 on CPU {cpu} is not known (the kernel's default: 50 ms of every 1 s), nor whether \
                 it was turned off"
            ),
            if e == DebugfsError::NotMounted {
                "mount -t debugfs none /sys/kernel/debug, then rtlab check again".into()
            } else {
                String::new()
            },
        ),
    };
    check("fair_server", status, value, FAIR_WHY, fix, 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn laid_out(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(debugfs::MOUNT).join("sched")).unwrap();
        for (rel, text) in files {
            let path = debugfs::path_in(root.path(), rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn kernel_versions_are_read_from_the_release() {
        assert_eq!(kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(kernel_version("5.10.0-28-amd64"), Some((5, 10)));
        assert_eq!(kernel_version("garbage"), None);
        assert!(has_fair_server(Some((6, 12))) && !has_fair_server(Some((6, 11))));
    }

    #[test]
    fn the_fair_server_is_judged_from_its_runtime() {
        let on = laid_out(&[
            ("sched/fair_server/cpu1/runtime", "50000000\n"),
            ("sched/fair_server/cpu1/period", "1000000000\n"),
        ]);
        let c = fair_server_in(on.path(), 1, Some((6, 18)));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.value.contains("50.0 ms of every 1.00 s"), "{c:?}");
        assert!(
            c.fix
                .contains("echo 0 > /sys/kernel/debug/sched/fair_server/cpu1/runtime"),
            "{c:?}"
        );
        let off = laid_out(&[
            ("sched/fair_server/cpu1/runtime", "0\n"),
            ("sched/fair_server/cpu1/period", "1000000000\n"),
        ]);
        let c = fair_server_in(off.path(), 1, Some((6, 18)));
        assert_eq!(c.status, Status::Ok, "{c:?}");
    }

    #[test]
    fn an_unreadable_fair_server_says_why_and_what_is_not_known() {
        let unmounted = tempfile::tempdir().unwrap();
        let c = fair_server_in(unmounted.path(), 1, Some((6, 18)));
        assert_eq!(c.status, Status::Skipped, "{c:?}");
        assert!(
            c.value.starts_with("cannot read: debugfs is not mounted"),
            "{c:?}"
        );
        assert!(c.value.contains("not known"), "{c:?}");
        assert!(c.fix.contains("mount -t debugfs"), "{c:?}");
        // An older kernel has none to read.
        let c = fair_server_in(unmounted.path(), 1, Some((6, 6)));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let without = laid_out(&[]);
        let c = fair_server_in(without.path(), 1, Some((6, 18)));
        assert_eq!(
            (c.status, c.value.as_str()),
            (Status::Ok, "none: this kernel has no fair server")
        );
    }

    #[test]
    fn the_preemption_fix_names_the_run_time_switch_where_there_is_one() {
        let c = preempt_model_from("dynamic(none)", Ok(()));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.fix
                .starts_with("echo full > /sys/kernel/debug/sched/preempt"),
            "{c:?}"
        );
        assert!(c.fix.contains("preempt=full"), "{c:?}");
        let c = preempt_model_from("dynamic(none)", Err(DebugfsError::Denied));
        assert!(
            c.value.contains("cannot read: debugfs denies access") && c.value.contains("not known"),
            "{c:?}"
        );
        assert!(c.fix.starts_with("add preempt=full"), "{c:?}");
        let c = preempt_model_from("dynamic(full)", Ok(()));
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.contains("PREEMPT_RT"), "{c:?}");
        let c = preempt_model_from("none", Err(DebugfsError::Absent));
        assert_eq!((c.status, c.value.as_str()), (Status::Fail, "none"));
        assert_eq!(preempt_model_from("rt", Ok(())).status, Status::Ok);
    }
}
