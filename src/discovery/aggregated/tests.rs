use serde_json::json;

use super::*;

fn list_json(version: Version) -> serde_json::Value {
    serde_json::to_value(group_discovery_list(version, &kinds())).unwrap()
}

#[test]
fn aggregated_list_has_one_group_named_after_ours_with_the_current_version() {
    let v = list_json(Version::V2);
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    assert_eq!(v["apiVersion"], "apidiscovery.k8s.io/v2");
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "storage.transfer.k8s.io");
    let versions = items[0]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["version"], "v1alpha1");
    assert_eq!(versions[0]["freshness"], "Current");
}

#[test]
fn each_resource_carries_kind_scope_verbs_names_and_status_subresource() {
    let v = list_json(Version::V2);
    let resources = v["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap();
    let find = |name: &str| resources.iter().find(|r| r["resource"] == name).unwrap();
    let nst = find("namespacetransfers");
    assert_eq!(
        *nst,
        json!({
            "resource": "namespacetransfers",
            "responseKind": {"group": "storage.transfer.k8s.io", "version": "v1alpha1", "kind": "NamespaceTransfer"},
            "scope": "Namespaced",
            "singularResource": "namespacetransfer",
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": ["nst"],
            "categories": ["storage-transfer"],
            "subresources": [{
                "subresource": "status",
                "responseKind": {"group": "storage.transfer.k8s.io", "version": "v1alpha1", "kind": "NamespaceTransfer"},
                "verbs": ["get", "patch", "update"],
            }],
        })
    );
    let ec = find("ephemeralclaims");
    assert_eq!(ec["responseKind"]["kind"], "EphemeralClaim");
    assert_eq!(ec["shortNames"], json!(["ec"]));
    assert_eq!(ec["subresources"][0]["subresource"], "status");
    assert_eq!(resources.len(), kinds().len());
}

#[test]
fn v2beta1_differs_only_in_api_version() {
    let mut beta = list_json(Version::V2Beta1);
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    beta["apiVersion"] = json!("apidiscovery.k8s.io/v2");
    assert_eq!(beta, list_json(Version::V2));
}

#[test]
fn served_document_has_the_exact_aggregated_content_type() {
    let doc = encode(Version::V2, &kinds()).unwrap();
    assert_eq!(
        doc.content_type(),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let body: serde_json::Value = serde_json::from_slice(&doc.body()).unwrap();
    assert_eq!(body, list_json(Version::V2));
    assert_eq!(
        encode(Version::V2Beta1, &kinds()).unwrap().content_type(),
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    );
}

#[test]
fn accept_headers_choose_between_aggregated_and_legacy_discovery() {
    let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
    let cases: Vec<(Option<String>, Option<Version>)> = vec![
        (None, None),
        (Some(String::new()), None),
        (Some("application/json".into()), None),
        (Some("*/*".into()), None),
        (Some(v2.into()), Some(Version::V2)),
        (Some(v2beta1.into()), Some(Version::V2Beta1)),
        // What the aggregator sends.
        (Some(format!("{v2},{v2beta1}")), Some(Version::V2)),
        // What client-go sends.
        (
            Some(format!("{v2},{v2beta1},application/json")),
            Some(Version::V2),
        ),
        (
            Some(format!("{v2};profile=nopeer,application/json")),
            Some(Version::V2),
        ),
        // Order decides, as in kube.
        (Some(format!("application/json, {v2}")), None),
        // Refused or unproducible ranges are skipped.
        (Some(format!("{v2};q=0, {v2beta1}")), Some(Version::V2Beta1)),
        (Some(format!("application/yaml, {v2}")), Some(Version::V2)),
        (
            Some("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList".into()),
            None,
        ),
        (
            Some("application/json;as=Table;v=v1;g=meta.k8s.io, application/json".into()),
            None,
        ),
    ];
    for (accept, want) in cases {
        assert_eq!(negotiate(accept.as_deref()), want, "{accept:?}");
    }
}

/// The kinds the server serves.
fn kinds() -> Vec<crate::api::schema::KindSchema> {
    crate::endpoints::kinds::Kinds::served().schemas()
}
