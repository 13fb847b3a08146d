use super::*;

#[test]
fn quantities_parse_in_binary_and_decimal_units() {
    let cases = [
        ("1Gi", 1024f64 * 1024.0 * 1024.0),
        ("512Mi", 512.0 * 1024.0 * 1024.0),
        ("1.5Ti", 1.5 * 1024f64.powi(4)),
        ("1G", 1e9),
        ("1000", 1000.0),
        ("1e9", 1e9),
        ("100m", 0.1),
    ];
    for (text, bytes) in cases {
        assert_eq!(quantity_bytes(text), Some(bytes), "{text}");
    }
    for bad in ["", "Gi", "1Qi", "one"] {
        assert_eq!(quantity_bytes(bad), None, "{bad}");
    }
}

#[test]
fn the_larger_quantity_is_kept_as_written() {
    assert_eq!(
        larger_quantity(Some("1Gi"), Some("2Gi")).as_deref(),
        Some("2Gi")
    );
    assert_eq!(
        larger_quantity(Some("2Gi"), Some("1G")).as_deref(),
        Some("2Gi")
    );
    assert_eq!(
        larger_quantity(Some("1Gi"), Some("1024Mi")).as_deref(),
        Some("1Gi")
    );
    assert_eq!(larger_quantity(None, Some("1Gi")).as_deref(), Some("1Gi"));
    assert_eq!(
        larger_quantity(Some("odd"), Some("1Gi")).as_deref(),
        Some("odd")
    );
}

#[test]
fn a_claim_ref_names_a_claim_only_with_its_uid() {
    let r = ClaimRef {
        namespace: "prod".to_owned(),
        name: "db".to_owned(),
        uid: String::new(),
    };
    assert!(!r.is("prod", "db", ""), "an empty uid names nothing");
    let r = ClaimRef {
        uid: "u1".to_owned(),
        ..r
    };
    assert!(r.is("prod", "db", "u1"));
    assert!(!r.is("prod", "db", "u2"));
    assert!(!r.is("dev", "db", "u1"));
}
