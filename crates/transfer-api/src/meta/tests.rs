use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

fn condition(type_: &str, status: &str, reason: &str, time: Time) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: String::new(),
        last_transition_time: time,
        observed_generation: Some(1),
    }
}

#[test]
fn a_requester_serializes_camel_case_and_skips_empty_fields() {
    let bare = Requester {
        username: "alice".to_owned(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&bare).unwrap(),
        json!({"username": "alice"})
    );

    let full = Requester {
        username: "alice".to_owned(),
        uid: Some("42".to_owned()),
        groups: vec!["system:authenticated".to_owned()],
        extra: [("scopes.example.com".to_owned(), vec!["a".to_owned()])].into(),
    };
    let value = serde_json::to_value(&full).unwrap();
    assert_eq!(
        value,
        json!({
            "username": "alice",
            "uid": "42",
            "groups": ["system:authenticated"],
            "extra": {"scopes.example.com": ["a"]}
        })
    );
    assert_eq!(serde_json::from_value::<Requester>(value).unwrap(), full);
}

#[test]
fn setting_a_new_condition_appends_it() {
    let mut conditions = Vec::new();
    assert!(set_condition(
        &mut conditions,
        condition("Ready", CONDITION_FALSE, "Waiting", at(1))
    ));
    assert_eq!(conditions.len(), 1);
}

#[test]
fn the_transition_time_moves_only_when_the_status_changes() {
    let mut conditions = vec![condition("Ready", CONDITION_FALSE, "Waiting", at(1))];

    assert!(set_condition(
        &mut conditions,
        condition("Ready", CONDITION_FALSE, "StillWaiting", at(2))
    ));
    assert_eq!(conditions[0].last_transition_time, at(1));
    assert_eq!(conditions[0].reason, "StillWaiting");

    assert!(set_condition(
        &mut conditions,
        condition("Ready", CONDITION_TRUE, "Done", at(3))
    ));
    assert_eq!(conditions[0].last_transition_time, at(3));
    assert!(is_condition_true(&conditions, "Ready"));
}

#[test]
fn setting_an_identical_condition_changes_nothing() {
    let mut conditions = vec![condition("Ready", CONDITION_TRUE, "Done", at(1))];
    assert!(!set_condition(
        &mut conditions,
        condition("Ready", CONDITION_TRUE, "Done", at(9))
    ));
    assert_eq!(conditions[0].last_transition_time, at(1));
}

#[test]
fn a_condition_can_be_found_and_removed_by_type() {
    let mut conditions = vec![
        condition("PeerMatched", CONDITION_TRUE, "Matched", at(1)),
        condition("Ready", CONDITION_UNKNOWN, "", at(1)),
    ];
    assert!(find_condition(&conditions, "Ready").is_some());
    assert!(!is_condition_true(&conditions, "Ready"));
    assert!(remove_condition(&mut conditions, "Ready"));
    assert!(!remove_condition(&mut conditions, "Ready"));
    assert!(find_condition(&conditions, "Ready").is_none());
    assert!(is_condition_true(&conditions, "PeerMatched"));
}

/// Two documented variants, as the API's enums have.
#[derive(schemars::JsonSchema)]
#[schemars(transform = string_enum_schema)]
#[allow(dead_code)]
enum Flavour {
    /// Sweet and cold.
    Vanilla,
    /// Dark.
    Chocolate,
}

#[test]
fn documented_enums_get_a_kube_style_enum_schema() {
    let schema = serde_json::to_value(schemars::schema_for!(Flavour)).unwrap();
    assert_eq!(schema["type"], json!("string"));
    assert_eq!(schema["enum"], json!(["Vanilla", "Chocolate"]));
    assert!(schema.get("oneOf").is_none(), "{schema}");
    assert_eq!(
        schema["description"],
        json!(
            "Two documented variants, as the API's enums have.\n\nPossible enum values:\n \
             - `\"Vanilla\"` Sweet and cold.\n - `\"Chocolate\"` Dark."
        )
    );
}
