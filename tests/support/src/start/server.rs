//! Starting our server for a control plane, and running it again: its
//! ServiceAccount identity, its command line (the same for the first start,
//! restarts and replicas), its audit policy and log, its direct kubeconfigs,
//! [`ControlPlane::restart_server`], [`ControlPlane::kill_server`] and the
//! other ways of watching it, and its extra replicas ([`Replica`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::pki::Pki;
use crate::process::{self, Process, Watchdog};
use crate::{
    forget_pid, free_port, guard_pid, http, io_err, lock, repo_root, sanitize, wait_ready,
    write_kubeconfig, ControlPlane, Error, Kubectl, Options, COMPONENTS, SERVICE_NAME,
    SERVICE_NAMESPACE,
};

/// The process name, log name (`logs/<name>.log`) and pid file name of our server.
pub(crate) const SERVER: &str = "storage-transfer-apiserver";

/// How long our server may take to answer `/readyz`.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a restart keeps trying to get its port back before giving up.
const SERVER_PORT_PATIENCE: Duration = Duration::from_secs(5);

/// SIGTERM grace for a replica: more than the server's `--shutdown-grace-period`.
const REPLICA_STOP_GRACE: Duration = Duration::from_secs(10);

impl ControlPlane {
    /// The audit policy our server runs with (unless
    /// [`Options::server_audit`] is off): our kinds at RequestResponse, the
    /// controllers' writes to PVs and PVCs at Metadata.
    fn server_audit_policy(&self) -> Result<PathBuf, Error> {
        let path = self.dir.join("server-audit-policy.yaml");
        std::fs::write(&path, SERVER_AUDIT_POLICY).map_err(io_err(&path))?;
        Ok(path)
    }

    /// The audit log of our server on `port`.
    pub fn server_audit_log(&self, port: u16) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("server-{port}-audit.log"))
    }

    /// Applies `deploy/rbac/` (namespace, ServiceAccount, the RBAC the server
    /// needs and the user-facing roles; not the workloads, since the server
    /// runs here as a local process) and gives the server a kubeconfig holding
    /// a token of its ServiceAccount, so that it runs with exactly the rights
    /// the deployment grants it, not as an administrator.
    pub(crate) fn install_server_identity(&self) -> Result<(), Error> {
        let deploy = repo_root().join("deploy").join("rbac");
        self.admin
            .eventually(
                &["apply", "-k", &deploy.display().to_string()],
                Duration::from_secs(30),
            )
            .into_result()?;
        self.service_account_kubeconfig(
            SERVICE_NAMESPACE,
            SERVICE_NAME,
            &self.dir.join("server.kubeconfig"),
        )
    }

    pub(crate) fn start_server(&mut self, opts: &Options) -> Result<(), Error> {
        self.server_audit_policy()?;
        let direct_kubeconfig = self.dir.join("direct.kubeconfig");
        let port = std::cell::Cell::new(0u16);
        let env = server_env(&opts.server_env);
        let this = &*self;
        this.start_component(
            SERVER,
            &this.server.bin,
            || {
                let p = free_port()?;
                port.set(p);
                this.write_direct_kubeconfig(&direct_kubeconfig, p)?;
                Ok(this.server_command_line(p, &[]))
            },
            &env_refs(&env),
            SERVER_READY_TIMEOUT,
            || this.direct.run(&["get", "--raw=/readyz"]).success,
        )?;
        self.server_port = port.get();
        self.server_url = format!("https://127.0.0.1:{}", port.get());
        Ok(())
    }

    /// Every flag our server runs with, in one place for the first start,
    /// restarts and replicas: the standard set for port `port` (less any
    /// flag the next two set), then [`Options::server_args`], then `extra`.
    fn server_command_line(&self, port: u16, extra: &[String]) -> Vec<String> {
        let mut args = vec![
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--etcd-servers={}", self.etcd_url),
            format!(
                "--kubeconfig={}",
                self.dir.join("server.kubeconfig").display()
            ),
            format!("--tls-cert-file={}", self.pki.server_serving.cert.display()),
            format!(
                "--tls-private-key-file={}",
                self.pki.server_serving.key.display()
            ),
            "--shutdown-grace-period=5s".to_owned(),
            // A clone the driver refuses fails the transfer in seconds; long
            // enough that the provisioner, retrying its own conflicts on a
            // source cloned several times at once, is not cut short on a
            // loaded machine.
            "--clone-timeout=10s".to_owned(),
            // tests/fairness.rs files 2,000 waiting transfers in one
            // namespace, past the default backstop of 1,000.
            "--max-objects-per-namespace=2500".to_owned(),
        ];
        if self.server.audit {
            args.push(format!(
                "--audit-policy-file={}",
                self.dir.join("server-audit-policy.yaml").display()
            ));
            args.push(format!(
                "--audit-log-path={}",
                self.server_audit_log(port).display()
            ));
        }
        // A flag the caller sets replaces the standard one of that name
        // (the server, as clap parses it, refuses a flag given twice).
        let name = |arg: &str| arg.split('=').next().unwrap_or_default().to_owned();
        let set: Vec<String> = self
            .server
            .args
            .iter()
            .chain(extra)
            .map(|a| name(a))
            .collect();
        args.retain(|a| !set.contains(&name(a)));
        args.extend(self.server.args.iter().cloned());
        args.extend(extra.iter().cloned());
        args
    }

    /// A kubeconfig for kubectl straight to our server on `port`, as admin.
    fn write_direct_kubeconfig(&self, path: &Path, port: u16) -> Result<(), Error> {
        write_kubeconfig(
            path,
            &format!("https://127.0.0.1:{port}"),
            &self.pki.serving_ca.cert,
            Some((&self.pki.admin.cert, &self.pki.admin.key)),
        )
    }

    /// The error to report if our server has exited: start-up is pointless
    /// then, whatever else is still waited for.
    pub(super) fn server_exited(&self) -> Option<Error> {
        let mut procs = lock(&self.processes);
        let p = procs.iter_mut().find(|p| p.name == SERVER)?;
        if p.is_running() {
            return None;
        }
        let code = p
            .exit_status()
            .map_or_else(|| "?".to_owned(), |s| process::status_code(s).to_string());
        Some(Error::Exited {
            component: format!("{SERVER} (exit code {code})"),
            log: p.log.clone(),
            tail: p.log_tail(),
        })
    }

    /// Our server's pid, while a process of it is tracked (running or exited
    /// but not yet restarted).
    pub fn server_pid(&self) -> Option<u32> {
        self.component_pid(SERVER)
    }

    /// Whether our server is running.
    pub fn server_is_running(&self) -> bool {
        lock(&self.processes)
            .iter_mut()
            .find(|p| p.name == SERVER)
            .is_some_and(Process::is_running)
    }

    /// Our server's current log (earlier runs are in
    /// `storage-transfer-apiserver.<n>.log`).
    pub fn server_log(&self) -> PathBuf {
        self.log_path(SERVER)
    }

    /// SIGKILLs our server now, with no grace, and reaps it. It stays down
    /// until [`restart_server`](Self::restart_server).
    pub fn kill_server(&self) {
        let mut procs = lock(&self.processes);
        if let Some(p) = procs.iter_mut().find(|p| p.name == SERVER) {
            p.kill();
            forget_pid(&self.watchdog, p.pid);
        }
    }

    /// Waits up to `timeout` for our server to exit by itself (fault
    /// injection) and returns its exit code (128 + signal if a signal killed
    /// it); `None` if it is still running after `timeout`, or not running
    /// under our control at all.
    pub fn wait_for_server_exit(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut procs = lock(&self.processes);
                let p = procs.iter_mut().find(|p| p.name == SERVER)?;
                if let Some(status) = p.exit_status() {
                    forget_pid(&self.watchdog, p.pid);
                    return Some(process::status_code(status));
                }
                if !p.is_running() {
                    return None; // detached: no exit status to read
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            // The lock is not held here, so kill_server works meanwhile.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts our server again on the same port, so that the APIService and
    /// [`direct`](Self::direct) keep working, after SIGKILLing it if it still
    /// runs. Flags: the standard set, [`Options::server_args`], `extra_args`;
    /// environment: `RUST_LOG=info`, then `env` ([`Options::server_env`] is
    /// not repeated, so a fault injected at start-up is not injected again).
    /// The previous log is kept as `storage-transfer-apiserver.<n>.log`.
    /// Returns once `/readyz` answers; fails with [`Error::PortTaken`] if
    /// another process holds the port.
    pub fn restart_server(
        &self,
        extra_args: &[String],
        env: &[(String, String)],
    ) -> Result<(), Error> {
        let old = {
            let mut procs = lock(&self.processes);
            procs
                .iter()
                .position(|p| p.name == SERVER)
                .map(|i| procs.remove(i))
        };
        if let Some(mut old) = old {
            old.kill();
            forget_pid(&self.watchdog, old.pid);
        }
        let log = self.log_path(SERVER);
        let args = self.server_command_line(self.server_port, extra_args);
        let env = server_env(env);
        let deadline = Instant::now() + SERVER_PORT_PATIENCE;
        loop {
            process::rotate_log(&log)?;
            let mut p = Process::spawn(SERVER, &self.server.bin, &args, &log, &env_refs(&env))?;
            let ready = wait_ready(&mut p, SERVER, SERVER_READY_TIMEOUT, &mut || {
                self.direct.run(&["get", "--raw=/readyz"]).success
            });
            match ready {
                Ok(()) => {
                    self.track(p);
                    return Ok(());
                }
                Err(e) => {
                    let lost = p.lost_port_race();
                    p.stop(Duration::from_secs(2));
                    if !lost {
                        return Err(e);
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::PortTaken {
                            component: SERVER.to_owned(),
                            port: self.server_port,
                            tail: p.log_tail(),
                            log,
                        });
                    }
                    // A port probe (free_port) may hold it for a moment.
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        }
    }

    /// Starts another replica of our server: same etcd, same ServiceAccount
    /// kubeconfig and serving certificate, its own free port, logging to
    /// `logs/<name>.log` (an earlier log of that name is rotated). Flags and
    /// environment as for [`restart_server`](Self::restart_server). Returns
    /// once its `/readyz` answers. It is not registered with the APIService;
    /// reach it through [`Replica::direct`].
    pub fn start_replica(
        &self,
        name: &str,
        extra_args: &[String],
        env: &[(String, String)],
    ) -> Result<Replica, Error> {
        let file = sanitize(name);
        if COMPONENTS.contains(&file.as_str()) {
            return Err(Error::Spawn {
                component: name.to_owned(),
                program: self.server.bin.clone(),
                message: "a replica needs a name of its own: the control plane uses this one"
                    .to_owned(),
            });
        }
        let log = self.log_path(&file);
        process::rotate_log(&log)?;
        let kubeconfig = self.dir.join(format!("{file}.direct.kubeconfig"));
        let direct = Kubectl::new(
            &self.bins.kubectl,
            &kubeconfig,
            &self.dir.join("kube-cache"),
        );
        let env = server_env(env);
        let port = std::cell::Cell::new(0u16);
        let p = process::spawn_ready(
            &file,
            &self.server.bin,
            || {
                let p = free_port()?;
                port.set(p);
                self.write_direct_kubeconfig(&kubeconfig, p)?;
                Ok(self.server_command_line(p, extra_args))
            },
            &log,
            &env_refs(&env),
            SERVER_READY_TIMEOUT,
            || direct.run(&["get", "--raw=/readyz"]).success,
        )?;
        guard_pid(&self.watchdog, p.pid);
        Ok(Replica {
            name: name.to_owned(),
            port: port.get(),
            url: format!("https://127.0.0.1:{}", port.get()),
            direct,
            log,
            pid: p.pid,
            pki: self.pki.clone(),
            process: Mutex::new(p),
            watchdog: Arc::clone(&self.watchdog),
        })
    }
}

/// Another process of our server, from [`ControlPlane::start_replica`]:
/// stopped (SIGTERM, then SIGKILL) when dropped, and killed with the test
/// binary however it exits.
#[derive(Debug)]
pub struct Replica {
    pub name: String,
    pub port: u16,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// kubectl straight to this replica, as admin (client certificate).
    pub direct: Kubectl,
    /// Its log.
    pub log: PathBuf,
    pub pid: u32,
    pki: Pki,
    process: Mutex<Process>,
    watchdog: Arc<Mutex<Option<Watchdog>>>,
}

impl Replica {
    /// SIGKILL now, no grace, and reap.
    pub fn kill(&self) {
        lock(&self.process).kill();
        forget_pid(&self.watchdog, self.pid);
    }

    /// SIGTERM, then SIGKILL if it is still running after a grace longer than
    /// its `--shutdown-grace-period`; waits for the exit.
    pub fn stop(&self) {
        lock(&self.process).stop(REPLICA_STOP_GRACE);
        forget_pid(&self.watchdog, self.pid);
    }

    pub fn is_running(&self) -> bool {
        lock(&self.process).is_running()
    }

    /// Waits up to `timeout` for it to exit by itself; its exit code (128 +
    /// signal if a signal killed it), or `None` on timeout.
    pub fn wait_for_exit(&self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = lock(&self.process).exit_status() {
                forget_pid(&self.watchdog, self.pid);
                return Some(process::status_code(status));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        process::log_tail(&self.log, 30)
    }

    /// A raw HTTPS client straight to this replica, presenting the admin
    /// certificate.
    pub fn http(&self) -> Result<http::HttpClient, Error> {
        http::HttpClient::new(
            self.port,
            &self.pki.serving_ca.cert,
            &format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc"),
            Some((&self.pki.admin.cert, &self.pki.admin.key)),
        )
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop();
    }
}

/// See [`ControlPlane::server_audit_policy`].
const SERVER_AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  resources: [{group: storage.transfer.k8s.io}]
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: \"\", resources: [persistentvolumes, persistentvolumeclaims]}]
- level: None
";

/// Our server's environment: `RUST_LOG=info`, then `extra` (later wins).
fn server_env(extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = vec![("RUST_LOG".to_owned(), "info".to_owned())];
    env.extend(extra.iter().cloned());
    env
}

fn env_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}
