use super::*;
use serde_json::json;

#[test]
fn the_walk_agrees_with_the_tree_it_would_build() {
    let bodies = [
        json!(null),
        json!("text"),
        json!([]),
        json!({}),
        json!([0, 1.5, -2, true, null, "", "x"]),
        json!({"a": {"b": [{"c": "d"}, [], {}]}, "": 1}),
        json!((0..100)
            .map(|i| (format!("k{i}"), json!([i])))
            .collect::<serde_json::Map<_, _>>()),
    ];
    for body in bodies {
        let text = serde_json::to_vec(&body).unwrap();
        let cost = estimate(&text).unwrap();
        assert_eq!(cost.bytes, VALUE_BYTES + cost_of(&body), "{body}");
    }
}

#[test]
fn values_are_counted_one_by_one() {
    let cost = estimate(br#"{"a":[1,2,{"b":null}],"c":"d"}"#).unwrap();
    assert_eq!(cost.values, 7);
}

#[test]
fn dense_bodies_cost_many_times_their_size_and_ordinary_ones_do_not() {
    let ratio = |body: &str| estimate(body.as_bytes()).unwrap().bytes / body.len();
    let zeros = format!("[{}]", vec!["0"; 100_000].join(","));
    let tiny_objects = format!("[{}]", vec![r#"{"a":0}"#; 100_000].join(","));
    assert!(ratio(&zeros) >= 16);
    assert!(ratio(&tiny_objects) >= 80);
    assert!(ratio(&format!("{:?}", "x".repeat(100_000))) <= 1);
}

/// `{"<key>":"<value>",…}` with `count` members of the given lengths.
fn labels(count: usize, key_len: usize, value_len: usize) -> String {
    let members: Vec<String> = (0..count)
        .map(|i| format!(r#""{i:0key_len$}":"{}""#, "v".repeat(value_len)))
        .collect();
    format!("{{{}}}", members.join(","))
}

#[test]
fn labels_of_every_usual_length_fit_their_budget() {
    // Labels of kube's longest names and values, as many as fit in a
    // stored object: well within the ratio.
    let longest = labels(9_000, 63, 63);
    assert!(parse(longest.as_bytes()).is_ok());
    assert!(estimate(longest.as_bytes()).unwrap().bytes < longest.len() * COST_RATIO);
    // Shorter ones cost more for their size (each member takes its share
    // of a B-tree node), but thousands of them stay under the floor.
    let short = labels(15_000, 24, 11);
    assert!(parse(short.as_bytes()).is_ok(), "{} bytes", short.len());
}

#[test]
fn a_body_over_its_budget_is_refused_naming_the_figures() {
    let body = format!("[{}]", vec!["0"; 1_000_000].join(","));
    let err = parse(body.as_bytes()).unwrap_err();
    let ParseError::TooCostly {
        cost,
        body: len,
        max,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(*len, body.len());
    assert_eq!(*max, budget(body.len()));
    assert_eq!(cost.values, 1_000_001);
    let message = err.to_string();
    for figure in [cost.bytes, cost.values, *len, *max] {
        assert!(message.contains(&figure.to_string()), "{message}");
    }
}

#[test]
fn every_body_may_cost_the_floor_however_small() {
    assert_eq!(budget(0), COST_FLOOR);
    assert_eq!(budget(10 * COST_FLOOR), 10 * COST_FLOOR * COST_RATIO);
    // About 2 MiB of tree from 100 KB of body: under the floor.
    let body = format!("[{}]", vec!["0"; 50_000].join(","));
    assert!(parse(body.as_bytes()).is_ok());
}

#[test]
fn what_is_not_json_is_refused_as_serde_json_refuses_it() {
    for body in [&b"{not json"[..], b"[1,2", b"{} trailing", b""] {
        let ours = parse(body).unwrap_err().to_string();
        let theirs = serde_json::from_slice::<Value>(body)
            .unwrap_err()
            .to_string();
        assert_eq!(ours, theirs);
    }
    let deep = "[".repeat(100_000);
    assert!(matches!(
        parse(deep.as_bytes()),
        Err(ParseError::Invalid(e)) if e.to_string().contains("recursion limit")
    ));
}

#[test]
fn the_most_operations_a_json_patch_may_hold_fit_its_budget_as_operations_not_as_a_tree() {
    let test = json!({"op": "test", "path": "/metadata/name", "value": "a"});
    let body = serde_json::to_vec(&vec![test; 10_000]).unwrap();
    assert!(estimate(&body).unwrap().bytes > budget(body.len()));
    assert!(estimate_json_patch(&body).unwrap().bytes < budget(body.len()));
    assert_eq!(parse_json_patch(&body).unwrap().0.len(), 10_000);
}

#[test]
fn a_json_patch_is_charged_the_whole_tree_of_every_value_it_carries() {
    let dense = vec![json!({"a": 0}); 100_000];
    let body = serde_json::to_vec(&json!([{"op": "add", "path": "/a", "value": dense}])).unwrap();
    let err = parse_json_patch(&body).unwrap_err();
    assert!(matches!(err, ParseError::TooCostly { .. }), "{err}");
}

#[test]
fn a_json_patch_that_is_not_a_list_of_operations_is_left_for_decoding_to_refuse() {
    for body in [&b"{}"[..], b"[1]", b"[{\"op\":5}]", b"\"x\""] {
        let err = parse_json_patch(body).unwrap_err();
        assert!(
            matches!(&err, ParseError::Invalid(e) if e.is_data()),
            "{}: {err}",
            String::from_utf8_lossy(body)
        );
    }
}
