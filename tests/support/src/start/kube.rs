//! Starting Kubernetes for a control plane: kube-apiserver (its flags, with
//! the aggregation layer's, and its audit policy and log),
//! kube-controller-manager (the controllers it runs), kubeconfigs of
//! ServiceAccount tokens for the components that run as one, and the
//! registration of our server as an APIService, which is waited on until
//! it is `Available` and our group is in discovery.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::pki::{self, Pki};
use crate::{
    base64, free_port, io_err, process, repo_root, write_kubeconfig, ControlPlane, Error, Kubectl,
    APISERVICE, GROUP,
};

impl ControlPlane {
    /// The audit policy kube-apiserver runs with: writes to PVs and PVCs
    /// (among them our controllers' steps) at Metadata, those to a claim's
    /// `/status` at Request (what a status write set is what tells ours
    /// from the binder's), nothing else.
    fn audit_policy(&self) -> Result<PathBuf, Error> {
        let path = self.dir.join("kube-audit-policy.yaml");
        std::fs::write(&path, KUBE_AUDIT_POLICY).map_err(io_err(&path))?;
        Ok(path)
    }

    /// kube-apiserver's audit log (`audit.k8s.io/v1` Event lines).
    pub fn apiserver_audit_log(&self) -> PathBuf {
        self.dir.join("logs").join("kube-apiserver-audit.log")
    }

    pub(crate) fn start_apiserver(&mut self) -> Result<(), Error> {
        let policy = self.audit_policy()?;
        let audit_log = self.apiserver_audit_log();
        let pki = self.pki.clone();
        let etcd_url = self.etcd_url.clone();
        let port = std::cell::Cell::new(0u16);
        let admin_kubeconfig = self.dir.join("kubeconfig");
        let bin = self.bins.kube_apiserver.clone();
        let admin = self.admin.clone();
        let this = &*self;
        this.start_component(
            "kube-apiserver",
            &bin,
            || {
                let p = free_port()?;
                port.set(p);
                write_kubeconfig(
                    &admin_kubeconfig,
                    &format!("https://127.0.0.1:{p}"),
                    &pki.cluster_ca.cert,
                    Some((&pki.admin.cert, &pki.admin.key)),
                )?;
                let mut args = apiserver_args(&pki, &etcd_url, p);
                args.push(format!("--audit-policy-file={}", policy.display()));
                args.push(format!("--audit-log-path={}", audit_log.display()));
                Ok(args)
            },
            &[],
            Duration::from_secs(120),
            || admin.run(&["get", "--raw=/readyz"]).success,
        )?;
        self.apiserver_url = format!("https://127.0.0.1:{}", port.get());
        Ok(())
    }

    pub(crate) fn start_controller_manager(&mut self) -> Result<(), Error> {
        let kubeconfig = self.dir.join("kube-controller-manager.kubeconfig");
        write_kubeconfig(
            &kubeconfig,
            &self.apiserver_url,
            &self.pki.cluster_ca.cert,
            Some((
                &self.pki.controller_manager.cert,
                &self.pki.controller_manager.key,
            )),
        )?;
        let health_kubeconfig = self.dir.join("kcm-health.kubeconfig");
        let health = Kubectl::new(
            &self.bins.kubectl,
            &health_kubeconfig,
            &self.dir.join("kube-cache"),
        );
        let port = std::cell::Cell::new(0u16);
        let pki = self.pki.clone();
        let cert_dir = self.dir.join("kcm-certs");
        self.start_component(
            "kube-controller-manager",
            &self.bins.kube_controller_manager,
            || {
                let p = free_port()?;
                port.set(p);
                write_insecure_kubeconfig(
                    &health_kubeconfig,
                    &format!("https://127.0.0.1:{p}"),
                    &pki.admin,
                )?;
                Ok(vec![
                    format!("--kubeconfig={}", kubeconfig.display()),
                    format!("--authentication-kubeconfig={}", kubeconfig.display()),
                    format!("--authorization-kubeconfig={}", kubeconfig.display()),
                    "--bind-address=127.0.0.1".to_owned(),
                    format!("--secure-port={p}"),
                    format!("--cert-dir={}", cert_dir.display()),
                    "--leader-elect=false".to_owned(),
                    format!("--controllers={}", CONTROLLERS.join(",")),
                    "--use-service-account-credentials=false".to_owned(),
                    format!(
                        "--service-account-private-key-file={}",
                        pki.service_account_key.display()
                    ),
                    format!("--root-ca-file={}", pki.cluster_ca.cert.display()),
                    "--pvclaimbinder-sync-period=5s".to_owned(),
                    "--v=1".to_owned(),
                ])
            },
            &[],
            Duration::from_secs(60),
            || health.run(&["get", "--raw=/healthz"]).success,
        )
    }

    /// Writes a kubeconfig at `path` that authenticates as the ServiceAccount
    /// `namespace/name` with a fresh token, so that a component runs with
    /// exactly the rights RBAC grants that account.
    pub(super) fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> Result<(), Error> {
        let token = self
            .admin
            .eventually(
                &["create", "token", name, "-n", namespace, "--duration=48h"],
                Duration::from_secs(30),
            )
            .into_result()?;
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {}\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: {name}\ncurrent-context: testenv\n",
            self.apiserver_url,
            self.pki.cluster_ca.cert.display(),
            token.trim()
        );
        std::fs::write(path, text).map_err(io_err(path))
    }

    /// Applies `apiservice/local` and `apiservice/apiservice.yaml`, points the
    /// APIService at our port with our CA, and waits for `Available=True` and
    /// for our group to appear in discovery.
    pub(crate) fn register_apiservice(&self) -> Result<(), Error> {
        let root = repo_root();
        let local = root.join("apiservice/local/service.yaml");
        let apiservice = root.join("apiservice/apiservice.yaml");
        self.admin
            .eventually(
                &["apply", "-f", &local.display().to_string()],
                Duration::from_secs(30),
            )
            .into_result()?;
        self.admin
            .try_ok(&["apply", "-f", &apiservice.display().to_string()])?;
        let ca = base64(self.pki.serving_ca.pem()?.as_bytes());
        let patch = format!(
            r#"{{"spec":{{"caBundle":"{ca}","service":{{"port":{}}}}}}}"#,
            self.server_port
        );
        self.admin.try_ok(&[
            "patch",
            "apiservice",
            APISERVICE,
            "--type=merge",
            &format!("--patch={patch}"),
        ])?;
        let log = self.log_path("kube-apiserver");
        let timeout = Duration::from_secs(90);
        let wait = self.admin.run(&[
            "wait",
            "--for=condition=Available",
            &format!("apiservice/{APISERVICE}"),
            &format!("--timeout={}s", timeout.as_secs()),
        ]);
        if !wait.success {
            if let Some(e) = self.server_exited() {
                return Err(e);
            }
            let status = self.admin.run(&[
                "get",
                "apiservice",
                APISERVICE,
                "-o",
                "jsonpath={.status.conditions}",
            ]);
            return Err(Error::Timeout {
                what: format!(
                    "APIService {APISERVICE} to be Available (conditions: {})",
                    status.stdout
                ),
                timeout,
                tail: process::log_tail(&log, 30),
                log,
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let run = self.admin.run(&[
                "api-resources",
                &format!("--api-group={GROUP}"),
                "-o",
                "name",
            ]);
            if run.success && run.stdout.contains("namespacetransfers") {
                return Ok(());
            }
            if let Some(e) = self.server_exited() {
                return Err(e);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("{GROUP} to appear in discovery ({})", run.stderr.trim()),
                    timeout: Duration::from_secs(60),
                    tail: process::log_tail(&log, 30),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

const CONTROLLERS: &[&str] = &[
    "persistentvolume-binder-controller",
    // Workloads that write their own claims (DESIGN §2.3): a StatefulSet's
    // volumeClaimTemplates, a pod's generic ephemeral volume.
    "statefulset-controller",
    "ephemeral-volume-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "endpointslice-controller",
    "resourcequota-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
];

/// See [`ControlPlane::audit_policy`].
const KUBE_AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [update, patch]
  resources: [{group: \"\", resources: [persistentvolumeclaims/status]}]
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: \"\", resources: [persistentvolumes, persistentvolumeclaims, persistentvolumeclaims/status]}]
- level: None
";

fn apiserver_args(pki: &Pki, etcd_url: &str, port: u16) -> Vec<String> {
    let p = |path: &Path| path.display().to_string();
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".to_owned(),
        "--advertise-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", p(&pki.apiserver_serving.cert)),
        format!("--tls-private-key-file={}", p(&pki.apiserver_serving.key)),
        format!("--cert-dir={}", p(&pki.dir.join("apiserver-generated"))),
        format!("--client-ca-file={}", p(&pki.cluster_ca.cert)),
        "--authorization-mode=RBAC".to_owned(),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--allow-privileged=true".to_owned(),
        // Endpoints may not hold loopback addresses, so the kubernetes Service
        // endpoint reconciler has nothing valid to write.
        "--endpoint-reconciler-type=none".to_owned(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
        format!("--service-account-key-file={}", p(&pki.service_account_pub)),
        format!(
            "--service-account-signing-key-file={}",
            p(&pki.service_account_key)
        ),
        // Aggregation: who may send X-Remote-* headers, and our proxy identity.
        format!(
            "--requestheader-client-ca-file={}",
            p(&pki.front_proxy_ca.cert)
        ),
        format!(
            "--requestheader-allowed-names={}",
            pki::FRONT_PROXY_CLIENT_CN
        ),
        "--requestheader-username-headers=X-Remote-User".to_owned(),
        "--requestheader-uid-headers=X-Remote-Uid".to_owned(),
        "--requestheader-group-headers=X-Remote-Group".to_owned(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
        format!(
            "--proxy-client-cert-file={}",
            p(&pki.front_proxy_client.cert)
        ),
        format!("--proxy-client-key-file={}", p(&pki.front_proxy_client.key)),
        "--profiling=false".to_owned(),
        "--v=1".to_owned(),
    ]
}

/// A kubeconfig for a component's own self-signed serving certificate (the
/// controller-manager's health port), authenticating with a client certificate
/// so that kubectl never prompts for a password.
fn write_insecure_kubeconfig(
    path: &Path,
    server: &str,
    client: &pki::CertPair,
) -> Result<(), Error> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        client.cert.display(),
        client.key.display()
    );
    std::fs::write(path, text).map_err(io_err(path))
}
