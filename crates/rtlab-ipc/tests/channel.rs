//! ShmChannel between two processes: integrity, blocking, peer death, errors.
#![allow(unsafe_code)]

use rtlab_ipc::{IpcError, ShmChannel};
use rtlab_sys::time::monotonic_now_ns;

const SECOND: u64 = 1_000_000_000;

fn iterations(release: u64) -> u64 {
    if cfg!(debug_assertions) {
        release / 20
    } else {
        release
    }
}

/// xorshift64: sizes and contents both sides can regenerate from the sequence number.
fn mix(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Message `seq`: its length depends on `seq`, it starts with `seq` and ends with a checksum.
fn message(seq: u64, max: usize, out: &mut Vec<u8>) {
    let len = 16 + (mix(seq + 1) as usize % (max - 15));
    out.clear();
    out.extend_from_slice(&seq.to_le_bytes());
    let mut x = mix(seq ^ 0x9e37_79b9);
    while out.len() < len - 8 {
        x = mix(x);
        out.push(x as u8);
    }
    let sum = out
        .iter()
        .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
    out.extend_from_slice(&sum.to_le_bytes());
}

fn verify(buf: &[u8], expected_seq: u64) {
    let seq = whole(buf);
    assert_eq!(seq, expected_seq, "messages out of order or lost");
}

/// Checks the checksum; returns the sequence number the message carries.
fn whole(buf: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
    let (body, tail) = buf.split_at(buf.len() - 8);
    let sum = body
        .iter()
        .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
    assert_eq!(
        sum,
        u64::from_le_bytes(tail.try_into().unwrap()),
        "torn message {seq}"
    );
    seq
}

fn stream(capacity: usize, max: usize, count: u64) {
    let ch = ShmChannel::create(capacity, max).unwrap();
    let mut msg = Vec::with_capacity(max);
    // SAFETY: the child uses only the shared mapping, a buffer allocated before the fork
    // (its capacity suffices, so it never reallocates) and syscalls.
    let child = unsafe {
        rtlab_sys::process::fork_child(|| {
            let Ok(tx) = ch.sender() else { return 2 };
            for seq in 0..count {
                message(seq, max, &mut msg);
                if tx
                    .send(&msg, Some(monotonic_now_ns() + 10 * SECOND))
                    .is_err()
                {
                    return 1;
                }
            }
            0
        })
    }
    .unwrap();
    let rx = ch.receiver().unwrap();
    let mut buf = vec![0u8; max];
    for seq in 0..count {
        let n = rx
            .recv(&mut buf, Some(monotonic_now_ns() + 10 * SECOND))
            .unwrap();
        verify(&buf[..n], seq);
    }
    assert_eq!(rtlab_sys::process::wait_child(child).unwrap(), 0);
}

#[test]
fn every_message_arrives_whole_and_in_order() {
    stream(1 << 20, 16 << 10, iterations(1_000_000));
}

#[test]
fn a_small_ring_wraps_and_blocks_without_losing_a_message() {
    // 4 KiB ring, messages up to 1 KiB: constant wrap-around and a full ring.
    stream(4096, 1024, iterations(200_000));
}

#[test]
fn a_killed_producer_is_reported_and_never_leaves_a_torn_message() {
    for round in 0..iterations(200).max(20) {
        let ch = ShmChannel::create(1 << 16, 2048).unwrap();
        let mut msg = Vec::with_capacity(2048);
        // SAFETY: as in `stream`.
        let child = unsafe {
            rtlab_sys::process::fork_child(|| {
                let Ok(tx) = ch.sender() else { return 2 };
                let mut seq = 0;
                loop {
                    message(seq, 2048, &mut msg);
                    if tx.send(&msg, None).is_err() {
                        return 1;
                    }
                    seq += 1;
                }
            })
        }
        .unwrap();
        let rx = ch.receiver().unwrap();
        let mut buf = vec![0u8; 2048];
        let kill_after = 1 + mix(round) % 500;
        let mut seq = 0;
        let deadline_ns = 2 * SECOND;
        loop {
            let started = monotonic_now_ns();
            match rx.recv(&mut buf, Some(started + deadline_ns)) {
                Ok(n) => {
                    verify(&buf[..n], seq);
                    seq += 1;
                    if seq == kill_after {
                        rtlab_sys::process::kill_hard(child).unwrap();
                    }
                }
                Err(IpcError::PeerDied) => {
                    assert!(
                        monotonic_now_ns() - started <= deadline_ns,
                        "round {round}: PeerDied past the deadline"
                    );
                    break;
                }
                Err(e) => panic!(
                    "round {round} after {seq} messages: {e}; {}; producer {}",
                    ch.state(),
                    where_is(child)
                ),
            }
        }
        assert!(seq >= kill_after, "round {round}");
        rtlab_sys::process::wait_child(child).unwrap();
    }
}

#[test]
fn a_killed_consumer_unblocks_a_producer_on_a_full_ring() {
    let ch = ShmChannel::create(4096, 1024).unwrap();
    // SAFETY: the child only sleeps in a futex wait on the shared mapping.
    let child = unsafe {
        rtlab_sys::process::fork_child(|| {
            let _rx = ch.receiver();
            std::thread::sleep(std::time::Duration::from_secs(30));
            0
        })
    }
    .unwrap();
    while ch.receiver_attached_pid() == 0 {
        std::thread::yield_now();
    }
    let tx = ch.sender().unwrap();
    let msg = [7u8; 1000];
    // Fill the ring, then kill the consumer while the producer waits for space.
    while tx
        .send(&msg, Some(monotonic_now_ns() + 100_000_000))
        .is_ok()
    {}
    rtlab_sys::process::kill_hard(child).unwrap();
    let started = monotonic_now_ns();
    let err = tx.send(&msg, Some(started + 5 * SECOND)).unwrap_err();
    assert_eq!(err, IpcError::PeerDied);
    assert!(monotonic_now_ns() - started < 5 * SECOND);
    rtlab_sys::process::wait_child(child).unwrap();
}

#[test]
fn several_producer_processes_share_an_mpsc_channel() {
    use rtlab_ipc::{ChannelOptions, Variant};
    const PRODUCERS: u64 = 4;
    let count = iterations(100_000);
    let max = 512;
    let ch =
        ShmChannel::create_anonymous(&ChannelOptions::new(1 << 14, max).variant(Variant::Mpsc))
            .unwrap();
    let rx = ch.receiver().unwrap();
    let mut msg = Vec::with_capacity(max);
    let children: Vec<i32> = (0..PRODUCERS)
        .map(|p| {
            // SAFETY: as in `stream`.
            unsafe {
                rtlab_sys::process::fork_child(|| {
                    let Ok(tx) = ch.sender() else { return 2 };
                    for seq in 0..count {
                        message(p << 48 | seq, max, &mut msg);
                        if tx
                            .send(&msg, Some(monotonic_now_ns() + 10 * SECOND))
                            .is_err()
                        {
                            return 1;
                        }
                    }
                    0
                })
            }
            .unwrap()
        })
        .collect();
    let mut next = [0u64; PRODUCERS as usize];
    let mut buf = vec![0u8; max];
    for _ in 0..count * PRODUCERS {
        let n = rx
            .recv(&mut buf, Some(monotonic_now_ns() + 10 * SECOND))
            .unwrap();
        let tagged = whole(&buf[..n]);
        let (p, seq) = ((tagged >> 48) as usize, tagged & ((1 << 48) - 1));
        assert_eq!(seq, next[p], "producer {p}: lost or reordered");
        next[p] += 1;
    }
    for child in children {
        assert_eq!(rtlab_sys::process::wait_child(child).unwrap(), 0);
    }
    // Every producer exited: the consumer is told so instead of waiting forever.
    assert_eq!(rx.recv(&mut buf, None).unwrap_err(), IpcError::PeerDied);
}

/// Where a child process is: its state and wait channel, and its kernel stack when readable.
fn where_is(pid: i32) -> String {
    let read = |what: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{what}"))
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|e| format!("({e})"))
    };
    let stat = read("stat");
    let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
    // Run and run-queue time (schedstat: ns on the CPU, ns waiting for it) over 100 ms: a
    // child starved of its CPU waits, one blocked does neither.
    let schedstat = || -> Vec<u64> {
        read("schedstat")
            .split(' ')
            .filter_map(|v| v.parse().ok())
            .collect()
    };
    let before = schedstat();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let after = schedstat();
    let grew = |i: usize| match (before.get(i), after.get(i)) {
        (Some(b), Some(a)) => format!("{} us", a.saturating_sub(*b) / 1000),
        _ => "?".into(),
    };
    let status = read("status");
    let field = |name: &str| {
        status
            .split(' ')
            .skip_while(|w| *w != name)
            .nth(1)
            .unwrap_or("?")
            .to_string()
    };
    format!(
        "pid {pid} state {state:?} syscall [{}] wchan {} stack [{}]; in 100 ms: ran {}, waited \
         for a CPU {}; switches {} voluntary {} forced; signals pending {} / {}",
        read("syscall"),
        read("wchan"),
        read("stack"),
        grew(0),
        grew(1),
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
        field("SigPnd:"),
        field("ShdPnd:"),
    )
}

#[test]
fn an_mpsc_producer_killed_holding_the_lock_does_not_stop_the_others() {
    use rtlab_ipc::{ChannelOptions, Variant};
    let max = 2048;
    for round in 0..iterations(100).max(10) {
        let ch =
            ShmChannel::create_anonymous(&ChannelOptions::new(1 << 16, max).variant(Variant::Mpsc))
                .unwrap();
        let rx = ch.receiver().unwrap();
        let mut msg = Vec::with_capacity(max);
        let spawn = |tag: u64, msg: &mut Vec<u8>| {
            // SAFETY: as in `stream`.
            unsafe {
                rtlab_sys::process::fork_child(|| {
                    let Ok(tx) = ch.sender() else { return 2 };
                    for seq in 0.. {
                        message(tag << 48 | seq, max, msg);
                        if tx.send(msg, None).is_err() {
                            return 1;
                        }
                    }
                    0
                })
            }
            .unwrap()
        };
        let (victim, survivor) = (spawn(0, &mut msg), spawn(1, &mut msg));
        let mut buf = vec![0u8; max];
        let mut next = [0u64; 2];
        // The victim dies once both producers have sent (a producer that has not attached yet
        // when the only one attached dies cannot be known: the consumer is then told, rightly,
        // that no producer is left; a busy machine can start the second that late).
        let kill_after = 1 + mix(round) % 300;
        let mut killed_at = None;
        let mut i = 0;
        while killed_at.is_none_or(|k| i < k + 2000) {
            if killed_at.is_none() && i >= kill_after && next[1] > 0 && next[0] > 0 {
                rtlab_sys::process::kill_hard(victim).unwrap();
                killed_at = Some(i);
            }
            assert!(i < 10_000_000, "round {round}: a producer never sent");
            i += 1;
            let n = rx
                .recv(&mut buf, Some(monotonic_now_ns() + 5 * SECOND))
                .unwrap_or_else(|e| {
                    panic!(
                        "round {round}, message {i} (victim killed at {killed_at:?}): {e}; {}; \
                         victim {}; survivor {}",
                        ch.state(),
                        where_is(victim),
                        where_is(survivor)
                    )
                });
            let tagged = whole(&buf[..n]);
            let (p, seq) = ((tagged >> 48) as usize, tagged & ((1 << 48) - 1));
            assert_eq!(
                seq, next[p],
                "round {round}: producer {p} lost or reordered"
            );
            next[p] += 1;
        }
        assert!(next[1] > 0, "round {round}: the survivor kept sending");
        rtlab_sys::process::kill_hard(survivor).unwrap();
        rtlab_sys::process::wait_child(victim).unwrap();
        rtlab_sys::process::wait_child(survivor).unwrap();
    }
}

#[test]
fn a_killed_consumer_never_hangs_the_producer_and_a_new_one_continues() {
    let max = 2048;
    for round in 0..iterations(200).max(20) {
        let ch = ShmChannel::create(1 << 14, max).unwrap();
        let tx = ch.sender().unwrap();
        let mut child_buf = vec![0u8; max];
        // SAFETY: the child uses only the shared mapping and a buffer made before the fork.
        let child = unsafe {
            rtlab_sys::process::fork_child(|| {
                let Ok(rx) = ch.receiver() else { return 2 };
                while rx.recv(&mut child_buf, None).is_ok() {}
                1
            })
        }
        .unwrap();
        // A consumer killed before it attached is one that never came: only the deadline
        // ends that wait. Kill it once attached, at a random point of its receiving.
        while ch.receiver_attached_pid() == 0 {
            std::thread::yield_now();
        }
        let kill_after = 1 + mix(round + 7) % 2000;
        let mut msg = Vec::with_capacity(max);
        let mut seq = 0;
        let deadline_ns = 2 * SECOND;
        loop {
            if seq == kill_after {
                rtlab_sys::process::kill_hard(child).unwrap();
            }
            message(seq, max, &mut msg);
            let started = monotonic_now_ns();
            match tx.send(&msg, Some(started + deadline_ns)) {
                Ok(()) => seq += 1,
                Err(IpcError::PeerDied) => {
                    assert!(
                        monotonic_now_ns() - started <= deadline_ns,
                        "round {round}: PeerDied past the deadline"
                    );
                    break;
                }
                Err(e) => panic!(
                    "round {round} after {seq} messages: {e}; {}; consumer {}",
                    ch.state(),
                    where_is(child)
                ),
            }
        }
        rtlab_sys::process::wait_child(child).unwrap();
        // A new consumer (this process) attaches where the dead one stopped: every message
        // left is whole and later than the one before (one may repeat if the consumer died
        // between copying it out and moving the tail; none is torn).
        let rx = ch.receiver().expect("the dead consumer's end is free");
        let mut buf = vec![0u8; max];
        let mut last = None;
        while let Some(n) = rx.try_recv(&mut buf).unwrap() {
            let s = whole(&buf[..n]);
            assert!(
                last.is_none_or(|l| s > l),
                "round {round}: {s} after {last:?}"
            );
            last = Some(s);
        }
        assert_eq!(
            last,
            Some(seq - 1),
            "round {round}: the newest message is there"
        );
    }
}

#[test]
fn busy_polling_ends_and_try_variants_never_block() {
    let ch = ShmChannel::create(4096, 1024).unwrap();
    let tx = ch.sender().unwrap().busy_poll(true);
    let rx = ch.receiver().unwrap().busy_poll(true);
    let mut buf = [0u8; 1024];
    assert_eq!(rx.try_recv(&mut buf).unwrap(), None);
    let mut sent = 0;
    while tx.try_send(&[sent as u8; 1000]).unwrap() {
        sent += 1;
    }
    assert!(sent >= 2, "a 4 KiB ring holds several 1000-byte messages");
    let deadline = monotonic_now_ns() + 5_000_000;
    assert_eq!(
        tx.send(&[0; 1000], Some(deadline)).unwrap_err(),
        IpcError::TimedOut,
        "a busy-polling sender still honours its deadline"
    );
    for i in 0..sent {
        assert_eq!(rx.recv(&mut buf, None).unwrap(), 1000);
        assert_eq!(buf[0], i as u8);
    }
    assert_eq!(rx.try_recv(&mut buf).unwrap(), None);
}

#[test]
fn errors_are_typed() {
    let ch = ShmChannel::create(4096, 100).unwrap();
    let tx = ch.sender().unwrap();
    let rx = ch.receiver().unwrap();
    assert_eq!(
        tx.send(&[0; 101], None).unwrap_err(),
        IpcError::TooLarge { len: 101, max: 100 }
    );
    let deadline = monotonic_now_ns() + 5_000_000;
    assert_eq!(
        rx.recv(&mut [0; 100], Some(deadline)).unwrap_err(),
        IpcError::TimedOut
    );
    assert!(monotonic_now_ns() >= deadline);
    tx.send(&[1; 50], None).unwrap();
    assert_eq!(
        rx.recv(&mut [0; 10], None).unwrap_err(),
        IpcError::BufferTooSmall { have: 10, need: 50 }
    );
    assert_eq!(
        rx.recv(&mut [0; 100], None).unwrap(),
        50,
        "the message stayed in the channel"
    );
    assert!(
        ShmChannel::create(4096, 4096).is_err(),
        "a message must leave room for others"
    );
}

fn slot_queue_keeps_every_message_whole_and_in_order(signalling: rtlab_ipc::Signalling) {
    let count = iterations(100_000);
    let max = 1024;
    let q = rtlab_ipc::MutexSemQueue::with_signalling(8, max, signalling).unwrap();
    let mut msg = Vec::with_capacity(max);
    // SAFETY: the child uses only the shared mapping, a buffer allocated before the fork
    // (never reallocated) and futex syscalls.
    let child = unsafe {
        rtlab_sys::process::fork_child(|| {
            for seq in 0..count {
                message(seq, max, &mut msg);
                if q.send(&msg, Some(monotonic_now_ns() + 10 * SECOND))
                    .is_err()
                {
                    return 1;
                }
            }
            0
        })
    }
    .unwrap();
    let mut buf = vec![0u8; max];
    for seq in 0..count {
        let n = q
            .recv(&mut buf, Some(monotonic_now_ns() + 10 * SECOND))
            .unwrap();
        verify(&buf[..n], seq);
    }
    assert_eq!(rtlab_sys::process::wait_child(child).unwrap(), 0);
    let deadline = monotonic_now_ns() + 5_000_000;
    assert_eq!(
        q.recv(&mut buf, Some(deadline)).unwrap_err(),
        IpcError::TimedOut
    );
}

#[test]
fn mutex_semaphore_queue_keeps_every_message_whole_and_in_order() {
    slot_queue_keeps_every_message_whole_and_in_order(rtlab_ipc::Signalling::Semaphores);
}

#[test]
fn mutex_condvar_queue_keeps_every_message_whole_and_in_order() {
    slot_queue_keeps_every_message_whole_and_in_order(rtlab_ipc::Signalling::Condvars);
}
