use super::*;

const NST: &str =
    "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{namespace}/namespacetransfers";

fn methods(item: &Value) -> Vec<&str> {
    let mut methods: Vec<&str> = item
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "parameters")
        .collect();
    methods.sort_unstable();
    methods
}

fn query_names(op: &Value) -> Vec<&str> {
    op["parameters"]
        .as_array()
        .map(|params| {
            params
                .iter()
                .filter(|p| p["in"] == "query")
                .map(|p| p["name"].as_str().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_resource_has_its_collection_item_status_and_all_namespaces_paths() {
    let paths = paths(Dialect::Swagger2, &kinds());
    for r in kinds().iter().map(|k| k.resource) {
        let base = "/apis/storage.transfer.k8s.io/v1alpha1";
        let collection = format!("{base}/namespaces/{{namespace}}/{}", r.plural);
        let item = format!("{collection}/{{name}}");
        let cases = [
            (collection.clone(), vec!["delete", "get", "post"]),
            (item.clone(), vec!["delete", "get", "patch", "put"]),
            (format!("{item}/status"), vec!["get", "patch", "put"]),
            (format!("{base}/{}", r.plural), vec!["get"]),
        ];
        for (path, want) in cases {
            let item = paths.get(&path).unwrap_or_else(|| panic!("{path} missing"));
            assert_eq!(methods(item), want, "{path}");
        }
    }
    assert_eq!(paths.len(), 4 * kinds().len());
}

#[test]
fn operations_are_named_and_tagged_as_kube_names_them() {
    let paths = paths(Dialect::Swagger2, &kinds());
    let id = |path: &str, method: &str| {
        paths[path][method]["operationId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        id(NST, "get"),
        "listStorageTransferV1alpha1NamespacedNamespaceTransfer"
    );
    assert_eq!(
        id(NST, "post"),
        "createStorageTransferV1alpha1NamespacedNamespaceTransfer"
    );
    assert_eq!(
        id(NST, "delete"),
        "deleteStorageTransferV1alpha1CollectionNamespacedNamespaceTransfer"
    );
    assert_eq!(
        id(&format!("{NST}/{{name}}/status"), "patch"),
        "patchStorageTransferV1alpha1NamespacedNamespaceTransferStatus"
    );
    assert_eq!(
        id(
            "/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers",
            "get"
        ),
        "listStorageTransferV1alpha1NamespaceTransferForAllNamespaces"
    );
    assert_eq!(
        paths[NST]["get"]["tags"],
        json!(["storageTransfer_v1alpha1"])
    );
}

#[test]
fn every_operation_carries_its_action_and_group_version_kind() {
    for dialect in [Dialect::Swagger2, Dialect::OpenApi3] {
        for (path, item) in paths(dialect, &kinds()) {
            let kind = if path.contains("namespacetransfers") {
                "NamespaceTransfer"
            } else {
                "EphemeralClaim"
            };
            for method in methods(&item) {
                let op = &item[method];
                assert_eq!(
                    op["x-kubernetes-group-version-kind"],
                    json!({ "group": "storage.transfer.k8s.io", "kind": kind, "version": "v1alpha1" }),
                    "{path} {method}"
                );
                assert!(op["x-kubernetes-action"].is_string(), "{path} {method}");
                assert!(op["responses"]["200"].is_object(), "{path} {method}");
            }
        }
    }
}

#[test]
fn patches_take_dry_run_field_validation_and_both_patch_types() {
    let v2 = paths(Dialect::Swagger2, &kinds());
    let v3 = paths(Dialect::OpenApi3, &kinds());
    for path in [format!("{NST}/{{name}}"), format!("{NST}/{{name}}/status")] {
        let op = &v2[&path]["patch"];
        assert_eq!(query_names(op), ["dryRun", "fieldValidation"], "{path}");
        assert_eq!(
            op["consumes"],
            json!([
                "application/json-patch+json",
                "application/merge-patch+json"
            ])
        );
        assert_eq!(
            op["parameters"][0]["schema"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
        );
        let op = &v3[&path]["patch"];
        assert_eq!(query_names(op), ["dryRun", "fieldValidation"], "{path}");
        let content = op["requestBody"]["content"].as_object().unwrap();
        let types: Vec<&String> = content.keys().collect();
        assert_eq!(
            types,
            [
                "application/json-patch+json",
                "application/merge-patch+json"
            ]
        );
    }
}

#[test]
fn lists_take_selectors_paging_and_watch_parameters() {
    let v2 = paths(Dialect::Swagger2, &kinds());
    for path in [
        NST,
        "/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers",
    ] {
        assert_eq!(
            query_names(&v2[path]["get"]),
            [
                "allowWatchBookmarks",
                "continue",
                "fieldSelector",
                "labelSelector",
                "limit",
                "resourceVersion",
                "resourceVersionMatch",
                "sendInitialEvents",
                "timeoutSeconds",
                "watch"
            ],
            "{path}"
        );
    }
    assert_eq!(query_names(&v2[NST]["post"]), ["dryRun", "fieldValidation"]);
}

#[test]
fn path_parameters_are_declared_once_per_path_in_each_dialect() {
    let v2 = paths(Dialect::Swagger2, &kinds());
    let item = &v2[&format!("{NST}/{{name}}")];
    assert_eq!(
        item["parameters"],
        json!([
            { "name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "name of the NamespaceTransfer" },
            { "name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "object name and auth scope, such as for teams and projects" },
        ])
    );
    let v3 = paths(Dialect::OpenApi3, &kinds());
    assert_eq!(
        v3[NST]["parameters"][0]["schema"],
        json!({ "type": "string", "uniqueItems": true })
    );
}

#[test]
fn v3_list_answers_the_list_as_json_and_watch_events_as_a_stream() {
    let v3 = paths(Dialect::OpenApi3, &kinds());
    let content = &v3[NST]["get"]["responses"]["200"]["content"];
    assert_eq!(
        content["application/json"]["schema"]["$ref"],
        "#/definitions/io.k8s.transfer.storage.v1alpha1.NamespaceTransferList"
    );
    assert_eq!(
        content["application/json;stream=watch"]["schema"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"
    );
}

/// The kinds the server serves.
fn kinds() -> Vec<crate::api::schema::KindSchema> {
    crate::endpoints::kinds::Kinds::served().schemas()
}
