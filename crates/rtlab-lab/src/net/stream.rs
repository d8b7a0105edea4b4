//! Periodic streams, their acknowledgements, and ping-pong, over TCP and UDP.
//!
//! A stream's sender keeps an absolute schedule (`start + k x period`) and never skips a
//! message: when one is late (a full send buffer, preemption), the next ones go out as soon as
//! they can, and every round trip is measured from the **scheduled** send time, so a stall
//! shows in all the messages it delayed (no coordinated omission). Send lateness (actual
//! start of the send minus the scheduled time) is its own distribution.

use super::protocol::{Counters, Stop, StreamReport};
pub use super::protocol::{Plan, SocketOptions};
use super::wire::{self, Header, Kind, HEADER_LEN};
use crate::LabError;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::sched::set_current_thread_scheduler;
use rtlab_sys::time::{monotonic_now_ns, sleep_until_monotonic_ns};
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

impl SocketOptions {
    fn apply_common(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<(), LabError> {
        use rtlab_sys::net;
        if self.busy_poll_us > 0 {
            net::set_busy_poll_us(fd, self.busy_poll_us)?;
        }
        if let Some(p) = self.priority {
            net::set_priority(fd, p)?;
        }
        if let Some(t) = self.tos {
            net::set_tos(fd, t)?;
        }
        if let Some(b) = self.sndbuf {
            net::set_sndbuf(fd, b)?;
        }
        if let Some(b) = self.rcvbuf {
            net::set_rcvbuf(fd, b)?;
        }
        Ok(())
    }

    /// Applies the options to a TCP socket.
    pub fn apply_tcp(&self, s: &TcpStream) -> Result<(), LabError> {
        use std::os::fd::AsFd;
        rtlab_sys::net::set_nodelay(s, self.nodelay)?;
        if self.quickack {
            rtlab_sys::net::set_quickack(s, true)?;
        }
        if self.thin {
            rtlab_sys::net::set_thin_linear_timeouts(s, true)?;
        }
        self.apply_common(s.as_fd())
    }

    /// Applies the options that exist for UDP.
    pub fn apply_udp(&self, s: &UdpSocket) -> Result<(), LabError> {
        use std::os::fd::AsFd;
        self.apply_common(s.as_fd())
    }
}

/// When a stream runs.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// First scheduled send (absolute CLOCK_MONOTONIC); 0: when the sender starts.
    pub start_ns: u64,
    /// No message is scheduled at or after this.
    pub end_ns: u64,
}

impl Timing {
    /// Runs until told to stop (a reverse stream on the peer).
    pub fn until_stopped() -> Timing {
        Timing {
            start_ns: 0,
            end_ns: u64::MAX,
        }
    }
}

/// What one stream measured.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Round trips from the scheduled send time to the acknowledgement.
    pub rtt: LatencyHistogram,
    /// Actual send start minus scheduled time.
    pub lateness: LatencyHistogram,
    /// Sent, acknowledged, lost and the rest.
    pub counters: Counters,
}

impl StreamStats {
    /// The peer's report of a reverse stream (histograms encoded).
    pub fn to_report(&self) -> StreamReport {
        StreamReport {
            rtt: self.rtt.encode_base64().unwrap_or_default(),
            lateness: self.lateness.encode_base64().unwrap_or_default(),
            counters: self.counters(),
        }
    }

    /// The counters, as recorded in a series' config.
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// From a peer's report.
    pub fn from_report(r: StreamReport) -> Result<StreamStats, LabError> {
        let hist = |data: &str| match data {
            "" => Ok(LatencyHistogram::new()),
            data => LatencyHistogram::decode_base64(data).map_err(LabError::from),
        };
        Ok(StreamStats {
            rtt: hist(&r.rtt)?,
            lateness: hist(&r.lateness)?,
            counters: r.counters,
        })
    }
}

/// Reads exactly `buf.len()` bytes, tolerating read timeouts (the socket has one) until
/// `give_up()` says so at such a timeout. Partial progress survives timeouts.
fn read_polling(
    s: &mut TcpStream,
    buf: &mut [u8],
    give_up: &dyn Fn() -> bool,
) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if give_up() {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Bytes of one acknowledgement: the header, padded to `pad_segments` full segments.
pub fn ack_length(s: &TcpStream, pad_segments: u32) -> usize {
    if pad_segments == 0 {
        return HEADER_LEN;
    }
    let mss = rtlab_sys::net::max_segment(s).unwrap_or(1448);
    (pad_segments as usize * mss).max(HEADER_LEN)
}

/// Acknowledges `h` with a header (and padding) written into `buf` (of `ack_length`).
pub fn write_ack(w: &mut impl Write, h: &Header, buf: &mut [u8]) -> std::io::Result<()> {
    let mut ack = *h;
    ack.kind = Kind::Ack;
    ack.payload = 0;
    ack.pad = (buf.len() - HEADER_LEN) as u32;
    ack.encode(buf);
    w.write_all(buf)
}

/// How long after the last send the acknowledgements are still awaited.
fn drain_ns(plan: &Plan) -> u64 {
    (4 * plan.period_ns).max(2_000_000_000)
}

/// Ack bookkeeping shared by TCP and UDP.
struct AckBook<'a> {
    plan: &'a Plan,
    start_ns: u64,
    next: u64,
    stats: StreamStats,
}

impl<'a> AckBook<'a> {
    /// In the ack reader's thread: takes the stream's scheduling, waits until the sender fixed
    /// the schedule's origin.
    fn when_started(plan: &'a Plan, progress: &Progress) -> AckBook<'a> {
        sched(plan);
        while progress.start_ns.load(Ordering::Acquire) == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        AckBook {
            plan,
            start_ns: progress.start_ns.load(Ordering::Acquire),
            next: 0,
            stats: StreamStats::default(),
        }
    }

    /// The final statistics once the sender sent `sent` messages.
    fn finish(self, sent: u64, lateness: LatencyHistogram) -> StreamStats {
        let mut stats = self.stats;
        stats.counters.sent = sent;
        stats.lateness = lateness;
        stats.counters.lost = sent.saturating_sub(stats.counters.acked);
        stats
    }

    fn ack(&mut self, h: &Header, now: u64) {
        if h.seq < self.next {
            self.stats.counters.duplicates += 1;
            return;
        }
        if h.seq > self.next {
            self.stats.counters.reordered += 1;
        }
        self.next = h.seq + 1;
        self.stats.counters.acked += 1;
        let rtt = now.saturating_sub(h.sched_ns);
        if h.sched_ns < self.start_ns + self.plan.warmup_ns {
            self.stats.counters.warmup_trimmed += 1;
            return;
        }
        self.stats.rtt.record(Nanos(rtt));
        if rtt > self.plan.deadline_ns {
            self.stats.counters.deadline_misses += 1;
        }
    }
}

/// Shared between a stream's sender and its ack reader.
struct Progress {
    /// Messages sent; `u64::MAX` while the sender still runs.
    final_count: AtomicU64,
    /// When the sender finished.
    done_at: AtomicU64,
    /// The schedule's origin, once the sender fixed it.
    start_ns: AtomicU64,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            final_count: AtomicU64::new(u64::MAX),
            done_at: AtomicU64::new(0),
            start_ns: AtomicU64::new(0),
        }
    }
}

fn sched(plan: &Plan) {
    // Best effort: without the privilege the stream still runs, at normal priority (the
    // caller warned once).
    let _ = set_current_thread_scheduler(plan.policy, plan.prio);
}

/// The sending loop: returns (messages sent, lateness, warm-up count). `report` sends late
/// wakeups to the explainer.
#[allow(clippy::too_many_arguments)]
fn send_loop(
    plan: &Plan,
    timing: &Timing,
    stop: &AtomicBool,
    buf: &mut [u8],
    pad: usize,
    progress: &Progress,
    report: Option<&(rtlab_trace::Reporter, u16)>,
    mut send: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<(u64, LatencyHistogram), LabError> {
    let tid = rtlab_sys::futex::current_tid() as i64;
    let start = if timing.start_ns == 0 {
        monotonic_now_ns()
    } else {
        timing.start_ns
    };
    progress.start_ns.store(start, Ordering::Release);
    let mut lateness = LatencyHistogram::new();
    let mut k = 0u64;
    loop {
        let due = start + k * plan.period_ns;
        if due >= timing.end_ns || stop.load(Ordering::Relaxed) || rtlab_sys::signal::interrupted()
        {
            break;
        }
        let _ = sleep_until_monotonic_ns(due);
        let now = monotonic_now_ns();
        if let Some((reporter, series)) = report.filter(|_| due >= start + plan.warmup_ns) {
            reporter.report_if_late(*series, tid, due, now);
        }
        let h = Header {
            kind: Kind::Data,
            stream: plan.stream,
            payload: (buf.len() - pad - HEADER_LEN) as u32,
            pad: pad as u32,
            seq: k,
            sched_ns: due,
            sent_ns: now,
        };
        h.encode(buf);
        send(buf).map_err(|e| LabError::Net(format!("send: {e}")))?;
        if due >= start + plan.warmup_ns {
            lateness.record(Nanos(now - due));
        }
        k += 1;
    }
    Ok((k, lateness))
}

/// Runs one periodic stream over a connected TCP socket whose hello was sent: this thread
/// sends, a second one reads the acknowledgements. With `control_stop` (the peer's side of a
/// reverse stream), a `Report` message from the other end stops the sender.
pub fn run_tcp(
    s: TcpStream,
    plan: &Plan,
    timing: &Timing,
    options: &SocketOptions,
    control_stop: bool,
    report: Option<(rtlab_trace::Reporter, u16)>,
) -> Result<StreamStats, LabError> {
    let mss = rtlab_sys::net::max_segment(&s).unwrap_or(1448);
    let total = plan.size.max(HEADER_LEN);
    let pad = if plan.pad_segments > 0 {
        (plan.pad_segments as usize * mss).saturating_sub(total)
    } else {
        0
    };
    let mut buf = vec![0xa5u8; total + pad];
    let mut reader = s.try_clone().map_err(LabError::from)?;
    reader
        .set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(LabError::from)?;
    let stop = AtomicBool::new(false);
    let progress = Progress::new();
    let quickack = options.quickack;
    let (sent, lateness, book) = std::thread::scope(|scope| {
        let acks = scope.spawn(|| -> Result<AckBook<'_>, LabError> {
            let mut book = AckBook::when_started(plan, &progress);
            let mut hbuf = [0u8; HEADER_LEN];
            let mut scratch = Vec::new();
            let finished = || {
                let count = progress.final_count.load(Ordering::Acquire);
                count != u64::MAX
                    && monotonic_now_ns()
                        > progress.done_at.load(Ordering::Acquire) + drain_ns(plan)
            };
            loop {
                let count = progress.final_count.load(Ordering::Acquire);
                if count != u64::MAX && book.next >= count {
                    return Ok(book);
                }
                match read_polling(&mut reader, &mut hbuf, &finished) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Ok(book),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && control_stop => {
                        stop.store(true, Ordering::Relaxed);
                        return Ok(book);
                    }
                    Err(e) => return Err(LabError::Net(format!("reading acknowledgements: {e}"))),
                }
                let now = monotonic_now_ns();
                let h = Header::decode(&hbuf)?;
                match h.kind {
                    Kind::Ack => {
                        book.ack(&h, now);
                        if h.pad > wire::MAX_CONTROL {
                            return Err(LabError::Net(format!("an ack padded to {} bytes", h.pad)));
                        }
                        if h.pad > 0 {
                            scratch.resize(h.pad as usize, 0);
                            read_polling(&mut reader, &mut scratch, &|| false).map_err(|e| {
                                LabError::Net(format!("reading an ack's padding: {e}"))
                            })?;
                        }
                    }
                    Kind::Report if control_stop => {
                        wire::skip(&mut reader, h.payload as u64 + h.pad as u64)
                            .map_err(LabError::from)?;
                        stop.store(true, Ordering::Relaxed);
                    }
                    other => {
                        return Err(LabError::Net(format!(
                            "unexpected {other:?} instead of an ack"
                        )))
                    }
                }
                if quickack {
                    let _ = rtlab_sys::net::set_quickack(&reader, true);
                }
            }
        });
        sched(plan);
        let mut w = &s;
        let sent = send_loop(
            plan,
            timing,
            &stop,
            &mut buf,
            pad,
            &progress,
            report.as_ref(),
            |b| w.write_all(b),
        );
        let count = match &sent {
            Ok((n, _)) => *n,
            Err(_) => 0,
        };
        progress
            .done_at
            .store(monotonic_now_ns(), Ordering::Release);
        progress.final_count.store(count, Ordering::Release);
        if sent.is_err() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let book = acks
            .join()
            .map_err(|_| LabError::Panicked("ack reader".into()));
        sent.map(|(n, l)| (n, l, book))
    })?;
    let mut stats = book??.finish(sent, lateness);
    stats.counters.pad_bytes = pad;
    stats.counters.retransmits = rtlab_sys::net::tcp_counters(&s)
        .ok()
        .map(|c| c.total_retrans as u64);
    Ok(stats)
}

/// Runs one periodic stream over a connected UDP socket (one datagram per message).
pub fn run_udp(
    s: UdpSocket,
    plan: &Plan,
    timing: &Timing,
    report: Option<(rtlab_trace::Reporter, u16)>,
) -> Result<StreamStats, LabError> {
    let total = plan.size.max(HEADER_LEN);
    if total > 65_000 {
        return Err(LabError::Net(format!(
            "{total}-byte messages do not fit one UDP datagram (max 65000)"
        )));
    }
    let mut buf = vec![0xa5u8; total];
    let reader = s.try_clone().map_err(LabError::from)?;
    reader
        .set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(LabError::from)?;
    let stop = AtomicBool::new(false);
    let progress = Progress::new();
    let (sent, lateness, book) = std::thread::scope(|scope| {
        let acks = scope.spawn(|| {
            let mut book = AckBook::when_started(plan, &progress);
            let mut hbuf = [0u8; 128];
            loop {
                let count = progress.final_count.load(Ordering::Acquire);
                if count != u64::MAX
                    && (book.next >= count
                        || monotonic_now_ns()
                            > progress.done_at.load(Ordering::Acquire) + drain_ns(plan))
                {
                    return book;
                }
                if let Ok(n) = reader.recv(&mut hbuf) {
                    let now = monotonic_now_ns();
                    if let Ok(h) = Header::decode(&hbuf[..n]) {
                        if h.kind == Kind::Ack && h.stream == plan.stream {
                            book.ack(&h, now);
                        }
                    }
                }
            }
        });
        sched(plan);
        let sent = send_loop(
            plan,
            timing,
            &stop,
            &mut buf,
            0,
            &progress,
            report.as_ref(),
            |b| s.send(b).map(|_| ()),
        );
        let count = sent.as_ref().map_or(0, |(n, _)| *n);
        progress
            .done_at
            .store(monotonic_now_ns(), Ordering::Release);
        progress.final_count.store(count, Ordering::Release);
        let book = acks
            .join()
            .map_err(|_| LabError::Panicked("ack reader".into()));
        sent.map(|(n, l)| (n, l, book))
    })?;
    Ok(book?.finish(sent, lateness))
}

/// The client's side of a reverse stream (the peer sends, this side acknowledges): runs
/// until `end_ns`, then asks the peer to stop and returns the peer's measurements.
pub fn receive_reverse(
    mut s: TcpStream,
    end_ns: u64,
    quickack: bool,
    plan: &Plan,
) -> Result<StreamStats, LabError> {
    sched(plan);
    let writer = std::sync::Mutex::new(s.try_clone().map_err(LabError::from)?);
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(LabError::from)?;
    let mut hbuf = [0u8; HEADER_LEN];
    let mut body = Vec::new();
    let mut ack_buf = vec![0u8; ack_length(&s, plan.pad_segments)];
    let mut stop_sent = false;
    let report_deadline = std::cell::Cell::new(u64::MAX);
    loop {
        let give_up = || {
            let now = monotonic_now_ns();
            if !stop_sent && (now >= end_ns || rtlab_sys::signal::interrupted()) {
                return false; // handled below, between messages
            }
            now > report_deadline.get()
        };
        match read_polling(&mut s, &mut hbuf, &give_up) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(LabError::Net(
                    "the peer sent no report after the stop".into(),
                ))
            }
            Err(e) => return Err(LabError::Net(format!("reverse stream: {e}"))),
        }
        let h = Header::decode(&hbuf)?;
        match h.kind {
            Kind::Data => {
                body.resize(h.payload as usize, 0);
                read_polling(&mut s, &mut body, &|| false).map_err(LabError::from)?;
                write_ack(&mut *writer.lock().expect("writer"), &h, &mut ack_buf)
                    .map_err(LabError::from)?;
                if quickack {
                    let _ = rtlab_sys::net::set_quickack(&s, true);
                }
                body.resize(h.pad as usize, 0);
                read_polling(&mut s, &mut body, &|| false).map_err(LabError::from)?;
            }
            Kind::Report => {
                // The peer's word: its size is checked before anything is allocated for it.
                if h.payload > wire::MAX_CONTROL {
                    return Err(LabError::Net(format!(
                        "a report of {} bytes from the peer",
                        h.payload
                    )));
                }
                body.resize(h.payload as usize, 0);
                read_polling(&mut s, &mut body, &|| false).map_err(LabError::from)?;
                let report: StreamReport = serde_json::from_slice(&body)
                    .map_err(|e| LabError::Net(format!("the peer's report: {e}")))?;
                return StreamStats::from_report(report);
            }
            other => {
                return Err(LabError::Net(format!(
                    "unexpected {other:?} on a reverse stream"
                )))
            }
        }
        let now = monotonic_now_ns();
        if !stop_sent && (now >= end_ns || rtlab_sys::signal::interrupted()) {
            wire::write_control(&mut *writer.lock().expect("writer"), Kind::Report, &Stop {})
                .map_err(LabError::from)?;
            stop_sent = true;
            report_deadline.set(now + drain_ns(plan) + 5_000_000_000);
        }
    }
}
