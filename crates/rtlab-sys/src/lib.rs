//! The only place where rtlab talks to the kernel directly.
//!
//! Every other crate reaches scheduling policy, affinity, memory locking, absolute sleeps,
//! timer slack, `/dev/cpu_dma_latency`, signals and capability probes through this crate.
//! Wrappers retry `EINTR` themselves where that is the right thing to do and return typed
//! errors ([`SysError`]) otherwise.
#![deny(unsafe_code)]

pub mod affinity;
#[allow(unsafe_code)]
pub mod bpf;
pub mod cgroup;
pub mod debugfs;
pub mod dma;
mod error;
pub mod fs;
#[allow(unsafe_code)]
pub mod futex;
pub mod hotspot;
#[allow(unsafe_code)]
pub mod ipc;
#[allow(unsafe_code)]
pub mod mem;
pub mod membarrier;
#[allow(unsafe_code)]
pub mod net;
#[allow(unsafe_code)]
pub mod netns;
pub mod perf;
pub mod probe;
#[allow(unsafe_code)]
pub mod process;
pub mod procfs;
#[allow(unsafe_code)]
pub mod pthread;
#[allow(unsafe_code)]
pub mod robust;
#[allow(unsafe_code)]
pub mod sched;
#[allow(unsafe_code)]
pub mod signal;
pub mod slack;
pub mod sleep;
pub mod sysinfo;
#[allow(unsafe_code)]
pub mod sysv_sem;
pub mod testing;
pub mod time;
#[allow(unsafe_code)]
pub mod tracefs;

pub use error::SysError;
