use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::manager::{manager_or_user_agent, ApplyError, Write};
use super::*;
use crate::api::namespace_transfer::NamespaceTransfer;

fn fm() -> FieldManager {
    for_kind::<NamespaceTransfer>()
}

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).unwrap())
}

fn write<'a>(manager: &'a str, now: &'a Time) -> Write<'a> {
    Write {
        manager,
        subresource: "",
        now,
    }
}

fn transfer(labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t", "namespace": "prod", "labels": labels},
        "spec": spec,
    })
}

fn spec(name: &str) -> Value {
    json!({"source": {"name": name}, "destination": {"namespace": "dev"}})
}

fn fields_of(entries: &[ManagedFieldsEntry], manager: &str) -> Value {
    let e = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some(manager))
        .unwrap_or_else(|| panic!("no entry for {manager}: {entries:?}"));
    e.fields_v1.as_ref().unwrap().0.clone()
}

#[test]
fn a_create_records_every_field_it_sets_under_an_update_entry() {
    let now = at(100);
    let new = transfer(json!({"app": "db"}), spec("db"));
    let entries = fm()
        .update(
            &fm().empty_object(),
            None,
            &new,
            None,
            true,
            write("kubectl", &now),
        )
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].operation.as_deref(), Some("Update"));
    assert_eq!(
        entries[0].api_version.as_deref(),
        Some("storage.transfer.k8s.io/v1alpha1")
    );
    assert_eq!(entries[0].time, Some(now));
    // As kube records a custom resource's create: new containers are
    // members too (`.`), identity metadata is nobody's.
    assert_eq!(
        fields_of(&entries, "kubectl"),
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {".": {}, "f:source": {".": {}, "f:name": {}},
                       "f:destination": {".": {}, "f:namespace": {}}},
        })
    );
}

#[test]
fn an_apply_owns_the_leaves_it_sets_and_creates_from_nothing() {
    let now = at(100);
    let config = transfer(json!({"app": "db"}), spec("db"));
    let (merged, entries) = fm()
        .apply(
            &fm().empty_object(),
            None,
            &config,
            false,
            write("flux", &now),
        )
        .unwrap();
    assert_eq!(merged["spec"]["source"]["name"], "db");
    let entries = entries.unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
    assert_eq!(
        fields_of(&entries, "flux"),
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:source": {"f:name": {}}, "f:destination": {"f:namespace": {}}},
        })
    );
}

#[test]
fn a_second_manager_changing_an_owned_field_conflicts_unless_it_forces() {
    let fm = fm();
    let now = at(100);
    let first = transfer(json!({"app": "db"}), spec("db"));
    let (live, entries) = fm
        .apply(&fm.empty_object(), None, &first, false, write("a", &now))
        .unwrap();
    let second = transfer(json!({"app": "web"}), spec("db"));
    let err = fm
        .apply(&live, entries.as_ref(), &second, false, write("b", &now))
        .unwrap_err();
    let ApplyError::Conflicts { message, causes } = err else {
        panic!("not a conflict: {err:?}");
    };
    assert_eq!(
        message,
        r#"Apply failed with 1 conflict: conflict with "a": .metadata.labels.app"#
    );
    assert_eq!(
        causes,
        [(
            ".metadata.labels.app".to_owned(),
            r#"conflict with "a""#.to_owned()
        )]
    );
    // Forced, b takes the field from a; both share what they agree on.
    let (merged, entries) = fm
        .apply(&live, entries.as_ref(), &second, true, write("b", &now))
        .unwrap();
    assert_eq!(merged["metadata"]["labels"]["app"], "web");
    let entries = entries.unwrap();
    assert!(
        fields_of(&entries, "a")["f:metadata"].is_null(),
        "{entries:?}"
    );
    assert_eq!(
        fields_of(&entries, "b")["f:metadata"]["f:labels"],
        json!({"f:app": {}})
    );
    assert_eq!(
        fields_of(&entries, "a")["f:spec"],
        fields_of(&entries, "b")["f:spec"]
    );
}

#[test]
fn a_field_an_applier_stops_applying_goes_unless_someone_else_owns_it() {
    let fm = fm();
    let now = at(100);
    let both = transfer(json!({"a": "1", "b": "2"}), spec("db"));
    let (live, entries) = fm
        .apply(&fm.empty_object(), None, &both, false, write("x", &now))
        .unwrap();
    let only_a = transfer(json!({"a": "1"}), spec("db"));
    let (pruned, _) = fm
        .apply(&live, entries.as_ref(), &only_a, false, write("x", &now))
        .unwrap();
    assert_eq!(pruned["metadata"]["labels"], json!({"a": "1"}));
    // With y applying b too, x dropping it leaves it to y.
    let (live2, entries2) = fm
        .apply(
            &live,
            entries.as_ref(),
            &transfer(json!({"b": "2"}), spec("db")),
            false,
            write("y", &now),
        )
        .unwrap();
    let (kept, entries3) = fm
        .apply(&live2, entries2.as_ref(), &only_a, false, write("x", &now))
        .unwrap();
    assert_eq!(kept["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        fields_of(entries3.as_ref().unwrap(), "y")["f:metadata"]["f:labels"],
        json!({"f:b": {}})
    );
}

#[test]
fn an_update_takes_the_fields_it_changes_from_their_appliers() {
    let fm = fm();
    let now = at(100);
    let config = transfer(json!({"app": "db"}), spec("db"));
    let (live, entries) = fm
        .apply(&fm.empty_object(), None, &config, false, write("a", &now))
        .unwrap();
    let edited = transfer(json!({"app": "web"}), spec("db"));
    let later = at(200);
    let entries = fm
        .update(
            &live,
            entries.as_ref(),
            &edited,
            None,
            false,
            write("kubectl-edit", &later),
        )
        .unwrap();
    assert_eq!(
        entries[0].operation.as_deref(),
        Some("Apply"),
        "Apply sorts first"
    );
    assert_eq!(
        fields_of(&entries, "kubectl-edit"),
        json!({"f:metadata": {"f:labels": {"f:app": {}}}})
    );
    assert!(fields_of(&entries, "a")["f:metadata"].is_null());
}

#[test]
fn an_object_nobody_tracks_is_tracked_from_its_first_apply() {
    let fm = fm();
    let now = at(100);
    let live = transfer(json!({"app": "db"}), spec("db"));
    // An update of an untracked object records nothing.
    assert!(fm
        .update(&live, None, &live, None, false, write("kubectl", &now))
        .is_none());
    let (_, entries) = fm
        .apply(
            &live,
            None,
            &transfer(json!({"x": "1"}), spec("db")),
            false,
            write("a", &now),
        )
        .unwrap();
    let entries = entries.unwrap();
    assert_eq!(
        fields_of(&entries, "before-first-apply")["f:metadata"],
        json!({"f:labels": {".": {}, "f:app": {}}})
    );
}

#[test]
fn status_conditions_merge_by_type() {
    let fm = fm();
    let now = at(100);
    let mut live = transfer(json!({}), spec("db"));
    live["status"] = json!({"conditions": [
        {"type": "A", "status": "True"}, {"type": "B", "status": "False"}]});
    let mut config = transfer(json!({}), spec("db"));
    config["status"] = json!({"conditions": [{"type": "B", "status": "True"}]});
    let status = Write {
        manager: "ctl",
        subresource: "status",
        now: &now,
    };
    let (merged, entries) = fm.apply(&live, None, &config, true, status).unwrap();
    assert_eq!(
        merged["status"]["conditions"],
        json!([{"type": "A", "status": "True"}, {"type": "B", "status": "True"}])
    );
    let entries = entries.unwrap();
    let ctl = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("ctl"))
        .unwrap();
    assert_eq!(ctl.subresource.as_deref(), Some("status"));
    assert_eq!(
        ctl.fields_v1.as_ref().unwrap().0["f:status"],
        json!({"f:conditions": {"k:{\"type\":\"B\"}": {".": {}, "f:status": {}, "f:type": {}}}})
    );
}

#[test]
fn an_apply_of_another_kind_or_with_unknown_fields_is_refused() {
    let fm = fm();
    let now = at(100);
    let mut other = transfer(json!({}), spec("db"));
    other["kind"] = json!("Pod");
    assert!(matches!(
        fm.apply(&fm.empty_object(), None, &other, false, write("a", &now)),
        Err(ApplyError::BadRequest(m)) if m.contains("invalid object type")
    ));
    let mut unknown = transfer(json!({}), spec("db"));
    unknown["spec"]["bogus"] = json!(1);
    let err = fm
        .apply(&fm.empty_object(), None, &unknown, false, write("a", &now))
        .unwrap_err();
    assert!(
        matches!(&err, ApplyError::Internal(m) if m.ends_with(".spec.bogus: field not declared in schema")),
        "{err:?}"
    );
    let mut with_entries = transfer(json!({}), spec("db"));
    with_entries["metadata"]["managedFields"] = json!([]);
    assert!(matches!(
        fm.apply(&fm.empty_object(), None, &with_entries, false, write("a", &now)),
        Err(ApplyError::BadRequest(m)) if m == "metadata.managedFields must be nil"
    ));
}

#[test]
fn the_manager_is_the_user_agent_up_to_its_first_slash() {
    assert_eq!(
        manager_or_user_agent(None, "kubectl/v1.36.3 (linux/amd64) kubernetes/abc"),
        "kubectl"
    );
    assert_eq!(manager_or_user_agent(Some("flux"), "kubectl/v1"), "flux");
    assert_eq!(manager_or_user_agent(Some(""), "a\u{7}b/x"), "ab");
    assert_eq!(manager_or_user_agent(None, &"x".repeat(300)).len(), 128);
}

#[test]
fn fields_v1_round_trips() {
    let v = json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                   "f:status": {"f:conditions": {"k:{\"type\":\"B\"}": {".": {}, "f:type": {}}}},
                   "f:x": {"v:\"a\"": {}}});
    let set = set::Set::from_fields_v1(&v).unwrap();
    assert_eq!(set.to_fields_v1(), v);
    assert!(set::Set::from_fields_v1(&json!({"q:x": {}})).is_err());
    assert!(set::Set::from_fields_v1(&json!({"f:x": 1})).is_err());
}

#[test]
fn a_long_set_merges_and_compares_item_by_item() {
    let fm = fm();
    let now = at(100);
    let names: Vec<String> = (0..20_000).map(|i| format!("f{i}")).collect();
    let mut config = transfer(json!({}), spec("db"));
    config["metadata"]["finalizers"] = json!(names);
    let (merged, entries) = fm
        .apply(&fm.empty_object(), None, &config, false, write("a", &now))
        .unwrap();
    assert_eq!(
        merged["metadata"]["finalizers"].as_array().unwrap().len(),
        20_000
    );
    let owned = fields_of(entries.as_ref().unwrap(), "a");
    assert_eq!(
        owned["f:metadata"]["f:finalizers"]
            .as_object()
            .unwrap()
            .len(),
        20_000
    );
    // Repeated items are owned once, whole.
    let mut twice = transfer(json!({}), spec("db"));
    twice["metadata"]["finalizers"] = json!(["x", "x", "y"]);
    let set = typed::to_field_set(&fm_schema(), fm_root(), &twice).unwrap();
    assert!(set.has(&[
        path::PathElement::field("metadata"),
        path::PathElement::field("finalizers"),
        path::PathElement::Value(path::OrdValue(json!("x"))),
    ]));
}

fn fm_schema() -> schema::Schema {
    let definitions = crate::api::schema::definitions(&[crate::api::schema::KindSchema::of::<
        crate::api::NamespaceTransfer,
    >()]);
    schema::Schema::from_definitions(
        &definitions,
        &[crate::api::schema::kind_definition("NamespaceTransfer").as_str()],
    )
}

fn fm_root() -> schema::TypeId {
    fm_schema()
        .named(&crate::api::schema::kind_definition("NamespaceTransfer"))
        .unwrap()
}

#[test]
fn numbers_order_exactly_even_where_floats_cannot_tell_them_apart() {
    use path::OrdValue;
    let big = OrdValue(json!(9_007_199_254_740_993_i64));
    let near = OrdValue(serde_json::from_str("9007199254740992.0").unwrap());
    assert_ne!(big, near);
    assert!(near < big);
    assert_eq!(OrdValue(json!(1)), OrdValue(json!(1)));
    assert_ne!(OrdValue(json!(1)), OrdValue(json!(1.0)));
}

#[test]
fn one_blank_entry_clears_the_entries_whatever_its_fields_say_blankly() {
    let fm = fm();
    let now = at(100);
    let live = transfer(json!({"app": "db"}), spec("db"));
    let entries = fm
        .update(
            &fm.empty_object(),
            None,
            &live,
            None,
            true,
            write("a", &now),
        )
        .unwrap();
    let blank = ManagedFieldsEntry {
        manager: Some(String::new()),
        ..ManagedFieldsEntry::default()
    };
    assert!(fm
        .update(
            &live,
            Some(&entries),
            &live,
            Some(&vec![blank]),
            false,
            write("b", &now)
        )
        .is_none());
    // An empty list keeps them, as for a custom resource.
    assert_eq!(
        fm.update(
            &live,
            Some(&entries),
            &live,
            Some(&vec![]),
            false,
            write("b", &now)
        ),
        Some(entries)
    );
}
