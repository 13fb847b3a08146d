//! `kubectl transfer` against a cluster that does not serve our API: its own
//! test binary, because it takes the APIService away from the control plane
//! it shares with no other test.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sta_testenv::{shared, APISERVICE, GROUP};

#[test]
fn without_the_apiservice_every_command_says_the_server_is_not_installed() {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    let admin = cp.kubectl();
    admin.ok(&["delete", "apiservice", APISERVICE]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin
        .run(&["get", "--raw", &format!("/apis/{GROUP}/v1alpha1")])
        .success
    {
        assert!(Instant::now() < deadline, "discovery still serves {GROUP}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let plugin = sta_testenv::plugin_bin();
    let path = format!(
        "{}:{}",
        plugin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for args in [
        vec!["list"],
        vec!["list", "-A"],
        vec!["status", "db-to-dev"],
        vec!["offer", "db", "--to", "dev", "--dry-run=server"],
        vec!["request", "prod/db", "-n", "default"],
        vec!["cancel", "db-to-dev"],
    ] {
        let out = Command::new(admin.binary())
            .arg("transfer")
            .args(&args)
            .arg(format!("--kubeconfig={}", admin.kubeconfig().display()))
            .env("PATH", &path)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: The storage-transfer-apiserver is not installed in this cluster: it does not serve {GROUP}/v1alpha1 (no APIService {APISERVICE}). Ask a cluster administrator to install it (deploy/README.md)."
            ),
            "{args:?}"
        );
    }
}
