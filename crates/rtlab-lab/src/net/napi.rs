//! Who processes the packets the host end of the veth pair receives (`--napi`), the network
//! stack's own priority inversion (seed 002's squeue workers): received packets are handled
//! in NET_RX softirq (in `ksoftirqd/N` at SCHED_OTHER when deferred) or, with threaded NAPI,
//! by a `napi/<dev>-<id>` kernel thread, SCHED_OTHER unless raised. An RT receiver above a
//! real-time hog then waits for its own packets while the hog keeps that thread off its CPU.

use crate::LabError;
use std::str::FromStr;

/// How the host end of the veth pair receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NapiMode {
    /// As created: no NAPI; a packet the peer sends is queued on the sending CPU's backlog
    /// and processed in NET_RX softirq there, at the end of the peer's own send.
    Backlog,
    /// GRO on, which gives a veth NAPI, polled in NET_RX softirq.
    Softirq,
    /// Threaded NAPI: a kernel thread polls it, SCHED_OTHER (None) or SCHED_FIFO at this
    /// priority (the fix: above every hog).
    Threaded(Option<u32>),
}

impl NapiMode {
    /// As on the command line.
    pub fn name(self) -> String {
        match self {
            NapiMode::Backlog => "backlog".into(),
            NapiMode::Softirq => "softirq".into(),
            NapiMode::Threaded(None) => "threaded".into(),
            NapiMode::Threaded(Some(p)) => format!("threaded:{p}"),
        }
    }
}

impl FromStr for NapiMode {
    type Err = super::ValueError;

    fn from_str(s: &str) -> Result<Self, super::ValueError> {
        match s {
            "backlog" => Ok(NapiMode::Backlog),
            "softirq" => Ok(NapiMode::Softirq),
            "threaded" => Ok(NapiMode::Threaded(None)),
            _ => match s.strip_prefix("threaded:").map(str::parse::<u32>) {
                Some(Ok(p)) if (1..=99).contains(&p) => Ok(NapiMode::Threaded(Some(p))),
                _ => Err(super::ValueError::NapiMode(s.to_string())),
            },
        }
    }
}

/// The setting: the mode, and the CPUs its NAPI threads are pinned to (empty: left free).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Napi {
    /// The mode.
    pub mode: NapiMode,
    /// Where a threaded NAPI's kernel threads run (the receiving CPUs).
    pub cpus: Vec<usize>,
}

/// PIDs and names of the kernel threads polling `dev` (`napi/<dev>-<id>`): kernel threads
/// only, whatever a process calls itself (rtlab raises these to SCHED_FIFO).
pub fn napi_threads(dev: &str) -> Vec<(i32, String)> {
    napi_threads_in(std::path::Path::new("/proc"), dev)
}

fn napi_threads_in(proc: &std::path::Path, dev: &str) -> Vec<(i32, String)> {
    let prefix = format!("napi/{dev}-");
    let mut out: Vec<(i32, String)> = std::fs::read_dir(proc)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let comm = comm.trim();
            // comm is cut at 15 characters: the prefix may be cut too.
            let named = comm.starts_with(&prefix) || prefix.starts_with(comm) && comm.len() == 15;
            (named && rtlab_sys::procfs::is_kernel_thread_in(proc, pid as u32))
                .then(|| (pid, comm.to_string()))
        })
        .collect();
    out.sort();
    out
}

/// Sets `dev` (the host end) up as `napi` says; `peer` is the other end, inside `netns`;
/// returns the facts for the result's config.
pub fn apply(
    dev: &str,
    peer: &str,
    netns: &std::path::Path,
    napi: &Napi,
) -> Result<serde_json::Value, LabError> {
    let err = |what: &str, e: &dyn std::fmt::Display| {
        LabError::Setup(format!("--napi {}: {what}: {e}", napi.mode.name()))
    };
    if napi.mode == NapiMode::Backlog {
        return Ok(serde_json::json!({"mode": "backlog"}));
    }
    rtlab_sys::net::set_gro(dev, true).map_err(|e| err("GRO on", &e))?;
    // A veth hands TSO-sized TCP skbs from its peer to the backlog, not to NAPI: the peer
    // end segments them itself.
    super::topology::in_netns(netns, || Ok(rtlab_sys::net::set_tso(peer, false)?))
        .map_err(|e| err(&format!("TSO off on {peer}"), &e))?;
    let threaded = format!("/sys/class/net/{dev}/threaded");
    if napi.mode == NapiMode::Softirq {
        return Ok(serde_json::json!({"mode": "softirq", "gro": true, "peer_tso": false}));
    }
    std::fs::write(&threaded, "1\n").map_err(|e| err(&format!("write 1 to {threaded}"), &e))?;
    // The threads start with the setting; give them a moment to appear.
    let mut threads = napi_threads(dev);
    for _ in 0..100 {
        if !threads.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        threads = napi_threads(dev);
    }
    if threads.is_empty() {
        return Err(err("no napi thread appeared", &dev));
    }
    let mut facts = Vec::new();
    for (pid, comm) in &threads {
        if !napi.cpus.is_empty() {
            let cpus = rtlab_sys::affinity::CpuList::from(napi.cpus.clone());
            rtlab_sys::affinity::set_thread_affinity(*pid, &cpus)
                .map_err(|e| err(&format!("pin {comm} to CPUs {cpus}"), &e))?;
        }
        if let NapiMode::Threaded(Some(prio)) = napi.mode {
            rtlab_sys::sched::set_thread_scheduler(*pid, rtlab_sys::sched::Policy::Fifo, prio)
                .map_err(|e| err(&format!("chrt -f {prio} {comm}"), &e))?;
        }
        facts.push(serde_json::json!({
            "pid": pid, "comm": comm, "cpus": napi.cpus,
            "policy": if matches!(napi.mode, NapiMode::Threaded(Some(_))) { "fifo" } else { "other" },
            "prio": match napi.mode { NapiMode::Threaded(Some(p)) => p, _ => 0 },
        }));
    }
    Ok(serde_json::json!({
        "mode": napi.mode.name(), "gro": true, "peer_tso": false, "threads": facts
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_back() {
        for s in ["backlog", "softirq", "threaded", "threaded:51"] {
            assert_eq!(s.parse::<NapiMode>().unwrap().name(), s);
        }
        for bad in ["threaded:0", "threaded:100", "threaded:x", "poll", ""] {
            assert!(bad.parse::<NapiMode>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_process_named_like_a_napi_thread_is_not_one() {
        // Regression (hardening, second review, #2): an unprivileged process that renamed
        // itself napi/<dev>-<n> got SCHED_FIFO from root.
        let proc = tempfile::tempdir().unwrap();
        for (pid, comm, stat) in [
            (
                10,
                "napi/veth9-8193",
                "10 (napi/veth9-8193) S 2 0 0 0 -1 2129984 0",
            ),
            (
                11,
                "napi/veth9-8194",
                "11 (napi/veth9-8194) S 77 11 11 0 -1 4194560 0",
            ),
        ] {
            let dir = proc.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(dir.join("stat"), stat).unwrap();
        }
        assert_eq!(
            napi_threads_in(proc.path(), "veth9"),
            vec![(10, "napi/veth9-8193".to_string())]
        );
        // The same with a real process that names itself so.
        let Ok(mut child) = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes,time; ctypes.CDLL(None).prctl(15, b'napi/rtlt9-1', 0, 0, 0); \
                 print(flush=True); time.sleep(10)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            rtlab_sys::testing::say_skipped("no python3");
            return;
        };
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        );
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.id())).unwrap();
        let found = napi_threads("rtlt9");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(comm.trim(), "napi/rtlt9-1", "the impostor is named so");
        assert!(found.is_empty(), "{found:?}");
    }
}
