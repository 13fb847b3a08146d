//! The `storage-transfer-apiserver` binary: parses flags, sets up logging, and
//! runs the server until SIGTERM.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use storage_transfer_apiserver::server::{self, Options};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let options = Options::parse();
    init_logging(&options.log_format);

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(server::WORKER_STACK_BYTES)
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            tracing::error!(error = %err, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let config = match options.complete() {
            Ok(config) => config,
            Err(err) => {
                tracing::error!("invalid configuration: {err}");
                return ExitCode::from(2);
            }
        };
        match server::run(config, server::termination_signal()).await {
            Ok(()) => {
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
            Err(err) => {
                tracing::error!("{err}");
                ExitCode::FAILURE
            }
        }
    })
}

fn init_logging(format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
