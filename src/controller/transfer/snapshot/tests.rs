use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn dynamic(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn transfer() -> NamespaceTransfer {
    NamespaceTransfer {
        metadata: ObjectMeta {
            uid: Some("uid-give".to_owned()),
            ..ObjectMeta::default()
        },
        ..NamespaceTransfer::default()
    }
}

/// The content the snapshot controller made for a dynamic snapshot.
fn old_content() -> Content {
    Content::from(&dynamic(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {
            "name": "snapcontent-1", "uid": "c-1", "resourceVersion": "7",
            "annotations": {
                "snapshot.storage.kubernetes.io/deletion-secret-name": "snap-secret",
                "snapshot.storage.kubernetes.io/deletion-secret-namespace": "storage",
                "unrelated": "x",
            },
        },
        "spec": {
            "deletionPolicy": "Delete",
            "driver": "csi.example",
            "source": {"volumeHandle": "vol-1"},
            "sourceVolumeMode": "Filesystem",
            "volumeSnapshotClassName": "fast",
            "volumeSnapshotRef": {"namespace": "prod", "name": "nightly", "uid": "s-1"},
        },
        "status": {"readyToUse": true, "snapshotHandle": "snap-42"},
    })))
}

#[test]
fn a_dynamic_content_is_read_with_its_handle_from_status() {
    let c = old_content();
    assert_eq!(c.handle.as_deref(), Some("snap-42"));
    assert_eq!(c.deletion_policy, "Delete");
    assert!(c.ready);
    assert!(c.names("prod", "nightly", "s-1"));
    assert_eq!(c.secrets.len(), 2, "only the deletion-secret annotations");
    assert!(!c.in_group);
}

#[test]
fn a_snapshot_is_read_with_its_binding_readiness_size_and_group() {
    let x = Snapshot::from(&dynamic(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "nightly", "namespace": "prod", "uid": "s-1", "resourceVersion": "9",
                     "annotations": {ANNOTATION_TRANSFER_LOCK: "uid-give"}},
        "spec": {"volumeSnapshotClassName": "fast", "source": {"persistentVolumeClaimName": "db"}},
        "status": {"boundVolumeSnapshotContentName": "snapcontent-1", "readyToUse": true,
                   "restoreSize": "1Gi", "volumeGroupSnapshotName": "group-1"},
    })));
    assert_eq!(x.lock.as_deref(), Some("uid-give"));
    assert_eq!(x.bound_content.as_deref(), Some("snapcontent-1"));
    assert!(x.ready);
    assert_eq!(x.restore_size.as_deref(), Some("1Gi"));
    assert_eq!(x.group.as_deref(), Some("group-1"));
    assert_eq!(x.content_source, None);
}

#[test]
fn the_new_content_holds_the_same_backend_snapshot_under_retain_for_the_destination() {
    let s = transfer();
    let object = new_content(&s, &old_content(), "dev", "nightly");
    assert_eq!(object["metadata"]["name"], "snapcontent-transfer-uid-give");
    assert_eq!(object["spec"]["deletionPolicy"], "Retain");
    assert_eq!(
        object["spec"]["source"],
        json!({"snapshotHandle": "snap-42"})
    );
    assert_eq!(object["spec"]["driver"], "csi.example");
    assert_eq!(object["spec"]["volumeSnapshotClassName"], "fast");
    assert_eq!(object["spec"]["sourceVolumeMode"], "Filesystem");
    assert_eq!(object["spec"]["volumeSnapshotRef"]["namespace"], "dev");
    assert_eq!(object["spec"]["volumeSnapshotRef"]["name"], "nightly");
    assert!(object["spec"]["volumeSnapshotRef"].get("uid").is_none());
    let annotations = &object["metadata"]["annotations"];
    assert_eq!(
        annotations["snapshot.storage.kubernetes.io/deletion-secret-name"],
        "snap-secret"
    );
    assert_eq!(annotations[ANNOTATION_ORIGINAL_DELETION_POLICY], "Delete");
    assert_eq!(annotations[ANNOTATION_TRANSFER_LOCK], "uid-give");
    assert!(annotations.get("unrelated").is_none());
}

#[test]
fn the_destination_snapshot_names_the_new_content_and_is_locked() {
    let s = transfer();
    let object = new_snapshot(&s, &old_content(), "dev", "nightly");
    assert_eq!(
        object["spec"]["source"],
        json!({"volumeSnapshotContentName": "snapcontent-transfer-uid-give"})
    );
    assert_eq!(object["metadata"]["namespace"], "dev");
    assert_eq!(
        object["metadata"]["annotations"][ANNOTATION_TRANSFER_LOCK],
        "uid-give"
    );
}

#[test]
fn a_content_is_ours_only_with_our_name_mark_handle_and_destination() {
    let s = transfer();
    let old = old_content();
    let made = Content::from(&dynamic(new_content(&s, &old, "dev", "nightly")));
    assert!(is_made_content(&s, &made, &old, "dev", "nightly"));
    assert!(!is_made_content(&s, &made, &old, "dev", "other"));
    let mut forged = made.clone();
    forged.handle = Some("snap-43".to_owned());
    assert!(!is_made_content(&s, &forged, &old, "dev", "nightly"));
    let mut unmarked = made;
    unmarked.marker = None;
    assert!(!is_made_content(&s, &unmarked, &old, "dev", "nightly"));
}

#[test]
fn a_secret_templated_by_the_snapshot_namespace_keeps_it_from_moving() {
    let templated: BTreeMap<String, String> = [(
        "csi.storage.k8s.io/snapshotter-secret-namespace".to_owned(),
        "${volumesnapshot.namespace}".to_owned(),
    )]
    .into();
    assert!(templated_secret(&templated).is_some());
    let by_name: BTreeMap<String, String> = [(
        "csi.storage.k8s.io/snapshotter-secret-name".to_owned(),
        "${volumesnapshot.name}-secret".to_owned(),
    )]
    .into();
    assert!(templated_secret(&by_name).is_some());
    let fixed: BTreeMap<String, String> = [(
        "csi.storage.k8s.io/snapshotter-secret-namespace".to_owned(),
        "storage".to_owned(),
    )]
    .into();
    assert_eq!(templated_secret(&fixed), None);
}
