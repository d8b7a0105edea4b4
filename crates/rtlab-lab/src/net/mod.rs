//! `rtlab net`: bounded-latency messaging between periodic real-time threads over TCP and UDP
//! (seeds 001 and 002), and a ping-pong comparable with sockperf.
//!
//! * [`NetRun`]: periodic streams (`SIZE@PERIOD`, each with its own sender thread on an
//!   absolute schedule and its own connection), acknowledged by the peer as soon as the useful
//!   bytes arrived; reverse streams sent by the peer; optional bulk background traffic.
//! * [`PingPong`]: one message in flight, echoed whole.
//!
//! Topologies: loopback (peer thread in this process), a network namespace behind a veth
//! pair (with MTU, static neighbours, random loss), or a remote `rtlab net serve`.

pub mod napi;
pub mod peer;
mod pingpong;
pub mod protocol;
mod run;
pub mod stream;
pub mod topology;
pub mod wire;

use crate::LabError;
use peer::Hello;
pub use pingpong::{PingPong, PingPongConfig};
use rtlab_stats::result::Series;
use rtlab_stats::Nanos;
pub use run::{NetRun, NetRunConfig};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;
pub use stream::SocketOptions;
pub use topology::{Topology, DEFAULT_PORT};

/// Series names (for help text).
pub const SERIES_HELP: &str = "net run: <SIZE>@<PERIOD>/rtt per stream as written (metric rtt, from the \
scheduled send time to the acknowledgement), <SIZE>@<PERIOD>/send_lateness (actual send start minus \
scheduled time), reverse/<SIZE>@<PERIOD>/rtt and /send_lateness for streams the peer sends, and all/rtt \
(every stream). net pingpong: pingpong/rtt.";

/// One plain sentence for the survey: the worst round trip of periodic messaging.
pub fn reading(series: &[Series], prefix: &str) -> Option<String> {
    let all = series
        .iter()
        .find(|s| s.name == format!("{prefix}all/rtt"))?;
    let topology = all
        .config
        .get("topology")
        .and_then(|t| t["topology"].as_str())
        .unwrap_or("loopback");
    Some(format!(
        "periodic TCP messages over {topology} ({} streams, each acknowledged): round trip p50 {}, p99 {}, worst {}",
        all.config.get("streams").and_then(Value::as_u64).unwrap_or(0),
        Nanos(all.p50? as u64),
        Nanos(all.p99? as u64),
        Nanos(all.max? as u64)
    ))
}

/// Protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP (one datagram per message).
    Udp,
}

impl Proto {
    /// `tcp` or `udp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One stream as written on the command line: `SIZE@PERIOD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// As written (`120KiB@50ms`): the series name.
    pub label: String,
    /// Bytes per message (rtlab's 40-byte header included).
    pub size: usize,
    /// Period.
    pub period: Nanos,
}

/// Why a value of the net experiment's configuration was refused: each says the value, then
/// what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// A stream without `@`.
    #[error("'{0}': expected SIZE@PERIOD, e.g. 1KiB@50ms")]
    NotSizeAtPeriod(String),
    /// A stream's size or period that does not parse.
    #[error("'{text}': {source}")]
    Unit {
        /// The stream as written.
        text: String,
        /// Why.
        source: rtlab_stats::ParseError,
    },
    /// A stream's size out of range.
    #[error("'{0}': size must be 1 byte to 64MiB")]
    Size(String),
    /// A stream's period too short.
    #[error("'{0}': period must be at least 100us")]
    Period(String),
    /// A NAPI mode that is none of them.
    #[error("'{0}': expected backlog, softirq, threaded or threaded:PRIO (PRIO 1-99)")]
    NapiMode(String),
    /// A namespace setting without `=`.
    #[error("'{0}': expected net.KEY=VALUE")]
    NotASetting(String),
    /// A namespace setting outside `net.*`, or without a value.
    #[error("'{0}': only net.* settings, e.g. net.ipv4.tcp_early_retrans=0")]
    NotNet(String),
}

impl std::str::FromStr for StreamSpec {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        let unit = |source| ValueError::Unit {
            text: text.to_string(),
            source,
        };
        let (size, period) = text
            .split_once('@')
            .ok_or_else(|| ValueError::NotSizeAtPeriod(text.to_string()))?;
        let size = rtlab_stats::parse_size(size).map_err(unit)? as usize;
        let period = rtlab_stats::parse_duration(period).map_err(unit)?;
        if !(1..=(64 << 20)).contains(&size) {
            return Err(ValueError::Size(text.to_string()));
        }
        if period < Nanos::from_micros(100) {
            return Err(ValueError::Period(text.to_string()));
        }
        Ok(StreamSpec {
            label: text.to_string(),
            size,
            period,
        })
    }
}

/// The seed's two-machine mix (seed 001): 120 KB, 1 KB, 100 B and 200 B every 50 ms one
/// way; 300 B and 350 B every 50 ms the other.
pub fn seed_poc_profile() -> (Vec<StreamSpec>, Vec<StreamSpec>) {
    let parse = |s: &str| s.parse::<StreamSpec>().expect("valid profile");
    (
        // The four senders of its first test, and the 50 KB messages of its result ("under
        // 45 ms for 50KB messages and 80 ms for 120KB").
        [
            "120KiB@50ms",
            "50KiB@50ms",
            "1KiB@50ms",
            "100B@50ms",
            "200B@50ms",
        ]
        .map(parse)
        .to_vec(),
        ["300B@50ms", "350B@50ms"].map(parse).to_vec(),
    )
}

/// The TCP loss-recovery settings that decide the worst case after a drop.
pub fn tcp_sysctls() -> Value {
    let mut out = serde_json::Map::new();
    for (key, path) in [
        ("tcp_rto_min_us", "/proc/sys/net/ipv4/tcp_rto_min_us"),
        ("tcp_early_retrans", "/proc/sys/net/ipv4/tcp_early_retrans"),
        ("tcp_recovery", "/proc/sys/net/ipv4/tcp_recovery"),
        ("tcp_sack", "/proc/sys/net/ipv4/tcp_sack"),
        (
            "tcp_thin_linear_timeouts",
            "/proc/sys/net/ipv4/tcp_thin_linear_timeouts",
        ),
        ("tcp_low_latency", "/proc/sys/net/ipv4/tcp_low_latency"),
        ("rmem_max", "/proc/sys/net/core/rmem_max"),
        ("wmem_max", "/proc/sys/net/core/wmem_max"),
        ("busy_poll", "/proc/sys/net/core/busy_poll"),
        ("busy_read", "/proc/sys/net/core/busy_read"),
    ] {
        if let Ok(v) = std::fs::read_to_string(path) {
            let v = v.trim();
            out.insert(
                key.into(),
                v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n)),
            );
        }
    }
    Value::Object(out)
}

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

fn connect(to: &topology::PeerAddr, hello: &Hello) -> Result<TcpStream, LabError> {
    let peer = to.addr;
    let mut s = TcpStream::connect_timeout(&peer, CONNECT_TIMEOUT).map_err(|e| {
        LabError::Unreachable(format!(
            "cannot connect to {peer}: {e} (is `rtlab net serve` running there?)"
        ))
    })?;
    hello.options.apply_tcp(&s)?;
    let refused = |e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::InvalidData {
            ""
        } else {
            " (is `rtlab net serve` running there?)"
        };
        LabError::Net(format!(
            "no rtlab handshake from {peer} within 3 s: {e}{hint}"
        ))
    };
    let hello = Hello {
        token: to.token.clone(),
        ..hello.clone()
    };
    hello.send(&mut s).map_err(refused)?;
    s.set_read_timeout(Some(CONNECT_TIMEOUT)).map_err(refused)?;
    let h = wire::Header::read_from(&mut s).map_err(refused)?;
    if h.kind != wire::Kind::Hello {
        return Err(LabError::Net(format!(
            "{peer} answered the handshake with {:?}",
            h.kind
        )));
    }
    let _: protocol::Welcome = wire::read_control(&mut s, &h).map_err(refused)?;
    s.set_read_timeout(None).map_err(LabError::from)?;
    Ok(s)
}

/// A connected UDP socket that got an answer from the peer (3 tries, 1 s each), and the TCP
/// connection that holds its session open on the peer (answered only while it stays open).
fn connect_udp(
    to: &topology::PeerAddr,
    options: &SocketOptions,
) -> Result<(UdpSocket, TcpStream), LabError> {
    let peer = to.addr;
    let local: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    let s = UdpSocket::bind(local).map_err(LabError::from)?;
    s.connect(peer)
        .map_err(|e| LabError::Net(format!("UDP {peer}: {e}")))?;
    options.apply_udp(&s)?;
    let session = Hello {
        role: protocol::Role::Udp,
        options: SocketOptions::default(),
        policy: rtlab_sys::sched::Policy::Other,
        prio: 0,
        plan: None,
        pad_segments: 0,
        token: None, // connect() sets the peer's
        udp_port: Some(s.local_addr().map_err(LabError::from)?.port()),
    };
    let control = connect(to, &session)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(LabError::from)?;
    let mut probe = [0u8; wire::HEADER_LEN];
    let mut h = wire::Header::new(wire::Kind::Echo);
    h.seq = u64::MAX;
    h.encode(&mut probe);
    let mut back = [0u8; 256];
    for _ in 0..3 {
        let _ = s.send(&probe);
        if let Ok(n) = s.recv(&mut back) {
            if wire::Header::decode(&back[..n]).is_ok_and(|r| r.seq == u64::MAX) {
                return Ok((s, control));
            }
        }
    }
    Err(LabError::Unreachable(format!(
        "no answer from {peer} over UDP within 3 s (is `rtlab net serve` running there?)"
    )))
}

/// A network namespace needs root: said before anything starts (bad input, not a failure).
fn needs_root_for(topology: &Topology) -> Result<(), LabError> {
    if matches!(topology, Topology::Netns { .. }) && rtlab_sys::process::effective_uid() != 0 {
        return Err(LabError::Config(
            "a network namespace needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::run::unique_labels;
    use super::*;

    #[test]
    fn stream_specs_parse_as_written() {
        let s: StreamSpec = "120KiB@50ms".parse().unwrap();
        assert_eq!(
            (s.size, s.period, s.label.as_str()),
            (120 << 10, Nanos::from_millis(50), "120KiB@50ms")
        );
        for bad in ["", "1KiB", "@50ms", "1KiB@", "0@1ms", "1KiB@10us", "x@1ms"] {
            assert!(bad.parse::<StreamSpec>().is_err(), "{bad}");
        }
        for (bad, said) in [
            ("1KiB", "'1KiB': expected SIZE@PERIOD, e.g. 1KiB@50ms"),
            ("0@1ms", "'0@1ms': size must be 1 byte to 64MiB"),
            ("1KiB@10us", "'1KiB@10us': period must be at least 100us"),
        ] {
            assert_eq!(bad.parse::<StreamSpec>().unwrap_err().to_string(), said);
        }
        let said = "x@1ms".parse::<StreamSpec>().unwrap_err().to_string();
        assert!(said.starts_with("'x@1ms': "), "{said}");
        let labels = unique_labels(&["1KiB@1ms".parse().unwrap(), "1KiB@1ms".parse().unwrap()]);
        assert_eq!(labels, ["1KiB@1ms", "1KiB@1ms#2"]);
    }
}
