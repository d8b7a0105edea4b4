//! What a fleet installs and runs: the Debian package, the systemd unit, the Kubernetes
//! manifests, the Prometheus alert rules and the Grafana dashboard (packaging/, deploy/),
//! each checked by the tool that consumes it, and the queries against a live `rtlab watch`.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Whether `program` runs here (`program ARG` exits 0).
fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a command, which must succeed; its stdout.
fn run_ok(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The unit's `CapabilityBoundingSet=`, as setpriv names them (`bpf`, `perfmon`).
fn unit_capabilities() -> Vec<String> {
    let unit = read("deploy/systemd/rtlab-watch.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet");
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

/// Processes a test started, killed and reaped however the test ends.
#[derive(Default)]
struct Started(Vec<Child>);

impl Started {
    fn spawn(&mut self, command: &mut Command) -> &mut Child {
        self.0.push(
            command
                .spawn()
                .unwrap_or_else(|e| panic!("{command:?}: {e}")),
        );
        self.0.last_mut().unwrap()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for child in self.0.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// examples/c/periodic.c (the `rt-loop` thread, 1 ms) built into `dir`, or None without cc.
fn periodic_program(dir: &Path) -> Option<PathBuf> {
    let program = dir.join("periodic");
    Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&program)
        .arg(repo().join("examples/c/periodic.c"))
        .status()
        .is_ok_and(|s| s.success())
        .then_some(program)
}

/// `periodic SECS` at SCHED_FIFO 50 on `cpus`, through rtlab exec.
fn fifo_periodic(program: &Path, secs: &str, cpus: &str) -> Command {
    let mut c = Command::new(rtlab_path());
    c.args([
        "exec", "--policy", "fifo", "--prio", "50", "--cpus", cpus, "--",
    ])
    .arg(program)
    .args([secs, "1000"])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    c
}

#[test]
fn the_systemd_unit_verifies_and_systemd_rates_its_sandbox_tight() {
    let test = "systemd unit";
    if !have("systemd-analyze", "--version") {
        return skip(test, "no systemd-analyze (apt-get install systemd)");
    }
    let dir = tempfile::tempdir().unwrap();
    // The unit as installed, but with this build's binary (verify checks ExecStart runs).
    let unit = read("deploy/systemd/rtlab-watch.service")
        .replace("/usr/bin/rtlab", &rtlab_path().display().to_string());
    let path = dir.path().join("rtlab-watch.service");
    std::fs::write(&path, unit).unwrap();
    // verify exits 0 on a misspelt setting too, with a warning: any output is a failure.
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    // systemd's own exposure score (0 best, 10 worst): 3.6 when written.
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--man=no", "--threshold=40"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exposure over 4.0: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_units_two_capabilities_are_enough_to_watch_and_each_is_needed() {
    let test = "the unit's capabilities";
    let caps = unit_capabilities();
    assert_eq!(caps, ["bpf", "perfmon"]);
    if !is_root() {
        return skip(
            test,
            "needs root (the unit runs rtlab as root with these only)",
        );
    }
    if !have("setpriv", "--version") {
        return skip(test, "no setpriv (apt-get install util-linux)");
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(program) = periodic_program(dir.path()) else {
        return skip(test, "no C compiler (cc) for the watched program");
    };
    let _serial = realtime_serial();
    let mut started = Started::default();
    started.spawn(&mut fifo_periodic(&program, "20", "0-1"));
    // As the unit runs it: root with only these capabilities, no new privileges.
    let watch_with = |caps: &[String]| -> Output {
        let bounding: String = caps.iter().map(|c| format!(",+{c}")).collect();
        Command::new("setpriv")
            .arg(format!("--bounding-set=-all{bounding}"))
            .args(["--inh-caps=-all", "--no-new-privs"])
            .arg(rtlab_path())
            .args([
                "watch",
                "--all",
                "--rt-only",
                "--quiet",
                "--duration",
                "1500ms",
            ])
            .arg("--json")
            .arg(dir.path().join("w.json"))
            .output()
            .expect("setpriv runs")
    };
    std::thread::sleep(Duration::from_millis(300));
    let out = watch_with(&caps);
    assert!(
        out.status.success(),
        "with {caps:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = load_valid_document(&dir.path().join("w.json"));
    let series = series_named(&doc, "rt-loop/wakeup");
    assert_eq!(series["tags"]["source"], "bpf", "{series}");
    let count = series["count"].as_u64().unwrap();
    assert!(count > 500, "{count} wakeups of the 1 kHz loop in 1.5 s");
    // Each of the two is needed: without it no eBPF recorder (and no watch at all unless
    // tracefs is mounted for the fallback, which it is not on the machine this was built on).
    for missing in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        std::fs::remove_file(dir.path().join("w.json")).ok();
        let out = watch_with(&fewer);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            let doc = load_valid_document(&dir.path().join("w.json"));
            let source = &series_named(&doc, "rt-loop/wakeup")["tags"]["source"];
            assert_ne!(source, "bpf", "the eBPF recorder ran without {missing}");
        } else {
            assert_eq!(out.status.code(), Some(1), "without {missing}: {stderr}");
        }
    }
}

#[test]
fn the_kubernetes_manifests_validate_against_the_api_schema() {
    let test = "kubernetes manifests";
    let manifest = repo().join("deploy/kubernetes/rtlab-watch.yaml");
    let text = read("deploy/kubernetes/rtlab-watch.yaml");
    // The DaemonSet asks for what the unit has, no more.
    let wanted: Vec<String> = unit_capabilities()
        .iter()
        .map(|c| format!("\"{}\"", c.to_uppercase()))
        .collect();
    assert!(
        text.contains(&format!("add: [{}]", wanted.join(", "))),
        "the DaemonSet adds {wanted:?}"
    );
    assert!(text.contains("drop: [\"ALL\"]") && text.contains("hostPID: true"));
    // Only the scraper reaches /metrics (it names the node's processes and threads).
    assert!(text.contains("kind: NetworkPolicy") && text.contains("- Ingress"));
    if !have("kubernetes-validate", "--version") {
        return skip(
            test,
            "no kubernetes-validate (pip install kubernetes-validate)",
        );
    }
    // Strict: a misspelt field is an error, not ignored. The newest API its schemas know,
    // and an older one still in support.
    for version in ["", "1.30.0"] {
        let mut c = Command::new("kubernetes-validate");
        c.arg("--strict");
        if !version.is_empty() {
            c.args(["-k", version]);
        }
        let said = run_ok(c.arg(&manifest));
        for kind in [
            "namespace/rtlab",
            "daemonset/rtlab-watch",
            "service/rtlab-watch",
            "networkpolicy/rtlab-watch",
        ] {
            assert!(
                said.contains(&format!("passed for resource {kind}")),
                "{said}"
            );
        }
    }
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    if !have("promtool", "--version") {
        return skip("alert rules", "no promtool (apt-get install prometheus)");
    }
    let dir = repo().join("deploy/prometheus");
    let said = run_ok(
        Command::new("promtool")
            .args(["check", "rules", "rtlab.rules.yml"])
            .current_dir(&dir),
    );
    assert!(said.contains("SUCCESS: 5 rules found"), "{said}");
    // The example scrape configuration, which loads them.
    let said = run_ok(
        Command::new("promtool")
            .args(["check", "config", "prometheus.yml"])
            .current_dir(&dir),
    );
    assert!(
        said.contains("is valid prometheus config file syntax"),
        "{said}"
    );
    let said = run_ok(
        Command::new("promtool")
            .args(["test", "rules", "rtlab.rules.test.yml"])
            .current_dir(&dir),
    );
    assert!(said.contains("SUCCESS"), "{said}");
}

/// Each alert's `expr:` in a rules file, by alert name (block scalars joined).
fn alert_exprs(rules: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut lines = rules.lines().peekable();
    let mut alert = String::new();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            alert = name.trim().to_string();
        }
        let Some(expr) = trimmed.strip_prefix("expr: ") else {
            continue;
        };
        if expr.trim() != "|" {
            found.push((alert.clone(), expr.trim().to_string()));
            continue;
        }
        let indent = line.len() - trimmed.len();
        let mut block = Vec::new();
        while let Some(next) = lines.next_if(|l| l.len() - l.trim_start().len() > indent) {
            block.push(next.trim());
        }
        found.push((alert.clone(), block.join(" ")));
    }
    found
}

/// An alert's expression without what makes it fire: the part before `unless` and the
/// comparison with a constant stripped, so it returns data whenever the metrics exist.
fn without_condition(expr: &str) -> String {
    let mut e = expr.split(" unless ").next().unwrap().trim().to_string();
    loop {
        let before = e.clone();
        if e.starts_with('(') && e.ends_with(')') && wraps_whole(&e) {
            e = e[1..e.len() - 1].trim().to_string();
        }
        for op in ["==", "!=", ">=", "<=", ">", "<"] {
            if let Some((left, right)) = e.rsplit_once(op) {
                if right.trim().parse::<f64>().is_ok() {
                    e = left.trim().to_string();
                    break;
                }
            }
        }
        if e == before {
            return e;
        }
    }
}

/// Whether the opening parenthesis of `e` closes at its very end.
fn wraps_whole(e: &str) -> bool {
    let mut depth = 0;
    for (i, c) in e.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return i == e.len() - 1;
        }
    }
    false
}

#[test]
fn the_condition_of_an_alert_is_stripped_to_the_query_that_needs_data() {
    let rules = alert_exprs(&read("deploy/prometheus/rtlab.rules.yml"));
    let names: Vec<&str> = rules.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        names,
        [
            "RtlabThreadP99High",
            "RtlabEventsLost",
            "RtlabThreadsUnwatched",
            "RtlabExporterDown",
            "RtlabOutlierBurst"
        ]
    );
    assert_eq!(
        without_condition("up{job=\"rtlab\"} == 0"),
        "up{job=\"rtlab\"}"
    );
    assert_eq!(
        without_condition("(sum by (a) (increase(x[5m])) > 30) unless on (a) (y >= on (a) z)"),
        "sum by (a) (increase(x[5m]))"
    );
    assert_eq!(
        without_condition("histogram_quantile(0.99, sum by (le) (rate(b[5m]))) > 0.001"),
        "histogram_quantile(0.99, sum by (le) (rate(b[5m])))"
    );
}

/// Every query of the dashboard (panels and template variables), with Grafana's variables
/// replaced as "All" and a short range would: regex-all matchers, 10 s rate windows.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let grafana = |q: &str| {
        q.replace("$__rate_interval", "10s")
            .replace("$__range", "1m")
            .replace("\"$node\"", "\".*\"")
            .replace("\"$thread\"", "\".*\"")
            .replace("\"$kind\"", "\".*\"")
    };
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            queries.push((panel["title"].as_str().unwrap().to_string(), grafana(expr)));
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        // label_values(METRIC, LABEL): the values come from METRIC's series.
        if let Some(q) = var["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .unwrap()
                .rsplit_once(',')
                .unwrap()
                .0;
            queries.push((format!("variable {}", var["name"]), grafana(inner)));
        }
    }
    queries
}

/// Prometheus's answer to an instant query (`curl`: the API wants the query URL-encoded).
fn prometheus_query(port: u16, query: &str) -> Option<Value> {
    let out = Command::new("curl")
        .args(["-s", "-G", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{port}/api/v1/query"))
        .arg("--data-urlencode")
        .arg(format!("query={query}"))
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// The finite values of a query's result (an empty list: no data yet).
fn finite_values(answer: &Value) -> Vec<f64> {
    answer["data"]["result"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .collect()
        })
        .unwrap_or_default()
}

/// A free TCP port on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn every_dashboard_query_and_alert_expression_returns_data_from_a_live_watch() {
    let test = "dashboard and alerts against a live watch";
    if !is_root() {
        return skip(test, "needs root (eBPF)");
    }
    if !have("prometheus", "--version") || !have("curl", "--version") {
        return skip(
            test,
            "needs Debian's prometheus and curl (apt-get install prometheus curl)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(program) = periodic_program(dir.path()) else {
        return skip(test, "no C compiler (cc) for the watched program");
    };
    let _serial = realtime_serial();
    let (_started, prom_port) = watched_and_scraped(dir.path(), &program);
    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/rtlab.json")).unwrap();
    let mut queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 14, "{queries:#?}");
    for (alert, expr) in alert_exprs(&read("deploy/prometheus/rtlab.rules.yml")) {
        queries.push((format!("alert {alert}"), without_condition(&expr)));
    }
    // Each must answer with a finite value within 40 s of the start (two scrapes give rates).
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut waiting: Vec<(String, String)> = queries;
    while !waiting.is_empty() && Instant::now() < deadline {
        waiting.retain(|(_, q)| {
            prometheus_query(prom_port, q).is_none_or(|a| finite_values(&a).is_empty())
        });
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert!(
        waiting.is_empty(),
        "no data in 40 s for {waiting:#?}\n{log}"
    );
    // Prometheus itself evaluated every rule without an error.
    let rules = Command::new("curl")
        .args(["-s", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{prom_port}/api/v1/rules"))
        .output()
        .unwrap();
    let rules: Value = serde_json::from_slice(&rules.stdout).unwrap();
    let evaluated = &rules["data"]["groups"][0]["rules"];
    assert_eq!(evaluated.as_array().map(Vec::len), Some(5), "{rules}");
    for rule in evaluated.as_array().unwrap() {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    // The hog is named as a culprit (the culprit panel's data is about the load it ran).
    let culprits = prometheus_query(prom_port, "rtlab_watch_outlier_culprits_total").unwrap();
    assert!(culprits.to_string().contains("rtlab-hog"), "{culprits}");
}

/// A FIFO 50 loop on CPU 0 beside a FIFO 99 hog there (a culprit for the outliers), `rtlab
/// watch --all --rt-only --metrics`, and Prometheus scraping it every second as job rtlab
/// with the alert rules loaded (its log in `dir`/prometheus.log): what was started, and
/// Prometheus's port.
fn watched_and_scraped(dir: &Path, program: &Path) -> (Started, u16) {
    let mut started = Started::default();
    started.spawn(&mut fifo_periodic(program, "60", "0"));
    started.spawn(
        Command::new(rtlab_path())
            .args(["load", "hog:99:2ms/100ms:0", "--duration", "60s", "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let port = free_port();
    started.spawn(
        Command::new(rtlab_path())
            .args([
                "watch",
                "--all",
                "--rt-only",
                "--quiet",
                "--interval-log",
                "1s",
            ])
            .arg("--metrics")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    // Prometheus as a fleet's would be: job rtlab, the rules loaded, 1 s scrapes.
    let prom_port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: rtlab\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
            repo().join("deploy/prometheus/rtlab.rules.yml").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    started.spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    );
    (started, prom_port)
}

#[test]
fn man_out_dir_writes_a_page_per_command_and_refuses_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    run_ok(
        Command::new(rtlab_path())
            .args(["man", "--out-dir"])
            .arg(dir.path()),
    );
    for page in [
        "rtlab.1",
        "rtlab-watch.1",
        "rtlab-net-run.1",
        "rtlab-slack-set.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        let title = format!(".TH {} 1", page.trim_end_matches(".1"));
        assert!(text.contains(&title), "{page}");
    }
    assert_bad_input(
        &["man", "--out-dir", "/nonexistent/man1"],
        &["--out-dir", "no such directory"],
    );
    assert_bad_input(&["man", "--out-dir", "/tmp", "watch"], &["--out-dir"]);
}

/// Removes the package however the test ends, so the machine is left as found.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["-P", "rtlab"]).output();
    }
}

/// The directory with the librtlab.so and librtlab.a cargo built (beside this test when
/// `cargo test` built them for the workspace, else target/<profile>).
fn library_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .find(|d| d.join("librtlab.so").is_file() && d.join("librtlab.a").is_file())
        .map(Path::to_path_buf)
}

/// Whether dpkg knows a package rtlab (installed, or its configuration left).
fn dpkg_knows_rtlab() -> bool {
    Command::new("dpkg-query")
        .args(["-s", "rtlab"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The installed package's files (not directories), from dpkg's own list.
fn package_files() -> Vec<PathBuf> {
    run_ok(Command::new("dpkg").args(["-L", "rtlab"]))
        .lines()
        .map(PathBuf::from)
        .filter(|p| !p.is_dir())
        .collect()
}

/// The reason the package test cannot run here, if any.
fn cannot_install_here() -> Option<String> {
    if !is_root() {
        return Some("dpkg -i needs root".into());
    }
    for (tool, package) in [
        ("dpkg-deb", "dpkg"),
        ("dpkg-shlibdeps", "dpkg-dev"),
        ("patchelf", "patchelf"),
        ("pkg-config", "pkg-config"),
        ("cc", "gcc"),
        ("man", "man-db"),
    ] {
        if !have(tool, "--version") {
            return Some(format!("no {tool} (apt-get install {package})"));
        }
    }
    if Path::new("/usr/bin/rtlab").exists() || dpkg_knows_rtlab() {
        return Some("rtlab is installed on this machine already: not replacing it".into());
    }
    None
}

#[test]
fn the_debian_package_installs_a_working_toolkit_and_library_and_purges_clean() {
    let test = "debian package";
    if let Some(reason) = cannot_install_here() {
        return skip(test, &reason);
    }
    let Some(libdir) = library_dir() else {
        return skip(
            test,
            "no librtlab.so and librtlab.a built (cargo build --release -p rtlab-ffi)",
        );
    };
    let dir = tempfile::tempdir().unwrap();
    // The package of this build (uncompressed: xz would take 15 s of the suite).
    let deb = run_ok(
        Command::new(repo().join("packaging/deb/build.sh"))
            .arg(dir.path())
            .env("RTLAB_NO_BUILD", "1")
            .env("RTLAB_DEB_COMPRESSION", "none")
            .env("RTLAB_BIN", rtlab_path())
            .env("RTLAB_LIBDIR", &libdir),
    );
    let _installed = Installed;
    run_ok(Command::new("dpkg").arg("-i").arg(deb.trim()));
    let files = package_files();
    let version = run_ok(Command::new("/usr/bin/rtlab").arg("--version"));
    assert_eq!(
        version.trim(),
        format!("rtlab {}", env!("CARGO_PKG_VERSION"))
    );
    assert_every_page_is_found(dir.path());
    assert_completions_are_found(test);
    assert_c_builds_against_it(dir.path());
    // The unit as installed, its manual page included.
    if have("systemd-analyze", "--version") {
        let out = Command::new("systemd-analyze")
            .args(["verify", "/lib/systemd/system/rtlab-watch.service"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "{stderr}");
    }
    // Removed: nothing but its configuration file; purged: nothing at all.
    let left = |files: &[PathBuf]| -> Vec<PathBuf> {
        files
            .iter()
            .filter(|f| f.exists() || f.is_symlink())
            .cloned()
            .collect()
    };
    run_ok(Command::new("dpkg").args(["-r", "rtlab"]));
    assert_eq!(
        left(&files),
        [Path::new("/etc/default/rtlab-watch")],
        "left after dpkg -r"
    );
    run_ok(Command::new("dpkg").args(["-P", "rtlab"]));
    assert_eq!(left(&files), Vec::<PathBuf>::new(), "left after dpkg -P");
    assert!(!dpkg_knows_rtlab(), "dpkg still knows rtlab");
}

/// `man -w` finds the installed page of every command the binary has (`net run` included).
fn assert_every_page_is_found(scratch: &Path) {
    let pages = scratch.join("pages");
    std::fs::create_dir(&pages).unwrap();
    run_ok(
        Command::new(rtlab_path())
            .args(["man", "--out-dir"])
            .arg(&pages),
    );
    let names: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".1")
                .to_string()
        })
        .collect();
    assert!(
        names.len() > 20 && names.iter().any(|n| n == "rtlab-net-run"),
        "{names:?}"
    );
    for name in &names {
        let found = run_ok(Command::new("man").args(["-w", name]));
        assert_eq!(found.trim(), format!("/usr/share/man/man1/{name}.1.gz"));
    }
}

/// Each shell's own loader finds its completion (bash-completion's on demand loader, fish's
/// completion of a partial command, zsh's function path).
fn assert_completions_are_found(test: &str) {
    let loader = Path::new("/usr/share/bash-completion/bash_completion");
    if loader.is_file() {
        let complete = run_ok(Command::new("bash").arg("-c").arg(format!(
            "source {}; __load_completion rtlab; complete -p rtlab",
            loader.display()
        )));
        assert!(complete.contains("-F _rtlab rtlab"), "{complete}");
    } else {
        skip(
            test,
            "bash completion: no bash-completion to load it (apt-get install bash-completion)",
        );
    }
    if have("fish", "--version") {
        let offered = run_ok(Command::new("fish").args(["-c", "complete -C 'rtlab wat'"]));
        assert!(offered.starts_with("watch"), "{offered}");
    }
    if have("zsh", "--version") {
        let fpath = run_ok(Command::new("zsh").args(["-fc", "print -l $fpath"]));
        assert!(
            fpath
                .lines()
                .any(|d| d == "/usr/share/zsh/vendor-completions"),
            "{fpath}"
        );
        assert!(Path::new("/usr/share/zsh/vendor-completions/_rtlab").is_file());
    }
}

/// A C program built with pkg-config's flags against the installed library runs: linked to
/// the shared library by its soname, and statically with `--static`'s private libraries.
fn assert_c_builds_against_it(scratch: &Path) {
    let app = scratch.join("app.c");
    std::fs::write(&app, C_PROGRAM).unwrap();
    let static_link = "$(pkg-config --cflags rtlab) -l:librtlab.a \
        $(pkg-config --static --libs-only-l rtlab | sed 's/-lrtlab//')";
    for (binary, link) in [
        ("shared", "$(pkg-config --cflags --libs rtlab)"),
        ("static", static_link),
    ] {
        let exe = scratch.join(binary);
        run_ok(Command::new("sh").arg("-c").arg(format!(
            "cc -Wall -Wextra -Werror -o {} {} {link}",
            exe.display(),
            app.display()
        )));
        let said = run_ok(&mut Command::new(&exe));
        assert_eq!(said.trim(), "pi mutex: success");
        let ldd = run_ok(Command::new("ldd").arg(&exe));
        let by_soname = format!("librtlab.so.0 => {}", installed_soname());
        assert_eq!(ldd.contains(&by_soname), binary == "shared", "{ldd}");
    }
}

/// Where the dynamic linker finds the installed library by its soname (ldconfig's cache:
/// /lib/... or /usr/lib/..., the same file on a merged-/usr system).
fn installed_soname() -> String {
    let cache = run_ok(Command::new("ldconfig").arg("-p"));
    let line = cache
        .lines()
        .find(|l| l.trim_start().starts_with("librtlab.so.0 "))
        .unwrap_or_else(|| panic!("ldconfig's cache lacks librtlab.so.0"));
    line.rsplit(" => ").next().unwrap().trim().to_string()
}

/// Locks and unlocks a PI mutex through the installed library.
const C_PROGRAM: &str = r#"#include <rtlab.h>
#include <stdio.h>

static rtlab_pi_mutex_t lock;

int main(void) {
    int rc = rtlab_pi_mutex_init(&lock, 0);
    if (rc == 0)
        rc = rtlab_pi_mutex_lock_until(&lock, rtlab_now_ns() + 1000000);
    if (rc == 0)
        rc = rtlab_pi_mutex_unlock(&lock);
    printf("pi mutex: %s\n", rtlab_strerror(rc));
    return rc;
}
"#;
