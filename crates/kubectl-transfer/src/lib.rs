//! `kubectl transfer`, the tenants' client: offer a claim, request one, follow
//! a transfer's progress, list and cancel transfers, through the same API
//! `kubectl` uses, as the user the kubeconfig (and `--as`) names.
//!
//! This module owns the command line ([`args`]) and its completion
//! ([`complete`]), the sentences its failures become ([`error`]), the
//! progress display ([`progress`]), what it prints ([`output`]) and the
//! commands ([`commands`]). It depends on `transfer-api` and kube-rs alone:
//! the server's types and words, never its storage, controllers or HTTP
//! server, so the plugin builds without them. The binary is `src/main.rs`.

pub mod args;
pub mod commands;
pub mod complete;
pub mod error;
pub mod output;
pub mod progress;

#[cfg(test)]
mod tests;

use std::io::Write;

use clap::Parser;

pub use error::Failure;

/// The plugin's entry point: parses the command line, runs the command and
/// returns the process's exit code.
pub fn main() -> i32 {
    let mut argv = std::env::args();
    let called = argv.next().unwrap_or_default();
    if std::path::Path::new(&called)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("kubectl_complete-"))
    {
        return match runtime() {
            Ok(rt) => {
                rt.block_on(commands::complete(argv.collect()));
                0
            }
            Err(_) => 1,
        };
    }
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return 1;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => 0,
        Err(failure) => {
            report(&failure);
            failure.exit_code()
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Says why the plugin stops. A transfer that ended has printed its closing
/// line already; it gets only the advice its reason carries.
fn report(failure: &Failure) {
    let mut err = std::io::stderr().lock();
    match failure {
        Failure::Failed { reason, .. } | Failure::Cancelled { reason, .. } => {
            if let Some(advice) = output::advice(reason) {
                let _ = writeln!(err, "{advice}");
            }
        }
        other => {
            let _ = writeln!(err, "error: {}", output::one_line(&other.to_string()));
        }
    }
}
