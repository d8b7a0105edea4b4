//! `rtlab net run | pingpong | serve`.

use crate::cli::{NetAction, NetArgs, NetPathArgs, NetPingPongArgs, NetRunArgs, NetServeArgs};
use crate::output::result_doc;
use crate::{BadInput, Status};
use rtlab_lab::net::{
    seed_poc_profile, NetRun, NetRunConfig, PingPong, PingPongConfig, Proto, SocketOptions,
    Topology,
};

pub fn run(args: NetArgs) -> anyhow::Result<Status> {
    match args.action {
        NetAction::Run(a) => run_streams(a),
        NetAction::Pingpong(a) => pingpong(a),
        NetAction::Serve(a) => serve(a),
    }
}

/// Each `--netns-sysctl` well-formed and a setting this kernel has (its namespaced net.*
/// settings exist in this namespace too), before any namespace is made.
fn check_netns_sysctls(settings: &[String]) -> Result<(), BadInput> {
    for s in settings {
        let (path, _) = rtlab_lab::net::topology::netns_sysctl(s)
            .map_err(|e| BadInput(format!("--netns-sysctl {e}")))?;
        if !path.is_file() {
            return Err(BadInput(format!(
                "--netns-sysctl {s}: this kernel has no such setting ({} is not a file)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Where the peer is; `cpus` (the measuring threads') also take a threaded NAPI's threads.
fn topology(path: &NetPathArgs, cpus: &[usize]) -> Result<Topology, BadInput> {
    let netns_only = path.mtu.is_some()
        || path.loss.is_some()
        || !path.netns_sysctl.is_empty()
        || path.napi.is_some();
    match (path.peer, path.topology.as_str()) {
        (Some(peer), _) if netns_only => Err(BadInput(format!(
            "--mtu, --loss, --netns-sysctl and --napi apply to --topology netns, not to --peer {peer}"
        ))),
        (Some(peer), _) => Ok(Topology::Remote(peer)),
        (None, "netns") => {
            check_netns_sysctls(&path.netns_sysctl)?;
            Ok(Topology::Netns {
            mtu: path.mtu,
            loss_pct: path.loss,
            sysctls: path.netns_sysctl.clone(),
            napi: path.napi.map(|mode| rtlab_lab::net::napi::Napi {
                mode,
                cpus: cpus.to_vec(),
            }),
        })
        }
        (None, _) if netns_only => Err(BadInput(
            "--mtu, --loss, --netns-sysctl and --napi need --topology netns".into(),
        )),
        (None, _) => Ok(Topology::Loopback),
    }
}

fn proto(path: &NetPathArgs) -> Proto {
    if path.proto == "udp" {
        Proto::Udp
    } else {
        Proto::Tcp
    }
}

fn options(path: &NetPathArgs) -> SocketOptions {
    SocketOptions {
        nodelay: !path.no_nodelay,
        quickack: path.quickack,
        busy_poll_us: path.busy_poll.unwrap_or(0),
        priority: path.priority,
        tos: path.tos,
        sndbuf: path.sndbuf.map(|b| b as usize),
        rcvbuf: path.rcvbuf.map(|b| b as usize),
        thin: path.thin_linear_timeouts,
    }
}

fn run_streams(args: NetRunArgs) -> anyhow::Result<Status> {
    let common = args.common.validate_with(crate::cli::defaults::NET)?;
    let topology = topology(&args.path, common.cpus.as_slice())?;
    let (mut streams, mut reverse) = (args.streams, args.reverse);
    if args.profile.as_deref() == Some("rt-java-poc") {
        let (f, r) = seed_poc_profile();
        streams.extend(f);
        reverse.extend(r);
    }
    let experiment = NetRun::new(NetRunConfig {
        topology: topology.clone(),
        proto: proto(&args.path),
        streams: streams.clone(),
        reverse: reverse.clone(),
        options: options(&args.path),
        pad_segments: args.pad_segments.unwrap_or(0),
        deadline: args.deadline,
        warmup: args.warmup,
        background_traffic: args.background_traffic,
        policy: common.policy,
        prio: common.prio,
        cpus: common.cpus.as_slice().to_vec(),
        explain: args.explain.settings()?,
    })?;
    let mut console = common.console();
    let labels: Vec<&str> = streams
        .iter()
        .map(|s| s.label.as_str())
        .chain(reverse.iter().map(|s| s.label.as_str()))
        .collect();
    console.note(&format!(
        "net run: {} over {} ({}), streams {}{}, {} {}, for {}",
        proto(&args.path).as_str(),
        topology.name(),
        match &topology {
            Topology::Remote(p) => p.to_string(),
            Topology::Netns { mtu, loss_pct, .. } => format!(
                "mtu {}, loss {}%",
                mtu.unwrap_or(1500),
                loss_pct.unwrap_or(0.0)
            ),
            Topology::Loopback => "127.0.0.1".into(),
        },
        labels.join(" "),
        if reverse.is_empty() {
            String::new()
        } else {
            format!(" ({} from the peer)", reverse.len())
        },
        common.policy,
        common.prio,
        common.config.duration
    ));
    let record = rtlab_lab::run_experiment(&experiment, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("net run", record);
    let mut text = rtlab_report::table::summary(&doc);
    text.push_str(&rtlab_report::table::net::counters(&doc));
    text.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &text)
}

fn pingpong(args: NetPingPongArgs) -> anyhow::Result<Status> {
    let common = args.common.validate_with(crate::cli::defaults::NET)?;
    let topology = topology(&args.path, common.cpus.as_slice())?;
    let experiment = PingPong::new(PingPongConfig {
        topology: topology.clone(),
        proto: proto(&args.path),
        size: args.size as usize,
        options: options(&args.path),
        policy: common.policy,
        prio: common.prio,
        cpus: common.cpus.as_slice().to_vec(),
        explain: args.explain.settings()?,
    })?;
    let mut console = common.console();
    console.note(&format!(
        "net pingpong: {} over {}, {} bytes, {} {}, for {}",
        proto(&args.path).as_str(),
        topology.name(),
        args.size,
        common.policy,
        common.prio,
        common.config.duration
    ));
    let record = rtlab_lab::run_experiment(&experiment, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("net pingpong", record);
    let mut text = rtlab_report::table::summary(&doc);
    text.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &text)
}

fn serve(args: NetServeArgs) -> anyhow::Result<Status> {
    use std::io::Write;
    rtlab_sys::signal::install_interrupt_handler();
    let mut out = std::io::stdout();
    use rtlab_lab::net::peer::{PeerLimits, PeerServer};
    let limits = PeerLimits {
        max_prio: args.max_prio,
        max_connections: args.max_connections as usize,
        max_buffer: usize::try_from(args.max_buffer).unwrap_or(usize::MAX),
        idle_timeout: std::time::Duration::from_nanos(args.idle_timeout.get()),
        token: None,
    };
    // An address in use or not on this machine is the user's choice: said as bad input.
    std::net::TcpListener::bind(args.listen)
        .map_err(|e| BadInput(format!("--listen {}: {e}", args.listen)))?;
    let server = match PeerServer::start(args.listen, limits) {
        Ok(s) => s,
        Err(e) => anyhow::bail!("{e}"),
    };
    writeln!(out, "listening on {} (tcp and udp)", server.addr())?;
    out.flush()?;
    if server.addr().ip().is_loopback() {
        eprintln!(
            "rtlab net serve: loopback only (--listen 0.0.0.0:{} for other hosts); Ctrl-C stops",
            server.addr().port()
        );
    } else {
        eprintln!("rtlab net serve: Ctrl-C stops");
    }
    if args.max_prio.is_none() {
        eprintln!(
            "rtlab net serve: connections run under SCHED_OTHER (--max-prio N lets clients ask for real-time priority)"
        );
    }
    while !rtlab_sys::signal::interrupted() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.stop();
    Ok(Status::Ok)
}
