use serde_json::Map;

use super::*;

/// Calls `visit` on every JSON object in `value`, with its JSON pointer.
fn each_object(value: &Value, pointer: &str, visit: &mut dyn FnMut(&str, &Map<String, Value>)) {
    match value {
        Value::Object(object) => {
            visit(pointer, object);
            for (key, child) in object {
                each_object(child, &format!("{pointer}/{key}"), visit);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                each_object(child, &format!("{pointer}/{i}"), visit);
            }
        }
        _ => {}
    }
}

/// Both documents with their schema maps and the prefix their references use.
fn documents() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("v2", swagger_v2(&kinds()), "#/definitions/"),
        (
            "v3",
            openapi_v3_group_version(&kinds()),
            "#/components/schemas/",
        ),
    ]
}

fn schemas_of<'a>(name: &str, document: &'a Value) -> &'a Map<String, Value> {
    let schemas = match name {
        "v2" => &document["definitions"],
        _ => &document["components"]["schemas"],
    };
    schemas.as_object().unwrap()
}

/// The definition a schema refers to, directly or through a one-element `allOf`.
fn referenced<'a>(
    schema: &'a Value,
    prefix: &str,
    schemas: &'a Map<String, Value>,
) -> Option<&'a Value> {
    let target = schema
        .get("$ref")
        .or_else(|| schema["allOf"].get(0).and_then(|s| s.get("$ref")))?;
    schemas.get(target.as_str()?.strip_prefix(prefix)?)
}

#[test]
fn every_reference_resolves_in_both_documents() {
    for (name, document, prefix) in documents() {
        let schemas = schemas_of(name, &document);
        let mut dangling = Vec::new();
        each_object(&document, "", &mut |pointer, object| {
            if let Some(target) = object.get("$ref") {
                let target = target.as_str().unwrap();
                let resolves = target
                    .strip_prefix(prefix)
                    .is_some_and(|n| schemas.contains_key(n));
                if !resolves {
                    dangling.push(format!("{pointer}: {target}"));
                }
            }
        });
        assert!(
            dangling.is_empty(),
            "{name}: dangling references: {dangling:#?}"
        );
    }
}

#[test]
fn every_schema_property_has_a_type_or_refers_to_a_typed_definition() {
    for (name, document, prefix) in documents() {
        let schemas = schemas_of(name, &document);
        let mut untyped = Vec::new();
        each_object(&document, "", &mut |pointer, object| {
            let mut nested: Vec<(String, &Value)> = Vec::new();
            if let Some(Value::Object(properties)) = object.get("properties") {
                nested.extend(
                    properties
                        .iter()
                        .map(|(k, v)| (format!("properties/{k}"), v)),
                );
            }
            for keyword in ["items", "additionalProperties"] {
                if let Some(schema @ Value::Object(_)) = object.get(keyword) {
                    nested.push((keyword.to_owned(), schema));
                }
            }
            for (at, schema) in nested {
                let typed = schema.get("type").is_some()
                    || referenced(schema, prefix, schemas).is_some_and(|d| d.get("type").is_some());
                if !typed {
                    untyped.push(format!("{pointer}/{at}"));
                }
            }
        });
        assert!(untyped.is_empty(), "{name}: untyped schemas: {untyped:#?}");
    }
}

#[test]
fn no_one_of_or_any_of_is_left_for_optionals_or_enums() {
    for (name, document, _) in documents() {
        let mut unions = Vec::new();
        each_object(&document, "", &mut |pointer, object| {
            for keyword in ["oneOf", "anyOf", "nullable", "const"] {
                if object.contains_key(keyword) {
                    unions.push(format!("{pointer}/{keyword}"));
                }
            }
            if matches!(object.get("type"), Some(Value::Array(_))) {
                unions.push(format!("{pointer}/type"));
            }
        });
        assert!(unions.is_empty(), "{name}: {unions:#?}");
    }
}

#[test]
fn kinds_and_their_lists_carry_their_group_version_kind() {
    for (name, document, _) in documents() {
        let schemas = schemas_of(name, &document);
        for resource in kinds().iter().map(|k| k.resource) {
            for (definition, kind) in [
                (
                    schemas::kind_definition(resource.kind),
                    resource.kind.to_owned(),
                ),
                (
                    schemas::list_definition(resource.kind),
                    format!("{}List", resource.kind),
                ),
            ] {
                let schema = schemas
                    .get(&definition)
                    .unwrap_or_else(|| panic!("{name}: {definition} missing"));
                assert_eq!(
                    schema["x-kubernetes-group-version-kind"],
                    json!([{ "group": "storage.transfer.k8s.io", "kind": kind, "version": "v1alpha1" }]),
                    "{name}: {definition}"
                );
            }
        }
    }
}

#[test]
fn our_types_are_named_after_the_reversed_group() {
    let document = swagger_v2(&kinds());
    let schemas = schemas_of("v2", &document);
    for name in [
        "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer",
        "io.k8s.transfer.storage.v1alpha1.NamespaceTransferList",
        "io.k8s.transfer.storage.v1alpha1.EphemeralClaim",
        "io.k8s.transfer.storage.v1alpha1.EphemeralClaimList",
        "io.k8s.transfer.storage.v1alpha1.TransferSource",
    ] {
        assert!(schemas.contains_key(name), "{name} missing");
    }
    let unqualified: Vec<&String> = schemas
        .keys()
        .filter(|k| !k.starts_with("io.k8s."))
        .collect();
    assert!(unqualified.is_empty(), "{unqualified:?}");
}

#[test]
fn metadata_refers_to_object_meta_and_list_metadata_to_list_meta() {
    let document = openapi_v3_group_version(&kinds());
    let schemas = schemas_of("v3", &document);
    let nst = &schemas["io.k8s.transfer.storage.v1alpha1.NamespaceTransfer"];
    assert_eq!(
        nst["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let list = &schemas["io.k8s.transfer.storage.v1alpha1.EphemeralClaimList"];
    assert_eq!(
        list["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
    );
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/io.k8s.transfer.storage.v1alpha1.EphemeralClaim"
    );
    let v2 = swagger_v2(&kinds());
    assert_eq!(
        v2["definitions"]["io.k8s.transfer.storage.v1alpha1.NamespaceTransfer"]["properties"]
            ["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
}

#[test]
fn quantity_and_time_are_published_as_kubernetes_publishes_them() {
    for (name, document, _) in documents() {
        let schemas = schemas_of(name, &document);
        let quantity = &schemas["io.k8s.apimachinery.pkg.api.resource.Quantity"];
        assert_eq!(quantity["type"], "string", "{name}");
        assert!(
            quantity.get("x-kubernetes-int-or-string").is_none(),
            "{name}"
        );
        let time = &schemas["io.k8s.apimachinery.pkg.apis.meta.v1.Time"];
        assert_eq!(time["type"], "string", "{name}");
        assert_eq!(time["format"], "date-time", "{name}");
        for name in [
            "io.k8s.apimachinery.pkg.apis.meta.v1.Condition",
            "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
        ] {
            assert!(schemas.contains_key(name), "{name} missing");
        }
    }
}

#[test]
fn field_descriptions_are_kept_and_reflowed_into_paragraphs() {
    let document = swagger_v2(&kinds());
    let source = &document["definitions"]["io.k8s.transfer.storage.v1alpha1.TransferSource"];
    let kind = source["properties"]["kind"]["description"]
        .as_str()
        .unwrap();
    assert_eq!(
        kind,
        "The kind of the source object: `PersistentVolumeClaim` (the default), or `VolumeSnapshot` (group `snapshot.storage.k8s.io`). In mode `Move` the snapshot itself moves to a VolumeSnapshot of the destination namespace; in mode `Clone` a claim restored from it beside it moves, and the snapshot stays."
    );
    assert_eq!(source["properties"]["name"]["type"], "string");
    assert!(source["properties"]["namespace"]["description"]
        .as_str()
        .unwrap()
        .starts_with("The namespace of the source claim."));
}

#[test]
fn string_enums_are_inlined_with_their_values() {
    let document = swagger_v2(&kinds());
    let spec = &document["definitions"]["io.k8s.transfer.storage.v1alpha1.NamespaceTransferSpec"];
    let mode = &spec["properties"]["mode"];
    assert_eq!(mode["type"], "string");
    assert_eq!(mode["enum"], json!(["Move", "Clone"]));
    let description = mode["description"].as_str().unwrap();
    assert!(
        description.starts_with("`Move` (the default)"),
        "{description}"
    );
    assert!(
        description.contains("Possible enum values:\n - `\"Move\"`"),
        "{description}"
    );
    assert!(document["definitions"]
        .get("io.k8s.transfer.storage.v1alpha1.TransferMode")
        .is_none());
}

#[test]
fn v3_root_lists_our_group_version_with_the_hash_of_the_served_document() {
    let served = build(&kinds()).unwrap();
    let root: Value = serde_json::from_slice(&served.v3_root.body()).unwrap();
    let hash = served.v3_group_version.hash();
    assert_eq!(
        root,
        json!({
            "paths": {
                "apis/storage.transfer.k8s.io/v1alpha1": {
                    "serverRelativeURL": format!("/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1?hash={hash}"),
                },
            },
        })
    );
    assert_eq!(
        hash,
        crate::discovery::document::content_hash(&served.v3_group_version.body())
    );
    assert!(hash
        .chars()
        .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
}

#[test]
fn served_documents_are_the_built_documents() {
    let served = build(&kinds()).unwrap();
    let v2: Value = serde_json::from_slice(&served.v2.body()).unwrap();
    assert_eq!(v2, swagger_v2(&kinds()));
    let v3: Value = serde_json::from_slice(&served.v3_group_version.body()).unwrap();
    assert_eq!(v3, openapi_v3_group_version(&kinds()));
}

#[test]
fn documents_are_deterministic_with_sorted_keys() {
    for (name, document, _) in documents() {
        let mut unsorted = Vec::new();
        each_object(&document, "", &mut |pointer, object| {
            let keys: Vec<&String> = object.keys().collect();
            if !keys.windows(2).all(|w| w[0] <= w[1]) {
                unsorted.push(pointer.to_owned());
            }
        });
        assert!(unsorted.is_empty(), "{name}: {unsorted:?}");
    }
    assert_eq!(checked_in(&kinds()).unwrap(), checked_in(&kinds()).unwrap());
}

#[test]
fn checked_in_files_are_the_v2_and_v3_documents() {
    let files = checked_in(&kinds()).unwrap();
    let names: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();
    assert_eq!(
        names,
        ["v2.json", "v3/apis__storage.transfer.k8s.io__v1alpha1.json"]
    );
    for (path, contents) in files {
        assert!(contents.ends_with("}\n"), "{}", path.display());
    }
}

/// The kinds the server serves.
fn kinds() -> Vec<crate::api::schema::KindSchema> {
    crate::endpoints::kinds::Kinds::served().schemas()
}
