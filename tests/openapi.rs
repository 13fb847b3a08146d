//! The OpenAPI documents and aggregated discovery: the checked-in copies under
//! `openapi/` against the code, then the real thing end to end, straight to our
//! server and through kube-apiserver's aggregator with the real kubectl.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use sta_testenv::{shared, ControlPlane};
use storage_transfer_apiserver::discovery::openapi;
use storage_transfer_apiserver::endpoints::kinds::Kinds;

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V3_PATH: &str = "/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1";

/// With `UPDATE_OPENAPI=1` (`make openapi`) this rewrites the files instead.
#[test]
fn checked_in_openapi_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi");
    if std::env::var("UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        openapi::write_checked_in(&dir, &Kinds::served().schemas()).unwrap();
        return;
    }
    let mut stale = Vec::new();
    for (relative, want) in openapi::checked_in(&Kinds::served().schemas()).unwrap() {
        let path = dir.join(&relative);
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("openapi/{} differs", relative.display())),
            Err(e) => stale.push(format!("openapi/{}: {e}", relative.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "the checked-in OpenAPI documents no longer match the API types ({}); \
         run `make openapi` and commit the result",
        stale.join("; ")
    );
}

/// Retries `check` for up to 30 s: the aggregator downloads our OpenAPI in the
/// background after the APIService becomes available.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check() {
            Ok(value) => return value,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

#[test]
fn our_server_answers_aggregated_discovery_with_its_content_type_and_etag() {
    let http = cp().server_http().unwrap();
    let resp = http
        .request("GET", "/apis", &[("Accept", AGGREGATED_V2)], b"")
        .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("Content-Type"), Some(AGGREGATED_V2));
    let body = resp.json();
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    assert_eq!(
        body["items"][0]["metadata"]["name"],
        "storage.transfer.k8s.io"
    );

    let etag = resp.header("ETag").unwrap().to_owned();
    let again = http
        .request(
            "GET",
            "/apis",
            &[("Accept", AGGREGATED_V2), ("If-None-Match", &etag)],
            b"",
        )
        .unwrap();
    assert_eq!(again.status, 304);

    let legacy = http.request("GET", "/apis", &[], b"").unwrap();
    assert_eq!(legacy.json()["kind"], "APIGroupList");
}

#[test]
fn our_server_serves_the_v3_document_its_root_points_at() {
    let http = cp().server_http().unwrap();
    let root = http.request("GET", "/openapi/v3", &[], b"").unwrap();
    assert_eq!(root.status, 200, "{}", root.text());
    let url = root.json()["paths"]["apis/storage.transfer.k8s.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = http.request("GET", &url, &[], b"").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Cache-Control"), Some("public, immutable"));
    let hash = url.split_once("?hash=").unwrap().1;
    assert_eq!(resp.header("ETag"), Some(format!("\"{hash}\"").as_str()));
    let etag = resp.header("ETag").unwrap().to_owned();
    let again = http
        .request("GET", V3_PATH, &[("If-None-Match", &etag)], b"")
        .unwrap();
    assert_eq!(again.status, 304);
    let v2 = http.request("GET", "/openapi/v2", &[], b"").unwrap();
    assert_eq!(v2.json()["swagger"], "2.0");
}

#[test]
fn kubectl_explain_describes_spec_source_from_our_schema() {
    // Start the control plane before the clock of `eventually` does.
    let k = cp().kubectl();
    let out = eventually("kubectl explain namespacetransfer.spec.source", || {
        k.try_ok(&["explain", "namespacetransfer.spec.source"])
            .map_err(|e| e.to_string())
    });
    assert!(out.contains("KIND:       NamespaceTransfer"), "{out}");
    assert!(
        out.contains("The claim whose volume is transferred."),
        "{out}"
    );
    for field in ["kind", "name", "namespace"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(&format!("{field}\t"))),
            "{field} missing: {out}"
        );
    }
}

#[test]
fn kubectl_explain_shows_enum_values_of_ephemeral_claim_release_policy() {
    let k = cp().kubectl();
    let out = eventually("kubectl explain ephemeralclaim.spec.releasePolicy", || {
        k.try_ok(&["explain", "ephemeralclaim.spec.releasePolicy"])
            .map_err(|e| e.to_string())
    });
    assert!(out.contains("FIELD: releasePolicy <string>"), "{out}");
    assert!(out.contains("ENUM:"), "{out}");
    assert!(out.contains("Retain"), "{out}");
}

#[test]
fn the_aggregator_serves_our_v3_document_with_our_schemas() {
    let k = cp().kubectl();
    let url = eventually("our group-version in the aggregated /openapi/v3", || {
        let root: Value = serde_json::from_str(
            &k.try_ok(&["get", "--raw", "/openapi/v3"])
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        root["paths"]["apis/storage.transfer.k8s.io/v1alpha1"]["serverRelativeURL"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "not listed yet".to_owned())
    });
    let doc: Value = serde_json::from_str(&k.ok(&["get", "--raw", &url])).unwrap();
    let schemas = &doc["components"]["schemas"];
    for name in [
        "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer",
        "io.k8s.transfer.storage.v1alpha1.EphemeralClaimList",
    ] {
        assert!(schemas[name].is_object(), "{name} missing");
    }
}

#[test]
fn the_aggregator_merges_our_definitions_into_openapi_v2() {
    let k = cp().kubectl();
    eventually("our definitions in the aggregated /openapi/v2", || {
        let doc: Value = serde_json::from_str(
            &k.try_ok(&["get", "--raw", "/openapi/v2"])
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        let nst = &doc["definitions"]["io.k8s.transfer.storage.v1alpha1.NamespaceTransfer"];
        if nst["x-kubernetes-group-version-kind"][0]["kind"] == "NamespaceTransfer"
            && doc["paths"]["/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{namespace}/namespacetransfers/{name}/status"]["patch"].is_object()
        {
            Ok(())
        } else {
            Err("not merged yet".to_owned())
        }
    });
}

#[test]
fn kubectl_sends_strict_field_validation_because_our_openapi_advertises_it() {
    let ns = cp().namespace("openapi-strict").unwrap();
    let yaml = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\n\
         kind: NamespaceTransfer\n\
         metadata:\n  name: strict\n  namespace: {}\n\
         spec:\n  source:\n    name: db\n  bogus: true\n",
        ns.name
    );
    // Server-side validation answers with our decoder's message; kubectl's own
    // client-side validation would word it differently.
    let run = eventually("kubectl create with an unknown field", || {
        let run = cp()
            .kubectl()
            .run_with_stdin(&["create", "--dry-run=server", "-f", "-"], Some(&yaml));
        if run.stderr.contains("strict decoding error") {
            Ok(run)
        } else {
            Err(format!("{run:?}"))
        }
    });
    assert!(!run.success);
    assert!(run.stderr.contains("spec.bogus"), "{}", run.stderr);
}
