use super::*;

fn meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: (!name.is_empty()).then(|| name.to_owned()),
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        ..Default::default()
    }
}

fn fields_and_reasons(errs: &FieldErrors) -> Vec<(&str, &str)> {
    errs.causes()
        .iter()
        .map(|c| (c.field.as_str(), c.reason.as_str()))
        .collect()
}

#[test]
fn dns1123_labels_are_accepted_and_rejected_as_kube_does() {
    let long_ok = "a".repeat(63);
    let too_long = "a".repeat(64);
    let cases: &[(&str, usize)] = &[
        ("a", 0),
        ("my-name", 0),
        ("123-abc", 0),
        (&long_ok, 0),
        ("", 1),
        ("-a", 1),
        ("a-", 1),
        ("A", 1),
        ("a.b", 1),
        ("a_b", 1),
        (&too_long, 1),
    ];
    for (value, problems) in cases {
        assert_eq!(
            is_dns1123_label(value).len(),
            *problems,
            "label {value:?}: {:?}",
            is_dns1123_label(value)
        );
    }
}

#[test]
fn dns1123_subdomains_are_accepted_and_rejected_as_kube_does() {
    let long_ok = format!("{}.{}", "a".repeat(200), "b".repeat(52));
    let too_long = "a".repeat(254);
    let cases: &[(&str, usize)] = &[
        ("a", 0),
        ("example.com", 0),
        ("a-b.c-d.e", 0),
        ("0.0", 0),
        (&long_ok, 0),
        ("", 1),
        (".a", 1),
        ("a.", 1),
        ("a..b", 1),
        ("Example.com", 1),
        ("a_b", 1),
        ("a.-b", 1),
        (&too_long, 1),
    ];
    for (value, problems) in cases {
        assert_eq!(
            is_dns1123_subdomain(value).len(),
            *problems,
            "subdomain {value:?}: {:?}",
            is_dns1123_subdomain(value)
        );
    }
}

#[test]
fn an_overlong_invalid_subdomain_reports_both_problems() {
    let value = format!("{}_", "a".repeat(253));
    assert_eq!(is_dns1123_subdomain(&value).len(), 2);
}

#[test]
fn subdomain_errors_use_kubes_wording() {
    assert_eq!(
        is_dns1123_subdomain("Db"),
        vec![
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character (e.g. \
             'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                .to_owned()
        ]
    );
    assert_eq!(
        is_dns1123_subdomain(&"a".repeat(254)),
        vec!["must be no more than 253 characters".to_owned()]
    );
}

#[test]
fn label_errors_use_kubes_wording_including_its_double_space() {
    assert_eq!(
        is_dns1123_label("a.b"),
        vec![
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
             '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_owned()
        ]
    );
}

#[test]
fn a_generate_name_prefix_may_end_with_a_dash() {
    assert!(is_dns1123_subdomain_prefix("db-").is_empty());
    assert!(is_dns1123_subdomain_prefix("db").is_empty());
    assert_eq!(is_dns1123_subdomain_prefix("-").len(), 1);
    assert_eq!(is_dns1123_subdomain_prefix("Db-").len(), 1);
}

#[test]
fn qualified_names_are_accepted_and_rejected_as_kube_does() {
    let long_name = "a".repeat(64);
    let long_prefixed = format!("example.com/{long_name}");
    let cases: &[(&str, usize)] = &[
        ("app", 0),
        ("App_1.x-y", 0),
        ("example.com/app", 0),
        ("a/b", 0),
        ("", 2),
        ("-app", 1),
        ("app-", 1),
        ("/app", 1),
        ("example.com/", 2),
        ("Example.com/app", 1),
        ("a/b/c", 1),
        (&long_name, 1),
        (&long_prefixed, 1),
    ];
    for (value, problems) in cases {
        assert_eq!(
            is_qualified_name(value).len(),
            *problems,
            "qualified name {value:?}: {:?}",
            is_qualified_name(value)
        );
    }
}

#[test]
fn label_values_may_be_empty_but_otherwise_follow_the_qualified_name_pattern() {
    let long_ok = "v".repeat(63);
    let too_long = "v".repeat(64);
    let cases: &[(&str, usize)] = &[
        ("", 0),
        ("v1", 0),
        ("my_value", 0),
        ("My.Value-2", 0),
        (&long_ok, 0),
        ("-v", 1),
        ("a b", 1),
        ("a/b", 1),
        (&too_long, 1),
    ];
    for (value, problems) in cases {
        assert_eq!(
            is_valid_label_value(value).len(),
            *problems,
            "label value {value:?}"
        );
    }
}

#[test]
fn quantities_are_parsed_for_their_sign() {
    let cases: &[(&str, Option<QuantitySign>)] = &[
        ("10Gi", Some(QuantitySign::Positive)),
        ("1", Some(QuantitySign::Positive)),
        ("+1.5G", Some(QuantitySign::Positive)),
        (".5", Some(QuantitySign::Positive)),
        ("5.", Some(QuantitySign::Positive)),
        ("100m", Some(QuantitySign::Positive)),
        ("1e3", Some(QuantitySign::Positive)),
        ("1E-3", Some(QuantitySign::Positive)),
        ("0", Some(QuantitySign::Zero)),
        ("0.0Gi", Some(QuantitySign::Zero)),
        ("-0", Some(QuantitySign::Zero)),
        ("-1Gi", Some(QuantitySign::Negative)),
        ("", None),
        ("Gi", None),
        (".", None),
        ("10GB", None),
        ("10 Gi", None),
        ("1.2.3", None),
        ("1e", None),
        ("ten", None),
    ];
    for (value, expected) in cases {
        assert_eq!(quantity_sign(value), *expected, "quantity {value:?}");
    }
}

#[test]
fn a_non_positive_quantity_is_invalid() {
    let mut errs = FieldErrors::new();
    validate_positive_quantity(&mut errs, "q", &Quantity("0".to_owned()));
    validate_positive_quantity(&mut errs, "q", &Quantity("lots".to_owned()));
    validate_positive_quantity(&mut errs, "q", &Quantity("1Gi".to_owned()));
    let messages: Vec<&str> = errs.causes().iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        messages,
        vec![
            "Invalid value: \"0\": must be greater than zero",
            "Invalid value: \"lots\": quantities must match the regular expression \
             '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ]
    );
}

#[test]
fn causes_carry_kubes_reasons_and_message_wording() {
    let cases: Vec<(FieldCause, &str, &str)> = vec![
        (required("f", ""), "FieldValueRequired", "Required value"),
        (
            required("f", "name or generateName is required"),
            "FieldValueRequired",
            "Required value: name or generateName is required",
        ),
        (
            invalid("f", "x", "bad"),
            "FieldValueInvalid",
            "Invalid value: \"x\": bad",
        ),
        (
            invalid("f", -3i64, "must be greater than or equal to 0"),
            "FieldValueInvalid",
            "Invalid value: -3: must be greater than or equal to 0",
        ),
        (
            invalid("f", None::<i64>, "field is immutable"),
            "FieldValueInvalid",
            "Invalid value: \"null\": field is immutable",
        ),
        (
            invalid("f", BadValue::Omitted, "field is immutable"),
            "FieldValueInvalid",
            "Invalid value: field is immutable",
        ),
        (
            invalid("f", "say \"hi\"\n", "bad"),
            "FieldValueInvalid",
            "Invalid value: \"say \\\"hi\\\"\\n\": bad",
        ),
        (
            not_supported("f", "Copy", &["Move", "Clone"]),
            "FieldValueNotSupported",
            "Unsupported value: \"Copy\": supported values: \"Move\", \"Clone\"",
        ),
        (
            forbidden("f", "may not be set"),
            "FieldValueForbidden",
            "Forbidden: may not be set",
        ),
        (
            too_long("f", 262144),
            "FieldValueTooLong",
            "Too long: may not be more than 262144 bytes",
        ),
    ];
    for (cause, reason, message) in cases {
        assert_eq!(cause.field, "f");
        assert_eq!(cause.reason, reason);
        assert_eq!(cause.message, message);
    }
}

#[test]
fn each_problem_of_a_value_is_its_own_cause() {
    let mut errs = FieldErrors::new();
    validate_dns1123_subdomain(&mut errs, "metadata.name", &format!("{}_", "a".repeat(253)));
    assert_eq!(
        fields_and_reasons(&errs),
        vec![
            ("metadata.name", "FieldValueInvalid"),
            ("metadata.name", "FieldValueInvalid")
        ]
    );
}

#[test]
fn a_valid_object_meta_has_no_causes() {
    let mut errs = FieldErrors::new();
    let mut m = meta("db-to-dev", "prod");
    m.labels = Some([("app.kubernetes.io/name".to_owned(), "db".to_owned())].into());
    m.annotations = Some([("example.com/Note".to_owned(), "any text".to_owned())].into());
    m.finalizers = Some(vec![
        "storage.transfer.k8s.io/transfer-protection".to_owned()
    ]);
    validate_object_meta(&mut errs, &m);
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn a_name_is_required_unless_generate_name_is_set() {
    let mut errs = FieldErrors::new();
    validate_object_meta(&mut errs, &meta("", "prod"));
    assert_eq!(
        errs.causes(),
        &[required(
            "metadata.name",
            "name or generateName is required"
        )]
    );

    let mut errs = FieldErrors::new();
    let mut m = meta("", "prod");
    m.generate_name = Some("db-".to_owned());
    validate_object_meta(&mut errs, &m);
    assert!(errs.is_empty(), "{errs:?}");
}

#[test]
fn object_meta_rules_name_the_offending_field() {
    type Edit = fn(&mut ObjectMeta);
    let cases: Vec<(&str, Edit, &str, &str)> = vec![
        (
            "bad name",
            |m| m.name = Some("Db".to_owned()),
            "metadata.name",
            "FieldValueInvalid",
        ),
        (
            "bad generateName",
            |m| m.generate_name = Some("Db-".to_owned()),
            "metadata.generateName",
            "FieldValueInvalid",
        ),
        (
            "missing namespace",
            |m| m.namespace = None,
            "metadata.namespace",
            "FieldValueRequired",
        ),
        (
            "namespace that is not a label",
            |m| m.namespace = Some("a.b".to_owned()),
            "metadata.namespace",
            "FieldValueInvalid",
        ),
        (
            "bad label key",
            |m| m.labels = Some([("-app".to_owned(), "db".to_owned())].into()),
            "metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "bad label value",
            |m| m.labels = Some([("app".to_owned(), "a b".to_owned())].into()),
            "metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "bad annotation key",
            |m| m.annotations = Some([("a b".to_owned(), String::new())].into()),
            "metadata.annotations",
            "FieldValueInvalid",
        ),
        (
            "annotations over 256KiB",
            |m| m.annotations = Some([("big".to_owned(), "x".repeat(256 * 1024))].into()),
            "metadata.annotations",
            "FieldValueTooLong",
        ),
        (
            "bad finalizer",
            |m| m.finalizers = Some(vec!["a b".to_owned()]),
            "metadata.finalizers",
            "FieldValueInvalid",
        ),
    ];
    for (case, edit, field, reason) in cases {
        let mut m = meta("db", "prod");
        edit(&mut m);
        let mut errs = FieldErrors::new();
        validate_object_meta(&mut errs, &m);
        assert_eq!(fields_and_reasons(&errs), vec![(field, reason)], "{case}");
    }
}

#[test]
fn annotation_keys_are_checked_in_lower_case() {
    let mut errs = FieldErrors::new();
    validate_annotations(
        &mut errs,
        "metadata.annotations",
        &[("Example.COM/Key".to_owned(), String::new())].into(),
    );
    assert!(errs.is_empty(), "{errs:?}");
}
