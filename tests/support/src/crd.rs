//! The CRD twin of NamespaceTransfer: the same schema, generated from our
//! checked-in OpenAPI (`openapi/v3`), served by kube-apiserver itself as a
//! CustomResourceDefinition, which is how the alternative (a CRD plus a
//! controller, as KubeVirt CDI's ObjectTransfer) is built.
//!
//! Two users: `make bench` measures it next to our server, and the
//! server-side apply differential test (`tests/apply_differential.rs`) uses
//! kube-apiserver serving it as the oracle for apply, conflicts and
//! `metadata.managedFields`.
//!
//! A CRD schema must be structural: no `$ref`, a type on every node, and
//! nothing about `metadata` beyond what kube-apiserver already knows. So
//! references are inlined, `ObjectMeta` becomes a bare object, `Quantity`
//! becomes int-or-string and `Time` a date-time string. Descriptions, enums
//! and required fields are kept, so that kube-apiserver validates and prunes
//! as much as the schema says; so are the markers server-side apply reads
//! ([`MARKERS`]: list types, list-map keys, map types), also where they sit
//! next to a reference, so that kube-apiserver merges and tracks ownership of
//! lists exactly as our OpenAPI says.
//!
//! It lives in [`GROUP`], not in `storage.transfer.k8s.io`: that group's
//! `v1alpha1` belongs to our APIService, and a `*.k8s.io` CRD would need the
//! API-approval annotation besides. [`namespace_transfer_crd_in`] makes the
//! same CRD in another group, so that two twins can be compared with each
//! other.

use serde_json::{json, Map, Value};

use crate::{io_err, repo_root, Error};

/// The CRD twin's API group.
pub const GROUP: &str = "storage.transfer.example.com";

/// Our OpenAPI v3 document, as checked in (and kept equal to what the server
/// serves by `tests/openapi.rs`).
pub const OPENAPI_V3: &str = "openapi/v3/apis__storage.transfer.k8s.io__v1alpha1.json";

/// The `x-kubernetes-*` extensions a CRD schema accepts and keeps. Others
/// (`x-kubernetes-group-version-kind`, `x-kubernetes-patch-strategy`, …)
/// describe built-in types to clients and have no place in a CRD.
pub const MARKERS: &[&str] = &[
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
];

const SCHEMAS: &str = "#/components/schemas/";
const KIND: &str = "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Reads [`OPENAPI_V3`] from the repository.
pub fn checked_in_openapi() -> Result<Value, Error> {
    let path = repo_root().join(OPENAPI_V3);
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Io {
        context: path.display().to_string(),
        source: std::io::Error::other(e),
    })
}

/// The CustomResourceDefinition in [`GROUP`], from the OpenAPI v3 document of
/// our group.
pub fn namespace_transfer_crd(openapi: &Value) -> Value {
    namespace_transfer_crd_in(openapi, GROUP)
}

/// The same CustomResourceDefinition in `group`.
///
/// Panics when the document lacks a schema it names: the document is ours
/// and checked in, so that is a bug in the generator or the document.
pub fn namespace_transfer_crd_in(openapi: &Value, group: &str) -> Value {
    let schemas = openapi["components"]["schemas"]
        .as_object()
        .expect("the OpenAPI document has components.schemas");
    let schema = structural(&schemas[KIND], schemas);
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("namespacetransfers.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "namespacetransfers",
                "singular": "namespacetransfer",
                "kind": "NamespaceTransfer",
                "listKind": "NamespaceTransferList",
            },
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": printer_columns(),
            }],
        },
    })
}

/// The columns `kubectl get` shows for our NamespaceTransfer (Name is
/// implicit). Source and Destination print `namespace/name` from our server;
/// a JSONPath can only name one field, so here they print the claim's name
/// and the destination namespace.
fn printer_columns() -> Value {
    json!([
        {"name": "Role", "type": "string", "jsonPath": ".status.role",
         "description": "Which side this object speaks for: Source, Destination or Both."},
        {"name": "Source", "type": "string", "jsonPath": ".spec.source.name",
         "description": "The claim given away."},
        {"name": "Destination", "type": "string", "jsonPath": ".spec.destination.namespace",
         "description": "The namespace the claim goes to."},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
         "description": "Where the transfer is in its protocol."},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])
}

/// `node` with every reference inlined and only what a structural schema
/// allows kept.
fn structural(node: &Value, schemas: &Map<String, Value>) -> Value {
    let Some(fields) = node.as_object() else {
        return node.clone();
    };
    // `{"allOf": [{"$ref": …}], "description": …}` and `{"$ref": …}` both
    // name another schema.
    let reference = fields.get("$ref").or_else(|| {
        fields
            .get("allOf")
            .and_then(Value::as_array)
            .filter(|all| all.len() == 1)
            .and_then(|all| all[0].get("$ref"))
    });
    if let Some(reference) = reference.and_then(Value::as_str) {
        let name = reference.strip_prefix(SCHEMAS).unwrap_or(reference);
        let mut inlined = match name {
            OBJECT_META => json!({"type": "object"}),
            "io.k8s.apimachinery.pkg.api.resource.Quantity" => json!({
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": true,
            }),
            _ => structural(
                schemas
                    .get(name)
                    .unwrap_or_else(|| panic!("the OpenAPI document has no schema {name}")),
                schemas,
            ),
        };
        // kube-apiserver owns metadata's schema: not even a description.
        if name != OBJECT_META {
            if let Some(out) = inlined.as_object_mut() {
                // What the referring field says about itself (its
                // description, and e.g. `x-kubernetes-map-type: atomic` on a
                // struct field) overrides what the referred schema says.
                for (key, value) in fields {
                    if key == "description" || MARKERS.contains(&key.as_str()) {
                        out.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        return inlined;
    }
    let mut out = Map::new();
    for (key, value) in fields {
        let kept = match key.as_str() {
            "description" | "type" | "format" | "enum" | "required" | "nullable" | "anyOf" => {
                value.clone()
            }
            "items" | "additionalProperties" if value.is_object() => structural(value, schemas),
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, field)| (name.clone(), structural(field, schemas)))
                    .collect(),
            ),
            marker if MARKERS.contains(&marker) => value.clone(),
            // `default`, `$ref` siblings, `x-kubernetes-group-version-kind`
            // and the like.
            _ => continue,
        };
        out.insert(key.clone(), kept);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(schemas: Value) -> Value {
        json!({"components": {"schemas": schemas}})
    }

    fn minimal(extra: Value) -> Value {
        let mut schemas = json!({
            "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "g", "kind": "k", "version": "v"}],
                "properties": {
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "description": "m"},
                    "status": {"allOf": [{"$ref": "#/components/schemas/S"}], "description": "the status"},
                },
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {"name": {"type": "string"}}},
            "C": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "default": "x"}}},
        });
        if let (Some(all), Some(more)) = (schemas.as_object_mut(), extra.as_object()) {
            all.extend(more.clone());
        }
        document(schemas)
    }

    fn schema_of(crd: &Value) -> &Value {
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    }

    #[test]
    fn list_and_map_markers_survive_and_client_only_extensions_do_not() {
        let openapi = minimal(json!({"S": {
            "type": "object",
            "properties": {
                "conditions": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/C"},
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-patch-merge-key": "type",
                },
                "modes": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"},
                "peer": {"allOf": [{"$ref": "#/components/schemas/C"}], "description": "p", "x-kubernetes-map-type": "atomic"},
            },
        }}));
        let crd = namespace_transfer_crd(&openapi);
        let schema = schema_of(&crd);
        assert!(schema.get("x-kubernetes-group-version-kind").is_none());
        assert_eq!(schema["properties"]["metadata"], json!({"type": "object"}));
        let status = &schema["properties"]["status"];
        assert_eq!(status["description"], "the status");
        let conditions = &status["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        assert!(conditions.get("x-kubernetes-patch-strategy").is_none());
        assert!(conditions.get("x-kubernetes-patch-merge-key").is_none());
        assert_eq!(
            conditions["items"],
            json!({"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}),
            "references are inlined and defaults dropped"
        );
        assert_eq!(
            status["properties"]["modes"]["x-kubernetes-list-type"],
            "atomic"
        );
        let peer = &status["properties"]["peer"];
        assert_eq!(peer["x-kubernetes-map-type"], "atomic", "{peer}");
        assert_eq!(peer["description"], "p");
    }

    #[test]
    fn the_twin_can_live_in_any_group() {
        let openapi = minimal(json!({"S": {"type": "object"}}));
        let crd = namespace_transfer_crd_in(&openapi, "storage.transfer.example.org");
        assert_eq!(
            crd["metadata"]["name"],
            "namespacetransfers.storage.transfer.example.org"
        );
        assert_eq!(crd["spec"]["group"], "storage.transfer.example.org");
        assert_eq!(namespace_transfer_crd(&openapi)["spec"]["group"], GROUP);
    }

    #[test]
    fn the_checked_in_document_makes_a_crd() {
        let crd = namespace_transfer_crd(&checked_in_openapi().unwrap_or_else(|e| panic!("{e}")));
        let text = crd.to_string();
        assert!(!text.contains("$ref"), "{text}");
        assert!(!text.contains("x-kubernetes-group-version-kind"), "{text}");
        assert_eq!(schema_of(&crd)["type"], "object");
    }
}
