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

#[test]
fn a_finalizer_is_put_on_once_and_taken_off_leaving_the_others_in_order() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let mut meta = ObjectMeta::default();
    crate::meta::set_finalizer(&mut meta, "b", true);
    crate::meta::set_finalizer(&mut meta, "b", true);
    assert_eq!(meta.finalizers.as_deref(), Some(&["b".to_owned()][..]));
    meta.finalizers = Some(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]);
    crate::meta::set_finalizer(&mut meta, "b", false);
    assert_eq!(
        meta.finalizers.as_deref(),
        Some(&["a".to_owned(), "c".to_owned()][..])
    );
    meta.finalizers = Some(vec!["b".to_owned()]);
    crate::meta::set_finalizer(&mut meta, "b", false);
    assert_eq!(meta.finalizers, None, "an empty list is stored as none");
}
