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

fn bookmark_as(output: Output, end: bool) -> Value {
    let strategy = crate::registry::namespace_transfer::NamespaceTransferStrategy;
    let bytes = encode_bookmark(&strategy, "42", end, output).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_metadata_watch_gets_its_bookmarks_as_partial_object_metadata() {
    for end in [false, true] {
        let b = bookmark_as(Output::Metadata, end);
        assert_eq!(b["kind"], "PartialObjectMetadata", "{b}");
        assert_eq!(b["apiVersion"], "meta.k8s.io/v1", "{b}");
        assert_eq!(b["metadata"]["resourceVersion"], "42", "{b}");
        assert_eq!(
            b["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true",
            end,
            "{b}"
        );
    }
}

#[test]
fn a_table_watch_gets_its_bookmarks_as_a_one_row_table() {
    let include = |include| Output::Table {
        v1beta1: false,
        include,
    };
    let b = bookmark_as(include(IncludeObject::None), false);
    assert_eq!(b["kind"], "Table", "{b}");
    assert_eq!(b["metadata"]["resourceVersion"], "42", "{b}");
    let row = &b["rows"][0];
    assert_eq!(row["cells"][0], "", "{b}");
    assert_eq!(
        row["cells"].as_array().unwrap().last().unwrap(),
        "<unknown>"
    );
    assert!(row.get("object").is_none(), "{b}");
    let b = bookmark_as(include(IncludeObject::Metadata), false);
    assert_eq!(
        b["rows"][0]["object"]["kind"], "PartialObjectMetadata",
        "{b}"
    );
    // The end of the initial events is always told in the row's metadata.
    let b = bookmark_as(include(IncludeObject::None), true);
    let object = &b["rows"][0]["object"];
    assert_eq!(object["kind"], "PartialObjectMetadata", "{b}");
    assert_eq!(
        object["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let b = bookmark_as(include(IncludeObject::Object), false);
    assert_eq!(b["rows"][0]["object"]["kind"], "NamespaceTransfer", "{b}");
}

#[test]
fn a_plain_watch_keeps_its_bookmarks_in_our_kind() {
    let b = bookmark_as(Output::Json, false);
    assert_eq!(b["kind"], "NamespaceTransfer", "{b}");
    assert_eq!(b["apiVersion"], crate::api::GROUP_VERSION);
}

/// A body of `GOOD` with `junk` spliced in at `at` (`"spec":{` or
/// `"metadata":{`), padded with `item`s to just under the 3 MiB body limit.
fn padded(at: &str, open: &str, item: impl Fn(usize) -> String, close: &str) -> Vec<u8> {
    let room = crate::wire::MAX_BODY_BYTES - GOOD.len() - 64;
    let mut junk = String::from(open);
    for i in 0.. {
        let next = item(i);
        if junk.len() + next.len() + 1 + close.len() > room {
            break;
        }
        if i > 0 {
            junk.push(',');
        }
        junk.push_str(&next);
    }
    junk.push_str(close);
    GOOD.replacen(at, &format!("{at}{junk},"), 1).into_bytes()
}

#[test]
fn a_body_whose_tree_would_cost_many_times_its_size_is_too_large_wherever_the_values_sit() {
    let cases = [
        (
            "zeros in an unknown field",
            padded(r#""spec":{"#, r#""junk":["#, |_| "0".to_owned(), "]"),
        ),
        (
            "one-member objects in managedFields' fieldsV1",
            padded(
                r#""metadata":{"#,
                r#""managedFields":[{"manager":"m","operation":"Update","fieldsType":"FieldsV1","fieldsV1":["#,
                |_| r#"{"a":0}"#.to_owned(),
                "]}]",
            ),
        ),
        (
            "short labels",
            padded(
                r#""metadata":{"#,
                r#""labels":{"#,
                |i| format!(r#""{i:x}":"""#),
                "}",
            ),
        ),
    ];
    for (what, body) in cases {
        for validation in [
            FieldValidation::Ignore,
            FieldValidation::Warn,
            FieldValidation::Strict,
        ] {
            let err = decode::<NamespaceTransfer>(&body, validation).unwrap_err();
            assert_eq!(err.code(), 413, "{what}: {err}");
            let message = err.to_string();
            assert!(
                message.contains(&body.len().to_string()) && message.contains("JSON values"),
                "{what}: the message names the figures: {message}"
            );
        }
    }
}

#[test]
fn a_large_body_of_ordinary_values_still_decodes() {
    let long_labels = padded(
        r#""metadata":{"#,
        r#""labels":{"#,
        |i| format!(r#""l{i:06}{}":"{}""#, "x".repeat(56), "v".repeat(63)),
        "}",
    );
    let one_annotation = GOOD.replacen(
        r#""metadata":{"#,
        &format!(
            r#""metadata":{{"annotations":{{"a":"{}"}},"#,
            "n".repeat(1024 * 1024)
        ),
        1,
    );
    for body in [long_labels, one_annotation.into_bytes()] {
        let (obj, _) = decode::<NamespaceTransfer>(&body, FieldValidation::Strict).unwrap();
        assert_eq!(obj.spec.source.name, "db");
    }
}
