//! Result files, written atomically: a temp file in the same directory, fsync, rename.
//! A crash leaves either the old file or the complete new one, never half of one.

use rtlab_stats::result::ResultDoc;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A result file could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Writing `path` failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A histogram in the document could not be decoded.
    #[error("series '{series}': {reason}")]
    BadSeries {
        /// Series name.
        series: String,
        /// Why.
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` atomically and safely (a new temp file with an unguessable name
/// beside it, fsync, rename; see [`rtlab_sys::fs::write_atomically`]): a link planted at the
/// path or at a temp name is never written through.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    rtlab_sys::fs::write_atomically(path, bytes).map_err(io_err(path))
}

/// Fails unless a file can be created at `path` (checked before a long run, not after it),
/// in a directory that root or the invoking user owns. The probe is a new file under an
/// unguessable name, removed at once: nothing existing is opened, so a link planted at any
/// name rtlab uses later changes nothing (the result is renamed into place then).
pub fn check_writable_file(path: &Path) -> Result<(), ReportError> {
    if path.is_dir() {
        return Err(ReportError::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
        });
    }
    if fs::metadata(path).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_block_device()
    }) {
        return Err(ReportError::Io {
            path: path.display().to_string(),
            source: std::io::Error::other(
                "is a block device (a result written there would overwrite the disk)",
            ),
        });
    }
    let dir = rtlab_sys::fs::parent_dir(path);
    rtlab_sys::fs::check_dir_owner(&dir).map_err(io_err(&dir))?;
    let (_, probe) =
        rtlab_sys::fs::create_unique(&dir, ".rtlab-probe-", "", 0o600).map_err(io_err(path))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// Creates `dir` if needed and fails unless files can be written in it (and root or the
/// invoking user owns it).
pub fn check_writable_dir(dir: &Path) -> Result<(), ReportError> {
    if dir.exists() && !dir.is_dir() {
        return Err(ReportError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "is a file, not a directory",
            ),
        });
    }
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    // (The probe's own name is not the user's: errors name the directory.)
    check_writable_file(&dir.join("x")).map_err(|e| match e {
        ReportError::Io { source, .. } => ReportError::Io {
            path: dir.display().to_string(),
            source,
        },
        e => e,
    })
}

/// One output format.
pub trait Exporter {
    /// Writes `doc` in this format.
    fn export(&self, doc: &ResultDoc) -> Result<(), ReportError>;
}

/// `--json PATH` (or `-` for stdout).
#[derive(Debug, Clone)]
pub struct JsonExporter {
    /// Destination; `-` is stdout.
    pub path: PathBuf,
}

impl Exporter for JsonExporter {
    fn export(&self, doc: &ResultDoc) -> Result<(), ReportError> {
        let mut text = serde_json::to_vec_pretty(doc).expect("result documents always serialise");
        text.push(b'\n');
        if self.path.as_os_str() == "-" {
            let mut out = std::io::stdout().lock();
            return out
                .write_all(&text)
                .and_then(|_| out.flush())
                .map_err(io_err(Path::new("<stdout>")));
        }
        atomic_write(&self.path, &text)
    }
}

/// `--hgrm DIR`: one percentile-distribution file per distribution series.
#[derive(Debug, Clone)]
pub struct HgrmExporter {
    /// Destination directory (created if missing).
    pub dir: PathBuf,
}

/// The `.hgrm` file name of a series: `/` (stage or implementation separators) become `_`.
pub fn hgrm_file_name(series: &str) -> String {
    let safe: String = series
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.hgrm")
}

impl Exporter for HgrmExporter {
    fn export(&self, doc: &ResultDoc) -> Result<(), ReportError> {
        fs::create_dir_all(&self.dir).map_err(io_err(&self.dir))?;
        rtlab_sys::fs::check_dir_owner(&self.dir).map_err(io_err(&self.dir))?;
        for series in doc.series.iter().filter(|s| s.histogram.is_some()) {
            let hist = series
                .decode_histogram()
                .expect("filtered on histogram")
                .map_err(|e| ReportError::BadSeries {
                    series: series.name.clone(),
                    reason: e.to_string(),
                })?;
            let mut text = Vec::new();
            hist.write_hgrm(&mut text)
                .expect("writing to a Vec cannot fail");
            atomic_write(&self.dir.join(hgrm_file_name(&series.name)), &text)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        atomic_write(&path, b"first").unwrap();
        atomic_write(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn unwritable_destinations_are_detected_up_front() {
        assert!(check_writable_file(Path::new("/nonexistent-dir/x.json")).is_err());
        let dir = tempfile::tempdir().unwrap();
        assert!(
            check_writable_file(dir.path()).is_err(),
            "a directory is not a file"
        );
        assert!(check_writable_file(&dir.path().join("ok.json")).is_ok());
        assert!(
            !dir.path().join("ok.json").exists(),
            "the check leaves nothing behind"
        );
        assert!(check_writable_dir(&dir.path().join("sub/dir")).is_ok());
    }

    #[test]
    fn hgrm_names_are_file_safe() {
        assert_eq!(hgrm_file_name("thread0"), "thread0.hgrm");
        assert_eq!(hgrm_file_name("idle/thread1"), "idle_thread1.hgrm");
        assert_eq!(hgrm_file_name("120KiB@50ms/rtt"), "120KiB@50ms_rtt.hgrm");
    }
}
