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

/// A Kubernetes pod's container, recognised from a cgroup path: the pod's UID (as the API
/// server writes it, with dashes) and the container runtime's ID of the container, when the
/// path reaches one (a process of the pod's own cgroup has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeContainer {
    pub pod_uid: String,
    pub container_id: Option<String>,
}

/// The pod and container of a cgroup path, for the kubelet's two cgroup drivers:
///
/// | driver | path |
/// |---|---|
/// | systemd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/cri-containerd-<id>.scope` (also `crio-`, `docker-`) |
/// | cgroupfs | `/kubepods/burstable/pod<uid>/<id>` |
///
/// A guaranteed pod has no QoS level (`kubepods-pod<uid>.slice`, `/kubepods/pod<uid>`); kind
/// and other nested kubelets put `kubelet-` before every slice name. Read from inside a pod
/// (a private cgroup namespace, as a DaemonSet's container has), another pod's path is
/// relative to its own: `/../../kubepods-besteffort-pod<uid>.slice/...`, `/../../burstable/
/// pod<uid>/<id>`, so the pod is found by its UID (a UUID, or a static pod's 32 hex digits),
/// not by `kubepods`. Anything below the container's cgroup (its own sub-cgroups) belongs to
/// that container; CRI-O's `crio-conmon-` scope is the runtime's monitor, not a container.
/// None for a path outside a pod.
pub fn kubernetes_container(path: &str) -> Option<KubeContainer> {
    let mut parts = path.split('/');
    let pod_uid = parts.by_ref().find_map(pod_uid_of)?;
    let container_id = parts.next().and_then(container_id_of);
    Some(KubeContainer {
        pod_uid,
        container_id,
    })
}

/// `kubepods-burstable-pod<uid>.slice` or `pod<uid>`: the UID with dashes.
fn pod_uid_of(part: &str) -> Option<String> {
    let uid = match part.strip_suffix(".slice") {
        Some(slice) => slice.rsplit_once("-pod")?.1,
        None => part.strip_prefix("pod")?,
    };
    let uid = uid.replace('_', "-");
    let digits = uid.chars().filter(char::is_ascii_hexdigit).count();
    let valid = digits == 32 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    valid.then_some(uid)
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope` or a bare `<id>`.
fn container_id_of(part: &str) -> Option<String> {
    let name = part.strip_suffix(".scope").unwrap_or(part);
    if name.starts_with("crio-conmon-") {
        return None;
    }
    let id = ["cri-containerd-", "crio-", "docker-", "containerd-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name);
    let valid = !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit());
    valid.then(|| id.to_string())
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
    fn kubernetes_pod_and_container_from_both_drivers_paths() {
        let uid = "3c5d8f2e-1b7a-4a4e-9c1d-2f6b8e0a7c11";
        let id = "4f1b2c9d0e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c";
        let found = |path: &str| kubernetes_container(path);
        let both = Some(KubeContainer {
            pod_uid: uid.into(),
            container_id: Some(id.into()),
        });
        let systemd_uid = uid.replace('-', "_");
        // The systemd driver, each runtime, each QoS class, and kind's nested kubelet.
        for path in [
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice/cri-containerd-{id}.scope"),
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_uid}.slice/crio-{id}.scope"),
            format!("/kubepods.slice/kubepods-pod{systemd_uid}.slice/docker-{id}.scope"),
            format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{systemd_uid}.slice/cri-containerd-{id}.scope"),
            // A sub-cgroup the container made itself belongs to the container.
            format!("/kubepods.slice/kubepods-pod{systemd_uid}.slice/cri-containerd-{id}.scope/init.scope"),
            // The cgroupfs driver.
            format!("/kubepods/burstable/pod{uid}/{id}"),
            format!("/kubepods/pod{uid}/{id}"),
            // Seen from another pod's cgroup namespace (rtlab in a DaemonSet): relative.
            format!("/../../kubepods-burstable-pod{systemd_uid}.slice/cri-containerd-{id}.scope"),
            format!("/../../burstable/pod{uid}/{id}"),
        ] {
            assert_eq!(found(&path), both, "{path}");
        }
        // The pod's own cgroup, and CRI-O's monitor beside the container: a pod, no container.
        let pod_only = Some(KubeContainer {
            pod_uid: uid.into(),
            container_id: None,
        });
        assert_eq!(found(&format!("/kubepods/besteffort/pod{uid}")), pod_only);
        // A static pod's UID: the hash of its manifest, 32 hex digits without dashes.
        let static_uid = "0f3c5d8e2a1b4c6d9e7f8a0b1c2d3e4f";
        assert_eq!(
            found(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{static_uid}.slice/cri-containerd-{id}.scope")),
            Some(KubeContainer {
                pod_uid: static_uid.into(),
                container_id: Some(id.into()),
            })
        );
        assert_eq!(
            found(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice/crio-conmon-{id}.scope")),
            pod_only
        );
        // Not a pod: the QoS slices alone, other services, containers outside Kubernetes.
        for path in [
            "/kubepods.slice/kubepods-burstable.slice",
            "/kubepods/burstable",
            "/system.slice/containerd.service",
            &format!("/system.slice/docker-{id}.scope"),
            "/user.slice/user-1000.slice/session-3.scope",
            // Named like a pod, but no UID.
            "/pods/pod1/c",
            "/system.slice/ipod-sync.slice/x",
            "/",
            "",
            "(several)",
        ] {
            assert_eq!(found(path), None, "{path}");
        }
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
