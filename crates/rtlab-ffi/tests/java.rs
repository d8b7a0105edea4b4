//! Runs the Java binding's JUnit tests (bindings/java, `mvn test`) against the librtlab.so
//! cargo built beside this test, when a JDK 22+ (FFM) and Maven are found; says `skipped:`
//! with the reason otherwise. So the README's one test command covers the Java side too.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// The feature version a JDK's `release` file names (`JAVA_VERSION="25.0.1"` -> 25).
fn jdk_version(home: &Path) -> Option<u32> {
    let release = std::fs::read_to_string(home.join("release")).ok()?;
    let line = release.lines().find(|l| l.starts_with("JAVA_VERSION="))?;
    let v = line.trim_start_matches("JAVA_VERSION=").trim_matches('"');
    v.split(['.', '-', '+']).next()?.parse().ok()
}

/// A JDK with FFM (22+): $JAVA_HOME if it is one, else the newest under /usr/lib/jvm.
fn jdk() -> Option<PathBuf> {
    let usable = |p: &Path| jdk_version(p).is_some_and(|v| v >= 22) && p.join("bin/javac").exists();
    if let Some(home) = std::env::var_os("JAVA_HOME").map(PathBuf::from) {
        if usable(&home) {
            return Some(home);
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/jvm")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| usable(p))
        .filter_map(|p| Some((jdk_version(&p)?, p)))
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

#[test]
fn the_java_bindings_junit_tests_pass() {
    let Some(home) = jdk() else {
        eprintln!("skipped: no JDK 22+ (FFM) in $JAVA_HOME or /usr/lib/jvm");
        return;
    };
    if Command::new("mvn").arg("-v").output().is_err() {
        eprintln!("skipped: no Maven (mvn)");
        return;
    }
    let library = common::libdir().join("librtlab.so");
    assert!(library.exists(), "no {}", library.display());
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/java");
    let _ = std::fs::remove_dir_all(project.join("target/surefire-reports"));
    let run = Command::new("mvn")
        .args(["-B", "-q", "test"])
        .arg(format!("-Drtlab.library={}", library.display()))
        .current_dir(&project)
        .env("JAVA_HOME", &home)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "mvn test failed:\n{out}\n{err}");
    // What surefire ran, so a test that silently ran nothing cannot pass.
    let reports = std::fs::read_dir(project.join("target/surefire-reports")).unwrap();
    let mut ran = 0;
    for r in reports.flatten() {
        let text = std::fs::read_to_string(r.path()).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.starts_with("Tests run:")) {
            let n: u32 = line["Tests run: ".len()..]
                .split(',')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            ran += n;
        }
    }
    assert!(ran >= 12, "surefire ran {ran} tests");
    println!("{ran} JUnit tests passed with {}", home.display());
}
