use super::*;
use serde_json::{json, Value};

/// The DESIGN §2.2 example, without status.
fn example() -> Value {
    json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "EphemeralClaim",
        "metadata": {"name": "scratch", "namespace": "ci"},
        "spec": {
            "owner": {"apiVersion": "v1", "kind": "Pod", "name": "e2e-runner"},
            "claimTemplate": {
                "metadata": {"labels": {"app": "e2e"}, "annotations": {"example.com/note": "fixture clone"}},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "fast",
                    "resources": {"requests": {"storage": "10Gi"}},
                    "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "fixture"}
                }
            },
            "releasePolicy": "Delete"
        }
    })
}

fn claim() -> EphemeralClaim {
    serde_json::from_value(example()).unwrap()
}

/// The example with `edit` applied to its JSON.
fn claim_with(edit: impl FnOnce(&mut Value)) -> EphemeralClaim {
    let mut value = example();
    edit(&mut value);
    serde_json::from_value(value).unwrap()
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

#[test]
fn the_design_example_is_valid() {
    assert!(
        claim().validate_create().is_empty(),
        "{:?}",
        claim().validate_create()
    );
}

#[test]
fn the_claim_is_named_after_the_owner_and_the_object() {
    assert_eq!(claim().claim_name(), "e2e-runner-scratch");
}

#[test]
fn release_policy_defaults_to_delete() {
    let mut c = claim_with(|v| {
        v["spec"].as_object_mut().unwrap().remove("releasePolicy");
    });
    assert_eq!(c.spec.release_policy, None);
    assert_eq!(c.release_policy(), ReleasePolicy::Delete);
    c.apply_defaults();
    assert_eq!(c.spec.release_policy, Some(ReleasePolicy::Delete));
}

#[test]
fn defaulting_keeps_a_retain_policy() {
    let mut c = claim_with(|v| v["spec"]["releasePolicy"] = json!("Retain"));
    c.apply_defaults();
    assert_eq!(c.spec.release_policy, Some(ReleasePolicy::Retain));
}

#[test]
fn each_spec_rule_names_its_field() {
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, ExpectedCauses)> = vec![
        (
            "missing owner",
            |v| {
                v["spec"].as_object_mut().unwrap().remove("owner");
            },
            vec![("spec.owner", "FieldValueRequired")],
        ),
        (
            "owner that is not a Pod",
            |v| v["spec"]["owner"] = json!({"apiVersion": "v1", "kind": "Service", "name": "web"}),
            vec![("spec.owner.kind", "FieldValueNotSupported")],
        ),
        (
            "owner of another API version",
            |v| v["spec"]["owner"]["apiVersion"] = json!("apps/v1"),
            vec![("spec.owner.apiVersion", "FieldValueNotSupported")],
        ),
        (
            "owner without kind or apiVersion",
            |v| v["spec"]["owner"] = json!({"name": "e2e-runner"}),
            vec![
                ("spec.owner.apiVersion", "FieldValueRequired"),
                ("spec.owner.kind", "FieldValueRequired"),
            ],
        ),
        (
            "owner without a name",
            |v| v["spec"]["owner"] = json!({"apiVersion": "v1", "kind": "Pod"}),
            vec![("spec.owner.name", "FieldValueRequired")],
        ),
        (
            "owner name that is not a subdomain",
            |v| v["spec"]["owner"]["name"] = json!("E2E"),
            vec![("spec.owner.name", "FieldValueInvalid")],
        ),
        (
            "missing claim template",
            |v| {
                v["spec"].as_object_mut().unwrap().remove("claimTemplate");
            },
            vec![("spec.claimTemplate", "FieldValueRequired")],
        ),
        (
            "no access modes",
            |v| v["spec"]["claimTemplate"]["spec"]["accessModes"] = json!([]),
            vec![("spec.claimTemplate.spec.accessModes", "FieldValueRequired")],
        ),
        (
            "unknown access mode",
            |v| v["spec"]["claimTemplate"]["spec"]["accessModes"] = json!(["ReadWriteSometimes"]),
            vec![(
                "spec.claimTemplate.spec.accessModes",
                "FieldValueNotSupported",
            )],
        ),
        (
            "unknown volume mode",
            |v| v["spec"]["claimTemplate"]["spec"]["volumeMode"] = json!("Tape"),
            vec![(
                "spec.claimTemplate.spec.volumeMode",
                "FieldValueNotSupported",
            )],
        ),
        (
            "no resources",
            |v| {
                v["spec"]["claimTemplate"]["spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("resources");
            },
            vec![(
                "spec.claimTemplate.spec.resources.requests[storage]",
                "FieldValueRequired",
            )],
        ),
        (
            "no storage request",
            |v| v["spec"]["claimTemplate"]["spec"]["resources"] = json!({"requests": {"cpu": "1"}}),
            vec![(
                "spec.claimTemplate.spec.resources.requests[storage]",
                "FieldValueRequired",
            )],
        ),
        (
            "zero storage request",
            |v| v["spec"]["claimTemplate"]["spec"]["resources"]["requests"]["storage"] = json!("0"),
            vec![(
                "spec.claimTemplate.spec.resources.requests[storage]",
                "FieldValueInvalid",
            )],
        ),
        (
            "storage request that is not a quantity",
            |v| {
                v["spec"]["claimTemplate"]["spec"]["resources"]["requests"]["storage"] =
                    json!("lots")
            },
            vec![(
                "spec.claimTemplate.spec.resources.requests[storage]",
                "FieldValueInvalid",
            )],
        ),
        (
            "bad template label",
            |v| v["spec"]["claimTemplate"]["metadata"]["labels"] = json!({"app": "-e2e"}),
            vec![("spec.claimTemplate.metadata.labels", "FieldValueInvalid")],
        ),
        (
            "bad template annotation key",
            |v| v["spec"]["claimTemplate"]["metadata"]["annotations"] = json!({"a b": ""}),
            vec![(
                "spec.claimTemplate.metadata.annotations",
                "FieldValueInvalid",
            )],
        ),
        (
            "missing namespace",
            |v| {
                v["metadata"].as_object_mut().unwrap().remove("namespace");
            },
            vec![("metadata.namespace", "FieldValueRequired")],
        ),
        (
            "a ConfigMap in another namespace",
            |v| {
                v["spec"]["claimTemplate"]["spec"]["dataSourceRef"] = json!({
                    "apiGroup": "",
                    "kind": "ConfigMap",
                    "namespace": "prod",
                    "name": "nightly"
                })
            },
            vec![(
                "spec.claimTemplate.spec.dataSourceRef.namespace",
                "FieldValueInvalid",
            )],
        ),
    ];
    for (case, edit, expected) in cases {
        let c = claim_with(edit);
        assert_eq!(fields_and_reasons(&c.validate_create()), expected, "{case}");
    }
}

#[test]
fn a_non_pod_owner_is_refused_with_the_supported_kind() {
    let c = claim_with(|v| {
        v["spec"]["owner"] = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
    });
    let causes = c.validate_create();
    let kind = causes
        .iter()
        .find(|c| c.field == "spec.owner.kind")
        .unwrap();
    assert_eq!(
        kind.message,
        "Unsupported value: \"Deployment\": supported values: \"Pod\""
    );
}

#[test]
fn an_overlong_claim_name_is_reported_on_metadata_name() {
    let owner = "o".repeat(200);
    let name = "n".repeat(60);
    let c = claim_with(|v| {
        v["spec"]["owner"]["name"] = json!(owner);
        v["metadata"]["name"] = json!(name);
    });
    let causes = c.validate_create();
    assert_eq!(
        fields_and_reasons(&causes),
        vec![("metadata.name", "FieldValueInvalid")]
    );
    assert!(
        causes[0]
            .message
            .contains("must be no more than 253 characters"),
        "{}",
        causes[0].message
    );
    assert!(
        causes[0].message.contains(&c.claim_name()),
        "{}",
        causes[0].message
    );
}

#[test]
fn a_claim_name_of_exactly_253_characters_is_valid() {
    let owner = "o".repeat(200);
    let name = "n".repeat(52);
    let c = claim_with(|v| {
        v["spec"]["owner"]["name"] = json!(owner);
        v["metadata"]["name"] = json!(name);
    });
    assert_eq!(c.claim_name().len(), 253);
    assert!(c.validate_create().is_empty(), "{:?}", c.validate_create());
}

#[test]
fn a_generate_name_without_a_name_skips_the_claim_name_check() {
    let c = claim_with(|v| {
        v["metadata"] = json!({"generateName": "scratch-", "namespace": "ci"});
    });
    assert!(c.validate_create().is_empty(), "{:?}", c.validate_create());
}

#[test]
fn an_unknown_release_policy_is_a_decode_error_naming_the_allowed_values() {
    let mut value = example();
    value["spec"]["releasePolicy"] = json!("Keep");
    let err = serde_json::from_value::<EphemeralClaim>(value)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Keep") && err.contains("Delete") && err.contains("Retain"),
        "{err}"
    );
}

#[test]
fn an_unknown_status_phase_is_a_decode_error() {
    let mut value = example();
    value["status"] = json!({"phase": "Gone"});
    let err = serde_json::from_value::<EphemeralClaim>(value)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Gone") && err.contains("InUse"), "{err}");
}

#[test]
fn only_released_deleted_and_failed_are_finished() {
    use EphemeralClaimPhase::*;
    for phase in [Pending, Bound, InUse] {
        assert!(!phase.is_finished(), "{phase}");
    }
    for phase in [Released, Deleted, Failed] {
        assert!(phase.is_finished(), "{phase}");
    }
}

#[test]
fn an_unchanged_spec_passes_update_validation() {
    let old = claim();
    let mut new = old.clone();
    new.status = Some(EphemeralClaimStatus {
        phase: Some(EphemeralClaimPhase::Bound),
        ..Default::default()
    });
    assert!(new.validate_update(&old).is_empty());
}

#[test]
fn a_changed_spec_is_rejected_naming_the_field() {
    type Edit = fn(&mut EphemeralClaimSpec);
    let cases: Vec<(Edit, &str, &str)> = vec![
        (
            |s| {
                if let Some(owner) = s.owner.as_mut() {
                    owner.name = "other-pod".to_owned();
                }
            },
            "spec.owner.name",
            "Invalid value: \"other-pod\": field is immutable",
        ),
        (
            |s| s.release_policy = Some(ReleasePolicy::Retain),
            "spec.releasePolicy",
            "Invalid value: \"Retain\": field is immutable",
        ),
        (
            |s| {
                if let Some(t) = s.claim_template.as_mut() {
                    t.spec.storage_class_name = Some("slow".to_owned());
                }
            },
            "spec.claimTemplate.spec.storageClassName",
            "Invalid value: \"slow\": field is immutable",
        ),
        (
            |s| {
                if let Some(t) = s.claim_template.as_mut() {
                    t.spec.storage_class_name = None;
                }
            },
            "spec.claimTemplate.spec.storageClassName",
            "Invalid value: \"null\": field is immutable",
        ),
        (
            |s| {
                if let Some(t) = s.claim_template.as_mut() {
                    t.spec.access_modes = Some(vec!["ReadWriteMany".to_owned()]);
                }
            },
            "spec.claimTemplate.spec.accessModes",
            "Invalid value: field is immutable",
        ),
        (
            |s| {
                if let Some(t) = s.claim_template.as_mut() {
                    t.spec.resources =
                        serde_json::from_value(json!({"requests": {"storage": "20Gi"}})).unwrap();
                }
            },
            "spec.claimTemplate.spec.resources",
            "Invalid value: field is immutable",
        ),
        (
            |s| {
                if let Some(t) = s.claim_template.as_mut() {
                    t.metadata
                        .labels
                        .insert("extra".to_owned(), "yes".to_owned());
                }
            },
            "spec.claimTemplate.metadata.labels",
            "Invalid value: field is immutable",
        ),
        (
            |s| {
                if let Some(t) = s.claim_template.as_mut() {
                    t.spec.data_source_ref = None;
                }
            },
            "spec.claimTemplate.spec.dataSourceRef",
            "Invalid value: field is immutable",
        ),
        (
            |s| s.claim_template = None,
            "spec.claimTemplate",
            "Invalid value: field is immutable",
        ),
    ];
    let old = claim();
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
fn a_template_may_not_choose_its_volume_or_set_reserved_annotations() {
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, ExpectedCauses)> = vec![
        (
            "a volume name",
            |v| v["spec"]["claimTemplate"]["spec"]["volumeName"] = json!("pv-of-another-namespace"),
            vec![("spec.claimTemplate.spec.volumeName", "FieldValueForbidden")],
        ),
        (
            "a selector",
            |v| v["spec"]["claimTemplate"]["spec"]["selector"] = json!({"matchLabels": {"owner": "prod"}}),
            vec![("spec.claimTemplate.spec.selector", "FieldValueForbidden")],
        ),
        (
            "an empty selector",
            |v| v["spec"]["claimTemplate"]["spec"]["selector"] = json!({}),
            vec![("spec.claimTemplate.spec.selector", "FieldValueForbidden")],
        ),
        (
            "the PV controller's bind annotation",
            |v| {
                v["spec"]["claimTemplate"]["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] =
                    json!("yes")
            },
            vec![(
                "spec.claimTemplate.metadata.annotations[pv.kubernetes.io/bind-completed]",
                "FieldValueForbidden",
            )],
        ),
        (
            "a provisioner annotation",
            |v| {
                v["spec"]["claimTemplate"]["metadata"]["annotations"]
                    ["volume.kubernetes.io/storage-provisioner"] = json!("csi.example.com")
            },
            vec![(
                "spec.claimTemplate.metadata.annotations[volume.kubernetes.io/storage-provisioner]",
                "FieldValueForbidden",
            )],
        ),
        (
            "a beta provisioner annotation",
            |v| {
                v["spec"]["claimTemplate"]["metadata"]["annotations"]
                    ["volume.beta.kubernetes.io/storage-provisioner"] = json!("csi.example.com")
            },
            vec![(
                "spec.claimTemplate.metadata.annotations[volume.beta.kubernetes.io/storage-provisioner]",
                "FieldValueForbidden",
            )],
        ),
        (
            "this server's own annotation",
            |v| {
                v["spec"]["claimTemplate"]["metadata"]["annotations"]
                    ["storage.transfer.k8s.io/transferred-from"] = json!("prod/db")
            },
            vec![(
                "spec.claimTemplate.metadata.annotations[storage.transfer.k8s.io/transferred-from]",
                "FieldValueForbidden",
            )],
        ),
        (
            "a reserved prefix in capitals",
            |v| {
                v["spec"]["claimTemplate"]["metadata"]["annotations"]["PV.kubernetes.io/bound-by-controller"] =
                    json!("yes")
            },
            vec![(
                "spec.claimTemplate.metadata.annotations[PV.kubernetes.io/bound-by-controller]",
                "FieldValueForbidden",
            )],
        ),
        (
            "all of them at once",
            |v| {
                v["spec"]["claimTemplate"]["spec"]["volumeName"] = json!("pv-1");
                v["spec"]["claimTemplate"]["spec"]["selector"] = json!({});
                v["spec"]["claimTemplate"]["metadata"]["annotations"]["pv.kubernetes.io/a"] = json!("");
            },
            vec![
                ("spec.claimTemplate.spec.volumeName", "FieldValueForbidden"),
                ("spec.claimTemplate.spec.selector", "FieldValueForbidden"),
                ("spec.claimTemplate.metadata.annotations[pv.kubernetes.io/a]", "FieldValueForbidden"),
            ],
        ),
    ];
    for (case, edit, expected) in cases {
        let c = claim_with(edit);
        assert_eq!(fields_and_reasons(&c.validate_create()), expected, "{case}");
        assert_eq!(
            fields_and_reasons(&c.template_safety_causes()),
            expected,
            "{case}"
        );
    }
}

#[test]
fn a_template_may_name_neighbouring_annotations_and_an_empty_volume_name() {
    let c = claim_with(|v| {
        let annotations = &mut v["spec"]["claimTemplate"]["metadata"]["annotations"];
        annotations["kubernetes.io/description"] = json!("fine");
        annotations["example.com/pv.kubernetes.io"] = json!("fine");
        annotations["my-pv.kubernetes.io/x"] = json!("fine");
        v["spec"]["claimTemplate"]["spec"]["volumeName"] = json!("");
    });
    assert!(c.validate_create().is_empty(), "{:?}", c.validate_create());
}

#[test]
fn the_forbidden_message_says_why() {
    let c = claim_with(|v| v["spec"]["claimTemplate"]["spec"]["volumeName"] = json!("pv-1"));
    let causes = c.validate_create();
    assert_eq!(
        causes[0].message,
        "Forbidden: may not be set: the server makes the claim under its own identity, so the \
         template may not choose its volume"
    );
}

#[test]
fn an_update_that_makes_the_template_unsafe_is_refused_as_forbidden_too() {
    let old = claim();
    let mut new = old.clone();
    if let Some(t) = new.spec.claim_template.as_mut() {
        t.spec.volume_name = Some("pv-of-another-namespace".to_owned());
    }
    assert_eq!(
        fields_and_reasons(&new.validate_update(&old)),
        vec![
            ("spec.claimTemplate.spec.volumeName", "FieldValueForbidden"),
            ("spec.claimTemplate.spec.volumeName", "FieldValueInvalid"),
        ]
    );
}

#[test]
fn an_unsafe_template_stored_before_the_check_may_still_have_its_status_and_finalizers_changed() {
    let old = claim_with(|v| v["spec"]["claimTemplate"]["spec"]["volumeName"] = json!("pv-1"));
    let mut new = old.clone();
    new.metadata.finalizers = Some(vec!["example.com/keep".to_owned()]);
    new.status = Some(EphemeralClaimStatus {
        phase: Some(EphemeralClaimPhase::Failed),
        ..Default::default()
    });
    assert!(
        new.validate_update(&old).is_empty(),
        "{:?}",
        new.validate_update(&old)
    );
    assert!(!new.template_safety_causes().is_empty());
}

#[test]
fn the_requester_can_never_change() {
    let mut old = claim();
    old.set_requester(requester("alice"));
    let mut new = old.clone();
    new.set_requester(requester("mallory"));
    assert_eq!(
        fields_and_reasons(&new.validate_update(&old)),
        vec![("spec.requester", "FieldValueInvalid")]
    );
}

#[test]
fn the_object_contract_reads_and_writes_the_right_parts() {
    let mut c = claim();
    c.api_version.clear();
    c.kind.clear();
    assert_eq!(c.type_meta(), ("", ""));
    c.set_type_meta();
    assert_eq!(
        c.type_meta(),
        ("storage.transfer.k8s.io/v1alpha1", "EphemeralClaim")
    );
    assert_eq!(EphemeralClaim::resource().plural, "ephemeralclaims");

    assert_eq!(c.phase(), None);
    let mut written = c.clone();
    written.status = Some(EphemeralClaimStatus {
        phase: Some(EphemeralClaimPhase::InUse),
        ..Default::default()
    });
    c.set_status_from(&written);
    assert_eq!(c.phase(), Some("InUse"));
    c.reset_status();
    assert_eq!(c.phase(), Some("Pending"));

    assert_eq!(c.requester(), None);
    c.set_requester(requester("alice"));
    assert_eq!(c.requester(), Some(&requester("alice")));
}

#[test]
fn the_design_example_round_trips_through_json() {
    let mut value = example();
    value["spec"]["requester"] =
        json!({"username": "ci-bot", "groups": ["system:serviceaccounts"]});
    value["status"] = json!({
        "phase": "InUse",
        "claimName": "e2e-runner-scratch",
        "volumeName": "pvc-5678",
        "firstUsedTime": "2025-01-02T03:04:05Z",
        "releasedTime": "2025-01-02T04:00:00Z",
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "Bound",
            "message": "",
            "lastTransitionTime": "2025-01-02T03:00:00Z"
        }],
        "reason": "PodRunning",
        "message": "pod e2e-runner is running",
        "observedGeneration": 1
    });
    let c: EphemeralClaim = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(serde_json::to_value(&c).unwrap(), value);
}

#[test]
fn the_schema_carries_field_descriptions_for_kubectl_explain() {
    let text = serde_json::to_value(schemars::schema_for!(EphemeralClaim))
        .unwrap()
        .to_string();
    assert!(text.contains("releasePolicy"), "{text}");
    assert!(
        text.contains("The Pod whose use of the claim decides its life"),
        "{text}"
    );
}

/// What an EphemeralClaim whose template's `dataSourceRef` is `reference`
/// clones across namespaces, as `(kind, namespace, name)`, and the fields
/// its validation refuses.
fn cross_source_of(reference: Value) -> (Option<(String, String, String)>, Vec<String>) {
    let c = claim_with(|v| v["spec"]["claimTemplate"]["spec"]["dataSourceRef"] = reference);
    let source = c
        .cross_namespace_source()
        .map(|s| (s.kind.to_owned(), s.namespace.to_owned(), s.name.to_owned()));
    let refused = c.validate_create().into_iter().map(|c| c.field).collect();
    (source, refused)
}

#[test]
fn a_claim_or_a_snapshot_in_another_namespace_is_a_cross_namespace_source_and_nothing_else_is() {
    let own = claim_with(|_| {}).metadata.namespace.unwrap();
    let source =
        |kind: &str, ns: &str, name: &str| Some((kind.to_owned(), ns.to_owned(), name.to_owned()));
    let refused = vec!["spec.claimTemplate.spec.dataSourceRef.namespace".to_owned()];
    let cases = [
        (
            json!({"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"}),
            (source("PersistentVolumeClaim", "prod", "db"), vec![]),
        ),
        (
            json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                   "namespace": "prod", "name": "nightly"}),
            (source("VolumeSnapshot", "prod", "nightly"), vec![]),
        ),
        // Its own namespace is no cross-namespace source.
        (
            json!({"kind": "PersistentVolumeClaim", "namespace": own, "name": "db"}),
            (None, vec![]),
        ),
        // A VolumeSnapshot is of its group; the bare kind is not one.
        (
            json!({"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"}),
            (None, refused.clone()),
        ),
        (
            json!({"kind": "ConfigMap", "namespace": "prod", "name": "db"}),
            (None, refused),
        ),
    ];
    for (reference, expected) in cases {
        assert_eq!(cross_source_of(reference.clone()), expected, "{reference}");
    }
}
