//! The plugin's command line where no cluster is needed: completion scripts
//! and usage errors.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::process::Command;

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-transfer");

#[test]
fn completion_scripts_are_printed_for_bash_and_zsh() {
    let plugin = PLUGIN;
    let bash = Command::new(plugin)
        .args(["completion", "bash"])
        .output()
        .unwrap();
    let bash = String::from_utf8(bash.stdout).unwrap();
    assert!(
        bash.contains("complete -F") && bash.contains("kubectl-transfer"),
        "{bash}"
    );
    for word in ["offer", "request", "status", "list", "cancel"] {
        assert!(bash.contains(word), "{word}: {bash}");
    }
    let zsh = Command::new(plugin)
        .args(["completion", "zsh"])
        .output()
        .unwrap();
    let zsh = String::from_utf8(zsh.stdout).unwrap();
    assert!(zsh.starts_with("#compdef kubectl-transfer"), "{zsh}");
    let fish = Command::new(plugin)
        .args(["completion", "fish"])
        .output()
        .unwrap();
    assert_eq!(
        fish.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn an_unknown_command_is_a_usage_error_that_names_it() {
    let out = Command::new(PLUGIN).arg("teleport").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("teleport"), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
}
