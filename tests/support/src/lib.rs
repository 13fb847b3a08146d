//! The test environment: a real control plane on loopback, envtest style.
//!
//! [`ControlPlane::start`] brings up, on free 127.0.0.1 ports:
//!
//! 1. etcd (the pinned 3.6 release, built by `hack/build-etcd.sh`), with a
//!    fresh data dir;
//! 2. kube-apiserver, with RBAC, ServiceAccount keys, a client CA, and the
//!    aggregation flags (requestheader CA and names, proxy client certificate);
//! 3. kube-controller-manager, with the PV binder, pvc-protection, garbage
//!    collector, ServiceAccount, namespace and quota controllers;
//! 4. the CSI stack of [`csi`]: the e2e mock driver on a unix socket, the
//!    external-provisioner, the snapshot controller and the csi-snapshotter;
//! 5. our server, with a serving certificate for
//!    `storage-transfer-apiserver.storage-transfer-system.svc`;
//!
//! then applies `apiservice/` (an ExternalName Service to `localhost` and the
//! APIService with the matching `caBundle`) and waits until the APIService is
//! `Available` and our group is in discovery.
//!
//! Binaries come from `hack/build-{etcd,kube,csi}.sh` (pinned, cached outside
//! the tree). Tests share one control plane per test binary through [`shared`]; it is
//! torn down by a watchdog when the binary exits, however it exits. `make dev`
//! runs the same start-up in detached mode through the `devenv` binary.
//!
//! Tests that crash our server use a private control plane and
//! [`ControlPlane::kill_server`], [`ControlPlane::wait_for_server_exit`] (after
//! fault injection through [`Options::server_env`]) and
//! [`ControlPlane::restart_server`] (same port, so the APIService keeps
//! working), and run more replicas with [`ControlPlane::start_replica`].
//!
//! On top of it, what the integration tests and benchmarks build their
//! scenarios from: [`scenario`] (NamespaceTransfers: classes, claims,
//! consents, phases; [`scenario::many`] for fleets, [`scenario::snapshots`]
//! for VolumeSnapshots, and `scenario::crash` with the `fault-injection`
//! feature), [`ephemeral`] (EphemeralClaims), [`watch`] (the one recorder of
//! `kubectl get -w`, which tests and benches watch with), and, with the `bench`
//! feature, `bench` (the benchmarks' load generator, null backend, charts
//! and latencies).

pub mod balancer;
#[cfg(feature = "bench")]
pub mod bench;
pub mod crd;
pub mod csi;
pub mod ephemeral;
pub mod etcd_cluster;
pub mod http;
pub mod kubectl;
pub mod pki;
pub mod process;
pub mod scenario;
pub mod standalone;
mod start;
pub mod watch;
pub mod webhook;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use csi::{Csi, CsiBinaries, CsiCall};
pub use etcd_cluster::EtcdCluster;
pub use kubectl::{Kubectl, Run};
use pki::{Pki, Usage};
pub(crate) use process::wait_ready;
use process::{Process, Watchdog};
use start::etcd::{etcd_args, etcd_data_dir, etcd_healthy};
pub use start::server::Replica;
use start::server::SERVER;

/// The namespace and name of the Service the APIService points at.
pub const SERVICE_NAMESPACE: &str = "storage-transfer-system";
pub const SERVICE_NAME: &str = "storage-transfer-apiserver";
/// The APIService this server registers.
pub const APISERVICE: &str = "v1alpha1.storage.transfer.k8s.io";
/// Our API group.
pub const GROUP: &str = "storage.transfer.k8s.io";

/// Every process a control plane runs, by its log and pid-file name, in the
/// order they start.
pub const COMPONENTS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    csi::MOCK_DRIVER,
    csi::PROVISIONER,
    csi::SNAPSHOT_CONTROLLER,
    csi::SNAPSHOTTER,
    SERVER,
];

/// Why the control plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{tool} is missing: {hint}")]
    MissingTool { tool: String, hint: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("generating certificates: {0}")]
    Pki(String),
    #[error("cannot start {component} ({}): {message}", program.display())]
    Spawn {
        component: String,
        program: PathBuf,
        message: String,
    },
    #[error("{component} exited during start-up; its log is {}\n--- last lines ---\n{tail}", log.display())]
    Exited {
        component: String,
        log: PathBuf,
        tail: String,
    },
    #[error("timed out after {timeout:?} waiting for {what}; log: {}\n--- last lines ---\n{tail}", log.display())]
    Timeout {
        what: String,
        timeout: Duration,
        log: PathBuf,
        tail: String,
    },
    #[error("{component} could not listen on its port {port} again: another process took it; log: {}\n--- last lines ---\n{tail}", log.display())]
    PortTaken {
        component: String,
        port: u16,
        log: PathBuf,
        tail: String,
    },
    #[error("kubectl {args} failed: {stderr}")]
    Kubectl { args: String, stderr: String },
    #[error("{script} failed:\n{stderr}")]
    Build { script: String, stderr: String },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        context: path.display().to_string(),
        source,
    }
}

/// The repository root, where `hack/`, `apiservice/` and `target/` live.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The `kubectl-transfer` binary of this build, beside the test binary that
/// asks (`target/<profile>/`). It is its own package
/// (`crates/kubectl-transfer`), so cargo names no `CARGO_BIN_EXE_` of it to
/// the server's tests and does not rebuild it for them: it builds it with
/// the workspace's tests (`make test`), as its own integration tests need
/// it. A binary older than the plugin's or the API's sources is refused
/// rather than tested. `STA_PLUGIN_BIN` names another.
pub fn plugin_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("STA_PLUGIN_BIN") {
        return PathBuf::from(bin);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("kubectl-transfer")));
    let Some(bin) = beside.filter(|bin| bin.is_file()) else {
        panic!(
            "no kubectl-transfer beside this test binary: build it with \
             `cargo build -p kubectl-transfer` (`make test` does), or name one in STA_PLUGIN_BIN"
        );
    };
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let root = repo_root();
    // What the binary is built from: the two crates' sources and manifests.
    let newest = [
        "crates/kubectl-transfer/src",
        "crates/kubectl-transfer/Cargo.toml",
        "crates/transfer-api/src",
        "crates/transfer-api/Cargo.toml",
    ]
    .iter()
    .filter_map(|path| newest_change(&root.join(path)))
    .max();
    if let (Some(built), Some(newest)) = (built, newest) {
        assert!(
            built >= newest,
            "{} is older than the plugin's sources: build it again with \
             `cargo build -p kubectl-transfer` (`make test` does)",
            bin.display()
        );
    }
    bin
}

/// When `path`, or anything below it, last changed.
fn newest_change(path: &Path) -> Option<SystemTime> {
    let mut newest = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if !path.is_dir() {
        return newest;
    }
    for entry in std::fs::read_dir(path).ok()?.flatten() {
        newest = newest.max(newest_change(&entry.path()));
    }
    newest
}

/// A directory of its own for one run of a test binary, under
/// `target/testenv`, named after the binary.
fn fresh_run_dir() -> PathBuf {
    let stem = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".to_owned());
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    // Tests in one binary run in parallel, and two of them may start a
    // control plane within the same second: the counter keeps their
    // directories (and so their PKI and etcd data) apart.
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    target
        .join("testenv")
        .join(format!("{stem}-{stamp}-{}-{run}", std::process::id()))
}

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where PKI, logs, kubeconfigs and pid files go.
    pub dir: PathBuf,
    /// The `storage-transfer-apiserver` binary.
    pub server_bin: PathBuf,
    /// Extra flags for our server (also on restarts and replicas).
    pub server_args: Vec<String>,
    /// Extra environment for our server as [`ControlPlane::start`] starts it,
    /// after `RUST_LOG=info` (so it may override that), e.g. fault injection.
    /// Not applied by [`ControlPlane::restart_server`] or replicas.
    pub server_env: Vec<(String, String)>,
    /// Leave the processes running when this process exits (`make dev`).
    pub detached: bool,
    /// Extra flags for other components, by name (one of [`COMPONENTS`]),
    /// appended to their standard set.
    pub component_args: Vec<(String, String)>,
    /// Whether our server writes an audit log
    /// ([`ControlPlane::server_audit_log`]); on for tests, off for the
    /// benchmarks, whose CRD side is not audited either.
    pub server_audit: bool,
    /// etcd members: 1 (the default) runs one etcd as the component `etcd`;
    /// more run an [`EtcdCluster`] ([`ControlPlane::etcd_cluster`]) that
    /// kube-apiserver and our server both reach through every member's URL.
    /// Attached control planes only.
    pub etcd_members: usize,
}

impl Options {
    /// Options for a test binary: a fresh run directory under `target/testenv`.
    pub fn for_tests(server_bin: impl Into<PathBuf>) -> Self {
        Self {
            dir: fresh_run_dir(),
            server_bin: server_bin.into(),
            server_args: Vec::new(),
            server_env: Vec::new(),
            detached: false,
            component_args: Vec::new(),
            server_audit: true,
            etcd_members: 1,
        }
    }
}

/// The binaries a control plane runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kubectl: PathBuf,
    pub csi: CsiBinaries,
}

impl Binaries {
    /// The pinned etcd, Kubernetes and CSI binaries, through
    /// `hack/build-{etcd,kube,csi}.sh`, which build them on first use and
    /// otherwise answer at once from their cache. `$ETCD_BIN` overrides etcd.
    pub fn locate() -> Result<Self, Error> {
        let etcd = etcd_binary()?;
        let kube = PathBuf::from(build("build-kube.sh")?);
        let csi = PathBuf::from(build("build-csi.sh")?);
        Ok(Self {
            etcd,
            kube_apiserver: kube.join("kube-apiserver"),
            kube_controller_manager: kube.join("kube-controller-manager"),
            kubectl: kube.join("kubectl"),
            csi: CsiBinaries::under(&csi),
        })
    }
}

/// Helm, the release pinned in `hack/helm-version`, built by
/// `hack/build-helm.sh` (at once when cached): the path of its binary.
pub fn helm() -> Result<PathBuf, Error> {
    build("build-helm.sh").map(PathBuf::from)
}

/// Prometheus and promtool, the release pinned in
/// `hack/prometheus-version`, built by `hack/build-prometheus.sh` (at once
/// when cached): the directory that holds both.
pub fn prometheus() -> Result<PathBuf, Error> {
    build("build-prometheus.sh").map(PathBuf::from)
}

/// Runs `hack/<script>` and returns the one line it prints: where its build
/// output is.
fn build(script: &str) -> Result<String, Error> {
    let path = repo_root().join("hack").join(script);
    let out = std::process::Command::new("bash")
        .arg(&path)
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(io_err(&path))?;
    if !out.status.success() {
        return Err(Error::Build {
            script: format!("hack/{script}"),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// etcd: `$ETCD_BIN`, or the pinned release from `hack/build-etcd.sh`.
fn etcd_binary() -> Result<PathBuf, Error> {
    match std::env::var_os("ETCD_BIN") {
        Some(p) => Ok(PathBuf::from(p)),
        None => build("build-etcd.sh").map(PathBuf::from),
    }
}

/// A free TCP port on 127.0.0.1, at the moment of asking, and none this
/// process was given among the last 4,096 (`RECENT_PORTS`): the listener is
/// closed before the port is used, so the kernel may offer the same port
/// to the next caller (an etcd cluster once got two members on one peer
/// port, and refused to start).
pub fn free_port() -> Result<u16, Error> {
    let io = |source| Error::Io {
        context: "finding a free port".to_owned(),
        source,
    };
    let mut given = GIVEN_PORTS.lock().unwrap_or_else(|p| p.into_inner());
    // Listeners held until a new port is found, so that the kernel offers
    // another each time.
    let mut held = Vec::new();
    loop {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let port = l.local_addr().map_err(io)?.port();
        if !given.contains(&port) {
            if given.len() == RECENT_PORTS {
                given.pop_front();
            }
            given.push_back(port);
            return Ok(port);
        }
        held.push(l);
    }
}

/// How many of the ports [`free_port`] gave are never given again.
const RECENT_PORTS: usize = 4096;

/// The ports [`free_port`] gave, oldest first.
static GIVEN_PORTS: std::sync::Mutex<std::collections::VecDeque<u16>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// How our server is started, kept for restarts and replicas.
#[derive(Debug, Clone)]
struct ServerSpec {
    bin: PathBuf,
    args: Vec<String>,
    /// [`Options::server_audit`].
    audit: bool,
}

/// A running control plane.
#[derive(Debug)]
pub struct ControlPlane {
    pub dir: PathBuf,
    pub bins: Binaries,
    pub pki: Pki,
    pub etcd_url: String,
    pub apiserver_url: String,
    /// Our server, directly (not through the aggregator).
    pub server_url: String,
    pub server_port: u16,
    /// The CSI driver's socket and call log.
    pub csi: Csi,
    admin: Kubectl,
    direct: Kubectl,
    etcd_data: PathBuf,
    /// The etcd cluster, when [`Options::etcd_members`] is above 1; dropped
    /// (stopped) after every other component.
    etcd_cluster: Option<Mutex<EtcdCluster>>,
    processes: Mutex<Vec<Process>>,
    /// Shared with the [`Replica`]s, which outlive no test binary either.
    watchdog: Arc<Mutex<Option<Watchdog>>>,
    server: ServerSpec,
    detached: bool,
    /// [`Options::component_args`].
    component_args: Vec<(String, String)>,
}

impl ControlPlane {
    /// Starts every component and registers our server. On failure, whatever
    /// was started is stopped again and the error carries the failing
    /// component's log tail.
    pub fn start(opts: Options) -> Result<Self, Error> {
        let bins = Binaries::locate()?;
        if !opts.server_bin.is_file() {
            return Err(Error::MissingTool {
                tool: opts.server_bin.display().to_string(),
                hint: "build it first: cargo build --bin storage-transfer-apiserver".to_owned(),
            });
        }
        let dir = opts.dir.clone();
        for sub in ["logs", "pids", "kube-cache"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(io_err(&dir))?;
        }
        let server_dns = format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc");
        let pki = Pki::generate(&dir.join("pki"), &server_dns)?;
        // A detached etcd keeps its data under `dir`, so that its command line
        // names `dir` and `make down` can recognise it as ours.
        let etcd_data = if opts.detached {
            dir.join("etcd-data")
        } else {
            etcd_data_dir(&dir)
        };
        let record = dir.join("etcd-data.path");
        std::fs::write(&record, etcd_data.display().to_string()).map_err(io_err(&record))?;

        // The call log names the run directory on the driver's command line,
        // so `make down` finds the driver even when its socket lives elsewhere.
        let csi = Csi {
            socket: csi::socket_path(&dir),
            call_log: dir.join("logs").join("csi-calls.jsonl"),
        };
        let mut cp = Self {
            csi,
            admin: Kubectl::new(
                &bins.kubectl,
                &dir.join("kubeconfig"),
                &dir.join("kube-cache"),
            ),
            direct: Kubectl::new(
                &bins.kubectl,
                &dir.join("direct.kubeconfig"),
                &dir.join("kube-cache"),
            ),
            dir,
            bins,
            pki,
            etcd_url: String::new(),
            apiserver_url: String::new(),
            server_url: String::new(),
            server_port: 0,
            etcd_data,
            etcd_cluster: None,
            processes: Mutex::new(Vec::new()),
            watchdog: Arc::new(Mutex::new(None)),
            server: ServerSpec {
                bin: opts.server_bin.clone(),
                args: opts.server_args.clone(),
                audit: opts.server_audit,
            },
            detached: opts.detached,
            component_args: opts.component_args.clone(),
        };
        if !opts.detached {
            let mut dog = Watchdog::start()?;
            dog.guard_path(&cp.etcd_data);
            dog.guard_path(&cp.csi.socket);
            *lock(&cp.watchdog) = Some(dog);
        }
        // On error `cp` is dropped, which stops what was started (detached too:
        // a half-started dev environment is of no use).
        let result = cp.boot(&opts);
        match result {
            Ok(()) => {
                if opts.detached {
                    for p in lock(&cp.processes).iter_mut() {
                        p.detach();
                    }
                }
                Ok(cp)
            }
            Err(e) => {
                cp.detached = false;
                Err(e)
            }
        }
    }

    fn boot(&mut self, opts: &Options) -> Result<(), Error> {
        // Each stage's time goes to stderr, which a test shows when it fails
        // and `--nocapture` always: where a slow start spends it.
        let started = Instant::now();
        let mut stages = Vec::new();
        let mut stage = |name: &'static str, at: &mut Instant| {
            stages.push(format!("{name} {:.1} s", at.elapsed().as_secs_f64()));
            *at = Instant::now();
        };
        let mut at = Instant::now();
        if opts.etcd_members > 1 && !opts.detached {
            let cluster = EtcdCluster::start(&self.dir.join("etcd-cluster"), opts.etcd_members)?;
            self.etcd_url = cluster.urls();
            self.etcd_cluster = Some(Mutex::new(cluster));
        } else {
            self.start_etcd()?;
        }
        stage("etcd", &mut at);
        self.start_apiserver()?;
        stage("kube-apiserver", &mut at);
        self.start_controller_manager()?;
        stage("kube-controller-manager", &mut at);
        self.start_csi()?;
        stage("CSI", &mut at);
        self.install_server_identity()?;
        stage("RBAC and token", &mut at);
        self.start_server(opts)?;
        stage("our server", &mut at);
        self.register_apiservice()?;
        stage("APIService Available", &mut at);
        eprintln!(
            "testenv: control plane up in {:.1} s ({})",
            started.elapsed().as_secs_f64(),
            stages.join(", ")
        );
        Ok(())
    }

    fn track(&self, p: Process) {
        guard_pid(&self.watchdog, p.pid);
        let pid_file = self.dir.join("pids").join(format!("{}.pid", p.name));
        let _ = std::fs::write(pid_file, format!("{}\n", p.pid));
        lock(&self.processes).push(p);
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Starts a component, retrying on fresh ports if it lost a port race.
    fn start_component(
        &self,
        name: &str,
        program: &Path,
        args_for: impl FnMut() -> Result<Vec<String>, Error>,
        env: &[(&str, &str)],
        timeout: Duration,
        ready: impl FnMut() -> bool,
    ) -> Result<(), Error> {
        let mut args_for = args_for;
        let extra: Vec<String> = self
            .component_args
            .iter()
            .filter(|(component, _)| component == name)
            .map(|(_, arg)| arg.clone())
            .collect();
        let with_extra = || {
            let mut args = args_for()?;
            args.extend(extra.iter().cloned());
            Ok(args)
        };
        let log = self.log_path(name);
        let p = process::spawn_ready(name, program, with_extra, &log, env, timeout, ready)?;
        self.track(p);
        Ok(())
    }

    /// kube-apiserver's port on 127.0.0.1.
    pub fn apiserver_port(&self) -> u16 {
        self.apiserver_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {}", self.apiserver_url))
    }

    /// kubectl as cluster admin (`system:masters`).
    pub fn kubectl(&self) -> &Kubectl {
        &self.admin
    }

    /// kubectl talking straight to our server, bypassing the aggregator.
    pub fn direct(&self) -> &Kubectl {
        &self.direct
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Where every component's log is.
    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// A raw HTTPS client to kube-apiserver, presenting the admin
    /// certificate (`system:masters`): our group through the aggregator, and
    /// everything else kube-apiserver serves.
    pub fn apiserver_http(&self) -> Result<http::HttpClient, Error> {
        let port = self
            .apiserver_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| Error::Io {
                context: format!("the kube-apiserver URL {}", self.apiserver_url),
                source: std::io::Error::other("it names no port"),
            })?;
        http::HttpClient::new(
            port,
            &self.pki.cluster_ca.cert,
            "localhost",
            Some((&self.pki.admin.cert, &self.pki.admin.key)),
        )
    }

    /// A raw HTTPS client straight to our server, presenting the admin
    /// certificate.
    pub fn server_http(&self) -> Result<http::HttpClient, Error> {
        http::HttpClient::new(
            self.server_port,
            &self.pki.serving_ca.cert,
            &format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc"),
            Some((&self.pki.admin.cert, &self.pki.admin.key)),
        )
    }

    /// A kubectl authenticated by a fresh client certificate (CN `user`, O
    /// `group`) from the cluster CA. For several groups use
    /// [`Kubectl::impersonating`].
    pub fn user(&self, user: &str, group: Option<&str>) -> Result<Kubectl, Error> {
        let dir = self.dir.join("users");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let file = sanitize(user);
        let groups: Vec<&str> = group.into_iter().collect();
        let pair = self
            .pki
            .cluster_ca
            .issue(&dir, &file, user, &groups, &[], Usage::Client)?;
        let kubeconfig = dir.join(format!("{file}.kubeconfig"));
        write_kubeconfig(
            &kubeconfig,
            &self.apiserver_url,
            &self.pki.cluster_ca.cert,
            Some((&pair.cert, &pair.key)),
        )?;
        Ok(Kubectl::new(
            &self.bins.kubectl,
            &kubeconfig,
            &self.dir.join("kube-cache"),
        ))
    }

    /// A fresh namespace `<prefix>-<n>`, deleted when the guard drops.
    pub fn namespace(&self, prefix: &str) -> Result<Namespace, Error> {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}-{}-{n}", sanitize(prefix), std::process::id() % 100_000);
        self.admin.try_ok(&["create", "namespace", &name])?;
        Ok(Namespace {
            name,
            kubectl: self.admin.clone(),
        })
    }

    /// The pid of a component this control plane started, by its name
    /// (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `storage-transfer-apiserver`); `None` when it is not tracked or the
    /// etcd is shared.
    pub fn component_pid(&self, name: &str) -> Option<u32> {
        lock(&self.processes)
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.pid)
    }

    /// The etcd cluster ([`Options::etcd_members`] above 1), to kill, pause
    /// and restart its members.
    pub fn etcd_cluster(&self) -> Option<std::sync::MutexGuard<'_, EtcdCluster>> {
        self.etcd_cluster.as_ref().map(lock)
    }

    /// SIGKILLs the component `name` (one of [`COMPONENTS`] but our server,
    /// which has [`kill_server`](Self::kill_server)) now, with no grace.
    /// It stays down until [`restart_component`](Self::restart_component).
    pub fn kill_component(&self, name: &str) {
        let mut procs = lock(&self.processes);
        if let Some(p) = procs.iter_mut().find(|p| p.name == name) {
            p.kill();
            forget_pid(&self.watchdog, p.pid);
        }
    }

    /// Starts the component `name` again with the flags and ports it had,
    /// after SIGKILLing it if it still runs; its earlier log is kept as
    /// `<name>.<n>.log`. Returns once it is spawned: whether it is ready is
    /// for the caller to see (kube-apiserver answering, a sidecar's work).
    pub fn restart_component(&self, name: &str) -> Result<(), Error> {
        let mut procs = lock(&self.processes);
        let p = procs
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| Error::Spawn {
                component: name.to_owned(),
                program: PathBuf::from(name),
                message: "not a component of this control plane".to_owned(),
            })?;
        forget_pid(&self.watchdog, p.pid);
        p.respawn()?;
        guard_pid(&self.watchdog, p.pid);
        let pid_file = self.dir.join("pids").join(format!("{name}.pid"));
        let _ = std::fs::write(pid_file, format!("{}\n", p.pid));
        Ok(())
    }

    /// Stops every component, newest first.
    pub fn stop(&self) {
        let mut procs = lock(&self.processes);
        while let Some(mut p) = procs.pop() {
            p.stop(Duration::from_secs(5));
            let _ = std::fs::remove_file(self.dir.join("pids").join(format!("{}.pid", p.name)));
        }
        let _ = std::fs::remove_dir_all(&self.etcd_data);
        // A driver killed without grace leaves its socket behind.
        let _ = std::fs::remove_file(&self.csi.socket);
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if !self.detached {
            self.stop();
        }
    }
}

/// A namespace that is deleted (without waiting) when dropped.
#[derive(Debug)]
pub struct Namespace {
    pub name: String,
    kubectl: Kubectl,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.kubectl.run(&[
            "delete",
            "namespace",
            &self.name,
            "--wait=false",
            "--ignore-not-found",
        ]);
    }
}

/// Applies the `make dev` demo (`hack/dev/demo.yaml`: namespaces `prod` and
/// `dev`, the CSI mock driver's StorageClass `transferable` that allows
/// transfers, a VolumeSnapshotClass, the claim `prod/db` and a snapshot of it)
/// and waits until the provisioner has made and bound `prod/db`'s volume and
/// the snapshot is ready to use.
pub fn create_demo(k: &Kubectl) -> Result<(), Error> {
    let demo = repo_root().join("hack/dev/demo.yaml");
    // Namespace and ServiceAccount set-up take a moment on a fresh cluster, and
    // apply is idempotent: retry it.
    k.eventually(
        &["apply", "-f", &demo.display().to_string()],
        Duration::from_secs(30),
    )
    .into_result()?;
    k.try_ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Bound",
        "pvc/db",
        "-n",
        "prod",
        "--timeout=60s",
    ])?;
    k.try_ok(&[
        "wait",
        "--for=jsonpath={.status.readyToUse}=true",
        "volumesnapshot/db-before-transfer",
        "-n",
        "prod",
        "--timeout=60s",
    ])?;
    Ok(())
}

static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The control plane shared by every test of this test binary, started on first
/// use. `server_bin` is `env!("CARGO_BIN_EXE_storage-transfer-apiserver")`.
///
/// A failing test names the directory holding every component's log.
#[track_caller]
pub fn shared(server_bin: &str) -> &'static ControlPlane {
    let result = SHARED.get_or_init(|| {
        let opts = Options::for_tests(server_bin);
        if let Some(parent) = opts.dir.parent() {
            prune_old_runs(parent, 30);
        }
        let logs = opts.dir.join("logs");
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            eprintln!("testenv: component logs are in {}", logs.display());
        }));
        ControlPlane::start(opts).map_err(|e| e.to_string())
    });
    match result {
        Ok(cp) => cp,
        Err(e) => panic!("the test control plane did not start: {e}"),
    }
}

/// Keeps the `keep` newest run directories under `parent` and removes the rest,
/// so that `target/testenv` does not grow without bound.
fn prune_old_runs(parent: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let mut runs: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .filter(|(_, p)| p.is_dir())
        .collect();
    runs.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, old) in runs.into_iter().skip(keep) {
        let _ = std::fs::remove_dir_all(old);
    }
}

/// etcd alone, for storage tests: stopped and its data removed on drop.
#[derive(Debug)]
pub struct Etcd {
    pub url: String,
    process: Process,
    data: PathBuf,
}

impl Etcd {
    /// Starts etcd for one test: in a fresh run directory under
    /// `target/testenv` (as [`Options::for_tests`] makes), its log at
    /// `<that>/<name>/etcd.log`. Panics if it cannot: a test fails there.
    #[track_caller]
    pub fn for_test(name: &str) -> Self {
        Self::start(&fresh_run_dir().join(name)).unwrap_or_else(|e| panic!("etcd for {name}: {e}"))
    }

    /// Starts etcd on free ports with a fresh data dir; its log goes to
    /// `<dir>/etcd.log`.
    pub fn start(dir: &Path) -> Result<Self, Error> {
        let bin = etcd_binary()?;
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let data = etcd_data_dir(dir);
        let log = dir.join("etcd.log");
        let client = std::cell::Cell::new(0u16);
        let started = process::spawn_ready(
            "etcd",
            &bin,
            || {
                let _ = std::fs::remove_dir_all(&data);
                let (c, peer) = (free_port()?, free_port()?);
                client.set(c);
                Ok(etcd_args(&data, c, peer))
            },
            &log,
            &[],
            Duration::from_secs(30),
            || etcd_healthy(client.get()),
        );
        match started {
            Ok(process) => Ok(Self {
                url: format!("http://127.0.0.1:{}", client.get()),
                process,
                data,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&data);
                Err(e)
            }
        }
    }
}

/// The certificates of an etcd that speaks TLS to its clients.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub ca: pki::Ca,
    pub server: pki::CertPair,
    pub client: pki::CertPair,
}

impl Etcd {
    /// Starts etcd serving clients over TLS and requiring client
    /// certificates, with a fresh CA under `<dir>/pki`.
    pub fn start_tls(dir: &Path) -> Result<(Self, EtcdTls), Error> {
        let pki_dir = dir.join("pki");
        std::fs::create_dir_all(&pki_dir).map_err(io_err(&pki_dir))?;
        let ca = pki::Ca::create(&pki_dir, "etcd-ca", "storage-transfer-test-etcd-ca")?;
        let server = ca.issue(
            &pki_dir,
            "etcd-server",
            "etcd",
            &[],
            &["127.0.0.1", "localhost"],
            Usage::ServerAndClient,
        )?;
        let client = ca.issue(
            &pki_dir,
            "etcd-client",
            "storage-transfer-apiserver",
            &[],
            &[],
            Usage::Client,
        )?;
        let bin = etcd_binary()?;
        let data = etcd_data_dir(dir);
        let log = dir.join("etcd.log");
        let client_port = std::cell::Cell::new(0u16);
        let tls_args = || {
            let _ = std::fs::remove_dir_all(&data);
            let (port, peer) = (free_port()?, free_port()?);
            client_port.set(port);
            // Readiness is read from the log below, so keep etcd's info lines.
            let mut args: Vec<String> = etcd_args(&data, port, peer)
                .into_iter()
                .filter(|a| !a.starts_with("--log-level"))
                .collect();
            for a in args.iter_mut() {
                if a.starts_with("--listen-client-urls=")
                    || a.starts_with("--advertise-client-urls=")
                {
                    *a = a.replace("http://", "https://");
                }
            }
            args.extend([
                format!("--cert-file={}", server.cert.display()),
                format!("--key-file={}", server.key.display()),
                format!("--trusted-ca-file={}", ca.cert.display()),
                "--client-cert-auth".to_owned(),
            ]);
            Ok(args)
        };
        // Each start writes its log anew.
        let p = process::spawn_ready(
            "etcd",
            &bin,
            tls_args,
            &log,
            &[],
            Duration::from_secs(30),
            || {
                std::fs::read_to_string(&log)
                    .is_ok_and(|l| l.contains("ready to serve client requests"))
            },
        )
        .inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&data);
        })?;
        let client_port = client_port.get();
        Ok((
            Self {
                url: format!("https://127.0.0.1:{client_port}"),
                process: p,
                data,
            },
            EtcdTls { ca, server, client },
        ))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// Writes a kubeconfig with one cluster, one user and one context.
pub fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<(), Error> {
    let user = match client {
        Some((cert, key)) => format!(
            "    client-certificate: {}\n    client-key: {}\n",
            cert.display(),
            key.display()
        ),
        None => "    {}\n".to_owned(),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: testenv\n  user:\n{user}contexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: testenv\ncurrent-context: testenv\n",
        ca.display()
    );
    std::fs::write(path, text).map_err(io_err(path))
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn guard_pid(dog: &Mutex<Option<Watchdog>>, pid: u32) {
    if let Some(dog) = lock(dog).as_mut() {
        dog.guard_pid(pid);
    }
}

fn forget_pid(dog: &Mutex<Option<Watchdog>>, pid: u32) {
    if let Some(dog) = lock(dog).as_mut() {
        dog.forget_pid(pid);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Standard base64 with padding, as kube reads a `caBundle` or a webhook's
/// `patch`.
pub fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn free_port_never_gives_a_port_it_gave_recently() {
        let ports: Vec<u16> = (0..500).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::HashSet<&u16> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn sanitize_makes_names_dns_friendly() {
        assert_eq!(sanitize("Alice@Example"), "alice-example");
    }
}
