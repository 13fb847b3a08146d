//! The audit log file, rotated by size as kube-apiserver's log backend
//! rotates it (gopkg.in/natefinch/lumberjack.v2): the current file keeps
//! its name; a file that would grow past `--audit-log-maxsize` is renamed to
//! `<name>-<UTC timestamp>.<ext>` (`audit-2024-05-01T10-00-00.000.log`) and
//! a new one is started; then backups beyond `--audit-log-maxbackup`, or
//! older than `--audit-log-maxage` days, are removed.
//!
//! Owns the files and nothing else: it is used only from the writer
//! thread of [`super::sink`], so it may block. Two differences from
//! lumberjack: rotation and clean-up run in that thread rather than a
//! goroutine of their own, and a backup is never named at or before the
//! newest one (two rotations in one millisecond): its timestamp moves on a
//! millisecond rather than overwriting a backup.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// lumberjack's `2006-01-02T15-04-05.000`.
const BACKUP_TIME_FORMAT: &str = "%Y-%m-%dT%H-%M-%S%.3f";
/// The length of a formatted backup timestamp.
const BACKUP_TIME_LEN: usize = 23;

/// How the log is rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rotation {
    /// Bytes a file may hold before it is rotated; 0: never rotate.
    pub max_size: u64,
    /// Backups kept; 0: all (subject to `max_age`).
    pub max_backups: usize,
    /// Backups older than this are removed; `None`: kept regardless of age.
    pub max_age: Option<Duration>,
}

/// An append-only log file that rotates itself. Each `write` call is one
/// line and is never split across two files.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    file: Option<BufWriter<File>>,
    size: u64,
}

impl RotatingFile {
    /// A log at `path`; nothing is opened until the first write.
    pub fn new(path: impl Into<PathBuf>, rotation: Rotation) -> Self {
        Self {
            path: path.into(),
            rotation,
            file: None,
            size: 0,
        }
    }

    /// Creates the log's directory (0700) and the file (0600) if they are
    /// missing, and checks that the file can be appended to: what kube
    /// does before it serves, so that a bad path stops the server.
    pub fn ensure(path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                builder.mode(0o700);
            }
            builder.create(dir)?;
        }
        create_private(path).map(drop)
    }

    /// The backups of this log, oldest first.
    pub fn backups(&self) -> io::Result<Vec<PathBuf>> {
        let mut found = self.backups_with_time()?;
        found.sort_by_key(|(t, _)| *t);
        Ok(found.into_iter().map(|(_, p)| p).collect())
    }

    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64;
        let max = self.rotation.max_size;
        if max > 0 && len > max {
            return Err(io::Error::other(format!(
                "write length {len} exceeds maximum file size {max}"
            )));
        }
        if self.file.is_none() {
            self.open_existing_or_new(len)?;
        }
        if max > 0 && self.size + len > max {
            self.rotate()?;
        }
        let file = match self.file.as_mut() {
            Some(f) => f,
            None => return Err(io::Error::other("the audit log is not open")),
        };
        file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    fn open_existing_or_new(&mut self, len: u64) -> io::Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(meta) => {
                let max = self.rotation.max_size;
                if max > 0 && meta.len() + len >= max {
                    return self.rotate();
                }
                match OpenOptions::new().append(true).open(&self.path) {
                    Ok(f) => {
                        self.file = Some(BufWriter::new(f));
                        self.size = meta.len();
                        Ok(())
                    }
                    // As lumberjack: if the old file will not open, start anew.
                    Err(_) => self.open_new(),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.open_new(),
            Err(e) => Err(io::Error::other(format!(
                "error getting log file info: {e}"
            ))),
        }
    }

    /// Moves the current file aside (if there is one), starts a new one,
    /// and removes the backups no longer wanted.
    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        if self.path.exists() {
            let backup = self.free_backup_name(Timestamp::now());
            std::fs::rename(&self.path, &backup)?;
        }
        self.open_new()?;
        if let Err(err) = self.remove_old_backups() {
            tracing::warn!(error = %err, "cannot remove old audit log backups");
        }
        Ok(())
    }

    fn open_new(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let f = create_private(&self.path)?;
        self.file = Some(BufWriter::new(f));
        self.size = 0;
        Ok(())
    }

    /// `<dir>/<prefix>-` and `<ext>` of the backup names.
    fn name_parts(&self) -> (PathBuf, String, String) {
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let file = self
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (stem, ext) = match file.rfind('.') {
            Some(i) if i > 0 => (file[..i].to_owned(), file[i..].to_owned()),
            _ => (file.clone(), String::new()),
        };
        (dir, format!("{stem}-"), ext)
    }

    /// The backup name for `at`, or for the first millisecond after the
    /// newest backup if that is later: names must sort as the backups were
    /// made, or the clean-up would remove the wrong ones.
    fn free_backup_name(&self, mut at: Timestamp) -> PathBuf {
        let millisecond = k8s_openapi::jiff::SignedDuration::from_millis(1);
        let newest = self
            .backups_with_time()
            .ok()
            .and_then(|found| found.into_iter().map(|(t, _)| t).max());
        if let Some(next) = newest.and_then(|t| t.checked_add(millisecond).ok()) {
            at = at.max(next);
        }
        let (dir, prefix, ext) = self.name_parts();
        loop {
            let name = format!("{prefix}{}{ext}", at.strftime(BACKUP_TIME_FORMAT));
            let path = dir.join(name);
            if !path.exists() {
                return path;
            }
            at = at.checked_add(millisecond).unwrap_or(at);
        }
    }

    fn backups_with_time(&self) -> io::Result<Vec<(Timestamp, PathBuf)>> {
        let (dir, prefix, ext) = self.name_parts();
        let read_from = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir.as_path()
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(read_from)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(middle) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(&ext))
            else {
                continue;
            };
            if let Some(t) = parse_backup_time(middle) {
                found.push((t, entry.path()));
            }
        }
        Ok(found)
    }

    /// lumberjack's `millRunOnce`, without compression.
    fn remove_old_backups(&self) -> io::Result<()> {
        if self.rotation.max_backups == 0 && self.rotation.max_age.is_none() {
            return Ok(());
        }
        let mut backups = self.backups_with_time()?;
        // Newest first.
        backups.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
        let mut remove = Vec::new();
        if self.rotation.max_backups > 0 && backups.len() > self.rotation.max_backups {
            remove.extend(backups.split_off(self.rotation.max_backups));
        }
        if let Some(age) = self.rotation.max_age {
            let cutoff = k8s_openapi::jiff::SignedDuration::try_from(age)
                .ok()
                .and_then(|d| Timestamp::now().checked_sub(d).ok());
            if let Some(cutoff) = cutoff {
                remove.extend(backups.into_iter().filter(|(t, _)| *t < cutoff));
            }
        }
        for (_, path) in remove {
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_line(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// `2024-05-01T10-00-00.000` → the instant, in UTC.
fn parse_backup_time(s: &str) -> Option<Timestamp> {
    if s.len() != BACKUP_TIME_LEN || !s.is_ascii() {
        return None;
    }
    let (date, rest) = s.split_at(10);
    let time = rest.strip_prefix('T')?;
    let (hms, millis) = time.split_at(8);
    format!("{date}T{}{millis}Z", hms.replace('-', ":"))
        .parse()
        .ok()
}

/// Creates (or opens, to append) a file only its owner can read, as kube
/// creates its audit log.
fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}
