//! The arguments of `rtlab net`.

use super::experiments::{CommonArgs, ExplainArgs};
use super::help::*;
use super::parse::*;
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand};
use rtlab_stats::Nanos;

#[derive(Debug, Args)]
pub struct NetArgs {
    #[command(subcommand)]
    pub action: NetAction,
}

#[derive(Debug, Subcommand)]
pub enum NetAction {
    /// Periodic streams to a peer, each message acknowledged; round trips from the schedule.
    #[command(after_help = NET_RUN_HELP, mut_arg("duration", |a| a.help(super::defaults::duration_help(super::defaults::NET))), mut_arg("prio", |a| a.help(super::defaults::prio_help(super::defaults::NET))))]
    Run(NetRunArgs),
    /// One message in flight, echoed whole (like sockperf ping-pong).
    #[command(after_help = NET_PINGPONG_HELP, mut_arg("duration", |a| a.help(super::defaults::duration_help(super::defaults::NET))), mut_arg("prio", |a| a.help(super::defaults::prio_help(super::defaults::NET))))]
    Pingpong(NetPingPongArgs),
    /// The peer: acknowledges, echoes, runs reverse streams (TCP and UDP, one port).
    #[command(after_help = NET_SERVE_HELP)]
    Serve(NetServeArgs),
}

/// Where the peer is and how sockets are set up (run and pingpong).
#[derive(Debug, Args, Clone)]
pub struct NetPathArgs {
    /// A peer started with `rtlab net serve` on another host (ADDR:PORT or HOST:PORT).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_peer, conflicts_with = "topology")]
    pub peer: Option<std::net::SocketAddr>,
    /// Where rtlab starts its own peer: loopback (a thread here) or netns (a network
    /// namespace behind a veth pair, root only).
    #[arg(long, value_name = "KIND", value_parser = ["loopback", "netns"], default_value = "loopback")]
    pub topology: String,
    /// MTU of the veth pair (netns), e.g. 9000 for jumbo frames.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(576..=65535))]
    pub mtu: Option<u32>,
    /// Drop this percentage of packets in both directions (netns; nftables).
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    pub loss: Option<f64>,
    /// A net.* sysctl for the peer's namespace (netns; repeatable), e.g.
    /// net.ipv4.tcp_early_retrans=0 to turn tail-loss probes off on the peer's side.
    #[arg(long, value_name = "KEY=VALUE")]
    pub netns_sysctl: Vec<String>,
    /// Who processes the packets the host end of the veth pair receives (netns): backlog (as
    /// created: NET_RX softirq on the sending CPU), softirq (GRO on: NAPI in softirq), threaded
    /// (a napi/<dev> kernel thread, SCHED_OTHER, pinned to --cpus) or threaded:PRIO (that
    /// thread at SCHED_FIFO PRIO: the fix for the network stack's priority inversion).
    #[arg(long, value_name = "MODE", value_parser = str::parse::<rtlab_lab::net::napi::NapiMode>)]
    pub napi: Option<rtlab_lab::net::napi::NapiMode>,
    /// tcp or udp.
    #[arg(long, value_name = "PROTO", value_parser = ["tcp", "udp"], default_value = "tcp")]
    pub proto: String,
    /// Leave Nagle's algorithm on (TCP_NODELAY is set by default).
    #[arg(long)]
    pub no_nodelay: bool,
    /// Set TCP_QUICKACK, re-armed after every receive (both ends).
    #[arg(long)]
    pub quickack: bool,
    /// SO_BUSY_POLL microseconds on both ends.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub busy_poll: Option<u32>,
    /// SO_PRIORITY of the sockets (0-6 without CAP_NET_ADMIN).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=15))]
    pub priority: Option<u32>,
    /// IP_TOS byte (e.g. 0x10 low delay, 0xb8 DSCP EF).
    #[arg(long, value_name = "BYTE", value_parser = parse_tos)]
    pub tos: Option<u8>,
    /// SO_SNDBUF (the bounded-time TCP study used 2MiB).
    #[arg(long, value_name = "SIZE", value_parser = positive_size_arg)]
    pub sndbuf: Option<u64>,
    /// SO_RCVBUF.
    #[arg(long, value_name = "SIZE", value_parser = positive_size_arg)]
    pub rcvbuf: Option<u64>,
    /// TCP_THIN_LINEAR_TIMEOUTS: no exponential backoff of the first retransmission timeouts.
    #[arg(long)]
    pub thin_linear_timeouts: bool,
}

#[derive(Debug, Args)]
pub struct NetRunArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub path: NetPathArgs,
    /// A stream this side sends: SIZE@PERIOD (repeatable), e.g. 120KiB@50ms.
    #[arg(long = "stream", value_name = "SIZE@PERIOD", value_parser = parse_stream)]
    pub streams: Vec<rtlab_lab::net::StreamSpec>,
    /// A stream the peer sends back (repeatable; TCP).
    #[arg(long = "reverse-stream", value_name = "SIZE@PERIOD", value_parser = parse_stream)]
    pub reverse: Vec<rtlab_lab::net::StreamSpec>,
    /// A predefined mix: rt-java-poc (the streams of a 2009 proof of concept of real-time
    /// Java on two machines).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new([
        clap::builder::PossibleValue::new("rt-java-poc").alias("seed-poc"),
    ]).map(|name| if name == "seed-poc" { "rt-java-poc".to_string() } else { name }))]
    pub profile: Option<String>,
    /// Pad each message to at least N full segments (TCP: so a loss is repaired by fast
    /// retransmit, not the retransmission timer).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub pad_segments: Option<u32>,
    /// Bulk TCP traffic on another connection while measuring (a background load as the
    /// bounded-time TCP study had).
    #[arg(long)]
    pub background_traffic: bool,
    /// Round trips over DUR count as deadline misses (default: the stream's period).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub deadline: Option<Nanos>,
    /// Not recorded at the start of each stream (default: min(1s, duration/5)).
    #[arg(long, value_name = "DUR", value_parser = duration_arg)]
    pub warmup: Option<Nanos>,
    /// --explain here names the causes of late sends (the stream threads' send_lateness).
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct NetPingPongArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub path: NetPathArgs,
    /// Message size (rtlab's 40-byte header included; smaller sizes send 40 bytes).
    #[arg(long, value_name = "SIZE", default_value = "64", value_parser = parse_size_arg)]
    pub size: u64,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct NetServeArgs {
    /// Address and port to listen on (TCP and UDP). The default answers this host only;
    /// for a client on another host, listen on its interface (e.g. 0.0.0.0:7471).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7471", value_parser = parse_peer)]
    pub listen: std::net::SocketAddr,
    /// Let clients ask for SCHED_FIFO/RR up to this priority for the peer's threads (and
    /// SO_BUSY_POLL up to 100 us). Without it every connection is served under SCHED_OTHER.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=99))]
    pub max_prio: Option<u32>,
    /// Connections served at once; more are closed at once.
    #[arg(long, value_name = "N", default_value = "16", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_connections: u32,
    /// Largest socket buffer, echoed message or reverse-stream message a client may ask for.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = positive_size_arg)]
    pub max_buffer: u64,
    /// A connection with nothing to read (or whose client does not read) for this long ends.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = positive_duration)]
    pub idle_timeout: Nanos,
}
