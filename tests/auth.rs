//! Delegated authentication and authorization, end to end: users reach our
//! server through kube-apiserver's aggregator (front-proxy headers) or
//! directly (client certificates, ServiceAccount tokens), and RBAC in the
//! cluster decides, through SubjectAccessReview.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sta_testenv::http::{HttpClient, HttpResponse};
use sta_testenv::pki::{Ca, Usage};
use sta_testenv::{shared, ControlPlane, Kubectl, SERVICE_NAME, SERVICE_NAMESPACE};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = cp().dir.join("auth-tests").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn transfer_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  source:\n    name: db\n  destination:\n    namespace: dev\n"
    )
}

/// Retries `f` until it returns true or `timeout` passes.
fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn server_name() -> String {
    format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc")
}

/// A direct HTTPS client presenting `cert` (or none).
fn direct(cert: Option<&sta_testenv::pki::CertPair>) -> HttpClient {
    HttpClient::new(
        cp().server_port,
        &cp().pki.serving_ca.cert,
        &server_name(),
        cert.map(|c| (c.cert.as_path(), c.key.as_path())),
    )
    .unwrap()
}

fn list_path(ns: &str) -> String {
    format!("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{ns}/namespacetransfers")
}

/// A user with the built-in `edit` (or other) ClusterRole in `ns`. The
/// aggregated roles take a moment to pick up our rules.
fn user_with_role(name: &str, role: &str, ns: &str) -> Kubectl {
    let k = cp().user(name, None).unwrap();
    cp().kubectl().ok(&[
        "create",
        "rolebinding",
        &format!("{name}-{role}"),
        &format!("--clusterrole={role}"),
        &format!("--user={name}"),
        "-n",
        ns,
    ]);
    k
}

#[track_caller]
fn assert_forbidden(resp: &HttpResponse, user: &str) {
    assert_eq!(resp.status, 403, "{}", resp.text());
    let message = resp.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains(&format!("User \"{user}\" cannot")),
        "{message}"
    );
}

#[test]
fn a_namespace_editor_can_use_transfers_there_and_nowhere_else() {
    let prod = cp().namespace("editor-prod").unwrap();
    let dev = cp().namespace("editor-dev").unwrap();
    let editor = user_with_role("editor-1", "edit", &prod.name);
    assert!(
        eventually(Duration::from_secs(20), || editor
            .apply(&transfer_yaml(&prod.name, "t"))
            .is_ok()),
        "the editor could never create in its namespace"
    );
    let listed = editor.ok(&["get", "nst", "-n", &prod.name, "-o", "name"]);
    assert!(listed.contains("/t"), "{listed}");

    let other = editor.run(&["get", "nst", "-n", &dev.name]);
    assert!(!other.success);
    assert!(
        other.stderr.contains(&format!(
            "User \"editor-1\" cannot list resource \"namespacetransfers\" in API group \"storage.transfer.k8s.io\" in the namespace \"{}\"",
            dev.name
        )),
        "{}",
        other.stderr
    );
    let all = editor.run(&["get", "nst", "-A"]);
    assert!(!all.success);
    assert!(
        all.stderr.contains("at the cluster scope"),
        "{}",
        all.stderr
    );
}

#[test]
fn a_viewer_can_read_and_watch_but_not_create() {
    let ns = cp().namespace("viewer").unwrap();
    cp().kubectl()
        .apply(&transfer_yaml(&ns.name, "seen"))
        .unwrap();
    let viewer = user_with_role("viewer-1", "view", &ns.name);
    assert!(eventually(Duration::from_secs(20), || viewer
        .run(&["get", "nst", "seen", "-n", &ns.name])
        .success));
    viewer.ok(&["get", "nst", "-n", &ns.name]);
    let watch = viewer.run(&[
        "get",
        "nst",
        "-n",
        &ns.name,
        "--watch",
        "--request-timeout=2s",
    ]);
    assert!(!watch.stderr.contains("forbidden"), "{}", watch.stderr);
    let create = viewer
        .apply(&transfer_yaml(&ns.name, "new"))
        .unwrap_err()
        .to_string();
    assert!(
        create.contains("forbidden") || create.contains("cannot"),
        "{create}"
    );
}

#[test]
fn kubectl_auth_can_i_agrees_with_the_server() {
    let ns = cp().namespace("can-i").unwrap();
    let editor = user_with_role("editor-2", "edit", &ns.name);
    let viewer = user_with_role("viewer-2", "view", &ns.name);
    // Let both roles' aggregation settle.
    assert!(eventually(Duration::from_secs(20), || editor
        .run(&[
            "auth",
            "can-i",
            "create",
            "namespacetransfers.storage.transfer.k8s.io",
            "-n",
            &ns.name
        ])
        .stdout
        .trim()
        == "yes"));
    let mut n = 0;
    for (who, k) in [("editor", &editor), ("viewer", &viewer)] {
        for (verb, args) in [
            ("create", vec!["apply", "-f", "-"]),
            ("list", vec!["get", "nst", "-n", ns.name.as_str()]),
            (
                "delete",
                vec![
                    "delete",
                    "nst",
                    "nothing-here",
                    "-n",
                    ns.name.as_str(),
                    "--ignore-not-found",
                ],
            ),
        ] {
            let can = k
                .run(&[
                    "auth",
                    "can-i",
                    verb,
                    "namespacetransfers.storage.transfer.k8s.io",
                    "-n",
                    &ns.name,
                ])
                .stdout
                .trim()
                == "yes";
            n += 1;
            let did = if verb == "create" {
                k.apply(&transfer_yaml(&ns.name, &format!("{who}-{n}")))
                    .is_ok()
            } else {
                k.run(&args).success
            };
            assert_eq!(can, did, "{who} {verb}: can-i says {can}, the server {did}");
        }
    }
}

/// Sends `X-Remote-User: system:admin` (in `system:masters`) straight to our
/// port, presenting `cert`, and expects to be treated as anonymous.
fn assert_forged_admin_is_anonymous(prefix: &str, cert: Option<&sta_testenv::pki::CertPair>) {
    let ns = cp().namespace(prefix).unwrap();
    let headers = [
        ("X-Remote-User", "system:admin"),
        ("X-Remote-Group", "system:masters"),
    ];
    let resp = direct(cert)
        .request("GET", &list_path(&ns.name), &headers, b"")
        .unwrap();
    assert_forbidden(&resp, "system:anonymous");
}

#[test]
fn remote_user_headers_without_the_front_proxy_certificate_are_ignored() {
    assert_forged_admin_is_anonymous("forge", None);
}

#[test]
fn remote_user_headers_with_a_certificate_from_the_wrong_ca_are_ignored() {
    let dir = scratch("rogue");
    let rogue = Ca::create(&dir, "rogue-ca", "rogue-ca").unwrap();
    let cert = rogue
        .issue(
            &dir,
            "rogue-proxy",
            "front-proxy-client",
            &[],
            &[],
            Usage::Client,
        )
        .unwrap();
    assert_forged_admin_is_anonymous("rogue", Some(&cert));
}

#[test]
fn a_front_proxy_certificate_with_a_name_not_allowed_is_ignored() {
    let dir = scratch("badcn");
    let front_proxy_ca = &cp().pki.front_proxy_ca;
    let cert = front_proxy_ca
        .issue(
            &dir,
            "other-proxy",
            "not-the-aggregator",
            &[],
            &[],
            Usage::Client,
        )
        .unwrap();
    assert_forged_admin_is_anonymous("badcn", Some(&cert));
}

#[test]
fn the_real_front_proxy_certificate_carries_user_groups_and_extra() {
    let ns = cp().namespace("proxy").unwrap();
    let headers = [
        ("X-Remote-User", "carol"),
        ("X-Remote-Group", "system:masters"),
        ("X-Remote-Extra-Reason%2Fwhy", "testing"),
        ("Content-Type", "application/json"),
    ];
    let body = serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "by-carol"},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"},
                 "requester": {"username": "mallory", "groups": ["system:masters"]}},
    });
    let resp = direct(Some(&cp().pki.front_proxy_client))
        .request(
            "POST",
            &list_path(&ns.name),
            &headers,
            &serde_json::to_vec(&body).unwrap(),
        )
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.text());
    let requester = &resp.json()["spec"]["requester"];
    assert_eq!(
        requester["username"], "carol",
        "a forged requester is replaced: {requester}"
    );
    assert_eq!(
        requester["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(
        requester["extra"]["reason/why"],
        serde_json::json!(["testing"])
    );
}

#[test]
fn a_forged_requester_through_kubectl_is_replaced_by_the_real_identity() {
    let ns = cp().namespace("requester").unwrap();
    let editor = user_with_role("editor-3", "edit", &ns.name);
    let yaml = format!(
        "{}  requester:\n    username: system:admin\n    groups: [system:masters]\n",
        transfer_yaml(&ns.name, "mine")
    );
    assert!(eventually(Duration::from_secs(20), || editor
        .apply(&yaml)
        .is_ok()));
    let who = cp().kubectl().ok(&[
        "get",
        "nst",
        "mine",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.requester.username}",
    ]);
    assert_eq!(who, "editor-3");
    // And it can never change: a write to it is replaced by the stored value.
    editor.ok(&[
        "patch",
        "nst",
        "mine",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"requester":{"username":"x"}}}"#,
    ]);
    let still = cp().kubectl().ok(&[
        "get",
        "nst",
        "mine",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.requester.username}",
    ]);
    assert_eq!(still, "editor-3");
}

#[test]
fn a_removed_rolebinding_stops_access_within_the_cache_ttl() {
    let ns = cp().namespace("revoke").unwrap();
    let editor = user_with_role("editor-4", "edit", &ns.name);
    assert!(eventually(Duration::from_secs(20), || editor
        .run(&["get", "nst", "-n", &ns.name])
        .success));
    cp().kubectl()
        .ok(&["delete", "rolebinding", "editor-4-edit", "-n", &ns.name]);
    let started = Instant::now();
    assert!(
        eventually(Duration::from_secs(15), || !editor
            .run(&["get", "nst", "-n", &ns.name])
            .success),
        "still allowed 15 s after the RoleBinding went"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_service_account_token_works_directly_until_the_account_is_deleted() {
    let ns = cp().namespace("sa").unwrap();
    let k = cp().kubectl();
    k.ok(&["create", "serviceaccount", "robot", "-n", &ns.name]);
    k.ok(&[
        "create",
        "rolebinding",
        "robot-view",
        "--clusterrole=view",
        &format!("--serviceaccount={}:robot", ns.name),
        "-n",
        &ns.name,
    ]);
    let token = k
        .ok(&["create", "token", "robot", "-n", &ns.name])
        .trim()
        .to_owned();
    let auth = format!("Bearer {token}");
    let http = direct(None);
    assert!(
        eventually(Duration::from_secs(20), || http
            .request(
                "GET",
                &list_path(&ns.name),
                &[("Authorization", &auth)],
                b""
            )
            .unwrap()
            .status
            == 200),
        "the token never worked"
    );
    k.ok(&["delete", "serviceaccount", "robot", "-n", &ns.name]);
    assert!(
        eventually(Duration::from_secs(20), || http
            .request(
                "GET",
                &list_path(&ns.name),
                &[("Authorization", &auth)],
                b""
            )
            .unwrap()
            .status
            == 401),
        "the token of a deleted ServiceAccount still works"
    );
}

#[test]
fn bad_bearer_tokens_are_unauthorized_and_the_server_keeps_serving() {
    let http = direct(None);
    for value in [
        "Bearer garbage",
        "Bearer ",
        "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6InVua25vd24ifQ.eyJzdWIiOiJ4In0.c2ln",
    ] {
        let resp = http
            .request(
                "GET",
                &list_path("default"),
                &[("Authorization", value)],
                b"",
            )
            .unwrap();
        assert_eq!(resp.status, 401, "{value}: {}", resp.text());
        assert_eq!(resp.json()["reason"], "Unauthorized");
    }
    let ok = cp().direct().ok(&["get", "--raw", "/readyz"]);
    assert_eq!(ok, "ok");
}

#[test]
fn a_rotated_front_proxy_ca_is_trusted_without_a_restart() {
    let ns = cp().namespace("rotate").unwrap();
    let dir = scratch("rotate");
    let next = Ca::create(&dir, "next-front-proxy-ca", "next-front-proxy-ca").unwrap();
    let cert = next
        .issue(
            &dir,
            "next-proxy",
            "front-proxy-client",
            &[],
            &[],
            Usage::Client,
        )
        .unwrap();
    let headers = [
        ("X-Remote-User", "dave"),
        ("X-Remote-Group", "system:masters"),
    ];
    let http = direct(Some(&cert));
    assert_forbidden(
        &http
            .request("GET", &list_path(&ns.name), &headers, b"")
            .unwrap(),
        "system:anonymous",
    );

    let k = cp().kubectl();
    let current = k.ok(&[
        "get",
        "configmap",
        "extension-apiserver-authentication",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.data.requestheader-client-ca-file}",
    ]);
    let bundle = format!("{}{}", current, next.pem().unwrap());
    let patch = serde_json::json!({"data": {"requestheader-client-ca-file": bundle}}).to_string();
    k.ok(&[
        "patch",
        "configmap",
        "extension-apiserver-authentication",
        "-n",
        "kube-system",
        "--type=merge",
        "-p",
        &patch,
    ]);
    assert!(
        eventually(Duration::from_secs(15), || http
            .request("GET", &list_path(&ns.name), &headers, b"")
            .unwrap()
            .status
            == 200),
        "the new CA was not trusted within 15 s"
    );
    // The old CA (the aggregator's) still works through kubectl.
    k.ok(&["get", "nst", "-n", &ns.name]);
}

/// A user who may create our objects in `ns` and nothing else (yet).
fn transfer_only_user(name: &str, ns: &str) -> Kubectl {
    let k = cp().kubectl();
    k.ok(&[
        "create", "role", &format!("{name}-ours"), "-n", ns,
        "--verb=create,get,list", "--resource=namespacetransfers.storage.transfer.k8s.io,ephemeralclaims.storage.transfer.k8s.io",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        &format!("{name}-ours"),
        "-n",
        ns,
        &format!("--role={name}-ours"),
        &format!("--user={name}"),
    ]);
    cp().user(name, None).unwrap()
}

fn grant(name: &str, ns: &str, verb: &str, resource: &str) {
    let role = format!("{name}-{verb}-{}", resource.replace('.', "-"));
    let k = cp().kubectl();
    k.ok(&[
        "create",
        "role",
        &role,
        "-n",
        ns,
        &format!("--verb={verb}"),
        &format!("--resource={resource}"),
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        &role,
        "-n",
        ns,
        &format!("--role={role}"),
        &format!("--user={name}"),
    ]);
}

#[test]
fn giving_a_claim_away_needs_the_right_to_delete_it() {
    let ns = cp().namespace("adm-src").unwrap();
    let user = transfer_only_user("giver", &ns.name);
    let refused = user
        .apply(&transfer_yaml(&ns.name, "offer"))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!(
            "User \"giver\" cannot delete persistentvolumeclaims \"db\" in namespace \"{}\", which giving a claim away requires",
            ns.name
        )),
        "{refused}"
    );
    grant("giver", &ns.name, "delete", "persistentvolumeclaims");
    assert!(eventually(Duration::from_secs(15), || user
        .apply(&transfer_yaml(&ns.name, "offer"))
        .is_ok()));
}

#[test]
fn receiving_a_claim_needs_the_right_to_create_claims() {
    let ns = cp().namespace("adm-dst").unwrap();
    let user = transfer_only_user("taker", &ns.name);
    let request = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: request\n  namespace: {}\nspec:\n  source:\n    namespace: elsewhere\n    name: db\n",
        ns.name
    );
    let refused = user.apply(&request).unwrap_err().to_string();
    assert!(
        refused.contains("cannot create persistentvolumeclaims in namespace"),
        "{refused}"
    );
    grant("taker", &ns.name, "create", "persistentvolumeclaims");
    assert!(eventually(Duration::from_secs(15), || user
        .apply(&request)
        .is_ok()));
}

#[test]
fn an_ephemeral_claim_needs_to_create_claims_and_read_its_clone_source() {
    let ns = cp().namespace("adm-ec").unwrap();
    let user = transfer_only_user("ci-bot", &ns.name);
    let claim = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: EphemeralClaim\nmetadata:\n  name: scratch\n  namespace: {}\nspec:\n  owner: {{apiVersion: v1, kind: Pod, name: runner}}\n  claimTemplate:\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: 1Gi}}}}\n      dataSourceRef: {{kind: PersistentVolumeClaim, name: fixture}}\n",
        ns.name
    );
    let refused = user.apply(&claim).unwrap_err().to_string();
    assert!(
        refused.contains("cannot create persistentvolumeclaims"),
        "{refused}"
    );
    grant("ci-bot", &ns.name, "create", "persistentvolumeclaims");
    let refused = eventually_error(
        &user,
        &claim,
        "cannot get persistentvolumeclaims \"fixture\"",
    );
    assert!(refused, "the clone source was never checked");
    grant("ci-bot", &ns.name, "get", "persistentvolumeclaims");
    assert!(eventually(Duration::from_secs(15), || user
        .apply(&claim)
        .is_ok()));
}

/// Waits until applying `yaml` fails with a message containing `says`.
fn eventually_error(user: &Kubectl, yaml: &str, says: &str) -> bool {
    eventually(Duration::from_secs(15), || {
        user.apply(yaml)
            .is_err_and(|e| e.to_string().contains(says))
    })
}

/// A ServiceAccount-shaped JWT for `ns/name` (uid), signed with `key_pem`.
fn service_account_jwt(
    kid: &str,
    key_pem: &[u8],
    ns: &str,
    name: &str,
    uid: &str,
    exp_offset: i64,
) -> String {
    let issuer = "https://kubernetes.default.svc.cluster.local";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = serde_json::json!({
        "iss": issuer,
        "aud": [issuer],
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + exp_offset,
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": uid}},
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    let key = jsonwebtoken::EncodingKey::from_ec_pem(key_pem).unwrap();
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

#[test]
fn forged_expired_and_unknown_key_jwts_are_unauthorized() {
    let ns = cp().namespace("jwt").unwrap();
    let k = cp().kubectl();
    k.ok(&["create", "serviceaccount", "robot", "-n", &ns.name]);
    k.ok(&[
        "create",
        "rolebinding",
        "robot-view",
        "--clusterrole=view",
        &format!("--serviceaccount={}:robot", ns.name),
        "-n",
        &ns.name,
    ]);
    let uid = k.ok(&[
        "get",
        "serviceaccount",
        "robot",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let jwks: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/openid/v1/jwks"])).unwrap();
    let kid = jwks["keys"][0]["kid"].as_str().unwrap().to_owned();
    let real_key = std::fs::read(&cp().pki.service_account_key).unwrap();
    let dir = scratch("jwt");
    let rogue = rcgen::KeyPair::generate().unwrap().serialize_pem();
    std::fs::write(dir.join("rogue.key"), &rogue).unwrap();

    let http = direct(None);
    let status = |token: &str| {
        http.request(
            "GET",
            &list_path(&ns.name),
            &[("Authorization", &format!("Bearer {token}"))],
            b"",
        )
        .unwrap()
        .status
    };
    // A well-formed token signed with the cluster's key is accepted.
    let good = service_account_jwt(&kid, &real_key, &ns.name, "robot", &uid, 600);
    assert!(
        eventually(Duration::from_secs(20), || status(&good) == 200),
        "a valid token was refused"
    );
    let cases = [
        (
            "expired",
            service_account_jwt(&kid, &real_key, &ns.name, "robot", &uid, -600),
        ),
        (
            "signed with the wrong key",
            service_account_jwt(&kid, rogue.as_bytes(), &ns.name, "robot", &uid, 600),
        ),
        (
            "unknown kid",
            service_account_jwt(
                "no-such-kid",
                rogue.as_bytes(),
                &ns.name,
                "robot",
                &uid,
                600,
            ),
        ),
        (
            "stale ServiceAccount uid",
            service_account_jwt(
                &kid,
                &real_key,
                &ns.name,
                "robot",
                "00000000-0000-0000-0000-000000000000",
                600,
            ),
        ),
    ];
    for (what, token) in cases {
        assert_eq!(status(&token), 401, "{what}");
    }
    assert_eq!(cp().direct().ok(&["get", "--raw", "/readyz"]), "ok");
}

#[test]
fn sar_cache_hits_and_misses_are_in_the_metrics() {
    let ns = cp().namespace("sar-metrics").unwrap();
    let viewer = user_with_role("viewer-5", "view", &ns.name);
    assert!(eventually(Duration::from_secs(20), || viewer
        .run(&["get", "nst", "-n", &ns.name])
        .success));
    viewer.ok(&["get", "nst", "-n", &ns.name]);
    let text = cp().direct().ok(&["get", "--raw", "/metrics"]);
    let count = |result: &str| -> u64 {
        text.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "storage_transfer_authorization_cache_total{{result=\"{result}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {result} series in:\n{text}"))
    };
    assert!(count("hit") >= 1, "{text}");
    assert!(count("miss") >= 1, "{text}");
}

#[test]
fn without_rights_to_read_the_authentication_configmap_the_server_is_not_ready_and_says_why() {
    let dir = scratch("no-configmap");
    let nobody = cp().user("nobody-server", None).unwrap();
    let port = sta_testenv::free_port().unwrap();
    let args = vec![
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--etcd-servers={}", cp().etcd_url),
        format!("--kubeconfig={}", nobody.kubeconfig().display()),
        format!("--tls-cert-file={}", cp().pki.server_serving.cert.display()),
        format!(
            "--tls-private-key-file={}",
            cp().pki.server_serving.key.display()
        ),
    ];
    let mut server = sta_testenv::process::Process::spawn(
        "unready",
        std::path::Path::new(env!("CARGO_BIN_EXE_storage-transfer-apiserver")),
        &args,
        &dir.join("server.log"),
        &[],
    )
    .unwrap();
    let http = HttpClient::new(port, &cp().pki.serving_ca.cert, &server_name(), None).unwrap();
    let said_why = eventually(Duration::from_secs(20), || {
        http.request("GET", "/readyz?verbose", &[], b"").is_ok_and(|r| {
            r.status == 500
                && r.text().contains("[-]authentication-config failed: cannot read kube-system/extension-apiserver-authentication")
        })
    });
    let log = server.log_tail();
    server.stop(Duration::from_secs(5));
    assert!(said_why, "{log}");
}

#[test]
fn a_client_ca_certificate_authenticates_directly_as_its_cn_and_groups() {
    let ns = cp().namespace("client-cert").unwrap();
    cp().user("dora", Some("team-x")).unwrap();
    let users = cp().dir.join("users");
    let cert = sta_testenv::pki::CertPair {
        cert: users.join("dora.crt"),
        key: users.join("dora.key"),
    };
    // Nobody granted dora anything: the refusal names her, not anonymous.
    let resp = direct(Some(&cert))
        .request("GET", &list_path(&ns.name), &[], b"")
        .unwrap();
    assert_forbidden(&resp, "dora");
    // Her group is what RBAC sees.
    cp().kubectl().ok(&[
        "create",
        "rolebinding",
        "team-x-view",
        "--clusterrole=view",
        "--group=team-x",
        "-n",
        &ns.name,
    ]);
    assert!(eventually(Duration::from_secs(20), || direct(Some(&cert))
        .request("GET", &list_path(&ns.name), &[], b"")
        .unwrap()
        .status
        == 200));
}
