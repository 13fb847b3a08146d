//! The CRD twin of NamespaceTransfer: the same schema, generated from our
//! checked-in OpenAPI (`openapi/v3`), served by kube-apiserver itself as a
//! CustomResourceDefinition, which is how the alternative (a CRD plus a
//! controller, as KubeVirt CDI's ObjectTransfer) is built.
//!
//! A CRD schema must be structural: no `$ref`, a type on every node, and
//! nothing about `metadata` beyond what kube-apiserver already knows. So
//! references are inlined, `ObjectMeta` becomes a bare object, `Quantity`
//! becomes int-or-string and `Time` a date-time string. Descriptions, enums
//! and required fields are kept, so that kube-apiserver validates and prunes
//! as much as the schema says.
//!
//! It lives in [`GROUP`], not in `storage.transfer.k8s.io`: that group's
//! `v1alpha1` belongs to our APIService, and a `*.k8s.io` CRD would need the
//! API-approval annotation besides.

use serde_json::{json, Map, Value};

/// The CRD twin's API group.
pub(crate) const GROUP: &str = "storage.transfer.example.com";

const SCHEMAS: &str = "#/components/schemas/";
const KIND: &str = "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer";

/// The CustomResourceDefinition, from the OpenAPI v3 document of our group.
pub(crate) fn namespace_transfer_crd(openapi: &Value) -> Value {
    let schemas = openapi["components"]["schemas"]
        .as_object()
        .expect("the OpenAPI document has components.schemas");
    let schema = structural(&schemas[KIND], schemas);
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("namespacetransfers.{GROUP}")},
        "spec": {
            "group": GROUP,
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
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" => json!({"type": "object"}),
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
        if name != "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
            if let (Some(description), Some(out)) =
                (fields.get("description"), inlined.as_object_mut())
            {
                out.insert("description".to_owned(), description.clone());
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
            k if k.starts_with("x-kubernetes-") && k != "x-kubernetes-group-version-kind" => {
                value.clone()
            }
            // `default`, `$ref` siblings and the like.
            _ => continue,
        };
        out.insert(key.clone(), kept);
    }
    Value::Object(out)
}
