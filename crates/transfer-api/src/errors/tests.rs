use super::*;

fn nst() -> GroupResource {
    GroupResource::new("storage.transfer.k8s.io", "namespacetransfers")
}

#[test]
fn each_error_maps_to_the_code_and_reason_kube_apiserver_uses() {
    let cases = [
        (
            ApiError::NotFound {
                resource: nst(),
                name: "a".into(),
            },
            404,
            "NotFound",
        ),
        (ApiError::PathNotFound, 404, "NotFound"),
        (
            ApiError::AlreadyExists {
                resource: nst(),
                name: "a".into(),
            },
            409,
            "AlreadyExists",
        ),
        (
            ApiError::Conflict {
                resource: nst(),
                name: "a".into(),
                message: "stale".into(),
            },
            409,
            "Conflict",
        ),
        (
            ApiError::Forbidden {
                message: "no".into(),
            },
            403,
            "Forbidden",
        ),
        (ApiError::Unauthorized, 401, "Unauthorized"),
        (ApiError::BadRequest("x".into()), 400, "BadRequest"),
        (ApiError::Expired("x".into()), 410, "Expired"),
        (ApiError::TooLarge("x".into()), 413, "RequestEntityTooLarge"),
        (
            ApiError::UnsupportedMediaType("x".into()),
            415,
            "UnsupportedMediaType",
        ),
        (ApiError::NotAcceptable("x".into()), 406, "NotAcceptable"),
        (ApiError::MethodNotAllowed, 405, "MethodNotAllowed"),
        (ApiError::Internal("x".into()), 500, "InternalError"),
        (
            ApiError::ServiceUnavailable("x".into()),
            503,
            "ServiceUnavailable",
        ),
        (ApiError::Timeout("x".into()), 504, "Timeout"),
        (
            ApiError::TooLargeResourceVersion {
                requested: 9,
                current: 7,
            },
            504,
            "Timeout",
        ),
    ];
    for (err, code, reason) in cases {
        let status = err.to_status();
        assert_eq!(status.code, Some(code), "{err:?}");
        assert_eq!(status.reason.as_deref(), Some(reason), "{err:?}");
        assert_eq!(status.status.as_deref(), Some("Failure"));
    }
}

#[test]
fn status_serializes_with_api_version_and_kind() {
    let v = serde_json::to_value(ApiError::PathNotFound.to_status()).unwrap();
    assert_eq!(v["apiVersion"], "v1");
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["code"], 404);
    assert_eq!(
        v["message"],
        "the server could not find the requested resource"
    );
}

#[test]
fn invalid_names_every_bad_field_in_causes() {
    let err = ApiError::Invalid {
        group: "storage.transfer.k8s.io".into(),
        kind: "NamespaceTransfer".into(),
        name: "t".into(),
        causes: vec![
            FieldCause {
                reason: "FieldValueRequired".into(),
                field: "spec.source.name".into(),
                message: "Required value".into(),
            },
            FieldCause {
                reason: "FieldValueInvalid".into(),
                field: "metadata.name".into(),
                message: "Invalid value".into(),
            },
        ],
    };
    let v = serde_json::to_value(err.to_status()).unwrap();
    assert_eq!(v["code"], 422);
    assert_eq!(v["details"]["kind"], "NamespaceTransfer");
    let fields: Vec<&str> = v["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.source.name", "metadata.name"]);
    assert_eq!(
        v["message"],
        "NamespaceTransfer.storage.transfer.k8s.io \"t\" is invalid: [spec.source.name: Required value, metadata.name: Invalid value]"
    );
}
