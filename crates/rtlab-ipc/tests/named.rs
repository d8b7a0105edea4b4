//! Named channels under /dev/shm: permissions, removal, stale-name reclaim, re-attaching a
//! new peer, validation of what is opened. Every test checks it left nothing in /dev/shm.
#![allow(unsafe_code)]

use rtlab_ipc::{ChannelOptions, IpcError, ShmChannel};
use rtlab_sys::process::{fork_child, kill_hard, wait_child};
use rtlab_sys::time::monotonic_now_ns;
use std::os::unix::fs::PermissionsExt;

const SECOND: u64 = 1_000_000_000;

fn name(tag: &str) -> String {
    format!("rtlab-test-{}-{tag}", std::process::id())
}

/// Entries of /dev/shm that this test (by its tag) created, temporary ones included.
fn leftovers(tag: &str) -> Vec<String> {
    let mine = name(tag);
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.trim_start_matches('.').starts_with(&mine))
        .collect()
}

fn opts() -> ChannelOptions {
    ChannelOptions::new(1 << 14, 256)
}

#[test]
fn a_named_channel_is_owner_only_reachable_by_name_and_removed_on_drop() {
    let tag = "perm";
    let ch = ShmChannel::create_named(&name(tag), &opts()).unwrap();
    let path = ch.path().unwrap().to_path_buf();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{path:?}");
    let rx = ch.receiver().unwrap();
    let n = name(tag);
    // SAFETY: the child opens the channel by name (glibc's malloc is fork-safe) and exits.
    let child = unsafe {
        fork_child(|| {
            let Ok(other) = ShmChannel::open(&n) else {
                return 2;
            };
            let Ok(tx) = other.sender() else { return 3 };
            tx.send(b"hello by name", None).map_or(4, |_| 0)
        })
    }
    .unwrap();
    let mut buf = [0u8; 256];
    let len = rx
        .recv(&mut buf, Some(monotonic_now_ns() + 5 * SECOND))
        .unwrap();
    assert_eq!(&buf[..len], b"hello by name");
    assert_eq!(
        wait_child(child).unwrap(),
        0,
        "the child's open/send failed"
    );
    drop(ch);
    assert!(!path.exists(), "removed on drop");

    let wider = ShmChannel::create_named(&name(tag), &opts().mode(0o640)).unwrap();
    let mode = std::fs::metadata(wider.path().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o640,
        "an explicit mode is applied despite the umask"
    );
    drop(wider);
    assert_eq!(leftovers(tag), Vec::<String>::new());
}

#[test]
fn a_stale_name_from_a_crashed_run_is_reclaimed_but_a_live_one_is_not() {
    let tag = "stale";
    let n = name(tag);
    // SAFETY: the child creates the channel by name, then waits to be killed (a crash).
    let child = unsafe {
        fork_child(|| {
            let Ok(ch) = ShmChannel::create_named(&n, &opts()) else {
                return 2;
            };
            std::mem::forget(ch);
            std::thread::sleep(std::time::Duration::from_secs(60));
            0
        })
    }
    .unwrap();
    let path = std::path::Path::new("/dev/shm").join(&n);
    let t0 = monotonic_now_ns();
    while !path.exists() {
        assert!(
            monotonic_now_ns() - t0 < 5 * SECOND,
            "the child never created it"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match ShmChannel::create_named(&n, &opts()) {
        Err(IpcError::Busy(why)) => assert!(why.contains("in use by pid"), "{why}"),
        other => panic!("a live creator's channel must not be taken over: {other:?}"),
    }
    kill_hard(child).unwrap();
    wait_child(child).unwrap();
    assert!(path.exists(), "a crash leaves the name behind");
    let reclaimed = ShmChannel::create_named(&n, &opts()).expect("stale name reclaimed");
    let tx = reclaimed.sender().unwrap();
    let rx = reclaimed.receiver().unwrap();
    tx.send(b"fresh", None).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        rx.recv(&mut buf, None).unwrap(),
        5,
        "a fresh, empty channel"
    );
    drop(reclaimed);

    // Someone else's object of that name is never removed.
    std::fs::write(&path, vec![0xffu8; 8192]).unwrap();
    match ShmChannel::create_named(&n, &opts()) {
        Err(IpcError::Busy(why)) => assert!(why.contains("not an rtlab channel"), "{why}"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(matches!(ShmChannel::open(&n), Err(IpcError::Corrupt(_))));
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(ShmChannel::open(&n), Err(IpcError::Create(_))));
    assert!(matches!(
        ShmChannel::create_named("../etc/passwd", &opts()),
        Err(IpcError::Create(_))
    ));
    assert_eq!(leftovers(tag), Vec::<String>::new());
}

/// Forks a producer that opens `n`, sends `from..to` (8-byte sequence numbers), then waits to
/// be killed. Exit 3 means its `sender()` was refused.
fn producer(n: &str, from: u64, to: u64) -> i32 {
    // SAFETY: the child opens the channel by name, sends, sleeps.
    unsafe {
        fork_child(|| {
            let Ok(ch) = ShmChannel::open(n) else {
                return 2;
            };
            let Ok(tx) = ch.sender() else { return 3 };
            for seq in from..to {
                if tx.send(&seq.to_le_bytes(), None).is_err() {
                    return 4;
                }
            }
            std::thread::sleep(std::time::Duration::from_secs(60));
            0
        })
    }
    .unwrap()
}

#[test]
fn a_new_producer_attaches_after_the_old_one_died_and_continues_the_stream() {
    let tag = "reattach";
    let n = name(tag);
    let ch = ShmChannel::create_named(&n, &opts()).unwrap();
    let rx = ch.receiver().unwrap();
    let expect = |rx: &rtlab_ipc::Receiver<'_>, seqs: std::ops::Range<u64>| {
        let mut buf = [0u8; 256];
        for seq in seqs {
            let len = rx
                .recv(&mut buf, Some(monotonic_now_ns() + 5 * SECOND))
                .unwrap();
            assert_eq!(u64::from_le_bytes(buf[..len].try_into().unwrap()), seq);
        }
    };
    let first = producer(&n, 0, 10);
    expect(&rx, 0..10);
    // While the first producer lives, a second one is refused (spsc).
    assert_eq!(wait_child(producer(&n, 100, 101)).unwrap(), 3);
    kill_hard(first).unwrap();
    wait_child(first).unwrap();
    let t0 = monotonic_now_ns();
    assert_eq!(
        rx.recv(&mut [0u8; 256], Some(t0 + 5 * SECOND)).unwrap_err(),
        IpcError::PeerDied
    );
    let second = producer(&n, 10, 20);
    expect(&rx, 10..20);
    kill_hard(second).unwrap();
    wait_child(second).unwrap();
    drop(ch);
    assert_eq!(leftovers(tag), Vec::<String>::new());
}

#[test]
fn a_link_planted_at_the_name_is_never_followed() {
    // Regression (hardening, low): open_named followed symlinks, as root too.
    let tag = "link";
    let victim = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(victim.path(), b"precious").unwrap();
    let path = std::path::Path::new("/dev/shm").join(name(tag));
    std::os::unix::fs::symlink(victim.path(), &path).unwrap();
    assert!(ShmChannel::open(&name(tag)).is_err());
    assert!(ShmChannel::create_named(&name(tag), &opts()).is_err());
    assert_eq!(std::fs::read(victim.path()).unwrap(), b"precious");
    std::fs::remove_file(&path).unwrap();
    assert!(leftovers(tag).is_empty(), "{:?}", leftovers(tag));
}

#[test]
fn a_channel_name_another_process_replaced_is_not_removed_on_drop() {
    // Regression (hardening, low): drop removed the name by path, whatever it named by then.
    let tag = "replaced";
    let ch = ShmChannel::create_named(&name(tag), &opts()).unwrap();
    let path = ch.path().unwrap().to_path_buf();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"someone else's").unwrap();
    drop(ch);
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    std::fs::remove_file(&path).unwrap();
    assert!(leftovers(tag).is_empty(), "{:?}", leftovers(tag));
}

#[test]
fn another_users_object_under_the_name_is_refused() {
    if rtlab_sys::process::effective_uid() != 0 {
        rtlab_sys::testing::say_skipped("needs root to chown");
        return;
    }
    let tag = "foreign";
    let ch = ShmChannel::create_named(&name(tag), &opts()).unwrap();
    let path = ch.path().unwrap().to_path_buf();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let err = ShmChannel::open(&name(tag)).unwrap_err();
    assert!(err.to_string().contains("uid 65534"), "{err}");
    drop(ch);
    assert!(leftovers(tag).is_empty(), "{:?}", leftovers(tag));
}
