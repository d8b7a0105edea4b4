//! Where the tests find librtlab.so and librtlab.a.

use std::path::PathBuf;

/// The directory holding the librtlab.so and librtlab.a that cargo built for this test run:
/// `$RTLAB_LIBDIR` when set (bench/soak.sh runs copies of the tests elsewhere); else this
/// test's own directory, `target/<profile>/deps`, where `cargo test` puts them (it copies
/// them up to `target/<profile>` only for `cargo build`, so a fresh clone's `cargo test` has
/// them in deps alone); else `target/<profile>`.
pub fn libdir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RTLAB_LIBDIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test's directory").to_path_buf();
    if deps.join("librtlab.so").exists() {
        return deps;
    }
    deps.parent().map(PathBuf::from).unwrap_or(deps)
}
