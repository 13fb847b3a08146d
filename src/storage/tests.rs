use super::*;

#[test]
fn keys_follow_the_kube_layout() {
    assert_eq!(
        key_for(
            "/registry",
            "storage.transfer.k8s.io",
            "namespacetransfers",
            "prod",
            "db"
        ),
        "/registry/storage.transfer.k8s.io/namespacetransfers/prod/db"
    );
    assert_eq!(resource_prefix("/registry/", "g", "r"), "/registry/g/r");
}

#[test]
fn prefix_end_is_the_next_key_after_the_prefix_range() {
    assert_eq!(prefix_end("/a/b/"), b"/a/b0".to_vec());
    assert_eq!(prefix_end("ab"), b"ac".to_vec());
}
