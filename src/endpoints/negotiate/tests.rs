use super::*;

#[test]
fn kubectl_get_asks_for_a_v1_table_first() {
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    assert_eq!(
        output(Some(accept), IncludeObject::Metadata).unwrap(),
        Output::Table {
            v1beta1: false,
            include: IncludeObject::Metadata
        }
    );
}

#[test]
fn plain_and_wildcard_accepts_get_json() {
    for accept in [
        None,
        Some(""),
        Some("application/json"),
        Some("*/*"),
        Some("application/vnd.kubernetes.protobuf, */*"),
    ] {
        assert_eq!(
            output(accept, IncludeObject::Metadata).unwrap(),
            Output::Json,
            "{accept:?}"
        );
    }
}

#[test]
fn metadata_informers_get_partial_object_metadata() {
    let accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    assert_eq!(
        output(Some(accept), IncludeObject::Metadata).unwrap(),
        Output::Metadata
    );
}

#[test]
fn unproducible_accepts_are_not_acceptable() {
    for accept in [
        "application/vnd.kubernetes.protobuf",
        "text/html",
        "application/json;as=Table;v=v2;g=meta.k8s.io",
    ] {
        assert_eq!(
            output(Some(accept), IncludeObject::Metadata)
                .unwrap_err()
                .code(),
            406,
            "{accept}"
        );
    }
}

#[test]
fn patch_types_are_merge_json_and_apply_as_for_custom_resources() {
    assert_eq!(
        patch_type(Some("application/merge-patch+json")).unwrap(),
        PatchType::Merge
    );
    assert_eq!(
        patch_type(Some("application/json-patch+json; charset=utf-8")).unwrap(),
        PatchType::Json
    );
    assert_eq!(
        patch_type(Some("application/apply-patch+yaml")).unwrap(),
        PatchType::Apply
    );
    for unsupported in [
        "application/strategic-merge-patch+json",
        "application/apply-patch+cbor",
        "text/plain",
    ] {
        assert_eq!(
            patch_type(Some(unsupported)).unwrap_err().code(),
            415,
            "{unsupported}"
        );
    }
    assert_eq!(
        require_json(Some("application/yaml")).unwrap_err().code(),
        415
    );
    assert!(require_json(Some("application/json; charset=utf-8")).is_ok());
}
