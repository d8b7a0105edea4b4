//! rtlab plays against an attacker: planted symlinks, a hostile network client, a histogram
//! bomb, markup and terminal escapes in result files. rtlab runs as root, so each of these is
//! a way for another local user (or a network peer) to reach root's files, threads or screen.

mod common;

use common::*;
use rtlab_lab::net::wire::{self, Header, Kind, HEADER_LEN};
use serde_json::{json, Value};
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A small valid result document (`rtlab wakeup` under SCHED_OTHER, 200 ms).
fn small_doc(dir: &Path) -> Value {
    let path = rtlab_doc(
        dir,
        "base.json",
        &[
            "wakeup",
            "--policy",
            "other",
            "--duration",
            "200ms",
            "--no-mlock",
            "--no-dma-latency",
            "--quiet",
        ],
    );
    load_valid_document(&path)
}

fn write_json(path: &Path, doc: &Value) {
    std::fs::write(path, serde_json::to_vec(doc).unwrap()).unwrap();
}

#[test]
fn report_replaces_planted_links_and_never_writes_through_them() {
    // Regression (hardening #1): `rtlab report good.json -o DIR` truncated one link's target,
    // overwrote another with the HTML and left report.html a symlink.
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("good.json");
    write_json(&doc, &small_doc(dir.path()));
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, out.join("report.html")).unwrap();
    report_html(&[&doc], &out);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(out.join("report.html")).unwrap();
    assert!(meta.is_file(), "report.html is a file of its own now");
}

#[test]
fn an_output_directory_of_another_user_is_refused() {
    if !is_root() {
        return skip("output directory owner", "needs root to chown");
    }
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let out = rtlab()
        .env_remove("SUDO_UID")
        .args(["check", "--json"])
        .arg(theirs.join("r.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("owned by uid 65534"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
}

#[test]
fn a_histogram_bomb_is_refused_in_one_line() {
    // Regression (hardening #3): a 52-character histogram made `rtlab diff` allocate 267 MB.
    let dir = tempfile::tempdir().unwrap();
    let good = small_doc(dir.path());
    let mut bomb = good.clone();
    // A V2 header claiming a 4 GiB payload, base64.
    let mut header = vec![0x1c, 0x84, 0x93, 0x13, 0xff, 0xff, 0xff, 0xff];
    header.extend([0, 0, 0, 0, 0, 0, 0, 3]);
    header.extend(1u64.to_be_bytes());
    header.extend(1_000_000u64.to_be_bytes());
    header.extend(1f64.to_bits().to_be_bytes());
    let data = base64_encode(&header);
    bomb["series"][0]["histogram"]["data"] = json!(data);
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    write_json(&a, &good);
    write_json(&b, &bomb);
    let started = Instant::now();
    let out = rtlab().arg("diff").arg(&a).arg(&b).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(started.elapsed() < Duration::from_secs(5));
    // The bad histogram is refused, said in one line, and its series compared by the
    // summary statistics alone.
    assert!(out.status.success(), "{stderr}");
    let warned: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("payload length"))
        .collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(warned[0].contains("histogram unreadable"), "{stderr}");
    // `report` draws what it can and leaves the unreadable one out.
    report_html(&[&b], &dir.path().join("r"));
}

fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn markup_and_terminal_escapes_in_a_result_file_stay_text() {
    // Regression (hardening #4): a check status went raw into report.html (a live <script>),
    // and series names reached the terminal with their escape sequences.
    let dir = tempfile::tempdir().unwrap();
    let mut doc = small_doc(dir.path());
    let evil = "t0\u{1b}]0;owned\u{7}\"'><script>alert(1)</script>";
    doc["series"][0]["name"] = json!(evil);
    let mut check = doc["series"][0].clone();
    check["name"] = json!("check/x");
    check["config"] = json!({"status": "<script>alert(2)</script>", "value": evil, "why": evil});
    doc["series"].as_array_mut().unwrap().push(check);
    doc["warnings"] = json!([evil]);
    let path = dir.path().join("evil.json");
    write_json(&path, &doc);
    let out_dir = dir.path().join("rep");
    let html = report_html(&[&path], &out_dir);
    assert!(!html.contains("<script"), "script in the report");
    let diff = rtlab().arg("diff").arg(&path).arg(&path).output().unwrap();
    assert!(
        diff.status.success(),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    for stream in [&diff.stdout, &diff.stderr] {
        assert!(
            !stream.contains(&0x1b),
            "{}",
            String::from_utf8_lossy(stream)
        );
        assert!(!stream.contains(&0x07));
    }
    assert!(String::from_utf8_lossy(&diff.stdout).contains("\\u{1b}"));
}

/// `rtlab net serve` on a free loopback port with `extra` options; returns it and its port.
fn serve(extra: &[&str]) -> (ServeGuard, u16) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("rtlab"))
        .args(["net", "serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening on 127.0.0.1:")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    (ServeGuard(child), port)
}

struct ServeGuard(Child);

impl Drop for ServeGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Connects and sends `hello`; returns the stream and whether the peer answered it.
fn hello(port: u16, hello: Value) -> (TcpStream, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = wire::write_control(&mut s, Kind::Hello, &hello);
    let answered = Header::read_from(&mut s)
        .ok()
        .filter(|h| h.kind == Kind::Hello)
        .and_then(|h| wire::read_control::<Value>(&mut s, &h).ok())
        .is_some();
    (s, answered)
}

/// Scheduling policies (0 other, 1 fifo, 2 rr) of `pid`'s threads called `name`.
fn policies(pid: u32, name: &str) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let (comm, rest) = stat.split_once(") ")?;
            (comm.rsplit_once('(')?.1 == name)
                .then(|| rest.split_whitespace().nth(38)?.parse().ok())
                .flatten()
        })
        .collect()
}

fn greedy_hello(role: &str) -> Value {
    json!({"role": role, "policy": "fifo", "prio": 99,
           "options": {"busy_poll_us": 1_000_000, "priority": 15, "sndbuf": 1 << 30,
                       "rcvbuf": 1 << 30},
           "plan": null, "pad_segments": 0})
}

#[test]
fn net_serve_obeys_its_owner_not_its_clients() {
    // Regression (hardening #2): a 10-line client put a server thread into SCHED_FIFO 99.
    let (server, port) = serve(&["--max-connections", "3", "--idle-timeout", "1s"]);
    let pid = server.0.id();
    let (mut pingpong, answered) = hello(port, greedy_hello("pingpong"));
    assert!(answered, "a plain client is served");
    std::thread::sleep(Duration::from_millis(100));
    let served = policies(pid, "rtlab-net-conn");
    assert_eq!(
        served,
        vec![0],
        "SCHED_OTHER without --max-prio: {served:?}"
    );
    // An echo over the buffer cap (4 MiB) ends the connection instead of a 64 MiB buffer.
    let mut h = Header::new(Kind::Echo);
    h.payload = 60 << 20;
    h.write_to(&mut pingpong).unwrap();
    let mut byte = [0u8; 1];
    assert!(
        matches!(pingpong.read(&mut byte), Ok(0) | Err(_)),
        "connection closed"
    );
    // A reverse stream faster than the owner allows is refused.
    let mut fast = greedy_hello("reverse");
    fast["plan"] = json!({"stream": 0, "size": 64, "period_ns": 10_000, "pad_segments": 0,
                          "warmup_ns": 0, "deadline_ns": 0, "policy": "fifo", "prio": 99});
    let (_s, _) = hello(port, fast);
    std::thread::sleep(Duration::from_millis(100));
    assert!(policies(pid, "rtlab-net-conn").iter().all(|&p| p == 0));
    // More connections than --max-connections are closed without a hello.
    let held: Vec<_> = (0..3).map(|_| hello(port, greedy_hello("bulk"))).collect();
    assert!(held.iter().all(|(_, ok)| *ok));
    let (_, answered) = hello(port, greedy_hello("bulk"));
    assert!(!answered, "a fourth connection is refused");
    // A silent client is dropped after the idle timeout.
    let (mut silent, _) = held.into_iter().next().unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let _ = silent.write_all(&[]);
    let mut buf = [0u8; 16];
    let closed = silent.read(&mut buf);
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "idle timeout 1 s"
    );
}

#[test]
fn net_serve_with_max_prio_grants_at_most_that() {
    if !is_root() {
        return skip("net serve --max-prio", "needs root for SCHED_FIFO");
    }
    let (server, port) = serve(&["--max-prio", "20"]);
    let (_s, answered) = hello(port, greedy_hello("pingpong"));
    assert!(answered);
    std::thread::sleep(Duration::from_millis(100));
    let pid = server.0.id();
    let tids: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim() == "rtlab-net-conn")
        })
        .collect();
    assert_eq!(tids.len(), 1);
    let stat = std::fs::read_to_string(tids[0].path().join("stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // Fields 40 (rt_priority) and 41 (policy), counted from 1 in proc(5).
    assert_eq!((fields[37], fields[38]), ("20", "1"), "FIFO, capped at 20");
}

#[test]
fn rtlabs_own_peer_answers_only_the_run_that_started_it() {
    // Regression (hardening #2): the in-process peer of `net run` and the survey (root,
    // mlockall) served any local user who found its port.
    use rtlab_lab::net::peer::{new_token, PeerLimits, PeerServer};
    let token = new_token().unwrap();
    let server = PeerServer::start(
        "127.0.0.1:0".parse().unwrap(),
        PeerLimits::own(token.clone()),
    )
    .unwrap();
    let port = server.addr().port();
    let (_s, answered) = hello(port, greedy_hello("bulk"));
    assert!(!answered, "a hello without the token is refused");
    let mut wrong = greedy_hello("bulk");
    wrong["token"] = json!("0000000000000000");
    assert!(!hello(port, wrong).1, "a wrong token is refused");
    let mut right = greedy_hello("bulk");
    right["token"] = json!(token);
    assert!(hello(port, right).1, "the run's own connection is served");
}

#[test]
fn net_serve_listens_on_loopback_by_default_and_says_so() {
    let out = rtlab().args(["net", "serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[default: 127.0.0.1:7471]"), "{help}");
    assert!(help.contains("--max-prio"), "{help}");
    // The header is only what a hello needs.
    assert_eq!(HEADER_LEN, 40);
}

/// The ids of the System V objects of `kind` (`msg`, `sem`) on the machine now.
fn sysvipc_ids(kind: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/sysvipc/{kind}"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

#[test]
fn ipc_peers_die_with_a_killed_rtlab_and_remove_their_queues() {
    // Regression (hardening #7): a forked ipc peer had no parent-death signal; after a
    // SIGKILL of rtlab it waited forever at SCHED_FIFO 50, pinned, holding
    // /dev/cpu_dma_latency, and its SysV queues leaked.
    let _serial = realtime_serial();
    for mechanism in ["sysv-msg", "posix-mq"] {
        let before = sysvipc_ids("msg");
        let mut run = Command::new(assert_cmd::cargo::cargo_bin("rtlab"))
            .args([
                "ipc",
                "--mechanism",
                mechanism,
                "--duration",
                "60s",
                "--quiet",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = run.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let peers = loop {
            let peers = rtlab_sys::procfs::children_of(pid);
            if !peers.is_empty() || Instant::now() > deadline {
                break peers;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!peers.is_empty(), "{mechanism}: no peer process seen");
        run.kill().unwrap();
        run.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while peers
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}")).exists())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in &peers {
            // A zombie reaped by init is gone; a live orphan is the bug.
            let state = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            assert!(
                state.is_empty(),
                "{mechanism}: peer {p} outlived rtlab: {state}"
            );
        }
        let leaked: Vec<_> = sysvipc_ids("msg")
            .into_iter()
            .filter(|q| !before.contains(q))
            .collect();
        assert!(
            leaked.is_empty(),
            "{mechanism}: SysV queues left: {leaked:?}"
        );
    }
}

/// `rtlab tune --revert FILE`: exit status and stderr.
fn revert(file: &Path) -> (Option<i32>, String) {
    let out = rtlab()
        .env_remove("SUDO_UID")
        .args(["tune", "--revert"])
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_planted_tune_state_file_makes_root_write_nothing() {
    // Regression (hardening, second review, #1): `tune --revert FILE` wrote whatever paths
    // and values FILE listed, as root: it overwrote a file in a root-only directory and
    // created a new one there, through links.
    if !is_root() {
        return skip(
            "planted tune state file",
            "needs root (tune --revert needs it)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let vault = dir.path().join("vault");
    std::fs::create_dir(&vault).unwrap();
    let victim = vault.join("authorized_keys");
    std::fs::write(&victim, "precious\n").unwrap();
    let created = vault.join("new");
    let planted = dir.path().join("state.json");
    let entry = |path: &Path| json!({"id": "rt_throttling", "path": path, "before": "ssh-ed25519 AAAA attacker", "after": "-1", "applied": true});
    // The earlier format, as an attacker would write it (paths, no kinds).
    let v1 = json!({"rtlab_tune_state": 1, "rt_cpus": [1],
                    "changes": [entry(&victim), entry(&created)]});
    let plant = |doc: &Value, uid: u32, mode: u32| {
        let _ = std::fs::remove_file(&planted);
        write_json(&planted, doc);
        std::os::unix::fs::chown(&planted, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(&planted, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
    };
    let untouched = || {
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!created.exists(), "a file was created");
    };
    // Planted by another user.
    plant(&v1, 65534, 0o644);
    let (code, err) = revert(&planted);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    untouched();
    // Root's, but anyone may write it.
    plant(&v1, 0, 0o666);
    let (code, err) = revert(&planted);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("world-writable"), "{err}");
    untouched();
    // Root's and private, but naming paths instead of kinds.
    plant(&v1, 0, 0o600);
    let (code, err) = revert(&planted);
    assert_eq!(code, Some(2), "{err}");
    untouched();
    // In the current format: a kind whose file is not the one listed.
    let v2 = json!({"rtlab_tune_state": 2, "rt_cpus": [1], "changes": [{
        "knob": {"kind": "rt_sysctl", "name": "sched_rt_runtime_us"},
        "path": victim, "before": "950000", "after": "-1", "applied": true}]});
    plant(&v2, 0, 0o600);
    let (code, err) = revert(&planted);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("/proc/sys/kernel/sched_rt_runtime_us"),
        "{err}"
    );
    untouched();
    // A link to a state file is not followed.
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&planted, &link).unwrap();
    let (code, err) = revert(&link);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    // In a directory others may write (not sticky).
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::copy(&planted, open.join("s.json")).unwrap();
    let (code, err) = revert(&open.join("s.json"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not sticky"), "{err}");
    untouched();
}

#[test]
fn a_udp_datagram_without_a_session_gets_no_answer() {
    // Regression (hardening, second review, #8): `net serve` echoed any datagram, a
    // reflector for forged sources when bound to a public address.
    let (_server, port) = serve(&[]);
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", port)).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut probe = [0u8; HEADER_LEN];
    let mut h = Header::new(Kind::Echo);
    h.seq = 7;
    h.encode(&mut probe);
    let mut back = [0u8; 256];
    let mut answered = |udp: &std::net::UdpSocket| {
        (0..3).any(|_| {
            let _ = udp.send(&probe);
            udp.recv(&mut back).is_ok()
        })
    };
    assert!(!answered(&udp), "a datagram with no session was echoed");
    // A session opened over TCP for this socket's port is answered while it lasts.
    let local = udp.local_addr().unwrap().port();
    let (session, ok) = hello(port, json!({"role": "udp", "udp_port": local}));
    assert!(ok, "the session is welcomed");
    assert!(answered(&udp), "a datagram of an open session is echoed");
    // Another port of the same host is not.
    let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    other.connect(("127.0.0.1", port)).unwrap();
    other
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(!answered(&other));
    drop(session);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!answered(&udp), "the session ended with its connection");
}

#[test]
fn a_killed_lock_run_leaves_no_semaphore_sets() {
    // Regression (hardening, second review, #4): SIGKILL of `lock --processes --impl
    // sysv-sem` left three SysV semaphore sets, made before the fork and never handed to
    // the orphan clean-up.
    let _serial = realtime_serial();
    for extra in [&["--processes"][..], &[][..]] {
        let before = sysvipc_ids("sem");
        let mut run = Command::new(assert_cmd::cargo::cargo_bin("rtlab"))
            .args(["lock", "--impl", "sysv-sem", "--duration", "60s", "--quiet"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let made = loop {
            let made: Vec<String> = sysvipc_ids("sem")
                .into_iter()
                .filter(|q| !before.contains(q))
                .collect();
            if made.len() >= 3 || Instant::now() > deadline {
                break made;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(made.len() >= 3, "{extra:?}: the run made no sets: {made:?}");
        std::thread::sleep(Duration::from_millis(300));
        run.kill().unwrap();
        run.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let left = loop {
            let now = sysvipc_ids("sem");
            let left: Vec<&String> = made.iter().filter(|m| now.contains(m)).collect::<Vec<_>>();
            if left.is_empty() || Instant::now() > deadline {
                break left.into_iter().cloned().collect::<Vec<String>>();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(left.is_empty(), "{extra:?}: sets left: {left:?}");
    }
}

#[test]
fn a_killed_watchs_tracing_instance_is_reported_then_removed() {
    // Regression (hardening, second review, #5): a SIGKILLed tracefs watch left its instance
    // tracing (sched_switch on, ~8 MB) for good.
    if !is_root() || rtlab_sys::probe::tracefs_mount().is_none() {
        return skip("stale tracing instance", "needs root and tracefs");
    }
    let _serial = realtime_serial();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let mut watch = Command::new(assert_cmd::cargo::cargo_bin("rtlab"))
        .args([
            "watch",
            "--explain-with",
            "tracefs",
            "--quiet",
            "--duration",
            "30s",
        ])
        .args(["--pid", &sleeper.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let instances = rtlab_sys::probe::tracefs_mount().unwrap().join("instances");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut instance = instance_of(&instances, watch.id());
    while instance.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        instance = instance_of(&instances, watch.id());
    }
    let instance = instance.expect("the watch made no instance");
    watch.kill().unwrap();
    watch.wait().unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // Another test's rtlab run, at the same time, may remove it at any moment from here on
    // (as it should): each claim is made only while the instance is seen to be there.
    if instance.exists() {
        let check = rtlab().args(["check", "--json", "-"]).output().unwrap();
        let text = String::from_utf8_lossy(&check.stdout);
        if instance.exists() {
            assert!(
                text.contains(&instance.display().to_string()),
                "check reports it (and leaves it)"
            );
        }
    }
    rtlab()
        .args(["load", "cpu:1", "--duration", "100ms", "--quiet"])
        .assert()
        .success();
    assert!(!instance.exists(), "the next run removed it");
}

#[test]
fn a_slow_metrics_client_does_not_keep_watch_from_ending() {
    // Regression (hardening, second review, #3): a client sending a byte every 1.5 s kept
    // `rtlab watch` from exiting for 9-12 s past its end.
    if !is_root() {
        return skip("slow metrics client", "watch needs root");
    }
    let _serial = realtime_serial();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let mut watch = Command::new(assert_cmd::cargo::cargo_bin("rtlab"))
        .args(["watch", "--metrics", "127.0.0.1:0", "--duration", "2s"])
        .args(["--pid", &sleeper.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(watch.stderr.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines
            .next()
            .expect("watch says where the metrics are")
            .unwrap();
        if let Some(rest) = line.split("metrics at http://127.0.0.1:").nth(1) {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    // The watch has started when it says where its metrics are.
    let started = Instant::now();
    std::thread::spawn(move || for _ in lines {});
    let dribbler = std::thread::spawn(move || {
        let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
            return;
        };
        for b in b"GET /metrics HTTP/1.1\r\n".iter().cycle().take(40) {
            if c.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut scrape = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let asked = Instant::now();
    scrape.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    scrape
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut page = String::new();
    let _ = scrape.read_to_string(&mut page);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    let status = watch.wait().unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2 + 1),
        "watch ended {:?} after it started (2 s asked)",
        started.elapsed()
    );
    drop(dribbler);
}

#[test]
fn many_wide_histograms_in_one_document_are_refused_at_once() {
    // Regression (hardening, second review, #13): 2 000 series each carrying the widest
    // histogram header accepted (1.2 MB of JSON) took `diff` 22 s.
    let dir = tempfile::tempdir().unwrap();
    let mut doc = small_doc(dir.path());
    let mut header = vec![0x1c, 0x84, 0x93, 0x13, 0, 0, 0, 0];
    header.extend([0, 0, 0, 0, 0, 0, 0, 4]);
    header.extend(1u64.to_be_bytes());
    header.extend((1u64 << 53).to_be_bytes());
    header.extend(1f64.to_bits().to_be_bytes());
    let data = base64_encode(&header);
    let template = doc["series"][0].clone();
    doc["series"] = Value::Array(
        (0..2000)
            .map(|i| {
                let mut s = template.clone();
                s["name"] = json!(format!("s{i}"));
                s["histogram"]["data"] = json!(data);
                s
            })
            .collect(),
    );
    let a = dir.path().join("wide.json");
    write_json(&a, &doc);
    for args in [vec!["diff"], vec!["report", "-o"]] {
        let started = Instant::now();
        let mut cmd = rtlab();
        cmd.args(&args);
        if args[0] == "report" {
            cmd.arg(dir.path().join("r")).arg(&a);
        } else {
            cmd.arg(&a).arg(&a);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("more than rtlab decodes"), "{stderr}");
    }
}

/// A process mapping `lib` (private, executable: as a program maps its code),
/// at SCHED_FIFO 5 where `rt`, until killed.
fn mapping(lib: &Path, rt: bool) -> Child {
    let mut cmd = Command::new(if rt { "chrt" } else { "python3" });
    if rt {
        cmd.args(["-f", "5", "python3"]);
    }
    let mut child = cmd
        .args([
            "-c",
            "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,flags=mmap.MAP_PRIVATE,prot=mmap.PROT_READ|mmap.PROT_EXEC)\nprint('mapped',flush=True)\ntime.sleep(60)",
        ])
        .arg(lib)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "mapped");
    child
}

#[test]
fn a_libjvm_of_another_users_is_probed_only_in_the_watched_process_that_maps_it() {
    // Regression (hardening, third review, #1): `watch --all` probed every process through
    // any file a process mapped as libjvm.so, at offsets its notes chose, and looked at
    // processes `--rt-only` then left out. Now a file not root's is probed only in the
    // watched process mapping it, and processes not watched are not looked at.
    let test = "a libjvm.so of another user's";
    if !is_root() {
        return skip(test, "needs root (eBPF, uprobes)");
    }
    let Some(real) = std::fs::read_dir("/usr/lib/jvm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("lib/server/libjvm.so"))
        .find(|p| p.is_file())
    else {
        return skip(test, "no libjvm.so under /usr/lib/jvm");
    };
    if Command::new("python3").arg("-V").output().is_err() {
        return skip(test, "no python3");
    }
    let _serial = realtime_serial();
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libjvm.so");
    std::fs::copy(&real, &lib).unwrap();
    // Another user's file (nobody's), as a user's own JDK is.
    std::os::unix::fs::chown(&lib, Some(65534), Some(65534)).unwrap();
    let (mut watched, mut other) = (mapping(&lib, true), mapping(&lib, false));
    let watch = Command::new(rtlab_path())
        .args(["watch", "--all", "--rt-only", "--duration", "3s", "--quiet"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    let (in_watched, in_other) = (probed_code_kb(watched.id()), probed_code_kb(other.id()));
    let out = watch.wait_with_output().unwrap();
    for p in [&mut watched, &mut other] {
        let _ = p.kill();
        let _ = p.wait();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(in_watched > 0, "no probe in the watched process: {stdout}");
    assert_eq!(in_other, 0, "probes in a process not watched: {stdout}");
}

#[test]
fn without_a_terminal_a_hangup_does_not_end_the_watch() {
    // Regression (hardening, third review, #2): a user who got a terminal of theirs made
    // rtlab's controlling terminal closed it, and the hangup ended the shipped unit's watch
    // with exit 0 ("interrupted"), which its restart policy did not restart. Run with no
    // terminal (as a service is), a SIGHUP is ignored.
    if !is_root() {
        return skip("a hangup without a terminal", "needs root (eBPF)");
    }
    let _serial = realtime_serial();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let started = Instant::now();
    let watch = Command::new(rtlab_path())
        .args(["watch", "--duration", "3s", "--quiet"])
        .args(["--pid", &sleeper.id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let sent = Command::new("kill")
        .args(["-HUP", &watch.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = watch.wait_with_output().unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("interrupted"), "{text}");
    assert!(text.contains("duration reached"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(2900));
}
