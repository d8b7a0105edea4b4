//! rtlab-ipc beside iceoryx2: round trips between two processes (a pinger and an echoing
//! ponger, each pinned to its own CPU at SCHED_FIFO 50 when root), the same message on each,
//! in interleaved blocks (bench/ipc.sh runs it and computes the ratios).
//!
//!   rtlab-bench-iceoryx2 SIZE BLOCKS BLOCK_MS
//!
//! Four links, every block visits each (its first one rotating):
//! - `rtlab-spin`: rtlab-ipc named `ShmChannel`s, both ends busy-polling;
//! - `iceoryx2-spin`: iceoryx2 publish-subscribe (`[u8]` slices, one in flight), the receiver
//!   polling `receive()` (iceoryx2's own benchmark's loop);
//! - `rtlab-wait`: rtlab-ipc as it waits by default (a 20 us spin, then a futex);
//! - `iceoryx2-wait`: iceoryx2 publish-subscribe plus an event service: the sender notifies,
//!   the receiver blocks in its listener when nothing is there (iceoryx2's way to sleep).
//!
//! Prints one line per block and link: `LINK SIZE p50 NS p99 NS max NS n COUNT`.
use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::*;
use rtlab_ipc::{ChannelOptions, Receiver, Sender, ShmChannel};
use rtlab_sys::time::monotonic_now_ns;

const DATA: u8 = 0;
const SWITCH: u8 = 1;
const STOP: u8 = 2;
const LINKS: [&str; 4] = ["rtlab-spin", "iceoryx2-spin", "rtlab-wait", "iceoryx2-wait"];

type Error = Box<dyn std::error::Error>;

trait Link {
    fn send(&mut self, msg: &[u8]) -> Result<(), Error>;
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Error>;
}

struct Rtlab {
    tx: Sender<'static>,
    rx: Receiver<'static>,
}

impl Link for Rtlab {
    fn send(&mut self, msg: &[u8]) -> Result<(), Error> {
        Ok(self.tx.send(msg, None)?)
    }
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        Ok(self.rx.recv(buf, None)?)
    }
}

struct Iceoryx {
    tx: Publisher<ipc::Service, [u8], ()>,
    rx: Subscriber<ipc::Service, [u8], ()>,
    /// For the waiting link: notify after each send, block in the listener when empty.
    events: Option<(Notifier<ipc::Service>, Listener<ipc::Service>)>,
}

impl Link for Iceoryx {
    fn send(&mut self, msg: &[u8]) -> Result<(), Error> {
        let sample = self.tx.loan_slice_uninit(msg.len())?;
        sample.write_from_slice(msg).send()?;
        if let Some((n, _)) = &self.events {
            n.notify()?;
        }
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        loop {
            if let Some(s) = self.rx.receive()? {
                let p = s.payload();
                buf[..p.len()].copy_from_slice(p);
                return Ok(p.len());
            }
            match &self.events {
                Some((_, l)) => {
                    l.blocking_wait(|_| {})?;
                }
                None => std::hint::spin_loop(),
            }
        }
    }
}

fn rtlab_link(tag: &str, parent: bool, busy: bool) -> Result<Rtlab, Error> {
    let (out, inn) = if parent {
        ("a2b", "b2a")
    } else {
        ("b2a", "a2b")
    };
    let open = |dir: &str| -> Result<&'static ShmChannel, Error> {
        let name = format!("{tag}-{dir}");
        let ch = if parent {
            ShmChannel::create_named(&name, &ChannelOptions::new(1 << 16, 1 << 14))?
        } else {
            ShmChannel::open(&name)?
        };
        Ok(Box::leak(Box::new(ch)))
    };
    // The parent creates both before the child starts; the child opens them.
    let (o, i) = (open(out)?, open(inn)?);
    Ok(Rtlab {
        tx: o.sender()?.busy_poll(busy),
        rx: i.receiver()?.busy_poll(busy),
    })
}

fn iceoryx_link(
    node: &Node<ipc::Service>,
    tag: &str,
    parent: bool,
    wait: bool,
    size: usize,
) -> Result<Iceoryx, Error> {
    let (out, inn) = if parent {
        ("a2b", "b2a")
    } else {
        ("b2a", "a2b")
    };
    let kind = if wait { "wait" } else { "spin" };
    let pubsub = |dir: &str| {
        node.service_builder(&ServiceName::new(&format!("{tag}/{kind}/{dir}"))?)
            .publish_subscribe::<[u8]>()
            .max_publishers(1)
            .max_subscribers(1)
            .history_size(0)
            .subscriber_max_buffer_size(1)
            .enable_safe_overflow(true)
            .open_or_create()
            .map_err(Error::from)
    };
    let (o, i) = (pubsub(out)?, pubsub(inn)?);
    let events = if wait {
        let event = |dir: &str| {
            node.service_builder(&ServiceName::new(&format!("{tag}/event/{dir}"))?)
                .event()
                .open_or_create()
                .map_err(Error::from)
        };
        let (eo, ei) = (event(out)?, event(inn)?);
        Some((
            eo.notifier_builder().create()?,
            ei.listener_builder().create()?,
        ))
    } else {
        None
    };
    Ok(Iceoryx {
        tx: o.publisher_builder().initial_max_slice_len(size).create()?,
        rx: i.subscriber_builder().create()?,
        events,
    })
}

fn links(
    node: &Node<ipc::Service>,
    tag: &str,
    parent: bool,
    size: usize,
) -> Result<Vec<Box<dyn Link>>, Error> {
    Ok(vec![
        Box::new(rtlab_link(&format!("{tag}-spin"), parent, true)?),
        Box::new(iceoryx_link(node, tag, parent, false, size)?),
        Box::new(rtlab_link(&format!("{tag}-wait"), parent, false)?),
        Box::new(iceoryx_link(node, tag, parent, true, size)?),
    ])
}

/// Pins the calling thread to `cpu` at SCHED_FIFO 50 (when allowed; says so otherwise).
fn place(cpu: usize) {
    let cpus = rtlab_sys::affinity::usable_cpus();
    if let Some(&c) = cpus.as_slice().get(cpu) {
        let _ = rtlab_sys::affinity::set_current_thread_affinity(&vec![c].into());
    }
    if let Err(e) =
        rtlab_sys::sched::set_current_thread_scheduler(rtlab_sys::sched::Policy::Fifo, 50)
    {
        eprintln!("note: SCHED_FIFO refused ({e}); measuring at SCHED_OTHER");
    }
}

fn child(tag: &str, size: usize) -> Result<(), Error> {
    place(1);
    let node = NodeBuilder::new().create::<ipc::Service>()?;
    let mut links = links(&node, tag, false, size)?;
    let mut buf = vec![0u8; 1 << 14];
    let mut at = 0;
    links[at].send(b"r")?; // ready
    loop {
        let n = links[at].recv(&mut buf)?;
        match buf[0] {
            SWITCH => {
                links[at].send(&buf[..n])?;
                at = buf[1] as usize;
            }
            STOP => return Ok(()),
            _ => links[at].send(&buf[..n])?,
        }
    }
}

fn parent(size: usize, blocks: usize, block_ms: u64) -> Result<(), Error> {
    let tag = format!("rtlab-bench-{}", std::process::id());
    let node = NodeBuilder::new().create::<ipc::Service>()?;
    // Create the rtlab channels before the child opens them; iceoryx2 opens or creates.
    let mut links = links(&node, &tag, true, size)?;
    let mut kid = std::process::Command::new(std::env::current_exe()?)
        .args(["child", &tag, &size.to_string()])
        .spawn()?;
    place(0);
    let mut buf = vec![0u8; 1 << 14];
    let mut at = 0;
    links[at].recv(&mut buf)?; // the child is ready
    let mut msg = vec![0u8; size.max(2)];
    let mut rtts = Vec::new();
    let mut block = |links: &mut Vec<Box<dyn Link>>,
                     at: &mut usize,
                     to: usize,
                     ms: u64,
                     print: bool|
     -> Result<(), Error> {
        if to != *at {
            msg[0] = SWITCH;
            msg[1] = to as u8;
            links[*at].send(&msg)?;
            links[*at].recv(&mut buf)?;
            *at = to;
        }
        msg[0] = DATA;
        rtts.clear();
        let end = monotonic_now_ns() + ms * 1_000_000;
        loop {
            let t0 = monotonic_now_ns();
            links[to].send(&msg)?;
            let n = links[to].recv(&mut buf)?;
            let t1 = monotonic_now_ns();
            assert_eq!(n, msg.len(), "echo of another length");
            rtts.push(t1 - t0);
            if t1 >= end {
                break;
            }
        }
        rtts.sort_unstable();
        let q = |p: f64| rtts[((rtts.len() - 1) as f64 * p) as usize];
        if print {
            println!(
                "{} {} p50 {} p99 {} max {} n {}",
                LINKS[to],
                size,
                q(0.5),
                q(0.99),
                rtts[rtts.len() - 1],
                rtts.len()
            );
        }
        Ok(())
    };
    // Warm-up, then the blocks (each visits every link, the first rotating).
    for to in 0..LINKS.len() {
        block(&mut links, &mut at, to, 200, false)?;
    }
    for b in 0..blocks {
        for k in 0..LINKS.len() {
            block(&mut links, &mut at, (b + k) % LINKS.len(), block_ms, true)?;
        }
    }
    msg[0] = STOP;
    links[at].send(&msg)?;
    kid.wait()?;
    // The channels are leaked (the links borrow them for the whole run), so their names are
    // not removed on drop: remove them here, or every run leaves four in /dev/shm.
    for entry in std::fs::read_dir("/dev/shm")?.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{tag}-"))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

fn main() {
    // (No config file: iceoryx2's defaults, which it would warn about in each process.)
    set_log_level(LogLevel::Error);
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, what: &str| -> u64 {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
            eprintln!(
                "usage: rtlab-bench-iceoryx2 SIZE BLOCKS BLOCK_MS ({what} missing or not a number)"
            );
            std::process::exit(2)
        })
    };
    let r = if args.get(1).map(String::as_str) == Some("child") {
        child(&args[2], num(3, "SIZE") as usize)
    } else {
        parent(
            num(1, "SIZE") as usize,
            num(2, "BLOCKS") as usize,
            num(3, "BLOCK_MS"),
        )
    };
    if let Err(e) = r {
        eprintln!("rtlab-bench-iceoryx2: {e}");
        std::process::exit(1);
    }
}
