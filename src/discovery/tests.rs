use super::*;

#[test]
fn resource_list_names_both_resources_with_short_names_and_categories() {
    let v = serde_json::to_value(api_resource_list(&kinds())).unwrap();
    assert_eq!(v["kind"], "APIResourceList");
    assert_eq!(v["groupVersion"], "storage.transfer.k8s.io/v1alpha1");
    let resources = v["resources"].as_array().unwrap();
    let find = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let nst = find("namespacetransfers");
    assert_eq!(nst["kind"], "NamespaceTransfer");
    assert_eq!(nst["singularName"], "namespacetransfer");
    assert_eq!(nst["shortNames"], serde_json::json!(["nst"]));
    assert_eq!(nst["categories"], serde_json::json!(["storage-transfer"]));
    assert_eq!(nst["namespaced"], true);
    assert_eq!(
        nst["verbs"],
        serde_json::json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ])
    );
    let ec = find("ephemeralclaims");
    assert_eq!(ec["shortNames"], serde_json::json!(["ec"]));
    assert_eq!(ec["kind"], "EphemeralClaim");
}

#[test]
fn status_subresources_are_listed_with_get_patch_update() {
    let list = api_resource_list(&kinds());
    for plural in ["namespacetransfers/status", "ephemeralclaims/status"] {
        let r = list
            .resources
            .iter()
            .find(|r| r.name == plural)
            .unwrap_or_else(|| panic!("{plural} missing"));
        assert_eq!(r.verbs, ["get", "patch", "update"]);
        assert!(r.short_names.is_none());
    }
}

#[test]
fn group_prefers_the_only_version() {
    let g = api_group();
    assert_eq!(g.name, "storage.transfer.k8s.io");
    assert_eq!(
        g.preferred_version.unwrap().group_version,
        "storage.transfer.k8s.io/v1alpha1"
    );
    let v = serde_json::to_value(api_group_list()).unwrap();
    assert_eq!(v["kind"], "APIGroupList");
}

/// The kinds the server serves.
fn kinds() -> Vec<crate::api::schema::KindSchema> {
    crate::endpoints::kinds::Kinds::served().schemas()
}
