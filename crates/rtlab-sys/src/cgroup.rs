//! Where this process stands in the cgroup hierarchy, as far as real-time work cares: the
//! CPUs its cpuset allows, the real-time budget of its CPU controller, whether it is a
//! Kubernetes pod's container, and which CPUs irqbalance keeps interrupts off. Read from
//! /proc and /sys only; the parsers are pure so they can be tested on other machines' text.

use std::path::{Path, PathBuf};

/// The cgroup of one controller (v1) or of the unified hierarchy (v2), from
/// `/proc/self/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The v1 path of the `cpu` controller, if it is mounted as v1.
    pub cpu_v1: Option<String>,
    /// The v1 path of the `cpuset` controller, if it is mounted as v1.
    pub cpuset_v1: Option<String>,
    /// The unified (v2) path (`0::/...`), if any.
    pub unified: Option<String>,
}

impl Membership {
    /// Parses `/proc/<pid>/cgroup` (`ID:CONTROLLERS:PATH` lines).
    pub fn parse(text: &str) -> Membership {
        let mut m = Membership {
            cpu_v1: None,
            cpuset_v1: None,
            unified: None,
        };
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                m.unified = Some(path.to_string());
                continue;
            }
            for c in controllers.split(',') {
                match c {
                    "cpu" => m.cpu_v1 = Some(path.to_string()),
                    "cpuset" => m.cpuset_v1 = Some(path.to_string()),
                    _ => {}
                }
            }
        }
        m
    }

    /// This process's membership (empty when /proc/self/cgroup cannot be read).
    pub fn of_self() -> Membership {
        Membership::parse(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default())
    }

    /// The path that names the container: the cpu controller's (v1) or the unified one.
    pub fn path(&self) -> &str {
        self.cpu_v1
            .as_deref()
            .or(self.unified.as_deref())
            .unwrap_or("/")
    }

    /// Whether this process is in the root cgroup (no container).
    pub fn is_root(&self) -> bool {
        self.path() == "/"
    }
}

/// A Kubernetes pod, recognised from a cgroup path (`/kubepods/burstable/pod<uid>/...`,
/// `/kubepods.slice/kubepods-pod<uid>.slice/...`): its QoS class. Only a `guaranteed` pod's
/// containers can get exclusive CPUs from the kubelet's static CPU manager.
pub fn kubernetes_qos(path: &str) -> Option<&'static str> {
    if !path.contains("kubepods") {
        return None;
    }
    Some(if path.contains("besteffort") {
        "besteffort"
    } else if path.contains("burstable") {
        "burstable"
    } else {
        "guaranteed"
    })
}

/// The real-time budget of a v1 `cpu` cgroup: `cpu.rt_runtime_us` (microseconds per
/// `cpu.rt_period_us`; -1 unlimited, 0 none: SCHED_FIFO is refused in it).
pub fn rt_runtime_us(cpu_v1_path: &str) -> Option<i64> {
    let dir = controller_dir("cpu", cpu_v1_path)?;
    std::fs::read_to_string(dir.join("cpu.rt_runtime_us"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The CPUs this process's cpuset allows, as the kernel writes a list (`0-3,8`).
pub fn cpuset_effective(m: &Membership) -> Option<String> {
    let file = match (&m.cpuset_v1, &m.unified) {
        (Some(p), _) => controller_dir("cpuset", p)?.join("cpuset.effective_cpus"),
        (None, Some(p)) => unified_dir(p).join("cpuset.cpus.effective"),
        (None, None) => return None,
    };
    let text = std::fs::read_to_string(file).ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

/// Where a v1 controller's hierarchy of `path` is (`/sys/fs/cgroup/cpu/<path>`, also
/// when mounted joined as `cpu,cpuacct`).
fn controller_dir(controller: &str, path: &str) -> Option<PathBuf> {
    let rel = path.trim_start_matches('/');
    [
        controller.to_string(),
        format!("{controller},cpuacct"),
        format!("cpuacct,{controller}"),
    ]
    .iter()
    .map(|m| Path::new("/sys/fs/cgroup").join(m).join(rel))
    .find(|d| d.is_dir())
}

fn unified_dir(path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    let hybrid = Path::new("/sys/fs/cgroup/unified");
    if hybrid.is_dir() {
        hybrid.join(rel)
    } else {
        Path::new("/sys/fs/cgroup").join(rel)
    }
}

/// The CPUs irqbalance is told to keep interrupts off (`IRQBALANCE_BANNED_CPULIST`, or the
/// older hex mask `IRQBALANCE_BANNED_CPUS`), from its environment or config text
/// (`KEY=VALUE` lines, NUL- or newline-separated, quotes allowed).
pub fn irqbalance_banned(text: &str) -> Option<String> {
    let mut mask = None;
    for entry in text.split(['\n', '\0']) {
        let entry = entry.trim();
        if entry.starts_with('#') {
            continue;
        }
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').trim_matches('\'');
        if value.is_empty() {
            continue;
        }
        match key.trim() {
            "IRQBALANCE_BANNED_CPULIST" => return Some(value.to_string()),
            "IRQBALANCE_BANNED_CPUS" => mask = Some(mask_to_list(value)?),
            _ => {}
        }
    }
    mask
}

/// A hex CPU mask (`0000000c`, or with commas between 32-bit words) as a CPU list (`2-3`).
fn mask_to_list(mask: &str) -> Option<String> {
    let digits: String = mask.chars().filter(|c| *c != ',').collect();
    let mut cpus = Vec::new();
    for (i, c) in digits.chars().rev().enumerate() {
        let nibble = c.to_digit(16)?;
        for bit in 0..4 {
            if nibble & (1 << bit) != 0 {
                cpus.push(i * 4 + bit);
            }
        }
    }
    Some(crate::affinity::CpuList::from(cpus).to_string())
}

/// irqbalance's banned CPUs on this machine: from the running daemon's environment, else
/// from its Debian/Red Hat config file; None when it is not running and not configured.
pub fn irqbalance_banned_here() -> Option<(bool, Option<String>)> {
    let running = crate::procfs::pids_named("irqbalance").into_iter().next();
    if let Some(pid) = running {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let from_env = irqbalance_banned(&String::from_utf8_lossy(&env));
        let from_file = ["/etc/default/irqbalance", "/etc/sysconfig/irqbalance"]
            .iter()
            .find_map(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| irqbalance_banned(&t));
        return Some((true, from_env.or(from_file)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_of_v1_hybrid_and_v2_machines() {
        let hybrid = "9:name=systemd:/\n4:memory:/x\n3:cpuset:/\n2:cpu,cpuacct:/docker/abc\n0::/\n";
        let m = Membership::parse(hybrid);
        assert_eq!(m.cpu_v1.as_deref(), Some("/docker/abc"));
        assert_eq!(m.cpuset_v1.as_deref(), Some("/"));
        assert_eq!(m.path(), "/docker/abc");
        assert!(!m.is_root());
        let v2 = "0::/kubepods.slice/kubepods-pod12.slice/cri-containerd-9.scope\n";
        let m = Membership::parse(v2);
        assert_eq!(m.cpu_v1, None);
        assert_eq!(
            m.path(),
            "/kubepods.slice/kubepods-pod12.slice/cri-containerd-9.scope"
        );
        assert_eq!(kubernetes_qos(m.path()), Some("guaranteed"));
        assert!(Membership::parse("0::/\n").is_root());
        assert!(Membership::parse("").is_root());
    }

    #[test]
    fn kubernetes_qos_classes_from_the_path() {
        assert_eq!(
            kubernetes_qos("/kubepods/burstable/pod1/c"),
            Some("burstable")
        );
        assert_eq!(
            kubernetes_qos("/kubepods.slice/kubepods-besteffort.slice/x"),
            Some("besteffort")
        );
        assert_eq!(kubernetes_qos("/kubepods/pod1/c"), Some("guaranteed"));
        assert_eq!(kubernetes_qos("/system.slice/ssh.service"), None);
    }

    #[test]
    fn irqbalance_banned_cpus_from_a_list_or_a_mask() {
        assert_eq!(
            irqbalance_banned("# x\nIRQBALANCE_BANNED_CPULIST=\"2-3\"\n").as_deref(),
            Some("2-3")
        );
        assert_eq!(
            irqbalance_banned("PATH=/bin\0IRQBALANCE_BANNED_CPUS=0000000c\0").as_deref(),
            Some("2-3")
        );
        assert_eq!(
            irqbalance_banned("IRQBALANCE_BANNED_CPUS=00000001,00000000").as_deref(),
            Some("32")
        );
        assert_eq!(irqbalance_banned("#IRQBALANCE_BANNED_CPULIST=1\n"), None);
        assert_eq!(irqbalance_banned("IRQBALANCE_BANNED_CPUS=zz"), None);
    }
}
