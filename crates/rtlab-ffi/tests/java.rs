//! Runs the Java binding's JUnit tests (bindings/java, `mvn test`) against the librtlab.so
//! cargo built beside this test, when a JDK 22+ (FFM) and Maven are found; says `skipped:`
//! with the reason otherwise. So the README's one test command covers the Java side too.
//! A second test installs the binding's jar and uses it from a project of its own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Both tests build in bindings/java/target: one at a time.
static BINDING_BUILD: Mutex<()> = Mutex::new(());

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

/// The JDK and Maven to build with, or why the test is skipped.
fn toolchain() -> Result<PathBuf, &'static str> {
    let home = jdk().ok_or("no JDK 22+ (FFM) in $JAVA_HOME or /usr/lib/jvm")?;
    if Command::new("mvn").arg("-v").output().is_err() {
        return Err("no Maven (mvn)");
    }
    Ok(home)
}

/// The JDK and Maven (else says why the test is skipped), and the library the tests load.
fn toolchain_and_library() -> Option<(PathBuf, PathBuf)> {
    let home = match toolchain() {
        Ok(home) => home,
        Err(why) => {
            rtlab_sys::testing::say_skipped(why);
            return None;
        }
    };
    let library = common::libdir().join("librtlab.so");
    assert!(library.exists(), "no {}", library.display());
    Some((home, library))
}

fn binding_project() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/java")
}

#[test]
fn the_java_bindings_junit_tests_pass() {
    let Some((home, library)) = toolchain_and_library() else {
        return;
    };
    let project = binding_project();
    let _build = BINDING_BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let _ = std::fs::remove_dir_all(project.join("target/surefire-reports"));
    let run = Command::new("mvn")
        .args(["-B", "-q", "test"])
        .arg(format!("-Drtlab.library={}", library.display()))
        .arg(format!("-Drtlab.native={}", library.display()))
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

/// `<version>` of the binding's pom (the first one after its `<artifactId>`).
fn binding_version(pom: &str) -> String {
    let after = &pom[pom
        .find("<artifactId>rtlab-java</artifactId>")
        .expect("artifactId")..];
    let start = after.find("<version>").expect("version") + "<version>".len();
    after[start..start + after[start..].find('<').unwrap()].to_string()
}

/// A local Maven repository for one test: the user's repository's groups linked in (read
/// from there first, so it works offline once they are cached; Maven Central otherwise), and
/// `dev/` a directory of its own, where the binding is installed.
fn scratch_repository(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("dev")).unwrap();
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    if let Ok(groups) = std::fs::read_dir(home.join(".m2/repository")) {
        for group in groups.flatten() {
            if group.file_name() != "dev" {
                std::os::unix::fs::symlink(group.path(), repo.join(group.file_name())).unwrap();
            }
        }
    }
    repo
}

const CONSUMER_MAIN: &str = r#"import dev.rtlab.PiMutex;
import java.nio.file.Files;
import java.nio.file.Path;

public class Main {
    public static void main(String[] args) throws Exception {
        PiMutex m = new PiMutex();
        m.lock();
        System.out.println("held " + m.isHeldByCurrentThread());
        m.unlock();
        System.out.println("free " + !m.isLocked());
        // Where the library was mapped from: the jar's copy, already deleted.
        for (String line : Files.readAllLines(Path.of("/proc/self/maps"))) {
            if (line.contains("librtlab.so")) {
                System.out.println("mapped " + line.substring(line.indexOf('/')));
                break;
            }
        }
    }
}
"#;

fn consumer_pom(version: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>uses-rtlab</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>22</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>dev.rtlab</groupId>
      <artifactId>rtlab-java</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.13.0</version>
      </plugin>
    </plugins>
  </build>
</project>
"#
    )
}

fn mvn(dir: &Path, home: &Path, args: &[&str]) {
    let run = Command::new("mvn")
        .args(["-B", "-q"])
        .args(args)
        .current_dir(dir)
        .env("JAVA_HOME", home)
        .env_remove("RTLAB_LIBRARY")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "mvn {args:?} in {} failed:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn the_installed_jar_carries_librtlab_and_another_project_locks_a_pi_mutex_with_no_flag() {
    let Some((home, library)) = toolchain_and_library() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let repo = scratch_repository(scratch.path());
    let repo_flag = format!("-Dmaven.repo.local={}", repo.display());
    let project = binding_project();
    {
        let _build = BINDING_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        let native = format!("-Drtlab.native={}", library.display());
        mvn(
            &project,
            &home,
            &["install", "-DskipTests", &repo_flag, &native],
        );
    }
    let version = binding_version(&std::fs::read_to_string(project.join("pom.xml")).unwrap());
    let jar = repo.join(format!(
        "dev/rtlab/rtlab-java/{version}/rtlab-java-{version}.jar"
    ));
    assert!(jar.exists(), "mvn install left no {}", jar.display());

    let consumer = scratch.path().join("consumer");
    std::fs::create_dir_all(consumer.join("src/main/java")).unwrap();
    std::fs::write(consumer.join("pom.xml"), consumer_pom(&version)).unwrap();
    std::fs::write(consumer.join("src/main/java/Main.java"), CONSUMER_MAIN).unwrap();
    mvn(&consumer, &home, &["compile", &repo_flag]);

    // No -Drtlab.library, no $RTLAB_LIBRARY, no java.library.path: the jar's own copy.
    let classpath = format!(
        "{}:{}",
        consumer.join("target/classes").display(),
        jar.display()
    );
    let run = Command::new(home.join("bin/java"))
        .args([
            "--enable-native-access=ALL-UNNAMED",
            "-cp",
            &classpath,
            "Main",
        ])
        .env_remove("RTLAB_LIBRARY")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the consumer failed:\n{out}\n{err}");
    assert!(out.contains("held true\nfree true\n"), "{out}\n{err}");
    let mapped = out
        .lines()
        .find_map(|l| l.strip_prefix("mapped "))
        .expect("librtlab.so mapped");
    assert!(
        mapped.contains("/rtlab-") && mapped.ends_with("librtlab.so (deleted)"),
        "librtlab.so should be mapped from the jar's private copy, deleted once loaded: {mapped}"
    );
    println!("a separate project locked a PiMutex from {}", jar.display());
}

#[test]
fn maven_under_a_jdk_older_than_22_fails_with_the_reason_and_what_to_do() {
    let older = std::fs::read_dir("/usr/lib/jvm").ok().and_then(|d| {
        d.flatten()
            .map(|e| e.path())
            .find(|p| jdk_version(p).is_some_and(|v| v < 22) && p.join("bin/javac").exists())
    });
    let Some(older) = older else {
        return rtlab_sys::testing::say_skipped("no JDK older than 22 under /usr/lib/jvm");
    };
    if Command::new("mvn").arg("-v").output().is_err() {
        return rtlab_sys::testing::say_skipped("no Maven (mvn)");
    }
    let _build = BINDING_BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let run = Command::new("mvn")
        .args(["-B", "-q", "validate"])
        .current_dir(binding_project())
        .env("JAVA_HOME", &older)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(!run.status.success(), "{out}");
    assert!(
        out.contains("rtlab-java needs Java 22 or later") && out.contains("set JAVA_HOME"),
        "{out}"
    );
}
