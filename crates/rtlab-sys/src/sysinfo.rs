//! Facts about the machine that a result document records.

use std::io::Read;

/// What `system` in a result document says about the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemFacts {
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPUs online.
    pub cpus: usize,
    /// `none`, `voluntary`, `full`, `lazy`, `rt`, `dynamic(<current>)` or `unknown`.
    pub preempt_model: String,
    /// The current clocksource (`tsc`, `kvm-clock`, ...).
    pub clocksource: String,
    /// True when the CPU reports the `hypervisor` flag.
    pub virtualized: bool,
}

/// Reads all facts. Never fails: what cannot be read is `unknown`.
pub fn system_facts() -> SystemFacts {
    let uname = rustix::system::uname();
    let kernel = uname.release().to_string_lossy().into_owned();
    let version = uname.version().to_string_lossy().into_owned();
    SystemFacts {
        kernel,
        cpus: online_cpus(),
        preempt_model: preempt_model(&version),
        clocksource: read_trimmed(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_else(|| "unknown".into()),
        virtualized: std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| {
                s.lines()
                    .filter(|l| l.starts_with("flags"))
                    .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
            })
            .unwrap_or(false),
    }
}

/// One of CPU 0's idle states (`/sys/devices/system/cpu/cpu0/cpuidle/stateN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleState {
    pub name: String,
    /// Exit latency, microseconds.
    pub latency_us: u64,
    pub disabled: bool,
}

/// CPU 0's idle states, in the driver's order; empty without a cpuidle driver (plain `hlt`).
pub fn idle_states() -> Vec<IdleState> {
    let mut states: Vec<(usize, IdleState)> =
        std::fs::read_dir("/sys/devices/system/cpu/cpu0/cpuidle")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let index = e
                    .file_name()
                    .to_str()?
                    .strip_prefix("state")?
                    .parse()
                    .ok()?;
                let p = e.path();
                let get = |f: &str| read_trimmed(p.join(f).to_str()?);
                Some((
                    index,
                    IdleState {
                        name: get("name").unwrap_or_default(),
                        latency_us: get("latency").and_then(|l| l.parse().ok()).unwrap_or(0),
                        disabled: get("disable").as_deref() == Some("1"),
                    },
                ))
            })
            .collect();
    states.sort_by_key(|s| s.0);
    states.into_iter().map(|s| s.1).collect()
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn online_cpus() -> usize {
    read_trimmed("/sys/devices/system/cpu/online")
        .and_then(|s| crate::affinity::CpuList::parse(&s).ok())
        .map(|l| l.len())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn kernel_config() -> Option<String> {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    if let Ok(text) = std::fs::read_to_string(format!("/boot/config-{release}")) {
        return Some(text);
    }
    let gz = std::fs::read("/proc/config.gz").ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The boot-time default model from the kernel config (`CONFIG_PREEMPT_NONE=y` etc.).
fn config_default_model(config: &str) -> Option<&'static str> {
    [
        ("CONFIG_PREEMPT_RT=y", "rt"),
        ("CONFIG_PREEMPT_LAZY=y", "lazy"),
        ("CONFIG_PREEMPT=y", "full"),
        ("CONFIG_PREEMPT_VOLUNTARY=y", "voluntary"),
        ("CONFIG_PREEMPT_NONE=y", "none"),
    ]
    .into_iter()
    .find(|(line, _)| config.lines().any(|l| l.trim() == *line))
    .map(|(_, m)| m)
}

fn preempt_model(uname_version: &str) -> String {
    let dynamic = uname_version.contains("PREEMPT_DYNAMIC");
    if let Some(current) = crate::debugfs::read(crate::debugfs::PREEMPT)
        .ok()
        .and_then(|t| crate::debugfs::selected(&t).map(str::to_string))
    {
        return if dynamic {
            format!("dynamic({current})")
        } else {
            current
        };
    }
    if uname_version.contains("PREEMPT_RT") {
        return "rt".into();
    }
    if dynamic {
        let from_cmdline = std::fs::read_to_string("/proc/cmdline").ok().and_then(|c| {
            c.split_whitespace()
                .find_map(|w| w.strip_prefix("preempt=").map(str::to_string))
        });
        let current = from_cmdline
            .or_else(|| kernel_config().and_then(|c| config_default_model(&c).map(String::from)))
            .unwrap_or_else(|| "unknown".into());
        return format!("dynamic({current})");
    }
    if uname_version.contains("PREEMPT_LAZY") {
        return "lazy".into();
    }
    if uname_version.split_whitespace().any(|w| w == "PREEMPT") {
        return "full".into();
    }
    kernel_config()
        .and_then(|c| config_default_model(&c).map(String::from))
        .unwrap_or_else(|| "unknown".into())
}

/// `MemTotal` of /proc/meminfo, in bytes.
pub fn total_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_default_is_found() {
        let cfg = "# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_NONE=y\nCONFIG_PREEMPT_DYNAMIC=y\n";
        assert_eq!(config_default_model(cfg), Some("none"));
        assert_eq!(
            config_default_model("CONFIG_PREEMPT_RT=y\nCONFIG_PREEMPT=y"),
            Some("rt")
        );
    }

    #[test]
    fn facts_are_plausible_on_this_machine() {
        let f = system_facts();
        assert!(f.cpus >= 1);
        assert!(!f.kernel.is_empty());
        assert!(!f.preempt_model.is_empty());
    }
}
