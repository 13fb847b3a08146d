use super::*;
use crate::api::namespace_transfer::NamespaceTransfer;

const GOOD: &str = r#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1","kind":"NamespaceTransfer","metadata":{"name":"a"},"spec":{"source":{"name":"db"},"destination":{"namespace":"dev"}}}"#;

#[test]
fn a_well_formed_body_decodes_without_warnings() {
    let (obj, warnings) =
        decode::<NamespaceTransfer>(GOOD.as_bytes(), FieldValidation::Strict).unwrap();
    assert_eq!(obj.spec.source.name, "db");
    assert!(warnings.is_empty());
}

#[test]
fn unknown_fields_are_dropped_warned_or_refused() {
    let body = GOOD.replace(r#""spec":{"#, r#""spec":{"bogus":1,"#);
    let (obj, warnings) =
        decode::<NamespaceTransfer>(body.as_bytes(), FieldValidation::Warn).unwrap();
    assert_eq!(warnings, [r#"unknown field "spec.bogus""#]);
    assert!(
        !serde_json::to_string(&obj).unwrap().contains("bogus"),
        "never stored"
    );
    let (_, none) = decode::<NamespaceTransfer>(body.as_bytes(), FieldValidation::Ignore).unwrap();
    assert!(none.is_empty());
    let err = decode::<NamespaceTransfer>(body.as_bytes(), FieldValidation::Strict).unwrap_err();
    assert_eq!(err.code(), 400);
    assert_eq!(
        err.to_string(),
        r#"strict decoding error: unknown field "spec.bogus""#
    );
}

#[test]
fn bad_bodies_are_bad_requests_that_say_why() {
    let cases = [
        ("{not json", "could not be decoded as JSON"),
        ("[1,2]", "must be a JSON object"),
        (
            r#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1"}"#,
            "Object 'Kind' is missing",
        ),
        (
            r#"{"apiVersion":"v1","kind":"NamespaceTransfer"}"#,
            "does not match the expected API version",
        ),
        (
            r#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1","kind":"EphemeralClaim"}"#,
            "does not match the expected kind",
        ),
        (
            r#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1","kind":"NamespaceTransfer","spec":5}"#,
            "not a valid NamespaceTransfer",
        ),
        (
            r#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1","kind":"NamespaceTransfer","metadata":{"name":7}}"#,
            "not a valid NamespaceTransfer",
        ),
    ];
    for (body, expected) in cases {
        let err = decode::<NamespaceTransfer>(body.as_bytes(), FieldValidation::Warn).unwrap_err();
        assert_eq!(err.code(), 400, "{body}");
        assert!(err.to_string().contains(expected), "{body}: {err}");
    }
}

#[test]
fn field_validation_values_are_checked() {
    assert_eq!(FieldValidation::parse(None).unwrap(), FieldValidation::Warn);
    assert_eq!(
        FieldValidation::parse(Some("Strict")).unwrap(),
        FieldValidation::Strict
    );
    assert_eq!(
        FieldValidation::parse(Some("strict")).unwrap_err().code(),
        400
    );
}

#[test]
fn bookmarks_carry_only_the_resource_version_and_the_end_marker() {
    let b = bookmark_object::<NamespaceTransfer>("42", true);
    assert_eq!(b["metadata"]["resourceVersion"], "42");
    assert_eq!(
        b["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(b["kind"], "NamespaceTransfer");
}
