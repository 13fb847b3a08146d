//! The real `kubectl`, built from the pinned release, as tests and the harness
//! drive it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// A `kubectl` bound to one kubeconfig and, optionally, an impersonated user.
#[derive(Debug, Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
    extra: Vec<String>,
}

/// What one kubectl invocation printed.
#[derive(Debug, Clone)]
pub struct Run {
    pub args: Vec<String>,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from_output(args: Vec<String>, out: Output) -> Self {
        Self {
            args,
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The result as `Ok(stdout)` or an error carrying stderr.
    pub fn into_result(self) -> Result<String, Error> {
        if self.success {
            Ok(self.stdout)
        } else {
            Err(Error::Kubectl {
                args: self.args.join(" "),
                stderr: self.stderr.trim().to_owned(),
            })
        }
    }
}

impl Kubectl {
    pub fn new(bin: &Path, kubeconfig: &Path, cache_dir: &Path) -> Self {
        Self {
            bin: bin.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            cache_dir: cache_dir.to_owned(),
            extra: Vec::new(),
        }
    }

    /// The same kubectl, impersonating `user` in `groups` (`--as`, `--as-group`).
    pub fn impersonating(&self, user: &str, groups: &[&str]) -> Self {
        let mut k = self.clone();
        k.extra.push(format!("--as={user}"));
        for g in groups {
            k.extra.push(format!("--as-group={g}"));
        }
        k
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn binary(&self) -> &Path {
        &self.bin
    }

    fn command(&self, args: &[&str]) -> (Command, Vec<String>) {
        let mut all = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--cache-dir={}", self.cache_dir.display()),
        ];
        all.extend(self.extra.iter().cloned());
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let mut cmd = Command::new(&self.bin);
        cmd.args(&all).stdin(Stdio::null());
        (cmd, all)
    }

    /// Runs kubectl and reports what happened, success or not.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    /// Runs kubectl with `input` on stdin (for `apply -f -`).
    pub fn run_with_stdin(&self, args: &[&str], input: Option<&str>) -> Run {
        let (mut cmd, all) = self.command(args);
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = cmd.spawn().and_then(|mut child| {
            if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
                stdin.write_all(text.as_bytes())?;
            }
            child.wait_with_output()
        });
        match output {
            Ok(out) => Run::from_output(all, out),
            Err(e) => Run {
                args: all,
                success: false,
                stdout: String::new(),
                stderr: format!("cannot run {}: {e}", self.bin.display()),
            },
        }
    }

    /// Runs kubectl and returns stdout, or an error with stderr.
    pub fn try_ok(&self, args: &[&str]) -> Result<String, Error> {
        self.run(args).into_result()
    }

    /// Runs kubectl and returns stdout; panics with stderr on failure. For tests.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        match self.try_ok(args) {
            Ok(out) => out,
            Err(e) => panic!("{e}"),
        }
    }

    /// `kubectl apply -f -` with `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String, Error> {
        self.run_with_stdin(&["apply", "-f", "-"], Some(yaml))
            .into_result()
    }

    /// Retries `args` until it succeeds or `timeout` passes; returns the last run.
    pub fn eventually(&self, args: &[&str], timeout: Duration) -> Run {
        let deadline = Instant::now() + timeout;
        loop {
            let run = self.run(args);
            if run.success || Instant::now() >= deadline {
                return run;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}
