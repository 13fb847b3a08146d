//! How a policy file's YAML is read: what YAML 1.1 and 1.2 disagree on, and
//! the bounds every YAML document is read in.

use super::*;

const HEAD: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";

fn load(rest: &str) -> Result<Policy, PolicyError> {
    Policy::from_slice(format!("{HEAD}{rest}").as_bytes())
}

fn refusal(rest: &str) -> String {
    load(rest).expect_err("the policy was loaded").to_string()
}

#[test]
fn a_policy_that_names_a_key_twice_is_refused() {
    let says = refusal("rules: [{level: None}]\nrules: [{level: RequestResponse}]\n");
    assert_eq!(
        says,
        r#"failed decoding: duplicate entry with key "rules" at line 4 column 1"#
    );
}

#[test]
fn a_yes_in_an_audit_policy_is_not_a_boolean() {
    let says = refusal("omitManagedFields: yes\nrules: [{level: None}]\n");
    assert!(says.starts_with("failed decoding: "), "{says}");
    let p = load("omitManagedFields: true\nrules: [{level: None, users: [yes, on]}]\n").unwrap();
    assert_eq!(p.rules()[0].users, ["yes", "on"]);
}

#[test]
fn numbers_with_leading_zeros_or_underscores_in_an_audit_policy_are_kept_as_written() {
    let p = load("rules: [{level: None, users: [0755, 1_000, 0o17, 0x1f]}]\n").unwrap();
    assert_eq!(p.rules()[0].users, ["0755", "1_000", "0o17", "0x1f"]);
}

#[test]
fn a_merge_key_in_an_audit_policy_is_an_unknown_field_not_a_merge() {
    let p = load(
        "rules:\n- &alice {level: Metadata, users: [alice]}\n- <<: *alice\n  level: Request\n",
    )
    .unwrap();
    assert_eq!(p.rules()[1].level, Level::Request);
    assert!(p.rules()[1].users.is_empty(), "{:?}", p.rules()[1]);
}

#[test]
fn a_tag_in_an_audit_policy_is_ignored() {
    let p = load("rules: [{level: !loud Request}]\n").unwrap();
    assert_eq!(p.rules()[0].level, Level::Request);
}

#[test]
fn a_policy_whose_aliases_expand_past_its_size_is_refused() {
    let mut rest = String::from("x0: &x0 [a,a,a,a,a,a,a,a,a,a]\n");
    for i in 1..10 {
        let aliases = vec![format!("*x{}", i - 1); 10].join(",");
        rest.push_str(&format!("x{i}: &x{i} [{aliases}]\n"));
    }
    rest.push_str("rules: [{level: None}]\n");
    assert_eq!(
        refusal(&rest),
        "failed decoding: yaml: document contains excessive aliasing"
    );
}

#[test]
fn a_policy_nested_deeper_than_the_bound_is_refused() {
    let deep = format!("rules: [{{level: None}}]\nx: {}\n", "[".repeat(100_000));
    assert_eq!(
        refusal(&deep),
        "failed decoding: the configuration nests deeper than 64 levels"
    );
}

#[test]
fn a_policy_of_two_documents_is_refused() {
    let says = refusal("rules: [{level: None}]\n---\nrules: [{level: None}]\n");
    assert!(says.contains("multiple found"), "{says}");
}
