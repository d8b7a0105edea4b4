//! For tests: a test that cannot run what it tests here says so, and why, where the person
//! who ran the tests will read it.

/// The file `say_skipped` appends to, named by the test command (`tools/test`), which prints
/// what it holds at the end of the run.
pub const SKIPPED_LOG: &str = "RTLAB_SKIPPED_LOG";

/// Says on stderr that the calling test did not run what it tests, and why (`skipped: <why>`,
/// after the test's name), and adds the line, with the test binary's name, to the file
/// [`SKIPPED_LOG`] names: cargo hides a passing test's output, the summary does not.
pub fn say_skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    eprintln!("{test}: skipped: {why}");
    let Some(path) = std::env::var_os(SKIPPED_LOG) else {
        return;
    };
    // The test binary's name without cargo's hash (`watch-601e70...` -> `watch`).
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| n.rsplit_once('-').map_or(n.clone(), |(b, _)| b.to_string()))
        .unwrap_or_default();
    log_skipped(std::path::Path::new(&path), &binary, test, why);
}

/// Appends `binary: test: why` to the file at `path`.
fn log_skipped(path: &std::path::Path, binary: &str, test: &str, why: &str) {
    use std::io::Write;
    let line = format!("{binary}: {test}: {why}\n");
    // One write in append mode: lines of tests running at once do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Makes i386 system call `nr` with three arguments through `int $0x80` from this 64-bit
/// process, as a 32-bit program's calls reach the kernel (numbered as i386 numbers them);
/// returns its result (`-ENOSYS` where the kernel runs no 32-bit calls). For tests of what
/// reads system calls by number. The call must not touch memory through its arguments.
#[cfg(target_arch = "x86_64")]
pub fn i386_syscall(nr: i32, args: [i32; 3]) -> i64 {
    let ret: i64;
    // SAFETY: `int $0x80` clobbers nothing but eax (the result) and, with the kernel's
    // compat entry, r8-r11 (saved as clobbered below); rbx is the compiler's, so it is
    // swapped in and out by hand; the caller promises the call reads and writes no memory.
    #[allow(unsafe_code)]
    unsafe {
        std::arch::asm!(
            "xchg {a:r}, rbx",
            "int 0x80",
            "xchg {a:r}, rbx",
            a = inout(reg) args[0] as i64 => _,
            inlateout("rax") nr as i64 => ret,
            in("rcx") args[1] as i64,
            in("rdx") args[2] as i64,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
        );
    }
    // The result is eax's, sign-extended.
    ret as i32 as i64
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_skipped_test_is_one_line_of_the_log_with_its_binary_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skipped.txt");
        let lines = (0..8).map(|i| format!("test{i}: no tool {i}"));
        let threads: Vec<_> = lines
            .clone()
            .map(|l| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let (test, why) = l.split_once(": ").unwrap();
                    super::log_skipped(&log, "watch", test, why);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let mut got: Vec<&str> = text.lines().collect();
        got.sort_unstable();
        let want: Vec<String> = lines.map(|l| format!("watch: {l}")).collect();
        assert_eq!(got, want);
    }
}
