//! `make dev` / `make down`: the test control plane, detached, with a demo.
//!
//! ```text
//! devenv up   --dir .dev --server-bin target/debug/storage-transfer-apiserver
//! devenv down --dir .dev
//! ```
//!
//! `up` is idempotent: a healthy environment is left as it is; a stale or broken
//! one is torn down and started afresh. `down` stops every process recorded in
//! `<dir>/pids`, and every process whose command line names `<dir>` (so a crash
//! before a pid file was written still leaves nothing behind).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use sta_testenv::{process, repo_root, ControlPlane, Kubectl, Options, APISERVICE};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut command = None;
    let mut dir = repo_root().join(".dev");
    let mut server_bin = repo_root().join("target/debug/storage-transfer-apiserver");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "up" | "down" | "status" => command = Some(a.clone()),
            "--dir" => match it.next() {
                Some(v) => dir = PathBuf::from(v),
                None => return usage("--dir needs a value"),
            },
            "--server-bin" => match it.next() {
                Some(v) => server_bin = PathBuf::from(v),
                None => return usage("--server-bin needs a value"),
            },
            other => return usage(&format!("unknown argument {other}")),
        }
    }
    let dir = absolute(&dir);
    match command.as_deref() {
        Some("up") => up(&dir, &absolute(&server_bin)),
        Some("down") => {
            down(&dir);
            println!("dev environment in {} is down", dir.display());
            ExitCode::SUCCESS
        }
        Some("status") => {
            if healthy(&dir) {
                println!("running: KUBECONFIG={}", dir.join("kubeconfig").display());
                ExitCode::SUCCESS
            } else {
                println!("not running");
                ExitCode::FAILURE
            }
        }
        _ => usage("expected up, down or status"),
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("devenv: {problem}\nusage: devenv up|down|status [--dir DIR] [--server-bin PATH]");
    ExitCode::from(2)
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_owned())
    }
}

fn up(dir: &Path, server_bin: &Path) -> ExitCode {
    if healthy(dir) {
        println!("dev environment already running in {}", dir.display());
        print_next_steps(dir, server_bin);
        return ExitCode::SUCCESS;
    }
    down(dir);
    let opts = Options {
        dir: dir.to_owned(),
        server_bin: server_bin.to_owned(),
        server_args: Vec::new(),
        server_env: Vec::new(),
        detached: true,
        component_args: Vec::new(),
        server_audit: true,
        etcd_members: 1,
    };
    eprintln!("devenv: starting {}…", sta_testenv::COMPONENTS.join(", "));
    let cp = match ControlPlane::start(opts) {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("devenv: {e}");
            down(dir);
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = sta_testenv::create_demo(cp.kubectl()) {
        eprintln!(
            "devenv: creating the demo failed: {e}\nlogs: {}",
            cp.logs_dir().display()
        );
        drop(cp);
        down(dir);
        return ExitCode::FAILURE;
    }
    print_next_steps(dir, server_bin);
    ExitCode::SUCCESS
}

fn healthy(dir: &Path) -> bool {
    let kubeconfig = dir.join("kubeconfig");
    if !kubeconfig.is_file() || !all_recorded_pids_alive(dir) {
        return false;
    }
    let Ok(bins) = sta_testenv::Binaries::locate() else {
        return false;
    };
    let k = Kubectl::new(&bins.kubectl, &kubeconfig, &dir.join("kube-cache"));
    let run = k.run(&[
        "get",
        "apiservice",
        APISERVICE,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
        "--request-timeout=5s",
    ]);
    run.success && run.stdout.trim() == "True"
}

fn recorded_pids(dir: &Path) -> Vec<(PathBuf, Option<u32>)> {
    let Ok(entries) = std::fs::read_dir(dir.join("pids")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pid"))
        .map(|p| {
            let pid = std::fs::read_to_string(&p)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            (p, pid)
        })
        .collect()
}

fn all_recorded_pids_alive(dir: &Path) -> bool {
    let pids = recorded_pids(dir);
    pids.len() == sta_testenv::COMPONENTS.len()
        && pids
            .iter()
            .all(|(_, pid)| pid.is_some_and(|p| owned_by(p, dir)))
}

/// Whether `pid` is alive and is one of ours: its command line names `dir`.
fn owned_by(pid: u32, dir: &Path) -> bool {
    process::pid_is_running(pid)
        && process::cmdline(pid).is_some_and(|c| c.contains(&dir.display().to_string()))
}

fn down(dir: &Path) {
    for (file, pid) in recorded_pids(dir) {
        if let Some(pid) = pid.filter(|p| owned_by(*p, dir)) {
            process::terminate(pid, Duration::from_secs(10));
        }
        let _ = std::fs::remove_file(file);
    }
    // Anything left over from a crash before its pid file was written.
    for pid in process::pids_of_run(dir) {
        process::terminate(pid, Duration::from_secs(10));
    }
    // etcd's data dir may be on tmpfs, outside `dir`: its path is recorded.
    if let Ok(data) = std::fs::read_to_string(dir.join("etcd-data.path")) {
        let _ = std::fs::remove_dir_all(data.trim());
    }
    // The CSI driver removes its socket when stopped gracefully; not when killed.
    let _ = std::fs::remove_file(sta_testenv::csi::socket_path(dir));
}

/// `server_bin`'s directory holds the plugin too: cargo builds both there.
fn print_next_steps(dir: &Path, server_bin: &Path) {
    let kubeconfig = dir.join("kubeconfig");
    let bin_dir = server_bin
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|| ".".to_owned());
    let kubectl = sta_testenv::Binaries::locate()
        .map(|b| b.kubectl.display().to_string())
        .unwrap_or_else(|_| "kubectl".to_owned());
    println!(
        "\nstorage-transfer-apiserver is registered and Available.\n\
         \n  export KUBECONFIG={kc}\n\
         \x20 alias kubectl={kubectl}   # the client built from the pinned release\n\
         \nTry:\n\
         \x20 kubectl api-resources --api-group=storage.transfer.k8s.io\n\
         \x20 kubectl get namespacetransfers -A\n\
         \x20 kubectl get --raw /apis/storage.transfer.k8s.io/v1alpha1\n\
         \x20 kubectl get pvc -n prod db          # the demo volume, Bound\n\
         \nThe tenants' plugin, kubectl transfer (docs/user-guide.md):\n\
         \n  export PATH={bin_dir}:$PATH\n\
         \x20 kubectl transfer offer db --to dev -n prod\n\
         \x20 kubectl transfer request prod/db -n dev --wait\n\
         \x20 kubectl transfer list -A\n\
         \nLogs: {logs}\n\
         \x20 server-<port>-audit.log: our audit log; kube-apiserver-audit.log: its PV and PVC writes\n\
         Stop everything: make down\n",
        kc = kubeconfig.display(),
        logs = dir.join("logs").display(),
    );
}
