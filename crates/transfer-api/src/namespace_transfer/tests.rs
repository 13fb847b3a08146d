use super::*;
use serde_json::{json, Value};

/// A transfer named `t` in namespace `ns` with the given spec, as a client sends it.
fn transfer(ns: &str, spec: Value) -> NamespaceTransfer {
    serde_json::from_value(json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t", "namespace": ns},
        "spec": spec,
    }))
    .unwrap()
}

fn defaulted(ns: &str, spec: Value) -> NamespaceTransfer {
    let mut t = transfer(ns, spec);
    t.apply_defaults();
    t
}

/// The `(field, reason)` pairs a validation is expected to report.
type ExpectedCauses = Vec<(&'static str, &'static str)>;

fn fields_and_reasons(causes: &[FieldCause]) -> Vec<(&str, &str)> {
    causes
        .iter()
        .map(|c| (c.field.as_str(), c.reason.as_str()))
        .collect()
}

fn requester(name: &str) -> Requester {
    Requester {
        username: name.to_owned(),
        ..Default::default()
    }
}

// --- defaulting (§2.1.1) ---

#[test]
fn source_kind_defaults_to_persistent_volume_claim() {
    let t = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}}),
    );
    assert_eq!(t.spec.source.kind, "PersistentVolumeClaim");
}

#[test]
fn source_namespace_defaults_to_the_objects_namespace() {
    let t = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}}),
    );
    assert_eq!(t.spec.source.namespace, "prod");
}

#[test]
fn destination_namespace_defaults_to_the_objects_namespace() {
    let t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    assert_eq!(t.spec.destination.namespace, "dev");
}

#[test]
fn mode_defaults_to_move() {
    let t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    assert_eq!(t.spec.mode, Some(TransferMode::Move));
}

#[test]
fn destination_name_defaults_to_source_name_on_the_destination_side() {
    let t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    assert_eq!(t.spec.destination.name, "db");
}

#[test]
fn a_populating_request_keeps_its_destination_name_empty_and_is_valid() {
    let t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"populate": true}}),
    );
    assert_eq!(t.spec.destination.name, "");
    assert!(t.populates());
    assert_eq!(t.validate_create(), Vec::new());
    let explicit_false = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"populate": false}}),
    );
    assert_eq!(explicit_false.spec.destination.name, "db");
    assert!(!explicit_false.populates());
}

#[test]
fn a_populating_clone_request_is_standing_unless_it_names_the_one_claim_it_serves() {
    let mut t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"populate": true}, "mode": "Clone"}),
    );
    t.metadata.name = Some("db-clones".to_owned());
    assert_eq!(t.validate_create(), Vec::new());
    assert!(t.is_standing_request());
    assert_eq!(t.populated_name(), "db-clones");
    // Made for one claim: by hand, it is asked for by its own name...
    t.metadata.annotations = Some(
        [(ANNOTATION_SERVES_CLAIM.to_owned(), "claim-uid".to_owned())]
            .into_iter()
            .collect(),
    );
    assert!(!t.is_standing_request());
    assert_eq!(t.served_claim_uid(), Some("claim-uid"));
    assert_eq!(t.populated_name(), "db-clones");
    let owner = |kind: &str, controller| OwnerReference {
        api_version: crate::GROUP_VERSION.to_owned(),
        kind: kind.to_owned(),
        name: "parent".to_owned(),
        uid: "parent-uid".to_owned(),
        controller: Some(controller),
        block_owner_deletion: None,
    };
    t.metadata.owner_references = Some(vec![owner("NamespaceTransfer", false)]);
    assert_eq!(
        t.populated_name(),
        "db-clones",
        "an owner that does not control"
    );
    t.metadata.owner_references = Some(vec![owner("EphemeralClaim", true)]);
    assert_eq!(
        t.populated_name(),
        "db-clones",
        "a controller of another kind"
    );
    // ...and by a standing request, by that request's name.
    t.metadata.owner_references = Some(vec![owner("NamespaceTransfer", true)]);
    assert!(!t.is_standing_request());
    assert_eq!(t.served_claim_uid(), Some("claim-uid"));
    assert_eq!(t.populated_name(), "parent");
    // Its owner gone (an orphaning delete), it still serves that claim
    // alone: never a standing request.
    t.metadata.owner_references = None;
    assert!(!t.is_standing_request());
    assert_eq!(t.served_claim_uid(), Some("claim-uid"));
    // A Move request is never one made for a claim.
    t.spec.mode = Some(TransferMode::Move);
    assert_eq!(t.served_claim_uid(), None);
    assert!(!t.is_standing_request());
}

#[test]
fn the_claim_a_request_serves_is_set_at_create_or_never() {
    let field = format!("metadata.annotations[{ANNOTATION_SERVES_CLAIM}]");
    let standing = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"populate": true}, "mode": "Clone"}),
    );
    let serving = |uid: &str| {
        let mut t = standing.clone();
        t.metadata.annotations = Some(
            [(ANNOTATION_SERVES_CLAIM.to_owned(), uid.to_owned())]
                .into_iter()
                .collect(),
        );
        t
    };
    let refused = |new: &NamespaceTransfer, old: &NamespaceTransfer| {
        let causes = new.validate_update(old);
        fields_and_reasons(&causes)
            .iter()
            .map(|(f, r)| (f.to_string(), r.to_string()))
            .collect::<Vec<_>>()
    };
    let immutable = vec![(field.clone(), "FieldValueInvalid".to_owned())];
    // Added (a standing request turned into one for a claim), changed, or
    // removed (one under way turned into a standing request).
    assert_eq!(refused(&serving("a"), &standing), immutable);
    assert_eq!(refused(&serving("b"), &serving("a")), immutable);
    assert_eq!(refused(&standing, &serving("a")), immutable);
    // Other annotations come and go.
    let mut labelled = serving("a");
    labelled
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("team".to_owned(), "db".to_owned());
    assert_eq!(refused(&labelled, &serving("a")), Vec::new());
}

#[test]
fn populate_cannot_change_after_create() {
    let old = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"populate": true}}),
    );
    let mut new = old.clone();
    new.spec.destination.populate = None;
    assert_eq!(
        fields_and_reasons(&new.validate_update(&old)),
        vec![("spec.destination.populate", "FieldValueInvalid")]
    );
}

#[test]
fn destination_name_stays_empty_on_the_source_side() {
    let t = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}}),
    );
    assert_eq!(t.spec.destination.name, "");
    assert!(t.validate_create().is_empty());
}

#[test]
fn destination_name_is_not_defaulted_for_a_rename() {
    let t = defaulted("prod", json!({"source": {"name": "db"}}));
    assert_eq!(t.spec.destination.name, "");
}

#[test]
fn defaulting_keeps_what_the_client_set() {
    let spec = json!({
        "source": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"},
        "destination": {"namespace": "dev", "name": "db-copy"},
        "mode": "Clone",
    });
    let t = defaulted("dev", spec);
    assert_eq!(t.spec.destination.name, "db-copy");
    assert_eq!(t.spec.mode, Some(TransferMode::Clone));
}

#[test]
fn defaulting_twice_changes_nothing_more() {
    let once = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    let mut twice = once.clone();
    twice.apply_defaults();
    assert_eq!(once, twice);
}

// --- roles (§2.1.1) ---

#[test]
fn the_role_follows_from_the_objects_namespace() {
    // (metadata.namespace, source.namespace, destination.namespace, expected role)
    let cases = [
        ("prod", "prod", "dev", Role::Source),
        ("prod", "", "dev", Role::Source),
        ("dev", "prod", "dev", Role::Destination),
        ("dev", "prod", "", Role::Destination),
        ("prod", "prod", "prod", Role::Both),
        ("prod", "", "", Role::Both),
    ];
    for (own, source, destination, expected) in cases {
        let t = transfer(
            own,
            json!({"source": {"namespace": source, "name": "db"},
                   "destination": {"namespace": destination, "name": "other"}}),
        );
        assert_eq!(t.role(), Ok(expected), "{own} {source}->{destination}");
    }
}

#[test]
fn a_transfer_outside_both_namespaces_has_no_role() {
    // (metadata.namespace, source.namespace, destination.namespace, field named)
    let cases = [
        ("ops", "prod", "dev", "spec.destination.namespace"),
        ("ops", "prod", "prod", "spec.source.namespace"),
    ];
    for (own, source, destination, field) in cases {
        let t = transfer(
            own,
            json!({"source": {"namespace": source, "name": "db"},
                   "destination": {"namespace": destination, "name": "other"}}),
        );
        let cause = t.role().unwrap_err();
        assert_eq!(
            (cause.field.as_str(), cause.reason.as_str()),
            (field, "FieldValueInvalid")
        );
        assert!(cause.message.contains("\"ops\""), "{}", cause.message);

        let causes = t.validate_create();
        assert_eq!(
            fields_and_reasons(&causes),
            vec![(field, "FieldValueInvalid")]
        );
    }
}

#[test]
fn a_transfer_without_a_namespace_has_no_role() {
    let mut t = transfer("prod", json!({"source": {"name": "db"}}));
    t.metadata.namespace = None;
    assert_eq!(t.role().unwrap_err().field, "metadata.namespace");
    assert_eq!(
        fields_and_reasons(&t.validate_create()),
        vec![("metadata.namespace", "FieldValueRequired")]
    );
}

// --- validation (§2.1.1) ---

#[test]
fn the_design_examples_are_valid() {
    let source_side = defaulted(
        "prod",
        json!({"source": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"},
               "destination": {"namespace": "dev", "name": "db"}, "mode": "Move"}),
    );
    let destination_side = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"name": "db"}}),
    );
    let rename = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"name": "db-v2"}}),
    );
    for t in [source_side, destination_side, rename] {
        assert!(t.validate_create().is_empty(), "{:?}", t.validate_create());
    }
}

#[test]
fn each_spec_rule_names_its_field() {
    // (case, metadata.namespace, spec, expected (field, reason) causes)
    let cases: Vec<(&str, &str, Value, ExpectedCauses)> = vec![
        (
            "missing source name",
            "dev",
            json!({"source": {"namespace": "prod"}}),
            vec![("spec.source.name", "FieldValueRequired")],
        ),
        (
            "source name not a subdomain",
            "dev",
            json!({"source": {"namespace": "prod", "name": "DB"}, "destination": {"name": "db"}}),
            vec![("spec.source.name", "FieldValueInvalid")],
        ),
        (
            "source namespace not a label",
            "dev",
            json!({"source": {"namespace": "pr.od", "name": "db"}}),
            vec![("spec.source.namespace", "FieldValueInvalid")],
        ),
        (
            "destination namespace not a label",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"namespace": "Dev"}}),
            vec![("spec.destination.namespace", "FieldValueInvalid")],
        ),
        (
            "destination name not a subdomain",
            "dev",
            json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"name": "db_2"}}),
            vec![("spec.destination.name", "FieldValueInvalid")],
        ),
        (
            "source kind neither PersistentVolumeClaim nor VolumeSnapshot",
            "dev",
            json!({"source": {"kind": "Secret", "namespace": "prod", "name": "db"}}),
            vec![("spec.source.kind", "FieldValueNotSupported")],
        ),
        (
            "rename without a destination name",
            "prod",
            json!({"source": {"name": "db"}}),
            vec![("spec.destination.name", "FieldValueRequired")],
        ),
        (
            "rename to the same name",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"name": "db"}}),
            vec![("spec.destination.name", "FieldValueInvalid")],
        ),
        (
            "negative ttl",
            "dev",
            json!({"source": {"namespace": "prod", "name": "db"}, "ttlSecondsAfterFinished": -1}),
            vec![("spec.ttlSecondsAfterFinished", "FieldValueInvalid")],
        ),
        (
            "zero deadline",
            "dev",
            json!({"source": {"namespace": "prod", "name": "db"}, "activeDeadlineSeconds": 0}),
            vec![("spec.activeDeadlineSeconds", "FieldValueInvalid")],
        ),
        (
            "zero maxClones on a standing offer",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}, "mode": "Clone", "maxClones": 0}),
            vec![("spec.maxClones", "FieldValueInvalid")],
        ),
        (
            "maxClones on a Move offer",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}, "maxClones": 2}),
            vec![("spec.maxClones", "FieldValueInvalid")],
        ),
        (
            "maxClones on a clone offer that names its destination",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"namespace": "dev", "name": "db"}, "mode": "Clone", "maxClones": 2}),
            vec![("spec.maxClones", "FieldValueInvalid")],
        ),
        (
            "maxClones on a clone request",
            "dev",
            json!({"source": {"namespace": "prod", "name": "db"}, "mode": "Clone", "maxClones": 2}),
            vec![("spec.maxClones", "FieldValueInvalid")],
        ),
        (
            "populate on the source side",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"namespace": "dev", "populate": true}}),
            vec![("spec.destination.populate", "FieldValueInvalid")],
        ),
        (
            "populate on a rename",
            "prod",
            json!({"source": {"name": "db"}, "destination": {"name": "new", "populate": true}}),
            vec![
                ("spec.destination.populate", "FieldValueInvalid"),
                ("spec.destination.name", "FieldValueInvalid"),
            ],
        ),
        (
            "populate with a destination name",
            "dev",
            json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"name": "data", "populate": true}}),
            vec![("spec.destination.name", "FieldValueInvalid")],
        ),
    ];
    for (case, ns, spec, expected) in cases {
        let t = defaulted(ns, spec);
        assert_eq!(fields_and_reasons(&t.validate_create()), expected, "{case}");
    }
}

#[test]
fn a_zero_ttl_and_a_one_second_deadline_are_allowed() {
    let t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"},
               "ttlSecondsAfterFinished": 0, "activeDeadlineSeconds": 1}),
    );
    assert!(t.validate_create().is_empty(), "{:?}", t.validate_create());
}

#[test]
fn an_unsupported_source_kind_lists_the_supported_ones() {
    let t = defaulted(
        "dev",
        json!({"source": {"kind": "ConfigMap", "namespace": "prod", "name": "db"}}),
    );
    assert_eq!(
        t.validate_create()[0].message,
        "Unsupported value: \"ConfigMap\": supported values: \"PersistentVolumeClaim\", \"VolumeSnapshot\""
    );
}

#[test]
fn a_volume_snapshot_source_is_valid_in_move_mode() {
    let t = defaulted(
        "dev",
        json!({"source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"}}),
    );
    assert!(t.validate_create().is_empty(), "{:?}", t.validate_create());
    assert!(t.moves_snapshot());
}

#[test]
fn a_moved_volume_snapshot_refuses_populate() {
    let t = defaulted(
        "dev",
        json!({"source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"},
               "destination": {"populate": true}}),
    );
    let fields: Vec<_> = t.validate_create().into_iter().map(|c| c.field).collect();
    assert_eq!(fields, vec!["spec.destination.populate".to_owned()]);
}

#[test]
fn a_volume_snapshot_may_be_cloned_into_a_named_or_a_populated_claim() {
    for destination in [json!({"name": "copy"}), json!({"populate": true})] {
        let t = defaulted(
            "dev",
            json!({"source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"},
                   "mode": "Clone", "destination": destination}),
        );
        assert!(t.validate_create().is_empty(), "{:?}", t.validate_create());
        assert!(t.clones_snapshot() && t.source_is_snapshot());
        assert!(!t.moves_snapshot());
    }
}

#[test]
fn numeric_violations_print_the_bare_number() {
    let t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "activeDeadlineSeconds": -5}),
    );
    assert_eq!(
        t.validate_create()[0].message,
        "Invalid value: -5: must be greater than or equal to 1"
    );
}

#[test]
fn metadata_is_validated_with_the_spec() {
    let mut t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    t.metadata.name = Some("Bad_Name".to_owned());
    assert_eq!(
        fields_and_reasons(&t.validate_create()),
        vec![("metadata.name", "FieldValueInvalid")]
    );
}

#[test]
fn validation_reads_empty_defaultable_fields_as_their_defaults() {
    let t = transfer(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    assert!(t.validate_create().is_empty(), "{:?}", t.validate_create());
}

// --- enums ---

#[test]
fn an_unknown_mode_is_a_decode_error_naming_the_allowed_values() {
    let err = serde_json::from_value::<NamespaceTransfer>(json!({
        "metadata": {"name": "t", "namespace": "dev"},
        "spec": {"source": {"namespace": "prod", "name": "db"}, "mode": "Copy"},
    }))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("Copy") && err.contains("Move") && err.contains("Clone"),
        "{err}"
    );
}

#[test]
fn an_unknown_status_phase_is_a_decode_error() {
    let err = serde_json::from_value::<NamespaceTransfer>(json!({
        "metadata": {"name": "t", "namespace": "dev"},
        "status": {"phase": "Done"},
    }))
    .unwrap_err()
    .to_string();
    assert!(err.contains("Done") && err.contains("Completed"), "{err}");
}

#[test]
fn unknown_fields_are_ignored_when_decoding() {
    let t: NamespaceTransfer = serde_json::from_value(json!({
        "metadata": {"name": "t", "namespace": "dev"},
        "spec": {"source": {"namespace": "prod", "name": "db", "colour": "blue"}, "speed": 11},
        "extra": true,
    }))
    .unwrap();
    assert_eq!(t.spec.source.name, "db");
}

#[test]
fn only_completed_failed_and_cancelled_are_finished() {
    use NamespaceTransferPhase::*;
    for phase in [Pending, WaitingForPeer, WaitingForRelease, Rebinding] {
        assert!(!phase.is_finished(), "{phase}");
    }
    for phase in [Completed, Failed, Cancelled] {
        assert!(phase.is_finished(), "{phase}");
    }
}

// --- updates ---

#[test]
fn an_unchanged_spec_passes_update_validation() {
    let old = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    let mut new = old.clone();
    new.metadata.labels = Some([("team".to_owned(), "data".to_owned())].into());
    new.status = Some(NamespaceTransferStatus {
        phase: Some(NamespaceTransferPhase::WaitingForPeer),
        ..Default::default()
    });
    assert!(new.validate_update(&old).is_empty());
}

#[test]
fn a_changed_spec_is_rejected_naming_the_field() {
    type Edit = fn(&mut NamespaceTransferSpec);
    let cases: Vec<(Edit, &str, &str)> = vec![
        (
            |s| s.source.name = "db2".to_owned(),
            "spec.source.name",
            "Invalid value: \"db2\": field is immutable",
        ),
        (
            |s| s.source.namespace = "staging".to_owned(),
            "spec.source.namespace",
            "Invalid value: \"staging\": field is immutable",
        ),
        (
            |s| s.destination.name = "db2".to_owned(),
            "spec.destination.name",
            "Invalid value: \"db2\": field is immutable",
        ),
        (
            |s| s.mode = Some(TransferMode::Clone),
            "spec.mode",
            "Invalid value: \"Clone\": field is immutable",
        ),
        (
            |s| s.ttl_seconds_after_finished = Some(60),
            "spec.ttlSecondsAfterFinished",
            "Invalid value: 60: field is immutable",
        ),
        (
            |s| s.active_deadline_seconds = Some(600),
            "spec.activeDeadlineSeconds",
            "Invalid value: 600: field is immutable",
        ),
    ];
    let old = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    for (edit, field, message) in cases {
        let mut new = old.clone();
        edit(&mut new.spec);
        let causes: Vec<FieldCause> = new
            .validate_update(&old)
            .into_iter()
            .filter(|c| c.message.ends_with("field is immutable"))
            .collect();
        assert_eq!(
            causes,
            vec![FieldCause {
                reason: "FieldValueInvalid".to_owned(),
                field: field.to_owned(),
                message: message.to_owned(),
            }],
            "{field}"
        );
    }
}

#[test]
fn a_changed_spec_is_also_checked_against_the_create_rules() {
    let old = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    let mut new = old.clone();
    new.spec.source.name = "DB".to_owned();
    assert_eq!(
        fields_and_reasons(&new.validate_update(&old)),
        vec![
            ("spec.source.name", "FieldValueInvalid"),
            ("spec.source.name", "FieldValueInvalid"),
        ]
    );
}

#[test]
fn the_requester_can_never_change() {
    let mut old = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    old.set_requester(requester("alice"));
    let mut new = old.clone();
    new.set_requester(requester("mallory"));
    assert_eq!(
        new.validate_update(&old),
        vec![FieldCause {
            reason: "FieldValueInvalid".to_owned(),
            field: "spec.requester".to_owned(),
            message: "Invalid value: field is immutable".to_owned(),
        }]
    );
    assert!(!new.same_spec(&old));
}

// --- the Object contract ---

#[test]
fn type_meta_is_whatever_the_client_sent_until_set() {
    let mut t: NamespaceTransfer = serde_json::from_value(json!({"metadata": {}})).unwrap();
    assert_eq!(t.type_meta(), ("", ""));
    t.set_type_meta();
    assert_eq!(
        t.type_meta(),
        ("storage.transfer.k8s.io/v1alpha1", "NamespaceTransfer")
    );
    assert_eq!(NamespaceTransfer::resource().plural, "namespacetransfers");
}

#[test]
fn spec_and_status_are_copied_separately() {
    let mut stored = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    let mut incoming = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "other"}}),
    );
    incoming.status = Some(NamespaceTransferStatus {
        phase: Some(NamespaceTransferPhase::Completed),
        ..Default::default()
    });

    stored.set_status_from(&incoming);
    assert_eq!(stored.phase(), Some("Completed"));
    assert_eq!(stored.spec.source.name, "db");

    stored.set_spec_from(&incoming);
    assert!(stored.same_spec(&incoming));

    stored.reset_status();
    assert_eq!(stored.phase(), Some("Pending"));
    assert_eq!(
        stored.status.as_ref().and_then(|s| s.role),
        Some(Role::Destination)
    );
}

#[test]
fn the_requester_is_read_and_written_through_the_spec() {
    let mut t = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    assert_eq!(t.requester(), None);
    t.set_requester(requester("alice"));
    assert_eq!(t.requester().map(|r| r.username.as_str()), Some("alice"));
}

// --- round trips of the DESIGN examples ---

#[test]
fn the_design_examples_round_trip_through_json() {
    let examples = [
        json!({
            "apiVersion": "storage.transfer.k8s.io/v1alpha1",
            "kind": "NamespaceTransfer",
            "metadata": {"name": "db-to-dev", "namespace": "prod"},
            "spec": {
                "source": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"},
                "destination": {"namespace": "dev", "name": "db"},
                "mode": "Move",
                "requester": {
                    "username": "alice",
                    "uid": "4f3c2b1a",
                    "groups": ["system:authenticated", "prod-admins"],
                    "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=ab"]}
                }
            }
        }),
        json!({
            "apiVersion": "storage.transfer.k8s.io/v1alpha1",
            "kind": "NamespaceTransfer",
            "metadata": {"name": "db-from-prod", "namespace": "dev"},
            "spec": {
                "source": {"namespace": "prod", "name": "db"},
                "destination": {"name": "db"}
            }
        }),
        json!({
            "apiVersion": "storage.transfer.k8s.io/v1alpha1",
            "kind": "NamespaceTransfer",
            "metadata": {"name": "db-to-dev", "namespace": "prod", "generation": 1},
            "spec": {
                "source": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"},
                "destination": {"namespace": "dev"},
                "mode": "Clone",
                "ttlSecondsAfterFinished": 3600,
                "activeDeadlineSeconds": 86400
            },
            "status": {
                "phase": "Completed",
                "role": "Source",
                "peer": {"namespace": "dev", "name": "db-from-prod"},
                "peerPhase": "Completed",
                "volumeName": "pvc-1234",
                "sourceClaim": {
                    "name": "db",
                    "uid": "9a8b",
                    "volumeName": "pvc-1234",
                    "storageRequest": "200Gi",
                    "storageClassName": "fast",
                    "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Filesystem"
                },
                "completionTime": "2025-01-02T03:04:05Z",
                "conditions": [{
                    "type": "Ready",
                    "status": "True",
                    "reason": "Completed",
                    "message": "volume pvc-1234 is bound to dev/db",
                    "lastTransitionTime": "2025-01-02T03:04:05Z",
                    "observedGeneration": 1
                }],
                "reason": "Completed",
                "message": "transferred",
                "observedGeneration": 1
            }
        }),
    ];
    for example in examples {
        let t: NamespaceTransfer = serde_json::from_value(example.clone()).unwrap();
        assert_eq!(serde_json::to_value(&t).unwrap(), example);
    }
}

#[test]
fn the_schema_carries_field_descriptions_for_kubectl_explain() {
    let schema = serde_json::to_value(schemars::schema_for!(NamespaceTransfer)).unwrap();
    let text = schema.to_string();
    assert!(text.contains("ttlSecondsAfterFinished"), "{text}");
    assert!(
        text.contains("is deleted this many seconds after it finishes"),
        "{text}"
    );
    assert!(text.contains("WaitingForRelease"), "{text}");
}

#[test]
fn a_standing_clone_offer_may_cap_its_clones() {
    let t = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}, "mode": "Clone", "maxClones": 2}),
    );
    assert!(t.is_standing_offer());
    assert!(t.validate_create().is_empty(), "{:?}", t.validate_create());
}

#[test]
fn the_clone_claims_name_is_the_offers_and_five_characters_of_the_receivers_uid() {
    let t = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}, "mode": "Clone"}),
    );
    assert_eq!(t.clone_claim_name("6F0a-91c2-77"), "t-clone-6f0a9");
    let mut long = t.clone();
    long.metadata.name = Some(format!("{}-", "a".repeat(252)));
    let name = long.clone_claim_name("abcdef");
    assert!(name.len() <= 253, "{}", name.len());
    assert!(name.ends_with("a-clone-abcde"), "{name}");
}

#[test]
fn a_clone_is_recognised_by_its_offers_name_in_the_offers_namespace_only() {
    let offer = defaulted(
        "prod",
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}, "mode": "Clone"}),
    );
    let clone = offer.clone_claim_name("6F0a-91c2-77");
    assert!(offer.may_be_clone("prod", &clone));
    assert!(!offer.may_be_clone("dev", &clone));
    assert!(!offer.may_be_clone("prod", "db"));
    let mut moving = offer.clone();
    moving.spec.mode = Some(TransferMode::Move);
    assert!(!moving.may_be_clone("prod", &clone));
    let request = defaulted(
        "dev",
        json!({"source": {"namespace": "prod", "name": "db"}, "mode": "Clone"}),
    );
    assert!(!request.may_be_clone("prod", &request.clone_claim_name("x")));
    // A name long enough to be cut for the suffix.
    let mut long = offer.clone();
    long.metadata.name = Some("a".repeat(250));
    let clone = long.clone_claim_name("6F0a-91c2-77");
    assert!(long.may_be_clone("prod", &clone), "{clone}");
}

fn at(seconds: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
}

#[test]
fn recording_a_step_fills_in_earlier_steps_whose_record_was_lost() {
    let mut status = NamespaceTransferStatus::default();
    status.record_step(TransferStepName::Locked, &at(1));
    status.record_step(TransferStepName::Committed, &at(5));
    let steps: Vec<_> = status
        .steps
        .iter()
        .map(|s| (s.name, s.time.clone()))
        .collect();
    assert_eq!(
        steps,
        vec![
            (TransferStepName::Locked, at(1)),
            (TransferStepName::Retained, at(5)),
            (TransferStepName::Created, at(5)),
            (TransferStepName::Committed, at(5)),
        ]
    );
}

#[test]
fn recording_a_step_twice_keeps_its_first_time_and_one_entry() {
    let mut status = NamespaceTransferStatus::default();
    status.record_step(TransferStepName::Retained, &at(2));
    status.record_step(TransferStepName::Retained, &at(9));
    status.record_step(TransferStepName::Locked, &at(9));
    assert_eq!(status.steps.len(), 2);
    assert_eq!(status.step_time(TransferStepName::Retained), Some(&at(2)));
    assert_eq!(status.step_time(TransferStepName::Settled), None);
}

#[test]
fn steps_serialize_with_their_names_and_times() {
    let mut status = NamespaceTransferStatus::default();
    status.record_step(TransferStepName::Locked, &at(0));
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(
        json["steps"],
        json!([{"name": "Locked", "time": "1970-01-01T00:00:00Z"}])
    );
    let back: NamespaceTransferStatus = serde_json::from_value(json).unwrap();
    assert_eq!(back, status);
}
