//! The device interrupts that may run on the real-time CPUs, counted one way for `rtlab check`
//! (how many) and `rtlab tune` (which to move).
//!
//! A device IRQ is a numbered directory under /proc/irq with a handler, i.e. a directory
//! inside it (the kernel names one per action: `virtio0-input`, `eth0`); the others have no
//! device behind them. It may run on a CPU when its allowed set (`smp_affinity_list`) holds
//! that CPU: that is what tune changes and what decides where it goes next. Where it is
//! delivered now (`effective_affinity_list`, one CPU of the allowed set on x86) is shown
//! beside it, but it may move within the allowed set at any time, so it decides nothing.
//!
//! Some interrupts cannot be moved at all: those whose CPUs the kernel manages itself (a
//! multi-queue device's queues, spread over the CPUs when the device starts), per-CPU ones and
//! those a driver pinned. Since Linux 6.12 the kernel makes their `smp_affinity_list`
//! read-only (mode 0444) and refuses a write with EPERM (EIO before); that mode is how they
//! are told apart without writing anything.

use rtlab_sys::affinity::CpuList;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// One device IRQ and where it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIrq {
    /// Its number.
    pub irq: u32,
    /// Where it may run (`smp_affinity_list`).
    pub allowed: CpuList,
    /// Where it is delivered now (`effective_affinity_list`, where the kernel has it).
    pub effective: Option<CpuList>,
    /// Its allowed set may be written (false: the kernel keeps it where it is, its file
    /// read-only).
    pub movable: bool,
}

impl DeviceIrq {
    /// It may run on one of `cpus`.
    pub fn allowed_on(&self, cpus: &[usize]) -> bool {
        self.allowed.as_slice().iter().any(|c| cpus.contains(c))
    }

    /// It is delivered to one of `cpus` now.
    pub fn delivered_on(&self, cpus: &[usize]) -> bool {
        self.effective
            .as_ref()
            .is_some_and(|e| e.as_slice().iter().any(|c| cpus.contains(c)))
    }
}

fn cpu_list(path: &Path) -> Option<CpuList> {
    CpuList::parse(std::fs::read_to_string(path).ok()?.trim()).ok()
}

/// Every device IRQ under `root`/proc/irq, by number.
pub fn device_irqs(root: &Path) -> Vec<DeviceIrq> {
    let mut irqs: Vec<DeviceIrq> = std::fs::read_dir(root.join("proc/irq"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let irq = e.file_name().to_str()?.parse().ok()?;
            let dir = e.path();
            let has_handler = std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .any(|x| x.file_type().is_ok_and(|t| t.is_dir()));
            if !has_handler {
                return None;
            }
            let allowed = dir.join("smp_affinity_list");
            let mode = std::fs::metadata(&allowed).ok()?.permissions().mode();
            Some(DeviceIrq {
                irq,
                allowed: cpu_list(&allowed)?,
                effective: cpu_list(&dir.join("effective_affinity_list")),
                movable: mode & 0o200 != 0,
            })
        })
        .collect();
    irqs.sort_by_key(|i| i.irq);
    irqs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_irqs_with_a_handler_count_and_the_allowed_set_decides() {
        // Regression (check counted 10 of 19 device IRQs on the RT CPU, by where each was
        // delivered, while tune planned to move all 19, by where each may run).
        let root = tempfile::tempdir().unwrap();
        let lay = |irq: &str, allowed: &str, effective: &str, handler: bool| {
            let dir = root.path().join("proc/irq").join(irq);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("smp_affinity_list"), allowed).unwrap();
            std::fs::write(dir.join("effective_affinity_list"), effective).unwrap();
            if handler {
                std::fs::create_dir(dir.join("virtio0-input")).unwrap();
            }
        };
        lay("30", "0-1\n", "0\n", true);
        lay("31", "0-1\n", "1\n", true);
        lay("32", "0\n", "0\n", true);
        lay("0", "0-1\n", "0\n", false);
        // IRQ 31's CPUs are the kernel's (a managed queue's): its file is read-only.
        let fixed = root.path().join("proc/irq/31/smp_affinity_list");
        std::fs::set_permissions(&fixed, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::fs::write(root.path().join("proc/irq/default_smp_affinity"), "3").unwrap();
        let irqs = device_irqs(root.path());
        assert_eq!(irqs.iter().map(|i| i.irq).collect::<Vec<_>>(), [30, 31, 32]);
        let on_rt: Vec<u32> = irqs
            .iter()
            .filter(|i| i.allowed_on(&[1]))
            .map(|i| i.irq)
            .collect();
        assert_eq!(
            on_rt,
            [30, 31],
            "IRQ 30 may run on CPU 1 though delivered to 0"
        );
        assert_eq!(irqs.iter().filter(|i| i.delivered_on(&[1])).count(), 1);
        let movable: Vec<u32> = irqs.iter().filter(|i| i.movable).map(|i| i.irq).collect();
        assert_eq!(movable, [30, 32]);
    }
}
