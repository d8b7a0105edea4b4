//! Where the peer runs: in this process on loopback, in a network namespace behind a veth
//! pair that this module creates (and always removes), or on another host.
//!
//! The namespace is `rtlab-<pid>`, the veth ends `rtl<pid>a` (here) and `rtl<pid>b` (there),
//! addresses a /30 of 10.213.0.0/16 derived from the pid, with permanent neighbour entries
//! on both sides (the seed's static ARP). The peer is this binary (the hidden `rtlab net
//! serve-netns`, running [`serve_in_netns`] with the [`NetnsPeerRequest`] it reads on its
//! standard input and answering one [`Handshake`] line), started with a parent-death signal
//! **before** anything is created: it creates the namespace and the veth pair itself, enters
//! the namespace, listens, and deletes the namespace (with the veth pair and any nftables
//! rules in it) when it stops.
//! If this process is killed, even by SIGKILL and even during the setup, the peer gets SIGTERM
//! and cleans up; this process deletes the namespace too when it ends normally. A namespace
//! left by anything else is deleted at the next start when its pid is gone.

use super::peer::{PeerLimits, PeerServer};
pub use super::protocol::{Handshake, NetnsPeerRequest};
use std::io::{BufRead, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
pub fn bring_up(topology: &Topology) -> Result<Running, String> {
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
                Some(n) => super::napi::apply(
                    &host_end(&ns.name),
                    &peer_end(&ns.name),
                    &std::path::Path::new("/run/netns").join(&ns.name),
                    n,
                )?,
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
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
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

/// A namespace with a veth pair and the peer process in it; removed on drop.
#[derive(Debug)]
struct Netns {
    name: String,
    host_ip: Ipv4Addr,
    peer_ip: Ipv4Addr,
    token: String,
    child: Option<Child>,
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM lets the peer stop cleanly (it also deletes the namespace).
            let _ = rtlab_sys::process::terminate(child.id());
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // Deleting the namespace destroys its veth end, which destroys ours.
        let _ = ip(&["netns", "del", &self.name]);
    }
}

impl Netns {
    fn create(
        mtu: Option<u32>,
        loss_pct: Option<f64>,
        sysctls: &[String],
    ) -> Result<Netns, String> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err("a network namespace needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)".into());
        }
        reclaim_stale_namespaces();
        let pid = std::process::id();
        let idx = pid % 16_384;
        let (third, fourth) = ((idx / 64) as u8, ((idx % 64) * 4) as u8);
        let host_ip = Ipv4Addr::new(10, 213, third, fourth + 1);
        let peer_ip = Ipv4Addr::new(10, 213, third, fourth + 2);
        let name = format!("rtlab-{pid}");
        let mut ns = Netns {
            name: name.clone(),
            host_ip,
            peer_ip,
            token: super::peer::new_token()?,
            child: None,
        };
        ns.child = Some(start_peer(
            &NamespaceSpec {
                name,
                host_ip,
                peer_ip,
                mtu,
                loss_pct,
                sysctls: sysctls.to_vec(),
            },
            &ns.token,
        )?);
        Ok(ns)
    }
}

/// What the peer creates (handed to it in its [`NetnsPeerRequest`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NamespaceSpec {
    /// Namespace name (`rtlab-<pid of the measuring process>`).
    pub name: String,
    /// Address of the veth end in the root namespace.
    pub host_ip: Ipv4Addr,
    /// Address of the end inside the namespace (where the peer listens).
    pub peer_ip: Ipv4Addr,
    /// MTU of both ends.
    pub mtu: Option<u32>,
    /// Random loss, percent.
    pub loss_pct: Option<f64>,
    /// `net.*` sysctls to set inside (`KEY=VALUE`).
    pub sysctls: Vec<String>,
}

/// Checks a `net.KEY=VALUE` setting; returns the /proc/sys path and the value.
pub fn netns_sysctl(setting: &str) -> Result<(std::path::PathBuf, String), String> {
    let (key, value) = setting
        .split_once('=')
        .ok_or_else(|| format!("'{setting}': expected net.KEY=VALUE"))?;
    let valid = key.starts_with("net.")
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_')
        && !key.contains("..");
    if !valid || value.is_empty() {
        return Err(format!(
            "'{setting}': only net.* settings, e.g. net.ipv4.tcp_early_retrans=0"
        ));
    }
    Ok((
        std::path::Path::new("/proc/sys").join(key.replace('.', "/")),
        value.to_string(),
    ))
}

/// Applies `net.*` settings to the network namespace of the calling thread.
pub fn apply_netns_sysctls(settings: &[String]) -> Result<(), String> {
    for s in settings {
        let (path, value) = netns_sysctl(s)?;
        std::fs::write(&path, &value).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("net setting {s}: no such setting here"),
            _ => format!("net setting {s}: {e}"),
        })?;
    }
    Ok(())
}

/// Deletes a namespace on drop (the peer's side of the cleanup).
#[derive(Debug)]
pub struct NamespaceGuard {
    name: String,
}

impl Drop for NamespaceGuard {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

impl NamespaceSpec {
    /// Creates the namespace, the veth pair (one end moved inside), addresses, MTU,
    /// permanent neighbour entries and the loss rules; the guard deletes it all. Runs in the
    /// peer process, in the root namespace.
    pub fn create(&self) -> Result<NamespaceGuard, String> {
        let name = &self.name;
        let suffix = name.trim_start_matches("rtlab-");
        let (a, b) = (host_end(name), peer_end(name));
        let pid: u32 = suffix.parse().unwrap_or(0);
        let mac = |end: u8| {
            format!(
                "02:72:{:02x}:{:02x}:{:02x}:{end:02x}",
                (pid >> 16) & 0xff,
                (pid >> 8) & 0xff,
                pid & 0xff
            )
        };
        let (mac_a, mac_b) = (mac(1), mac(2));
        ip(&["netns", "add", name])?;
        // From here on, dropping the guard removes everything made so far.
        let guard = NamespaceGuard { name: name.clone() };
        let mtu = self.mtu.unwrap_or(1500).to_string();
        let (host_cidr, peer_cidr) = (
            format!("{}/30", self.host_ip),
            format!("{}/30", self.peer_ip),
        );
        let (host_s, peer_s) = (self.host_ip.to_string(), self.peer_ip.to_string());
        ip(&[
            "link", "add", &a, "address", &mac_a, "type", "veth", "peer", "name", &b, "address",
            &mac_b,
        ])?;
        ip(&["link", "set", &b, "netns", name])?;
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
        ])?;
        if let Some(pct) = self.loss_pct.filter(|&p| p > 0.0) {
            add_loss(name, pct)?;
        }
        Ok(guard)
    }
}

/// Random drop of `pct` % of packets in both directions, by nftables rules inside the
/// namespace (they vanish with it).
fn add_loss(ns: &str, pct: f64) -> Result<(), String> {
    let per_10k = (pct * 100.0).round() as u32;
    let rules = format!(
        "table inet rtlab_loss {{\n\
         chain input {{ type filter hook input priority 0; policy accept; numgen random mod 10000 < {per_10k} drop; }}\n\
         chain output {{ type filter hook output priority 0; policy accept; numgen random mod 10000 < {per_10k} drop; }}\n\
         }}\n"
    );
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(rules.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No such file") || err.contains("nft") && err.contains("not found") {
            return Err("packet loss needs nftables (Debian: apt-get install nftables)".into());
        }
        return Err(format!("nft: {}", err.trim()));
    }
    Ok(())
}

/// How long the namespace peer may take to set up.
const PEER_SETUP: Duration = Duration::from_secs(10);

/// Starts the namespace peer (this executable's hidden `net serve-netns`, which runs
/// [`serve_in_netns`]), hands it `spec` and `token` on its standard input (not argv: any
/// user can read a process's command line), and waits for its [`Handshake`].
fn start_peer(spec: &NamespaceSpec, token: &str) -> Result<Child, String> {
    let ns = &spec.name;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["net", "serve-netns"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    rtlab_sys::process::terminate_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the peer: {e}"))?;
    let request = NetnsPeerRequest {
        spec: spec.clone(),
        port: DEFAULT_PORT,
        token: token.to_string(),
    };
    let mut stdin = child.stdin.take().expect("piped");
    let sent = serde_json::to_writer(&mut stdin, &request)
        .map_err(|e| e.to_string())
        .and_then(|()| stdin.write_all(b"\n").map_err(|e| e.to_string()));
    drop(stdin);
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let answer = match (sent, rx.recv_timeout(PEER_SETUP)) {
        (Err(e), _) => Err(format!("cannot hand the peer for {ns} its set-up: {e}")),
        (Ok(()), Err(_)) => Err(format!(
            "the peer in {ns} did not start within {} s",
            PEER_SETUP.as_secs()
        )),
        (Ok(()), Ok(line)) if line.trim().is_empty() => {
            Err(format!("the peer for {ns} exited before listening"))
        }
        (Ok(()), Ok(line)) => match serde_json::from_str::<Handshake>(&line) {
            Ok(Handshake::Listening { .. }) => return Ok(child),
            Ok(Handshake::Failed { error }) => Err(error),
            Err(e) => Err(format!("the peer for {ns} answered '{}': {e}", line.trim())),
        },
    };
    let _ = child.kill();
    let _ = child.wait();
    answer
}

/// rtlab's own peer in a network namespace, what the hidden `rtlab net serve-netns` runs:
/// creates the namespace and its veth pair, enters it, applies its sysctls, listens with
/// the run's token, and writes one [`Handshake`] line to `out`; then serves until `stop()`
/// and deletes the namespace (the veth pair and nftables rules go with it), however it
/// ends.
pub fn serve_in_netns(
    request: &NetnsPeerRequest,
    out: &mut dyn Write,
    stop: &dyn Fn() -> bool,
) -> Result<(), String> {
    let spec = &request.spec;
    let setup = spec.create().and_then(|guard| {
        rtlab_sys::net::enter_netns(&std::path::Path::new("/run/netns").join(&spec.name))
            .map_err(|e| e.to_string())?;
        apply_netns_sysctls(&spec.sysctls)?;
        let listen = SocketAddr::from((spec.peer_ip, request.port));
        let server = PeerServer::start(listen, PeerLimits::own(request.token.clone()))?;
        Ok((guard, server))
    });
    let say = |out: &mut dyn Write, h: &Handshake| {
        serde_json::to_writer(&mut *out, h)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot answer the run: {e}"))
    };
    match setup {
        Err(error) => {
            let _ = say(
                out,
                &Handshake::Failed {
                    error: error.clone(),
                },
            );
            Err(error)
        }
        Ok((_guard, server)) => {
            say(
                out,
                &Handshake::Listening {
                    addr: server.addr(),
                },
            )?;
            while !stop() {
                std::thread::sleep(Duration::from_millis(50));
            }
            server.stop();
            Ok(())
        }
    }
}
