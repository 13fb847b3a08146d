use super::*;

#[test]
fn etcd_3_6_and_3_5_from_13_are_accepted() {
    for version in [
        "3.6.16",
        "3.6.0",
        "3.5.13",
        "3.5.21",
        "v3.6.8",
        "3.7.0-alpha.0",
        "4.0.0",
    ] {
        assert_eq!(check(version), Ok(()), "{version}");
    }
}

#[test]
fn etcd_before_3_5_13_is_refused_naming_its_version_and_why() {
    for version in ["3.4.23", "3.4.31", "3.5.12", "3.5.0", "2.3.8"] {
        let err = check(version).unwrap_err();
        assert_eq!(
            err,
            UnsupportedEtcd::TooOld {
                version: version.to_owned()
            }
        );
        let message = err.to_string();
        assert!(message.contains(version), "{message}");
        assert!(message.contains("3.5.13"), "{message}");
        assert!(message.contains("progress notifications"), "{message}");
    }
}

#[test]
fn a_version_that_is_not_three_numbers_is_refused_as_unparsable() {
    for version in ["", "3.6", "three", "3.6.x", "3.6.1.2"] {
        assert!(
            matches!(check(version), Err(UnsupportedEtcd::Unparsable { .. })),
            "{version}"
        );
    }
}
