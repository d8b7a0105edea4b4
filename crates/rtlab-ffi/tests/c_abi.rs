//! Builds tests/c/abi_test.c with the system C compiler against include/rtlab.h, linked once
//! with librtlab.so and once with librtlab.a (both built by cargo beside this test), and runs
//! it: every function of the header, called from C.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::libdir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn compile(out: &Path, link: &[&str]) -> Result<(), String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/abi_test.c");
    let built = Command::new("cc")
        .args([
            "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o",
        ])
        .arg(out)
        .arg(&source)
        .arg("-I")
        .arg(repo().join("include"))
        .args(link)
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !built.status.success() {
        return Err(String::from_utf8_lossy(&built.stderr).into_owned());
    }
    Ok(())
}

/// Whether there is a C compiler (else the test says it skipped).
fn have_cc() -> bool {
    let there = Command::new("cc").arg("--version").output().is_ok();
    if !there {
        rtlab_sys::testing::say_skipped("no C compiler (cc)");
    }
    there
}

fn run(program: &Path) {
    // Without cargo's LD_LIBRARY_PATH, which may list target/<profile> (holding the
    // librtlab.so of the last `cargo build`, possibly older) before the rpath'd deps.
    let ran = Command::new(program)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("checks passed"), "{stdout}{stderr}");
    print!("{stdout}");
}

#[test]
fn a_c_program_uses_every_function_through_the_shared_library() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("abi_test");
    let lib = libdir();
    assert!(
        lib.join("librtlab.so").exists(),
        "no librtlab.so in {}",
        lib.display()
    );
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    let search = format!("-L{}", lib.display());
    compile(&program, &[&search, "-lrtlab", &rpath]).unwrap();
    run(&program);
}

#[test]
fn a_c_program_links_the_static_library_alone() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("abi_test_static");
    let archive = libdir().join("librtlab.a");
    assert!(archive.exists(), "no {}", archive.display());
    let archive = archive.display().to_string();
    compile(&program, &[&archive, "-ldl", "-lm", "-lrt"]).unwrap();
    // No librtlab.so needed at run time.
    let dynamic = Command::new("ldd").arg(&program).output();
    if let Ok(d) = dynamic {
        assert!(!String::from_utf8_lossy(&d.stdout).contains("librtlab"));
    }
    run(&program);
}
