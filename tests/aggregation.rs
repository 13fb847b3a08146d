//! End to end through kube-apiserver's aggregation layer, with the real kubectl:
//! kubectl → kube-apiserver (aggregator) → APIService → storage-transfer-apiserver.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use sta_testenv::{shared, ControlPlane, APISERVICE};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

#[test]
fn apiservice_reports_available_true() {
    let status = cp().kubectl().ok(&[
        "get",
        "apiservice",
        APISERVICE,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
    ]);
    assert_eq!(status, "True");
}

#[test]
fn apiservice_trusts_our_ca_and_does_not_skip_tls_verification() {
    let spec: serde_json::Value = serde_json::from_str(&cp().kubectl().ok(&[
        "get",
        "apiservice",
        APISERVICE,
        "-o",
        "jsonpath={.spec}",
    ]))
    .unwrap();
    assert_ne!(spec["insecureSkipTLSVerify"], true);
    assert!(!spec["caBundle"].as_str().unwrap_or_default().is_empty());
    assert_eq!(spec["service"]["namespace"], "storage-transfer-system");
}

#[test]
fn kubectl_api_resources_lists_both_resources_with_short_names() {
    let out = cp().kubectl().ok(&[
        "api-resources",
        "--api-group=storage.transfer.k8s.io",
        "--no-headers",
    ]);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec![
                "ephemeralclaims",
                "ec",
                "storage.transfer.k8s.io/v1alpha1",
                "true",
                "EphemeralClaim"
            ],
            vec![
                "namespacetransfers",
                "nst",
                "storage.transfer.k8s.io/v1alpha1",
                "true",
                "NamespaceTransfer"
            ],
        ],
        "{out}"
    );
}

#[test]
fn kubectl_api_resources_shows_verbs_and_categories() {
    let out = cp().kubectl().ok(&[
        "api-resources",
        "--api-group=storage.transfer.k8s.io",
        "-o",
        "wide",
        "--no-headers",
    ]);
    for line in out.lines() {
        assert!(
            line.contains("create,delete,deletecollection,get,list,patch,update,watch"),
            "{line}"
        );
        assert!(line.contains("storage-transfer"), "{line}");
    }
}

#[test]
fn raw_get_of_the_group_version_returns_the_resource_list_through_the_aggregator() {
    let body = cp()
        .kubectl()
        .ok(&["get", "--raw", "/apis/storage.transfer.k8s.io/v1alpha1"]);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], "storage.transfer.k8s.io/v1alpha1");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "namespacetransfers",
            "namespacetransfers/status",
            "ephemeralclaims",
            "ephemeralclaims/status"
        ]
    );
}

#[test]
fn our_server_answers_readyz_directly_with_its_serving_certificate() {
    let out = cp().direct().ok(&["get", "--raw", "/readyz?verbose"]);
    assert!(out.contains("[+]shutdown ok"), "{out}");
    assert!(out.ends_with("readyz check passed\n"), "{out}");
}

#[test]
fn the_demo_claim_is_provisioned_through_csi_bound_and_snapshotted() {
    let k = cp().kubectl();
    sta_testenv::create_demo(k).unwrap();
    let pvc = |path: &str| {
        k.ok(&[
            "get",
            "pvc",
            "db",
            "-n",
            "prod",
            "-o",
            &format!("jsonpath={path}"),
        ])
    };
    let pv = pvc("{.spec.volumeName}");
    let volume = |path: &str| k.ok(&["get", "pv", &pv, "-o", &format!("jsonpath={path}")]);
    assert_eq!(
        volume("{.spec.claimRef.namespace}/{.spec.claimRef.name}"),
        "prod/db"
    );
    assert_eq!(volume("{.spec.csi.driver}"), sta_testenv::csi::DRIVER);
    assert_eq!(volume("{.spec.persistentVolumeReclaimPolicy}"), "Delete");
    let handle = volume("{.spec.csi.volumeHandle}");
    let created = cp()
        .csi
        .creation_of(&handle)
        .expect("the driver logged the CreateVolume of the demo volume");
    assert_eq!(
        created.request["parameters"]["csi.storage.k8s.io/pvc/name"], "db",
        "{}",
        created.request
    );
    // StorageObjectInUseProtection admission puts pvc-protection on the claim,
    // as in a real cluster.
    let finalizers = pvc("{.metadata.finalizers}");
    assert!(
        finalizers.contains("kubernetes.io/pvc-protection"),
        "{finalizers}"
    );
    let snapshot = k.ok(&[
        "get",
        "volumesnapshot",
        "db-before-transfer",
        "-n",
        "prod",
        "-o",
        "jsonpath={.status.readyToUse} {.status.boundVolumeSnapshotContentName}",
    ]);
    assert!(snapshot.starts_with("true snapcontent-"), "{snapshot}");
    let snapshots = cp().csi.calls("CreateSnapshot");
    assert!(
        snapshots
            .iter()
            .any(|c| c.succeeded() && c.request["source_volume_id"] == handle.as_str()),
        "the driver snapshotted the demo volume: {snapshots:?}"
    );
}

/// The resource as kube-rs addresses it, for a client built like any
/// controller's: from a kubeconfig, through kube-apiserver.
fn transfers(client: kube::Client, ns: &str) -> kube::Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "storage.transfer.k8s.io".to_owned(),
        version: "v1alpha1".to_owned(),
        api_version: "storage.transfer.k8s.io/v1alpha1".to_owned(),
        kind: "NamespaceTransfer".to_owned(),
        plural: "namespacetransfers".to_owned(),
    };
    kube::Api::namespaced_with(client, ns, &resource)
}

/// kube-apiserver's answer to a resourceVersion the store has not reached:
/// 504 Timeout, "Too large resource version: X, current: Y", the
/// `ResourceVersionTooLarge` cause and a retry after one second.
#[track_caller]
fn assert_too_large(case: &str, status: &kube::core::Status, requested: u64) {
    assert_eq!(
        (status.code, status.reason.as_str()),
        (504, "Timeout"),
        "{case}: {status:?}"
    );
    assert!(
        status.message.starts_with(&format!(
            "Timeout: Too large resource version: {requested}, current: "
        )),
        "{case}: {status:?}"
    );
    let details = status.details.as_ref().expect("details");
    assert_eq!(details.retry_after_seconds, 1, "{case}: {status:?}");
    let causes: Vec<&str> = details.causes.iter().map(|c| c.reason.as_str()).collect();
    assert_eq!(causes, ["ResourceVersionTooLarge"], "{case}: {status:?}");
}

#[test]
fn a_list_or_watch_from_a_future_resource_version_is_told_it_is_too_large() {
    use futures::StreamExt;
    use kube::api::{ListParams, VersionMatch, WatchEvent, WatchParams};

    let ns = cp().namespace("future-rv").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(cp().kubeconfig()).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        // kube-rs, like client-go, retries a 504 after the Retry-After the
        // error carries; this test wants to see the error itself.
        config.default_retry = false;
        let api = transfers(kube::Client::try_from(config).unwrap(), &ns.name);
        let current: u64 = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap()
            .parse()
            .unwrap();
        let future = current + 1_000_000;
        let rv = future.to_string();

        for (case, params) in [
            (
                "NotOlderThan",
                ListParams::default()
                    .at(&rv)
                    .matching(VersionMatch::NotOlderThan),
            ),
            (
                "Exact",
                ListParams::default().at(&rv).matching(VersionMatch::Exact),
            ),
            (
                "NotOlderThan, paged",
                ListParams::default()
                    .at(&rv)
                    .matching(VersionMatch::NotOlderThan)
                    .limit(1),
            ),
        ] {
            match api.list(&params).await {
                Err(kube::Error::Api(status)) => assert_too_large(case, &status, future),
                other => panic!("{case}: {other:?}"),
            }
        }

        for (case, params) in [
            ("watch", WatchParams::default().timeout(30)),
            (
                "watch with initial events",
                WatchParams::streaming_lists().timeout(30),
            ),
        ] {
            let events = api.watch(&params, &rv).await.unwrap();
            let events: Vec<_> = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                events.collect::<Vec<_>>(),
            )
            .await
            .unwrap_or_else(|_| panic!("{case}: the watch stays open"));
            match events.as_slice() {
                [Ok(WatchEvent::Error(status))] => assert_too_large(case, status, future),
                other => panic!("{case}: {other:?}"),
            }
        }
    });

    // The status code and the retry hint reach an HTTP client as they are.
    let port: u16 = cp()
        .apiserver_url
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let http = sta_testenv::http::HttpClient::new(
        port,
        &cp().pki.cluster_ca.cert,
        "localhost",
        Some((&cp().pki.admin.cert, &cp().pki.admin.key)),
    )
    .unwrap();
    let resp = http
        .request(
            "GET",
            &format!(
                "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{}/namespacetransfers?resourceVersion=999999999999&resourceVersionMatch=NotOlderThan",
                ns.name
            ),
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(resp.status, 504, "{}", resp.text());
    assert_eq!(resp.header("Retry-After"), Some("1"));
}
