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
    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
    assert_eq!(seq, expected_seq, "messages out of order or lost");
    let (body, tail) = buf.split_at(buf.len() - 8);
    let sum = body
        .iter()
        .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
    assert_eq!(
        sum,
        u64::from_le_bytes(tail.try_into().unwrap()),
        "torn message {seq}"
    );
}

fn stream(capacity: usize, max: usize, count: u64) {
    let ch = ShmChannel::create(capacity, max).unwrap();
    let mut msg = Vec::with_capacity(max);
    // SAFETY: the child uses only the shared mapping, a buffer allocated before the fork
    // (its capacity suffices, so it never reallocates) and syscalls.
    let child = unsafe {
        rtlab_sys::process::fork_child(|| {
            let tx = ch.sender();
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
    let rx = ch.receiver();
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
    stream(1 << 20, 16 << 10, iterations(500_000));
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
                let tx = ch.sender();
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
        let rx = ch.receiver();
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
                Err(e) => panic!("round {round} after {seq} messages: {e}"),
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
    let tx = ch.sender();
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
fn errors_are_typed() {
    let ch = ShmChannel::create(4096, 100).unwrap();
    let tx = ch.sender();
    let rx = ch.receiver();
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

#[test]
fn mutex_semaphore_queue_keeps_every_message_whole_and_in_order() {
    let count = iterations(100_000);
    let max = 1024;
    let q = rtlab_ipc::MutexSemQueue::create(8, max).unwrap();
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
