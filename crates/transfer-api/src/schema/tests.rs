use super::*;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn an_optional_scalar_becomes_the_plain_scalar() {
    let mut schema = object(json!({ "type": ["integer", "null"], "format": "int32" }));
    unwrap_optional(&mut schema);
    assert_eq!(
        Value::Object(schema),
        json!({ "type": "integer", "format": "int32" })
    );
}

#[test]
fn an_optional_reference_becomes_the_reference_with_the_field_description() {
    let mut schema = object(json!({
        "anyOf": [{ "$ref": "#/definitions/Peer" }, { "type": "null" }],
        "description": "The matched transfer.",
    }));
    unwrap_optional(&mut schema);
    assert_eq!(
        Value::Object(schema),
        json!({ "$ref": "#/definitions/Peer", "description": "The matched transfer." })
    );
}

#[test]
fn a_real_union_is_left_alone() {
    let union = json!({ "anyOf": [{ "type": "string" }, { "type": "integer" }] });
    let mut schema = object(union.clone());
    unwrap_optional(&mut schema);
    assert_eq!(Value::Object(schema), union);
}

#[test]
fn cleaning_drops_defaults_and_titles_and_renames_references() {
    let mut schema = json!({
        "title": "T",
        "type": "object",
        "properties": {
            "spec": {
                "anyOf": [{ "$ref": "#/definitions/Spec" }, { "type": "null" }],
                "default": null,
                "description": "One\nline.",
            },
        },
    });
    clean(&mut schema, true, &|name: &str| format!("x.{name}"));
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "spec": { "$ref": "#/definitions/x.Spec", "description": "One line." },
            },
        })
    );
}

#[test]
fn reflow_joins_lines_but_keeps_paragraphs_and_list_items() {
    assert_eq!(
        reflow("A long\nsentence.\n\nPossible enum values:\n - `\"A\"` first\n - `\"B\"` second"),
        "A long sentence.\n\nPossible enum values:\n - `\"A\"` first\n - `\"B\"` second"
    );
}

#[test]
fn own_names_start_with_the_reversed_group_and_the_version() {
    assert_eq!(own_prefix(), "io.k8s.transfer.storage.v1alpha1.");
    assert_eq!(
        kind_definition("NamespaceTransfer"),
        "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer"
    );
    assert_eq!(
        list_definition("EphemeralClaim"),
        "io.k8s.transfer.storage.v1alpha1.EphemeralClaimList"
    );
}

#[test]
fn every_served_resource_has_a_kind_and_a_list_definition() {
    let kinds = both_kinds();
    let definitions = definitions(&kinds);
    for resource in kinds.iter().map(|k| k.resource) {
        assert!(
            definitions.contains_key(&kind_definition(resource.kind)),
            "{}",
            resource.kind
        );
        assert!(
            definitions.contains_key(&list_definition(resource.kind)),
            "{}",
            resource.kind
        );
    }
}

#[test]
fn string_enums_are_inlined_and_their_definitions_dropped() {
    let prefix = "io.k8s.transfer.storage.v1alpha1.";
    let mut definitions: Definitions = [
        (
            format!("{prefix}Mode"),
            json!({
                "type": "string",
                "enum": ["A", "B"],
                "description": "How.\n\nPossible enum values:\n - `\"A\"` a\n - `\"B\"` b",
            }),
        ),
        (
            format!("{prefix}Spec"),
            json!({
                "type": "object",
                "properties": {
                    "mode": { "$ref": format!("#/definitions/{prefix}Mode"), "description": "The mode." },
                    "bare": { "$ref": format!("#/definitions/{prefix}Mode") },
                },
            }),
        ),
    ]
    .into_iter()
    .collect();
    inline_string_enums(&mut definitions, prefix);
    assert_eq!(definitions.len(), 1);
    let properties = &definitions[&format!("{prefix}Spec")]["properties"];
    assert_eq!(
        properties["mode"],
        json!({
            "type": "string",
            "enum": ["A", "B"],
            "description": "The mode.\n\nPossible enum values:\n - `\"A\"` a\n - `\"B\"` b",
        })
    );
    assert_eq!(
        properties["bare"]["description"],
        "How.\n\nPossible enum values:\n - `\"A\"` a\n - `\"B\"` b"
    );
}

#[test]
fn int_or_string_and_quantity_are_published_as_strings() {
    let mut definitions: Definitions = [
        (
            definition_of::<IntOrString>(),
            json!({ "description": "d", "x-kubernetes-int-or-string": true }),
        ),
        (
            definition_of::<Quantity>(),
            json!({ "description": "d", "x-kubernetes-int-or-string": true }),
        ),
    ]
    .into_iter()
    .collect();
    publish_as_kubernetes_does(&mut definitions);
    assert_eq!(
        definitions[&definition_of::<IntOrString>()],
        json!({ "description": "d", "type": "string", "format": "int-or-string" })
    );
    assert_eq!(
        definitions[&definition_of::<Quantity>()],
        json!({ "description": "d", "type": "string" })
    );
}

#[test]
fn openapi3_references_point_at_components_and_keep_siblings_in_all_of() {
    let mut document = json!({
        "bare": { "$ref": "#/definitions/A" },
        "described": { "$ref": "#/definitions/B", "description": "d" },
    });
    refs_to_components(&mut document);
    assert_eq!(
        document,
        json!({
            "bare": { "$ref": "#/components/schemas/A" },
            "described": { "allOf": [{ "$ref": "#/components/schemas/B" }], "description": "d" },
        })
    );
}

fn both_kinds() -> [KindSchema; 2] {
    [
        KindSchema::of::<api::NamespaceTransfer>(),
        KindSchema::of::<api::EphemeralClaim>(),
    ]
}
