use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn label_selectors_match_as_kube_apiserver_does() {
    let l = labels(&[("app", "db"), ("tier", "prod"), ("x.io/team", "a")]);
    let cases = [
        ("", true),
        ("app=db", true),
        ("app==db", true),
        ("app!=db", false),
        ("app!=web", true),
        ("missing!=x", true),
        ("app in (db,web)", true),
        ("app in (web)", false),
        ("app notin (web, cache)", true),
        ("app notin (db)", false),
        ("missing notin (db)", true),
        ("tier", true),
        ("missing", false),
        ("!missing", true),
        ("!tier", false),
        ("x.io/team=a", true),
        ("app=db,tier=prod", true),
        ("app=db,tier=dev", false),
        ("app in (db, web),!missing", true),
    ];
    for (text, expected) in cases {
        let s = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(s.matches(Some(&l)), expected, "{text}");
    }
    assert!(LabelSelector::parse("!app").unwrap().matches(None));
}

#[test]
fn malformed_label_selectors_are_bad_requests() {
    for text in [
        "app in db",
        "app in (db",
        "app)",
        "-bad=x",
        "app=-bad-",
        "app foo (x)",
        "app in ()",
        "a b c",
    ] {
        let err = LabelSelector::parse(text).unwrap_err();
        assert_eq!(err.code(), 400, "{text}");
    }
}

#[test]
fn field_selectors_accept_only_supported_fields() {
    let supported = ["metadata.name", "metadata.namespace", "status.phase"];
    let s = FieldSelector::parse("metadata.name=a,status.phase!=Failed", &supported).unwrap();
    let object = |f: &str| match f {
        "metadata.name" => Some("a".to_owned()),
        "status.phase" => Some("Pending".to_owned()),
        _ => None,
    };
    assert!(s.matches(object));
    assert_eq!(s.exact("metadata.name"), Some("a"));
    let err = FieldSelector::parse("spec.source.name=a", &supported).unwrap_err();
    assert_eq!(
        err.to_string(),
        "field label not supported: spec.source.name"
    );
    assert_eq!(
        FieldSelector::parse("nonsense", &supported)
            .unwrap_err()
            .code(),
        400
    );
}
