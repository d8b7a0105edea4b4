//! The header against the declarations here, and the boundary's checks. The C side's own
//! behaviour is tested by tests/c_abi.rs, which builds and runs a C program.

use super::*;
use std::collections::BTreeMap;

const HEADER: &str = include_str!("../../../include/rtlab.h");
const SOURCE: &str = include_str!("lib.rs");

/// The header's `#define RTLAB_X <number>` lines.
fn header_numbers() -> BTreeMap<String, u64> {
    HEADER
        .lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("#define ")?.split_whitespace();
            let name = words.next()?;
            let value = words.next()?.parse().ok()?;
            Some((name.to_string(), value))
        })
        .collect()
}

#[test]
fn the_headers_codes_sizes_and_alignments_are_the_rust_sides() {
    let rust: BTreeMap<&str, u64> = [
        ("RTLAB_EINVAL", RTLAB_EINVAL as u64),
        ("RTLAB_EBUSY", RTLAB_EBUSY as u64),
        ("RTLAB_EOWNERDEAD", RTLAB_EOWNERDEAD as u64),
        ("RTLAB_ENOTRECOVERABLE", RTLAB_ENOTRECOVERABLE as u64),
        ("RTLAB_ETIMEDOUT", RTLAB_ETIMEDOUT as u64),
        ("RTLAB_EPEERDIED", RTLAB_EPEERDIED as u64),
        ("RTLAB_ECORRUPT", RTLAB_ECORRUPT as u64),
        ("RTLAB_EDEADLK", RTLAB_EDEADLK as u64),
        ("RTLAB_EPERM", RTLAB_EPERM as u64),
        ("RTLAB_EMSGSIZE", RTLAB_EMSGSIZE as u64),
        ("RTLAB_ENOBUFS", RTLAB_ENOBUFS as u64),
        ("RTLAB_ENOENT", RTLAB_ENOENT as u64),
        ("RTLAB_ENOTSUP", RTLAB_ENOTSUP as u64),
        ("RTLAB_ERANGE", RTLAB_ERANGE as u64),
        ("RTLAB_EIO", RTLAB_EIO as u64),
        ("RTLAB_EINTERNAL", RTLAB_EINTERNAL as u64),
        ("RTLAB_PI_MUTEX_SIZE", RTLAB_PI_MUTEX_SIZE as u64),
        ("RTLAB_PI_MUTEX_ALIGN", RTLAB_PI_MUTEX_ALIGN as u64),
        ("RTLAB_ROBUST_MUTEX_SIZE", RTLAB_ROBUST_MUTEX_SIZE as u64),
        ("RTLAB_ROBUST_MUTEX_ALIGN", RTLAB_ROBUST_MUTEX_ALIGN as u64),
        ("RTLAB_PI_COND_SIZE", RTLAB_PI_COND_SIZE as u64),
        ("RTLAB_PI_COND_ALIGN", RTLAB_PI_COND_ALIGN as u64),
        ("RTLAB_PARKER_SIZE", RTLAB_PARKER_SIZE as u64),
        ("RTLAB_PARKER_ALIGN", RTLAB_PARKER_ALIGN as u64),
        ("RTLAB_CHANNEL_SEND", RTLAB_CHANNEL_SEND as u64),
        ("RTLAB_CHANNEL_RECV", RTLAB_CHANNEL_RECV as u64),
        (
            "RTLAB_CHANNEL_LAYOUT_WORDS",
            RTLAB_CHANNEL_LAYOUT_WORDS as u64,
        ),
        ("RTLAB_CHANNEL_FORMAT", rtlab_ipc::FORMAT as u64),
    ]
    .into_iter()
    .collect();
    let header = header_numbers();
    for (name, value) in &rust {
        assert_eq!(header.get(*name), Some(value), "{name}");
    }
    let unknown: Vec<&String> = header
        .keys()
        .filter(|k| !rust.contains_key(k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "defined only in the header: {unknown:?}"
    );
}

/// A Rust type of a declaration here as C writes it.
fn c_type(rust: &str) -> String {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*const ") {
        return format!("const {} *", c_type(inner)).replace("* *", "**");
    }
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return format!("{} *", c_type(inner)).replace("* *", "**");
    }
    match rust {
        "c_int" => "int",
        "c_char" => "char",
        "c_void" => "void",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "i64" => "int64_t",
        "usize" => "size_t",
        "PiMutexC" => "rtlab_pi_mutex_t",
        "RobustMutexC" => "rtlab_robust_mutex_t",
        "PiCondC" => "rtlab_pi_cond_t",
        "ParkerC" => "rtlab_parker_t",
        "Channel" => "rtlab_channel_t",
        other => panic!("no C type for {other}"),
    }
    .to_string()
}

/// `ret name(type, ...)` of every `extern "C" fn` declared in lib.rs.
fn rust_prototypes() -> BTreeMap<String, String> {
    let flat = SOURCE.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.split("extern \"C\" fn ")
        .skip(1)
        .map(|rest| {
            let (name, rest) = rest.split_once('(').unwrap();
            let (args, rest) = rest.split_once(')').unwrap();
            let ret = rest
                .trim_start()
                .strip_prefix("-> ")
                .map_or("void".to_string(), |r| {
                    c_type(r.split(" {").next().unwrap())
                });
            let args: Vec<String> = args
                .split(',')
                .filter(|a| !a.trim().is_empty())
                .map(|a| c_type(a.split_once(':').unwrap().1))
                .collect();
            (
                name.to_string(),
                format!("{ret} {name}({})", args.join(", ")),
            )
        })
        .collect()
}

/// The same of every function the header declares (parameter names dropped).
fn header_prototypes() -> BTreeMap<String, String> {
    // Without comments and preprocessor lines.
    let mut code = String::new();
    let mut rest = HEADER;
    while let Some(open) = rest.find("/*") {
        code.push_str(&rest[..open]);
        rest = &rest[open + 2..];
        rest = &rest[rest.find("*/").map_or(rest.len(), |c| c + 2)..];
    }
    code.push_str(rest);
    let code: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let flat = code.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.split(';')
        .filter_map(|decl| {
            let decl = decl.trim();
            let open = decl.find("rtlab_")?;
            let (head, rest) = decl.split_at(open);
            let (name, args) = rest.split_once('(')?;
            if head.contains("typedef") || head.contains('}') || !args.ends_with(')') {
                return None;
            }
            let ret = head.trim().replace("char*", "char *");
            let args: Vec<String> = args
                .trim_end_matches(')')
                .split(',')
                .map(str::trim)
                .filter(|a| *a != "void" && !a.is_empty())
                .map(|a| {
                    // Drop the parameter's name: the type is what precedes it.
                    let cut = a.rfind(['*', ' ']).unwrap();
                    a[..=cut].trim().replace("**", "* *").replace("* *", "**")
                })
                .collect();
            Some((
                name.to_string(),
                format!("{ret} {name}({})", args.join(", ")),
            ))
        })
        .collect()
}

#[test]
fn the_header_declares_every_function_with_the_rust_signature() {
    let (rust, header) = (rust_prototypes(), header_prototypes());
    assert!(rust.len() >= 30, "{rust:?}");
    assert_eq!(rust, header);
}

#[test]
fn null_and_misaligned_pointers_are_refused_not_followed() {
    // SAFETY: each call is given a null or a misaligned pointer, which it must refuse
    // before reading through it.
    unsafe {
        assert_eq!(rtlab_pi_mutex_init(std::ptr::null_mut(), 0), RTLAB_EINVAL);
        assert_eq!(rtlab_pi_mutex_lock(std::ptr::null_mut()), RTLAB_EINVAL);
        let mut bytes = [0u64; 20];
        let odd = (bytes.as_mut_ptr() as *mut u8).add(1);
        assert_eq!(rtlab_pi_mutex_lock(odd.cast()), RTLAB_EINVAL);
        assert_eq!(rtlab_robust_mutex_lock(odd.cast()), RTLAB_EINVAL);
        assert_eq!(rtlab_parker_unpark(odd.cast()), RTLAB_EINVAL);
        assert_eq!(rtlab_pi_cond_signal(odd.cast()), RTLAB_EINVAL);
        assert_eq!(
            rtlab_channel_send(std::ptr::null_mut(), std::ptr::null(), 0, 0),
            RTLAB_EINVAL
        );
        assert_eq!(
            rtlab_channel_open(std::ptr::null(), std::ptr::null_mut()),
            RTLAB_EINVAL
        );
        assert_eq!(rtlab_thread_set_affinity(std::ptr::null(), 1), RTLAB_EINVAL);
        assert_eq!(rtlab_probe(std::ptr::null_mut(), 10), RTLAB_EINVAL);
        rtlab_channel_close(std::ptr::null_mut());
    }
}

#[test]
fn a_pi_mutex_is_unlocked_only_by_its_holder_and_the_probe_text_fits_or_says_so() {
    let mut m = std::mem::MaybeUninit::<PiMutexC>::uninit();
    let m = m.as_mut_ptr();
    // SAFETY: `m` is writable, aligned memory for a mutex, initialised first.
    unsafe {
        assert_eq!(rtlab_pi_mutex_init(m, 0), 0);
        assert_eq!(rtlab_pi_mutex_unlock(m), RTLAB_EPERM);
        assert_eq!(rtlab_pi_mutex_lock(m), 0);
        assert_eq!(rtlab_pi_mutex_lock(m), RTLAB_EDEADLK);
        let addr = m as usize;
        let other = std::thread::spawn(move || {
            let m = addr as *mut PiMutexC;
            (rtlab_pi_mutex_trylock(m), rtlab_pi_mutex_unlock(m))
        })
        .join()
        .unwrap();
        assert_eq!(other, (RTLAB_EBUSY, RTLAB_EPERM));
        assert_eq!(rtlab_pi_mutex_unlock(m), 0);
    }
    let mut small = [0 as c_char; 8];
    let mut big = [0 as c_char; 1024];
    // SAFETY: each buffer holds the length given.
    unsafe {
        assert_eq!(rtlab_probe(small.as_mut_ptr(), small.len()), RTLAB_ERANGE);
        assert_eq!(CStr::from_ptr(small.as_ptr()).to_bytes(), b"pi_fute");
        assert_eq!(rtlab_probe(big.as_mut_ptr(), big.len()), 0);
        let text = CStr::from_ptr(big.as_ptr()).to_str().unwrap();
        assert!(text.starts_with("pi_futex=1 "), "{text}");
        // SAFETY: a static NUL-terminated text.
        let why = CStr::from_ptr(rtlab_strerror(RTLAB_EOWNERDEAD))
            .to_str()
            .unwrap();
        assert!(why.contains("owner died"), "{why}");
    }
}

#[test]
fn a_scribbled_mutex_offset_in_a_pi_condvar_is_reported_not_ignored() {
    // Regression (hardening, second review, #12): a peer that scribbled the stored mutex
    // offset of a shared PI condition variable made rtlab_pi_cond_signal return 0 and wake
    // nobody: the waiter slept on, the signaller believed it had woken it.
    use std::mem::MaybeUninit;
    struct Pair {
        m: MaybeUninit<PiMutexC>,
        other: MaybeUninit<PiMutexC>,
        c: MaybeUninit<PiCondC>,
    }
    let pair = Box::leak(Box::new(Pair {
        m: MaybeUninit::uninit(),
        other: MaybeUninit::uninit(),
        c: MaybeUninit::uninit(),
    }));
    let (m, other, c) = (
        pair.m.as_mut_ptr(),
        pair.other.as_mut_ptr(),
        pair.c.as_mut_ptr(),
    );
    // SAFETY: each points into the leaked, live `pair`; init comes before any other call.
    unsafe {
        assert_eq!(rtlab_pi_mutex_init(m, 1), 0);
        assert_eq!(rtlab_pi_mutex_init(other, 1), 0);
        assert_eq!(rtlab_pi_cond_init(c, 1), 0);
    }
    let (ma, ca) = (m as usize, c as usize);
    let waiter = std::thread::spawn(move || {
        let (m, c) = (ma as *mut PiMutexC, ca as *mut PiCondC);
        // SAFETY: the objects live for the whole test (leaked).
        unsafe {
            assert_eq!(rtlab_pi_mutex_lock(m), 0);
            let deadline = rtlab_sys::time::monotonic_now_ns() + 5_000_000_000;
            let rc = rtlab_pi_cond_wait_until(c, m, deadline);
            assert_eq!(rtlab_pi_mutex_unlock(m), 0);
            rc
        }
    });
    // SAFETY: `c` is initialised; the offset field is read atomically.
    let cond = unsafe { &*c };
    while cond.mutex_offset.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(50)); // the waiter asleep in the kernel
    let right = cond.mutex_offset.load(Ordering::Acquire);
    // A peer points it at another (valid) mutex, then at a misaligned address.
    cond.mutex_offset
        .store(other as i64 - c as i64, Ordering::Release);
    // SAFETY: `c` is initialised.
    assert_eq!(unsafe { rtlab_pi_cond_signal(c) }, RTLAB_ECORRUPT);
    cond.mutex_offset.store(right + 1, Ordering::Release);
    // SAFETY: as above.
    assert_eq!(unsafe { rtlab_pi_cond_broadcast(c) }, RTLAB_ECORRUPT);
    // Put back, the signal wakes the waiter.
    cond.mutex_offset.store(right, Ordering::Release);
    // SAFETY: as above.
    assert_eq!(unsafe { rtlab_pi_cond_signal(c) }, 0);
    assert_eq!(waiter.join().unwrap(), 0, "woken, not timed out");
}
