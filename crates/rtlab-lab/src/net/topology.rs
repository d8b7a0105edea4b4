//! Where the peer runs: in this process on loopback, in a network namespace behind a veth
//! pair that this module creates (and always removes), or on another host.
//!
//! The namespace is `rtlab-<pid>`, the veth ends `rtl<pid>a` (here) and `rtl<pid>b` (there),
//! addresses a /30 of 10.213.0.0/16 derived from the pid, with permanent neighbour entries
//! on both sides (the seed's static ARP).
//!
//! The peer in the namespace is a [`PeerServer`] in this process, started from a thread of its
//! own that first enters the namespace: `setns(CLONE_NEWNET)` moves the calling thread only,
//! its sockets belong to the namespace it is in when it makes them, and the threads it
//! spawns (the acceptor, the UDP responder and, from the acceptor, one per connection) start
//! in its namespace. Nothing else of this process moves, and no second program is involved
//! (no fork that runs Rust code after it, no private subcommand of the binary). The
//! namespace's own `net.*` settings are written from that thread too, and `nft` for the loss
//! rules is started from such a thread (a child starts in its creator's namespace).
//!
//! Removal: the namespace is made by [`rtlab_sys::netns::NamedNetns`], whose janitor process
//! is forked **before** the name exists and removes it when this process ends, however it
//! ends (Ctrl-C, an error, even SIGKILL in the middle of the set-up). The veth pair is made
//! with its peer end already inside the namespace, in one command, so the pair goes with the
//! namespace whenever the set-up stops; the loss rules live in the namespace too. A namespace
//! left by anything else is deleted at the next start when its pid is gone.

use super::peer::{PeerLimits, PeerServer};
use crate::LabError;
use rtlab_sys::netns::NamedNetns;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};

/// Port the peer listens on inside a namespace (and `rtlab net serve`'s default).
pub const DEFAULT_PORT: u16 = 7471;

/// Where the peer is.
#[derive(Debug, Clone, PartialEq)]
pub enum Topology {
    /// A peer thread in this process on 127.0.0.1.
    Loopback,
    /// A peer process in a fresh network namespace behind a veth pair.
    Netns {
        /// MTU of both veth ends (None: the default 1500).
        mtu: Option<u32>,
        /// Random loss in percent, both directions (nftables inside the namespace).
        loss_pct: Option<f64>,
        /// `net.*` sysctls set inside the namespace (`net.ipv4.tcp_early_retrans=0`).
        sysctls: Vec<String>,
        /// Who processes what the host end receives (None: as created).
        napi: Option<super::napi::Napi>,
    },
    /// `rtlab net serve` on another host.
    Remote(SocketAddr),
}

impl Topology {
    /// Short name for configs and tables.
    pub fn name(&self) -> &'static str {
        match self {
            Topology::Loopback => "loopback",
            Topology::Netns { .. } => "netns",
            Topology::Remote(_) => "remote",
        }
    }
}

/// Where a peer listens, and the secret its hellos carry (rtlab's own peers only).
#[derive(Debug, Clone)]
pub struct PeerAddr {
    /// Its address.
    pub addr: SocketAddr,
    /// The token of a peer rtlab started (None: a remote `rtlab net serve`).
    pub token: Option<String>,
}

/// A peer that is up; dropping it takes everything down.
#[derive(Debug)]
pub struct Running {
    /// Where to connect.
    pub peer: PeerAddr,
    /// Facts for the result's config (namespace name, addresses, mtu, loss).
    pub facts: serde_json::Value,
    _local: Option<PeerServer>,
    _netns: Option<Netns>,
}

/// Brings the topology up.
pub fn bring_up(topology: &Topology) -> Result<Running, LabError> {
    match topology {
        Topology::Loopback => {
            let token = super::peer::new_token()?;
            let server = PeerServer::start(
                (Ipv4Addr::LOCALHOST, 0).into(),
                super::peer::PeerLimits::own(token.clone()),
            )?;
            Ok(Running {
                peer: PeerAddr {
                    addr: server.addr(),
                    token: Some(token),
                },
                facts: serde_json::json!({"topology": "loopback"}),
                _local: Some(server),
                _netns: None,
            })
        }
        Topology::Remote(addr) => Ok(Running {
            peer: PeerAddr {
                addr: *addr,
                token: None,
            },
            facts: serde_json::json!({"topology": "remote", "peer": addr.to_string()}),
            _local: None,
            _netns: None,
        }),
        Topology::Netns {
            mtu,
            loss_pct,
            sysctls,
            napi,
        } => {
            let ns = Netns::create(*mtu, *loss_pct, sysctls)?;
            let napi_facts = match napi {
                Some(n) => {
                    super::napi::apply(&host_end(&ns.name), &peer_end(&ns.name), ns.held.path(), n)?
                }
                None => serde_json::json!({"mode": "backlog"}),
            };
            Ok(Running {
                peer: PeerAddr {
                    addr: SocketAddr::from((ns.peer_ip, DEFAULT_PORT)),
                    token: Some(ns.token.clone()),
                },
                facts: serde_json::json!({
                    "topology": "netns", "netns": ns.name, "mtu": mtu.unwrap_or(1500),
                    "loss_pct": loss_pct.unwrap_or(0.0), "static_neighbours": true,
                    "netns_sysctls": sysctls,
                    "host_ip": ns.host_ip.to_string(), "peer_ip": ns.peer_ip.to_string(),
                    "napi": napi_facts,
                }),
                _local: None,
                _netns: Some(ns),
            })
        }
    }
}

/// The host end of namespace `ns`'s veth pair (`rtlab-<pid>` -> `rtl<pid>a`).
pub fn host_end(ns: &str) -> String {
    format!("rtl{}a", ns.trim_start_matches("rtlab-"))
}

/// The end of namespace `ns`'s veth pair inside it (`rtlab-<pid>` -> `rtl<pid>b`).
pub fn peer_end(ns: &str) -> String {
    format!("rtl{}b", ns.trim_start_matches("rtlab-"))
}

/// Runs `ip ARGS`; the error carries its stderr.
fn ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::io("cannot run ip (iproute2)", e))?;
    if !out.status.success() {
        return Err(LabError::Tool {
            command: format!("ip {}", args.join(" ")),
            said: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Deletes `rtlab-<pid>` namespaces whose process is gone (left by a crash).
pub fn reclaim_stale_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix("rtlab-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// A namespace with a veth pair and the peer in it; the peer stopped and the namespace
/// removed on drop.
#[derive(Debug)]
struct Netns {
    name: String,
    host_ip: Ipv4Addr,
    peer_ip: Ipv4Addr,
    token: String,
    peer: Option<PeerServer>,
    /// Dropped after the peer: removes the namespace (the veth pair and the loss rules go
    /// with it).
    held: NamedNetns,
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(peer) = self.peer.take() {
            peer.stop();
        }
    }
}

impl Netns {
    fn create(
        mtu: Option<u32>,
        loss_pct: Option<f64>,
        sysctls: &[String],
    ) -> Result<Netns, LabError> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err(LabError::Setup(
                "a network namespace needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)".into(),
            ));
        }
        reclaim_stale_namespaces();
        let pid = std::process::id();
        let idx = pid % 16_384;
        let (third, fourth) = ((idx / 64) as u8, ((idx % 64) * 4) as u8);
        let name = format!("rtlab-{pid}");
        let mut ns = Netns {
            host_ip: Ipv4Addr::new(10, 213, third, fourth + 1),
            peer_ip: Ipv4Addr::new(10, 213, third, fourth + 2),
            token: super::peer::new_token()?,
            peer: None,
            held: NamedNetns::create(&name)?,
            name,
        };
        ns.link(mtu)?;
        if let Some(pct) = loss_pct.filter(|&p| p > 0.0) {
            add_loss(ns.held.path(), pct)?;
        }
        let listen = SocketAddr::from((ns.peer_ip, DEFAULT_PORT));
        let limits = PeerLimits::own(ns.token.clone());
        let sysctls = sysctls.to_vec();
        ns.peer = Some(in_netns(ns.held.path(), move || {
            apply_netns_sysctls(&sysctls)?;
            PeerServer::start(listen, limits)
        })?);
        Ok(ns)
    }

    /// The veth pair (its peer end made inside the namespace, so the pair never exists
    /// outside it), addresses, MTU and permanent neighbour entries.
    fn link(&self, mtu: Option<u32>) -> Result<(), LabError> {
        let name = &self.name;
        let (a, b) = (host_end(name), peer_end(name));
        let mac = |end: u8| {
            let pid = std::process::id();
            format!(
                "02:72:{:02x}:{:02x}:{:02x}:{end:02x}",
                (pid >> 16) & 0xff,
                (pid >> 8) & 0xff,
                pid & 0xff
            )
        };
        let (mac_a, mac_b) = (mac(1), mac(2));
        let mtu = mtu.unwrap_or(1500).to_string();
        let (host_cidr, peer_cidr) = (
            format!("{}/30", self.host_ip),
            format!("{}/30", self.peer_ip),
        );
        let (host_s, peer_s) = (self.host_ip.to_string(), self.peer_ip.to_string());
        ip(&[
            "link", "add", &a, "address", &mac_a, "type", "veth", "peer", "name", &b, "address",
            &mac_b, "netns", name,
        ])?;
        ip(&["addr", "add", &host_cidr, "dev", &a])?;
        ip(&["link", "set", &a, "mtu", &mtu, "up"])?;
        ip(&["-n", name, "addr", "add", &peer_cidr, "dev", &b])?;
        ip(&["-n", name, "link", "set", &b, "mtu", &mtu, "up"])?;
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        ip(&[
            "neigh",
            "replace",
            &peer_s,
            "lladdr",
            &mac_b,
            "dev",
            &a,
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            name,
            "neigh",
            "replace",
            &host_s,
            "lladdr",
            &mac_a,
            "dev",
            &b,
            "nud",
            "permanent",
        ])
    }
}

/// Runs `f` on a thread of its own inside the network namespace at `netns` (the namespace of
/// this process's other threads does not change); what `f` makes there (sockets, threads,
/// child processes) is in the namespace.
pub(crate) fn in_netns<T: Send>(
    netns: &Path,
    f: impl FnOnce() -> Result<T, LabError> + Send,
) -> Result<T, LabError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            rtlab_sys::net::enter_netns(netns)?;
            f()
        })
        .join()
        .map_err(|_| LabError::Panicked("the namespace thread".into()))?
    })
}

/// Checks a `net.KEY=VALUE` setting; returns the /proc/sys path and the value.
pub fn netns_sysctl(setting: &str) -> Result<(std::path::PathBuf, String), super::ValueError> {
    let (key, value) = setting
        .split_once('=')
        .ok_or_else(|| super::ValueError::NotASetting(setting.to_string()))?;
    let valid = key.starts_with("net.")
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_')
        && !key.contains("..")
        && !key.ends_with('.');
    if !valid || value.is_empty() {
        return Err(super::ValueError::NotNet(setting.to_string()));
    }
    Ok((
        std::path::Path::new("/proc/sys").join(key.replace('.', "/")),
        value.to_string(),
    ))
}

/// Applies `net.*` settings to the network namespace of the calling thread.
fn apply_netns_sysctls(settings: &[String]) -> Result<(), LabError> {
    for s in settings {
        let (path, value) = netns_sysctl(s).map_err(|e| LabError::Setup(e.to_string()))?;
        std::fs::write(&path, &value).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                LabError::Setup(format!("net setting {s}: no such setting here"))
            }
            _ => LabError::io(format!("net setting {s}"), e),
        })?;
    }
    Ok(())
}

/// Random drop of `pct` % of packets in both directions, by nftables rules inside the
/// namespace at `netns` (they vanish with it); `nft` is started from a thread inside it.
fn add_loss(netns: &Path, pct: f64) -> Result<(), LabError> {
    let per_10k = (pct * 100.0).round() as u32;
    let rules = format!(
        "table inet rtlab_loss {{\n\
         chain input {{ type filter hook input priority 0; policy accept; numgen random mod 10000 < {per_10k} drop; }}\n\
         chain output {{ type filter hook output priority 0; policy accept; numgen random mod 10000 < {per_10k} drop; }}\n\
         }}\n"
    );
    let child = in_netns(netns, || {
        Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => LabError::Setup(
                    "packet loss needs nftables (Debian: apt-get install nftables)".into(),
                ),
                _ => LabError::io("cannot run nft", e),
            })
    })?;
    let mut child = child;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(rules.as_bytes())
        .map_err(|e| LabError::io("nft", e))?;
    let out = child
        .wait_with_output()
        .map_err(|e| LabError::io("nft", e))?;
    if !out.status.success() {
        return Err(LabError::Tool {
            command: "nft".into(),
            said: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}
