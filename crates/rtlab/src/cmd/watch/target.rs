//! Which process `rtlab watch` watches: a command it starts, a pid, a name, a systemd unit,
//! a container's cgroup or a Kubernetes pod.

use super::*;

/// What to watch: `--pid`'s process (checked now), a command, started once tracing is
/// ready (so its first wakeups are seen), a cgroup's processes or the machine's.
pub(super) enum Target<'a> {
    Pid(i32),
    Command(&'a [std::ffi::OsString]),
    Cgroup(std::path::PathBuf),
    All,
}

pub(super) fn target(args: &WatchArgs) -> anyhow::Result<Target<'_>> {
    let given = [
        args.pid.is_some(),
        !args.command.is_empty(),
        args.cgroup.is_some(),
        args.all,
    ];
    match given.iter().filter(|&&g| g).count() {
        0 => {
            return Err(BadInput(
                "say what to watch: --pid PID, a command after -- (rtlab watch -- ./app), --cgroup PATH or --all".into(),
            )
            .into())
        }
        1 => {}
        _ => {
            return Err(BadInput(
                "give one of --pid, a command after --, --cgroup or --all".into(),
            )
            .into())
        }
    }
    if args.no_children && (args.cgroup.is_some() || args.all) {
        return Err(BadInput("--no-children goes with --pid or a command".into()).into());
    }
    if let Some(pid) = args.pid {
        if rtlab_sys::procfs::threads_of(pid).is_err() {
            return Err(BadInput(format!("--pid {pid}: no such process")).into());
        }
        return Ok(Target::Pid(pid));
    }
    if let Some(cg) = &args.cgroup {
        if cg.trim().is_empty() {
            return Err(BadInput(
                "--cgroup is empty: give a cgroup's path or a pod's UID (--all watches every thread)"
                    .into(),
            )
            .into());
        }
        return cgroup_dir(cg)
            .map(Target::Cgroup)
            .map_err(|e| BadInput(format!("--cgroup {cg}: {e}")).into());
    }
    if args.all {
        return Ok(Target::All);
    }
    Ok(Target::Command(&args.command))
}

/// The cgroup (v2) directory `text` names: a path (absolute, or under /sys/fs/cgroup), or a
/// Kubernetes pod's UID (its directory, `...pod<uid>.slice` with `_` for `-`, or `pod<uid>`,
/// found under /sys/fs/cgroup).
pub(super) fn cgroup_dir(text: &str) -> Result<std::path::PathBuf, NoCgroup> {
    let roots: Vec<std::path::PathBuf> = rtlab_sys::procfs::cgroup2_mount()
        .into_iter()
        .chain([std::path::PathBuf::from("/sys/fs/cgroup")])
        .collect();
    let path = std::path::Path::new(text);
    let candidates: Vec<std::path::PathBuf> = match path.is_absolute() {
        true => vec![path.to_path_buf()],
        false => roots.iter().map(|r| r.join(path)).collect(),
    };
    if let Some(dir) = candidates
        .into_iter()
        .find(|d| d.join("cgroup.procs").is_file())
    {
        return Ok(dir);
    }
    let uid = text.strip_prefix("pod").unwrap_or(text);
    if !is_pod_uid(uid) {
        return Err(NoCgroup::NoSuchDir);
    }
    let mut found = pod_dirs(&roots, uid);
    found.dedup();
    match found.len() {
        0 => Err(NoCgroup::NoSuchPod(uid.to_string())),
        1 => Ok(found.remove(0)),
        _ => Err(NoCgroup::Ambiguous(uid.to_string(), found)),
    }
}

/// A whole pod UID: a UUID (`-` or `_` between its groups, as cgroup names spell it), or a
/// static pod's 32 hex digits. Never a prefix.
pub(super) fn is_pod_uid(uid: &str) -> bool {
    let groups: Vec<&str> = uid.split(['-', '_']).collect();
    let hex = |g: &str| g.chars().all(|c| c.is_ascii_hexdigit());
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    groups.iter().all(|g| hex(g)) && (lens == [8, 4, 4, 4, 12] || lens == [32])
}

/// The cgroups of the pod `uid` under `roots`: only in Kubernetes' own subtrees (a
/// directory named `kubepods*` at the top, or one level down under the kubelet's cgroup
/// root), and only a directory named exactly as the kubelet names a pod's (`pod<uid>`, or
/// `kubepods[-<qos>]-pod<uid with _>.slice`). A user's delegated subtree is not searched.
pub(super) fn pod_dirs(roots: &[std::path::PathBuf], uid: &str) -> Vec<std::path::PathBuf> {
    let (dashed, underscored) = (uid.replace('_', "-"), uid.replace('-', "_"));
    let is_pod = |name: &str| {
        name == format!("pod{dashed}")
            || name.strip_prefix("kubepods").is_some_and(|rest| {
                rest.ends_with(&format!("-pod{underscored}.slice"))
                    && rest
                        .trim_end_matches(&format!("-pod{underscored}.slice"))
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c == '-')
            })
    };
    let dirs = |d: &std::path::Path| -> Vec<(String, std::path::PathBuf)> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect()
    };
    // Kubernetes' subtrees: `kubepods*` at the top or one level down.
    let mut stack: Vec<(std::path::PathBuf, usize)> = Vec::new();
    for root in roots {
        for (name, top) in dirs(root) {
            if name.starts_with("kubepods") {
                stack.push((top, 0));
            } else if !name.contains("user") {
                let under = dirs(&top)
                    .into_iter()
                    .filter(|(n, _)| n.contains("kubepods"));
                stack.extend(under.map(|(_, p)| (p, 0)));
            }
        }
    }
    let mut found = Vec::new();
    while let Some((d, depth)) = stack.pop() {
        for (name, path) in dirs(&d) {
            if is_pod(&name) {
                found.push(path);
            } else if depth < 3 {
                stack.push((path, depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// Why `--cgroup` names no cgroup.
#[derive(Debug)]
pub(super) enum NoCgroup {
    /// Neither a cgroup's directory nor a pod UID.
    NoSuchDir,
    /// A pod UID (as written, without `pod`) that no cgroup's name holds.
    NoSuchPod(String),
    /// A pod UID that more than one cgroup is named for.
    Ambiguous(String, Vec<std::path::PathBuf>),
}

impl std::fmt::Display for NoCgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoCgroup::NoSuchDir => f.write_str(
                "no such cgroup (a directory with cgroup.procs, under /sys/fs/cgroup or absolute, or a pod UID)",
            ),
            NoCgroup::NoSuchPod(uid) => write!(f, "no pod with UID {uid} under /sys/fs/cgroup"),
            NoCgroup::Ambiguous(uid, dirs) => write!(
                f,
                "{} cgroups are named for pod {uid} ({}): give the directory",
                dirs.len(),
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl std::error::Error for NoCgroup {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_its_whole_uid_in_kubernetes_own_subtrees_and_never_two() {
        // Regression (hardening, third review, #6): the first directory holding `pod<uid>`
        // anywhere (a user's delegated subtree too) was taken, from an 8-digit prefix.
        let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        assert!(is_pod_uid(uid) && is_pod_uid(&uid.replace('-', "_")));
        assert!(is_pod_uid("0123456789abcdef0123456789abcdef"));
        for not in [
            "0f1e2d3c",
            "0f1e2d3c-4b5a",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fz",
        ] {
            assert!(!is_pod_uid(not), "{not}");
        }
        let root = tempfile::tempdir().unwrap();
        let mk = |p: &str| std::fs::create_dir_all(root.path().join(p)).unwrap();
        let u = uid.replace('-', "_");
        // A user's subtree naming the pod first: never searched.
        mk(&format!("user.slice/user-1000.slice/kubepods-pod{u}.slice"));
        mk(&format!("user.slice/evil/pod{uid}"));
        let roots = [root.path().to_path_buf()];
        assert_eq!(pod_dirs(&roots, uid), Vec::<std::path::PathBuf>::new());
        let pod =
            format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice");
        mk(&pod);
        mk(&format!(
            "kubepods.slice/kubepods-burstable.slice/x-pod{u}.slice.bak"
        ));
        assert_eq!(pod_dirs(&roots, uid), vec![root.path().join(&pod)]);
        // Under the kubelet's own cgroup root too, in the cgroupfs form.
        mk(&format!("kubelet.slice/kubepods/besteffort/pod{uid}"));
        assert_eq!(pod_dirs(&roots, uid).len(), 2, "two: ambiguous, refused");
    }
}
