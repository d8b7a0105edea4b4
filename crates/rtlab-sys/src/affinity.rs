//! CPU lists (`0`, `0,1`, `0-3`) and thread affinity.

use crate::SysError;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use std::fmt;

/// An ordered set of CPU numbers, as written on the command line (`0-3,6`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Parses the kernel's list syntax: comma-separated numbers and inclusive ranges.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let mut cpus = Vec::new();
        let text = text.trim();
        if text.is_empty() {
            return Err(CpuListError::Empty);
        }
        for part in text.split(',') {
            let part = part.trim();
            let parse_one = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .map_err(|_| CpuListError::NotANumber(s.to_string()))
            };
            match part.split_once('-') {
                // "-1", "1-": a range needs both ends; said of the whole part.
                Some((lo, hi)) if lo.trim().is_empty() || hi.trim().is_empty() => {
                    return Err(CpuListError::NotANumber(part.to_string()));
                }
                Some((lo, hi)) => {
                    let (lo, hi) = (parse_one(lo)?, parse_one(hi)?);
                    if lo > hi {
                        return Err(CpuListError::Backwards(part.to_string()));
                    }
                    if hi - lo > 65_536 {
                        return Err(CpuListError::TooLarge(part.to_string()));
                    }
                    cpus.extend(lo..=hi);
                }
                None => cpus.push(parse_one(part)?),
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }

    /// The CPUs in ascending order.
    pub fn as_slice(&self) -> &[usize] {
        &self.0
    }

    /// Number of CPUs in the list.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when the list names no CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Fails with a message naming the first CPU that is not in `available`.
    pub fn check_within(&self, available: &CpuList) -> Result<(), CpuListError> {
        match self.0.iter().find(|c| !available.0.contains(c)) {
            Some(&cpu) => Err(CpuListError::Unavailable {
                cpu,
                available: available.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// Why a CPU list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuListError {
    /// Nothing was written.
    #[error("empty CPU list")]
    Empty,
    /// A part that is not a number.
    #[error("'{0}' is not a CPU number (expected e.g. 0, 0,1 or 0-3)")]
    NotANumber(String),
    /// A range whose end is below its start.
    #[error("range '{0}' runs backwards")]
    Backwards(String),
    /// A range of more CPUs than any machine has.
    #[error("range '{0}' is too large")]
    TooLarge(String),
    /// A CPU this process may not use.
    #[error("CPU {cpu} is not available (usable CPUs on this machine: {available})")]
    Unavailable {
        /// The first one.
        cpu: usize,
        /// Those it may use.
        available: CpuList,
    },
}

impl From<Vec<usize>> for CpuList {
    fn from(mut cpus: Vec<usize>) -> Self {
        cpus.sort_unstable();
        cpus.dedup();
        CpuList(cpus)
    }
}

impl fmt::Display for CpuList {
    /// Writes the compact form: consecutive CPUs are folded into ranges (`0-3,6`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// A set of CPU numbers as a bitmap of any width (CPUs 64 and above included): what a
/// tracer follows and what it traced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuMask(Vec<u64>);

impl CpuMask {
    /// The set of `cpus`.
    pub fn of(cpus: &[usize]) -> CpuMask {
        let mut m = CpuMask::default();
        for &c in cpus {
            m.insert(c);
        }
        m
    }

    /// Every CPU the kernel's affinity masks can name (`CPU_SETSIZE`).
    pub fn every() -> CpuMask {
        CpuMask(vec![u64::MAX; CpuSet::MAX_CPU.div_ceil(64)])
    }

    /// Adds `cpu`.
    pub fn insert(&mut self, cpu: usize) {
        let word = cpu / 64;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (cpu % 64);
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        self.0
            .get(cpu / 64)
            .is_some_and(|w| w >> (cpu % 64) & 1 == 1)
    }

    /// True when no CPU is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The CPUs in both sets.
    pub fn and(&self, other: &CpuMask) -> CpuMask {
        let mut m = CpuMask(self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect());
        m.trim();
        m
    }

    /// Adds every CPU of `other`.
    pub fn union_with(&mut self, other: &CpuMask) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w >> b & 1 == 1)
                .map(move |b| i * 64 + b)
        })
    }

    /// Drops high words with no CPU, so equal sets compare equal.
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
}

impl From<&CpuMask> for CpuList {
    fn from(m: &CpuMask) -> CpuList {
        CpuList(m.iter().collect())
    }
}

/// The CPUs online (`/sys/devices/system/cpu/online`), whatever this process's affinity; its
/// usable CPUs where that cannot be read.
pub fn online_cpus() -> CpuList {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| CpuList::parse(s.trim()).ok())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(usable_cpus)
}

/// The CPU rtlab suggests for real-time work where none is named (`rtlab check`, `rtlab
/// tune`): the last CPU the kernel isolates (`isolcpus=`) that this process's cpuset allows,
/// else the last CPU its cpuset allows (a container's), else the last one online. Not this
/// process's own affinity: a shell kept off the real-time CPUs (tuned's `isolated_cores`
/// moves every task off them) would make rtlab judge a housekeeping CPU instead.
pub fn suggested_rt_cpu() -> usize {
    let allowed = crate::cgroup::cpuset_effective(&crate::cgroup::Membership::of_self())
        .and_then(|s| CpuList::parse(&s).ok())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(online_cpus);
    let isolated = std::fs::read_to_string("/sys/devices/system/cpu/isolated")
        .ok()
        .and_then(|s| CpuList::parse(s.trim()).ok())
        .unwrap_or_default();
    let isolated_allowed = (isolated.as_slice().iter().copied())
        .rev()
        .find(|c| allowed.as_slice().contains(c));
    isolated_allowed
        .or_else(|| allowed.as_slice().last().copied())
        .unwrap_or(0)
}

/// The CPUs this process may run on (its affinity mask, which already excludes offline CPUs).
pub fn usable_cpus() -> CpuList {
    match sched_getaffinity(None) {
        Ok(set) => CpuList((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()),
        Err(_) => {
            CpuList((0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect())
        }
    }
}

/// The CPUs thread `tid` may run on (its affinity mask), or None when it is gone or cannot
/// be read.
///
/// C: `sched_getaffinity(tid, sizeof(cpu_set_t), &set)`.
pub fn thread_cpus(tid: i32) -> Option<CpuList> {
    let pid = rustix::process::Pid::from_raw(tid)?;
    let set = sched_getaffinity(Some(pid)).ok()?;
    Some(CpuList(
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
    ))
}

/// Pins the calling thread to `cpus`.
///
/// C: `sched_setaffinity(0, sizeof(cpu_set_t), &set)`; pid 0 is the calling thread.
pub fn set_current_thread_affinity(cpus: &CpuList) -> Result<(), SysError> {
    set_thread_affinity(0, cpus)
}

/// [`set_current_thread_affinity`] for thread `tid` (0: the calling thread): `taskset -p`.
pub fn set_thread_affinity(tid: i32, cpus: &CpuList) -> Result<(), SysError> {
    let mut set = CpuSet::new();
    for &cpu in cpus.as_slice() {
        if cpu >= CpuSet::MAX_CPU {
            return Err(SysError::Invalid {
                what: format!("sched_setaffinity(CPU {cpu})"),
            });
        }
        set.set(cpu);
    }
    let pid = rustix::process::Pid::from_raw(tid);
    sched_setaffinity(pid, &set)
        .map_err(|e| SysError::from_errno(format!("sched_setaffinity({tid}, {cpus})"), e))
}

/// The CPU the calling thread is running on right now.
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(CpuList::parse("0").unwrap().as_slice(), &[0]);
        assert_eq!(CpuList::parse("0,1").unwrap().as_slice(), &[0, 1]);
        assert_eq!(
            CpuList::parse("0-3,6").unwrap().as_slice(),
            &[0, 1, 2, 3, 6]
        );
        assert_eq!(CpuList::parse("3,1,1").unwrap().as_slice(), &[1, 3]);
        assert_eq!(CpuList::parse("0-3,6").unwrap().to_string(), "0-3,6");
        for bad in ["", "a", "3-1", "-1", "1,,2", "0-999999999"] {
            assert!(CpuList::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        // An open range is named whole (it was "'' is not a CPU number").
        for open in ["-1", "1-"] {
            let said = CpuList::parse(open).unwrap_err().to_string();
            assert!(said.starts_with(&format!("'{open}' is not")), "{said}");
        }
    }

    #[test]
    fn check_within_names_the_missing_cpu() {
        let avail = CpuList::parse("0-1").unwrap();
        let err = CpuList::parse("4096")
            .unwrap()
            .check_within(&avail)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "CPU 4096 is not available (usable CPUs on this machine: 0-1)"
        );
        assert!(CpuList::parse("1").unwrap().check_within(&avail).is_ok());
    }

    #[test]
    fn masks_hold_cpus_of_any_number() {
        let m = CpuMask::of(&[0, 63, 64, 130]);
        for c in [0, 63, 64, 130] {
            assert!(m.contains(c), "{c}");
        }
        for c in [1, 62, 65, 129, 131, 100_000] {
            assert!(!m.contains(c), "{c}");
        }
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 63, 64, 130]);
        assert_eq!(CpuList::from(&m).to_string(), "0,63-64,130");
        // The intersection drops empty high words: equal sets compare equal.
        let low = m.and(&CpuMask::of(&[0, 1, 63]));
        assert_eq!(low, CpuMask::of(&[0, 63]));
        assert!(m.and(&CpuMask::of(&[5])).is_empty());
        assert_eq!(m.and(&CpuMask::every()), m);
        let mut u = CpuMask::of(&[3]);
        u.union_with(&CpuMask::of(&[200]));
        assert_eq!(u.iter().collect::<Vec<_>>(), [3, 200]);
        assert!(CpuMask::default().is_empty() && !u.is_empty());
    }

    #[test]
    fn pinning_moves_the_thread() {
        let cpus = usable_cpus();
        let last = *cpus.as_slice().last().unwrap();
        std::thread::spawn(move || {
            set_current_thread_affinity(&CpuList::from(vec![last])).unwrap();
            assert_eq!(current_cpu(), last);
            // Read back by TID, as another process's threads are.
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            assert_eq!(thread_cpus(tid).unwrap().as_slice(), &[last]);
        })
        .join()
        .unwrap();
        assert_eq!(thread_cpus(i32::MAX), None);
    }
}
