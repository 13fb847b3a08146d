use super::*;

#[test]
fn every_resource_is_found_by_its_plural() {
    for r in RESOURCES {
        assert_eq!(resource_by_plural(r.plural), Some(r));
    }
    assert_eq!(resource_by_plural("persistentvolumeclaims"), None);
}

#[test]
fn short_names_are_unique_across_resources() {
    let mut seen = std::collections::HashSet::new();
    for r in RESOURCES {
        for s in r.short_names {
            assert!(seen.insert(*s), "short name {s} is used twice");
        }
    }
}

#[test]
fn singular_is_the_lowercase_kind() {
    for r in RESOURCES {
        assert_eq!(r.singular, r.kind.to_lowercase());
    }
}
