//! `deploy/monitoring/` against a real Prometheus (the release pinned in
//! `hack/prometheus-version`, built by `hack/build-prometheus.sh`): its
//! rules pass `promtool check rules`, a Prometheus that scrapes the test
//! control plane's server and kube-apiserver answers every dashboard
//! panel's query with a series during transfers, and the alerts fire in
//! the scenarios they describe and stay quiet otherwise.
//!
//! The rules are the PrometheusRule's own groups, loaded as a rule file
//! with two changes only, so that a test does not wait half an hour: every
//! `for:` is one second, and StorageTransferStuck's 900 s threshold is 3 s.
//!
//! StorageTransferFencedWrites needs a write that reaches etcd after its
//! term ended, which no outside event makes at will: the test's server runs
//! with `STA_FAULT_UNHEARD_KEY_LOSS=1` (`controller::fault`), so that when
//! the test deletes its election key the term goes on until the next write
//! of our objects is refused by its fence. Built without the
//! `fault-injection` feature (which `make test` turns on), that scenario is
//! skipped.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sta_testenv::scenario::*;
use sta_testenv::standalone::Replica;
use sta_testenv::{repo_root, ControlPlane, Kubectl, Options};

const WAIT: Duration = Duration::from_secs(90);
const JOB: &str = "storage-transfer-apiserver";
const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");

/// The test's own control plane, whose server leaves a lost election key
/// unheard (see the module docs).
fn control_plane() -> ControlPlane {
    let mut opts = Options::for_tests(BIN);
    opts.server_env
        .push(("STA_FAULT_UNHEARD_KEY_LOSS".to_owned(), "1".to_owned()));
    let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
    ensure_classes(cp.kubectl());
    cp
}

fn prometheus_bin() -> PathBuf {
    sta_testenv::prometheus().unwrap_or_else(|e| panic!("{e}"))
}

/// The PrometheusRule's spec, as a rule file's document.
fn rule_groups() -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("deploy/monitoring/prometheusrule.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

fn alerts(groups: &Value) -> Vec<&Value> {
    groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The rule file the test's Prometheus loads: the same groups, each `for:`
/// one second and StorageTransferStuck's threshold three seconds.
fn test_rules(dir: &Path) -> PathBuf {
    let mut groups = rule_groups();
    for group in groups["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            if rule.get("for").is_some() {
                rule["for"] = "1s".into();
            }
            if rule["alert"] == "StorageTransferStuck" {
                let expr = rule["expr"].as_str().unwrap();
                assert!(expr.ends_with("> 900"), "{expr}");
                rule["expr"] = expr.replace("> 900", "> 3").into();
            }
        }
    }
    let path = dir.join("rules.json");
    // JSON is YAML: Prometheus reads it as a rule file.
    std::fs::write(&path, serde_json::to_vec_pretty(&groups).unwrap()).unwrap();
    path
}

fn scratch(name: &str) -> PathBuf {
    let dir = repo_root()
        .join("target/testenv/monitoring")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_rules_pass_promtool_and_every_alert_has_a_runbook_in_operations() {
    let dir = scratch("promtool");
    let groups = rule_groups();
    let file = dir.join("rules.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&groups).unwrap()).unwrap();
    let out = Command::new(prometheus_bin().join("promtool"))
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let operations = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap();
    let all = alerts(&groups);
    assert!(all.len() >= 6, "{groups}");
    for alert in all {
        let name = alert["alert"].as_str().unwrap();
        let runbook = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            runbook,
            format!("docs/operations.md#{}", name.to_ascii_lowercase()),
            "{name}'s runbook"
        );
        assert!(
            operations.lines().any(|l| l == format!("### {name}")),
            "docs/operations.md has no runbook section for {name}"
        );
        assert!(alert["annotations"]["summary"].is_string(), "{name}");
        assert!(alert["labels"]["severity"].is_string(), "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Prometheus scraping the server and kube-apiserver every second,
/// killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Scrapes `cp`'s server and kube-apiserver, and `replicas` (ports of
    /// more replicas of the server) in the server's job.
    fn start(cp: &ControlPlane, replicas: &[u16]) -> Self {
        let dir = scratch("prometheus");
        let rules = test_rules(&dir);
        let pki = &cp.pki;
        let path = |p: &Path| p.display().to_string();
        // A job scraping `ports` over TLS, trusting `ca` for `server_name`
        // and presenting the admin certificate (system:masters).
        let job = |name: &str, ca: &Path, server_name: &str, ports: Vec<u16>| {
            serde_json::json!({
                "job_name": name,
                "scheme": "https",
                "tls_config": {
                    "ca_file": path(ca),
                    "cert_file": path(&pki.admin.cert),
                    "key_file": path(&pki.admin.key),
                    "server_name": server_name,
                },
                "static_configs": [{"targets": ports
                    .iter()
                    .map(|port| format!("127.0.0.1:{port}"))
                    .collect::<Vec<_>>()}],
            })
        };
        let servers = std::iter::once(cp.server_port)
            .chain(replicas.iter().copied())
            .collect();
        let config = serde_json::json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [path(&rules)],
            "scrape_configs": [
                job(
                    JOB,
                    &pki.serving_ca.cert,
                    "storage-transfer-apiserver.storage-transfer-system.svc",
                    servers,
                ),
                job(
                    "apiserver",
                    &pki.cluster_ca.cert,
                    "localhost",
                    vec![cp.apiserver_port()],
                ),
            ],
        });
        let config_file = dir.join("prometheus.json");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let port = sta_testenv::free_port().unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(prometheus_bin().join("prometheus"))
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let p = Self { child, port, dir };
        eventually("Prometheus to be ready", WAIT, || {
            p.get("/-/ready").is_some_and(|(code, _)| code == 200)
        });
        p
    }

    /// GET `path` over plain HTTP: the status code and the body.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        let code = head.split(' ').nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    }

    /// The result of an instant query.
    fn query(&self, expr: &str) -> Vec<Value> {
        let (code, body) = self
            .get(&format!("/api/v1/query?query={}", encode(expr)))
            .unwrap_or_else(|| panic!("Prometheus did not answer {expr}"));
        let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(code, 200, "{expr}: {body}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts firing now, by name.
    fn firing(&self) -> Vec<String> {
        let (_, body) = self.get("/api/v1/alerts").unwrap();
        let answer: Value = serde_json::from_str(&body).unwrap();
        let mut names: Vec<String> = answer["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["state"] == "firing")
            .map(|a| a["labels"]["alertname"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn wait_firing(&self, alert: &str) {
        eventually(&format!("{alert} to fire"), WAIT, || {
            self.firing().iter().any(|a| a == alert)
        });
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every panel's query of the dashboard, with its variables filled in.
fn panel_queries() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(repo_root().join("deploy/monitoring/dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                panel["title"].as_str().unwrap().to_owned(),
                target["expr"].as_str().unwrap().replace("$job", JOB),
            ));
        }
    }
    assert!(!queries.is_empty());
    queries
}

/// A standing clone offer of `src/db` with `maxClones: 1`, and one request
/// it serves: the offer is then at its limit.
fn offer_at_its_limit(admin: &Kubectl, src: &str, dst: &str) {
    admin
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: fixtures\n  namespace: {src}\nspec:\n  mode: Clone\n  maxClones: 1\n  source:\n    name: db\n  destination:\n    namespace: {dst}\n"
        ))
        .unwrap();
    admin
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: one\n  namespace: {dst}\nspec:\n  mode: Clone\n  source:\n    namespace: {src}\n    name: db\n  destination:\n    name: db-1\n"
        ))
        .unwrap();
    wait_phase(admin, dst, "one", "Completed", WAIT);
}

/// A ValidatingAdmissionPolicy refusing every update of the volume `pv`
/// (`held`), or none (`!held`): once kube-apiserver enforces it, or no
/// longer does.
fn hold_volume(admin: &Kubectl, pv: &str, held: bool) {
    let policy = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: hold-volume\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n    - apiGroups: [\"\"]\n      apiVersions: [v1]\n      operations: [UPDATE]\n      resources: [persistentvolumes]\n  validations:\n  - expression: \"object.metadata.name != '{pv}'\"\n    message: held by the monitoring test\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: hold-volume\nspec:\n  policyName: hold-volume\n  validationActions: [Deny]\n"
    );
    if held {
        admin.apply(&policy).unwrap();
    } else {
        admin.ok(&["delete", "validatingadmissionpolicybinding", "hold-volume"]);
        admin.ok(&["delete", "validatingadmissionpolicy", "hold-volume"]);
    }
    // An annotation's update tells whether it is enforced yet.
    eventually("the volume's hold to take effect", WAIT, || {
        let run = admin.run(&[
            "annotate",
            "pv",
            pv,
            "--overwrite",
            "monitoring-test/probe=1",
        ]);
        run.success != held
    });
}

/// Deletes the controllers' election key from `cp`'s etcd, behind the
/// leader's back.
fn delete_election_key(cp: &ControlPlane) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut etcd = etcd_client::Client::connect([cp.etcd_url.as_str()], None)
            .await
            .unwrap();
        let deleted = etcd
            .delete(
                "/registry/storage.transfer.k8s.io/_leader/controllers/",
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        assert_eq!(deleted.deleted(), 1, "the leader's key, and only it");
    });
}

#[test]
fn a_real_prometheus_answers_every_panel_and_fires_each_alert_only_in_its_scenario() {
    let cp = &control_plane();
    let admin = cp.kubectl();
    // A second replica that serves the API only, whose audit log cannot be
    // written: it audits our group's requests, and every write fails.
    let dir = scratch("replica");
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: storage.transfer.k8s.io\n- level: None\n",
    )
    .unwrap();
    let replica = Replica::start(
        Path::new(env!("CARGO_BIN_EXE_storage-transfer-apiserver")),
        &dir,
        "full-disk",
        &cp.pki,
        &cp.etcd_url,
        &[
            "--controllers=-namespacetransfer,-ephemeralclaim".to_owned(),
            format!("--audit-policy-file={}", policy.display()),
            "--audit-log-path=/dev/full".to_owned(),
            "--audit-log-mode=batch".to_owned(),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let prometheus = Prometheus::start(cp, &[replica.http.port()]);
    eventually("the three targets to be scraped", WAIT, || {
        prometheus.query("up == 1").len() == 3
    });
    // Quiet while nothing is wrong.
    let quiet = Duration::from_secs(5);
    std::thread::sleep(quiet);
    assert_eq!(
        prometheus.firing(),
        Vec::<String>::new(),
        "with nothing wrong"
    );

    // A move, and a standing offer that clones up to its maxClones.
    let src = cp.namespace("src").unwrap();
    let dst = cp.namespace("dst").unwrap();
    provisioned_volume(admin, ALLOWED_CLASS, &src.name, "db", "1Gi");
    offer_at_its_limit(admin, &src.name, &dst.name);
    let moved = cp.namespace("moved").unwrap();
    provisioned_volume(admin, ALLOWED_CLASS, &moved.name, "data", "1Gi");
    offer(admin, &moved.name, "give", "data", &dst.name);
    request(admin, &dst.name, "take", &moved.name, "data");
    wait_phase(admin, &dst.name, "take", "Completed", WAIT);

    // Every panel has a series once both are scraped.
    for (title, expr) in panel_queries() {
        eventually(
            &format!("the panel '{title}' to have a series"),
            WAIT,
            || !prometheus.query(&expr).is_empty(),
        );
    }

    // The offer at its limit: StorageTransferClonesNearLimit, and no other.
    prometheus.wait_firing("StorageTransferClonesNearLimit");
    assert_eq!(
        prometheus.firing(),
        vec!["StorageTransferClonesNearLimit".to_owned()]
    );

    // A transfer whose source a pod still uses waits for its release: the
    // tenants' business, not an operator's alert.
    let stuck = cp.namespace("stuck").unwrap();
    let held = provisioned_volume(admin, ALLOWED_CLASS, &stuck.name, "db", "1Gi");
    running_pod(admin, &stuck.name, "user", "db");
    offer(admin, &stuck.name, "give", "db", &dst.name);
    request(admin, &dst.name, "take-stuck", &stuck.name, "db");
    wait_phase(admin, &stuck.name, "give", "WaitingForRelease", WAIT);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        prometheus.firing(),
        vec!["StorageTransferClonesNearLimit".to_owned()],
        "a transfer waiting for a pod is not stuck"
    );
    // Released, it is Rebinding; a ValidatingAdmissionPolicy that refuses
    // every update of its volume (an admission policy or webhook in the
    // controller's way, as in a cluster) holds it there: stuck.
    hold_volume(admin, &held.pv, true);
    delete_pod(admin, &stuck.name, "user");
    wait_phase(admin, &stuck.name, "give", "Rebinding", WAIT);
    prometheus.wait_firing("StorageTransferStuck");
    // The policy gone, it completes, and the alert ends.
    hold_volume(admin, &held.pv, false);
    wait_phase(admin, &dst.name, "take-stuck", "Completed", WAIT);
    eventually("StorageTransferStuck to end", WAIT, || {
        !prometheus
            .firing()
            .contains(&"StorageTransferStuck".to_owned())
    });

    // The server down: kube-apiserver's aggregator finds the APIService
    // unavailable.
    cp.kill_component("storage-transfer-apiserver");
    prometheus.wait_firing("StorageTransferAPIServiceUnavailable");
    // Started again, it serves at once, but the killed process's lease
    // outlives it: until the lease expires no replica leads (in a cluster
    // the alert's five minutes let this pass; here it fires).
    cp.restart_component("storage-transfer-apiserver").unwrap();
    prometheus.wait_firing("StorageTransferNoLeader");
    eventually(
        "the restarted server to lead, and both alerts to end",
        WAIT,
        || prometheus.firing() == vec!["StorageTransferClonesNearLimit".to_owned()],
    );

    // A request the replica audits, on a full disk.
    let listed = replica
        .http
        .request(
            "GET",
            "/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers",
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(listed.status, 200, "{}", listed.text());
    prometheus.wait_firing("StorageTransferAuditEventsDropped");

    // Quiet until its scenario.
    let fenced = "count_over_time(ALERTS{alertname=\"StorageTransferFencedWrites\"}[1h])";
    assert!(
        prometheus.query(fenced).is_empty(),
        "StorageTransferFencedWrites fired, or was pending, without its scenario"
    );
    if !cfg!(feature = "fault-injection") {
        return;
    }
    // The leader's election key deleted behind its back: its term goes on
    // (the fault), and the next write of a transfer is refused by the fence.
    delete_election_key(cp);
    let late = cp.namespace("late").unwrap();
    offer(admin, &late.name, "give", "db", &dst.name);
    prometheus.wait_firing("StorageTransferFencedWrites");
    // The refused write ended the term; the replica is elected again, and
    // the offer gets its status.
    wait_status(admin, &late.name, "give", "a phase", WAIT, |t| {
        t["status"]["phase"].is_string()
    });
}
