#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use super::*;
use serde_json::json;

const MIB: usize = 1024 * 1024;

fn ops(patch: Value) -> Vec<PatchOperation> {
    serde_json::from_value::<json_patch::Patch>(patch)
        .unwrap()
        .0
}

fn limits() -> Limits {
    Limits::new(3 * MIB)
}

fn patched(doc: Value, patch: Value) -> Result<Value, PatchError> {
    let mut doc = doc;
    apply(&mut doc, &ops(patch), &limits())?;
    Ok(doc)
}

fn compact_len(value: &Value) -> usize {
    serde_json::to_vec(value).unwrap().len()
}

/// How many arrays and objects the deepest path of `value` passes through.
fn depth_of(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

/// Applies `patch` one operation at a time, asserting after each that the
/// budget's size is the document's exact size and its depth is never less
/// than the document's. Returns the result of the first refusal, if any.
fn apply_checking_the_books(
    doc: &mut Value,
    patch: &[PatchOperation],
    limits: &Limits,
) -> Result<(), Refusal> {
    let whole = measure(doc);
    let mut budget = Budget {
        limits,
        size: whole.bytes,
        depth: whole.depth,
        copied: 0,
        copied_cost: 0,
    };
    for op in patch {
        budget.apply(doc, op)?;
        assert_eq!(budget.size, compact_len(doc), "size after {op}: {doc}");
        assert!(budget.depth >= depth_of(doc), "depth after {op}: {doc}");
    }
    Ok(())
}

#[test]
fn measuring_agrees_with_serde_json_byte_for_byte() {
    let cases = [
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-17),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1.5),
        json!(-0.000_001_25),
        json!(1e300),
        json!(""),
        json!("plain"),
        json!("quote \" backslash \\ slash /"),
        json!("controls \n \r \t \u{8} \u{c} \u{0} \u{1f} \u{7f}"),
        json!("unicode é ✓ 🦀"),
        json!([]),
        json!({}),
        json!([1, [2, [3, []]], {}]),
        json!({"a": {"b": {"c": [null, {"d": "e"}]}}, "k\"ey\n": 1, "": {}}),
    ];
    for value in cases {
        let m = measure(&value);
        assert_eq!(m.bytes, compact_len(&value), "{value}");
        assert_eq!(m.depth, depth_of(&value), "{value}");
    }
}

#[test]
fn the_examples_of_rfc_6902_apply_as_the_rfc_says() {
    let cases = [
        // A.1 to A.8, A.10, A.14 and A.16.
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux"}]),
            json!({"baz": "qux", "foo": "bar"}),
        ),
        (
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
            json!({"foo": ["bar", "qux", "baz"]}),
        ),
        (
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "remove", "path": "/baz"}]),
            json!({"foo": "bar"}),
        ),
        (
            json!({"foo": ["bar", "qux", "baz"]}),
            json!([{"op": "remove", "path": "/foo/1"}]),
            json!({"foo": ["bar", "baz"]}),
        ),
        (
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "replace", "path": "/baz", "value": "boo"}]),
            json!({"baz": "boo", "foo": "bar"}),
        ),
        (
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
            json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        ),
        (
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
            json!({"foo": ["all", "cows", "eat", "grass"]}),
        ),
        (
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
            json!([
                {"op": "test", "path": "/baz", "value": "qux"},
                {"op": "test", "path": "/foo/1", "value": 2}
            ]),
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
        ),
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]),
            json!({"foo": "bar", "child": {"grandchild": {}}}),
        ),
        (
            json!({"/": 9, "~1": 10}),
            json!([{"op": "test", "path": "/~01", "value": 10}]),
            json!({"/": 9, "~1": 10}),
        ),
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
            json!({"foo": ["bar", ["abc", "def"]]}),
        ),
        // Copies, and the whole document.
        (
            json!({"a": {"b": 1}}),
            json!([{"op": "copy", "from": "/a", "path": "/a/c"}]),
            json!({"a": {"b": 1, "c": {"b": 1}}}),
        ),
        (
            json!({"a": 1}),
            json!([{"op": "replace", "path": "", "value": [1]}]),
            json!([1]),
        ),
        (
            json!({"a": {"b": [1, 2]}}),
            json!([{"op": "move", "from": "/a", "path": ""}]),
            json!({"b": [1, 2]}),
        ),
    ];
    for (doc, patch, expected) in cases {
        assert_eq!(patched(doc, patch.clone()).unwrap(), expected, "{patch}");
    }
}

#[test]
fn operations_that_do_not_apply_fail_with_the_reason_and_the_operation() {
    let doc = json!({"baz": "qux", "foo": ["bar"], "/": 9, "~1": 10});
    let cases = [
        // A.9, A.12, A.15.
        (
            json!({"op": "test", "path": "/baz", "value": "bar"}),
            Failure::TestFailed,
        ),
        (
            json!({"op": "add", "path": "/baz/bat", "value": "qux"}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "test", "path": "/~01", "value": "10"}),
            Failure::TestFailed,
        ),
        (json!({"op": "remove", "path": ""}), Failure::InvalidPointer),
        (
            json!({"op": "remove", "path": "/nothing"}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "remove", "path": "/foo/-"}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "add", "path": "/foo/2", "value": 1}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "add", "path": "/foo/01", "value": 1}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "add", "path": "/foo/+0", "value": 1}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "replace", "path": "/nothing", "value": 1}),
            Failure::InvalidPointer,
        ),
        (
            json!({"op": "move", "from": "/nothing", "path": "/x"}),
            Failure::InvalidFromPointer,
        ),
        (
            json!({"op": "copy", "from": "/nothing", "path": "/x"}),
            Failure::InvalidFromPointer,
        ),
        (
            json!({"op": "move", "from": "/foo", "path": "/foo/0"}),
            Failure::CannotMoveInsideItself,
        ),
    ];
    for (op, reason) in cases {
        let patch = json!([{"op": "test", "path": "/baz", "value": "qux"}, op]);
        let err = patched(doc.clone(), patch).unwrap_err();
        match &err {
            PatchError::Failed { at, reason: got } => {
                assert_eq!((at.index, *got), (1, reason), "{op}");
                assert!(!err.is_too_large());
            }
            other => panic!("{op}: {other}"),
        }
    }
}

#[test]
fn the_books_stay_exact_through_every_kind_of_operation() {
    let mut doc = json!({"metadata": {"name": "a", "annotations": {}}, "list": [], "s": "x\"y"});
    let patch = ops(json!([
        {"op": "add", "path": "/metadata/annotations/first", "value": "1"},
        {"op": "add", "path": "/metadata/annotations/second", "value": {"n\nested": [1, 2.5, null]}},
        {"op": "add", "path": "/metadata/annotations/first", "value": "replaced by add"},
        {"op": "add", "path": "/list/-", "value": true},
        {"op": "add", "path": "/list/0", "value": "front"},
        {"op": "add", "path": "/list/1", "value": {"mid": []}},
        {"op": "remove", "path": "/list/2"},
        {"op": "replace", "path": "/s", "value": "\u{1}"},
        {"op": "move", "from": "/metadata/annotations/first", "path": "/a~1much~0longer key"},
        {"op": "move", "from": "/list/0", "path": "/list/1"},
        {"op": "move", "from": "/list/0", "path": "/list/0"},
        {"op": "move", "from": "/s", "path": "/metadata/name"},
        {"op": "copy", "from": "/metadata", "path": "/metadata/annotations/copy"},
        {"op": "copy", "from": "/list", "path": "/list/-"},
        {"op": "test", "path": "/metadata/name", "value": "\u{1}"},
        {"op": "remove", "path": "/metadata/annotations/second"},
        {"op": "remove", "path": "/metadata/annotations/copy"},
        {"op": "remove", "path": "/list/1"},
        {"op": "remove", "path": "/list/0"},
        {"op": "replace", "path": "", "value": {"fresh": ["start"]}},
        {"op": "move", "from": "/fresh", "path": ""},
        {"op": "add", "path": "", "value": {"x": 1}},
        {"op": "remove", "path": "/x"},
    ]));
    apply_checking_the_books(&mut doc, &patch, &limits()).unwrap();
    assert_eq!(doc, json!({}));
}

/// A small deterministic generator, so that the fuzzed patches are the same
/// on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// Every pointer in `value`, the root first.
fn pointers(value: &Value, at: &str, out: &mut Vec<String>) {
    out.push(at.to_owned());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, &format!("{at}/{i}"), out);
            }
        }
        Value::Object(members) => {
            for (key, item) in members {
                let token = key.replace('~', "~0").replace('/', "~1");
                pointers(item, &format!("{at}/{token}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_books_stay_exact_through_thousands_of_random_operations() {
    let mut rng = Lcg(0x5eed);
    let values = [
        json!(1),
        json!("s\"\n"),
        json!(null),
        json!([]),
        json!({}),
        json!({"k": [1, {"é": "✓"}]}),
        json!([[], [false]]),
    ];
    let keys = ["a", "b~c", "d/e", "", "long key with spaces"];
    let mut doc = json!({"root": {"a": [1, 2]}});
    let small = Limits {
        max_bytes: 64 * 1024,
        max_depth: 12,
        ..limits()
    };
    let mut applied = 0;
    for _ in 0..5_000 {
        let mut at = Vec::new();
        pointers(&doc, "", &mut at);
        let target = at[rng.below(at.len())].clone();
        let other = at[rng.below(at.len())].clone();
        // A new member or element next to an existing one, now and then.
        let fresh = match rng.below(3) {
            0 => format!(
                "{target}/{}",
                keys[rng.below(keys.len())]
                    .replace('~', "~0")
                    .replace('/', "~1")
            ),
            1 => format!("{target}/-"),
            _ => format!("{target}/0"),
        };
        let value = values[rng.below(values.len())].clone();
        let op = match rng.below(6) {
            0 => json!({"op": "add", "path": fresh, "value": value}),
            1 => json!({"op": "remove", "path": target}),
            2 => json!({"op": "replace", "path": target, "value": value}),
            3 => json!({"op": "move", "from": other, "path": fresh}),
            4 => json!({"op": "copy", "from": other, "path": fresh}),
            _ => json!({"op": "test", "path": target, "value": value}),
        };
        let op = ops(json!([op]));
        let mut next = doc.clone();
        if apply_checking_the_books(&mut next, &op, &small).is_ok() {
            doc = next;
            applied += 1;
        }
        if compact_len(&doc) > 16 * 1024 {
            doc = json!({"root": {"a": [1, 2]}});
        }
    }
    assert!(applied > 1_000, "only {applied} operations applied");
}

#[test]
fn a_copy_bomb_is_refused_before_the_document_passes_the_limit() {
    let doc = json!({"metadata": {"annotations": {"note": "n".repeat(400)}}});
    let bomb: Vec<Value> = (0..24)
        .map(|i| json!({"op": "copy", "from": "/metadata/annotations", "path": format!("/metadata/annotations/copy{i}")}))
        .collect();
    let mut doc = doc;
    let err = apply(&mut doc, &ops(Value::Array(bomb)), &limits()).unwrap_err();
    match &err {
        PatchError::TooLarge { at, size, max } => {
            assert_eq!((at.op, *max), ("copy", 3 * MIB));
            assert!(*size > *max && *size <= 2 * *max, "{err}");
            assert!(at.index < 24, "{err}");
        }
        other => panic!("{other}"),
    }
    assert!(err.is_too_large());
    assert!(compact_len(&doc) <= 3 * MIB);
    assert!(err.to_string().contains("3145728"), "{err}");
}

#[test]
fn more_than_ten_thousand_operations_are_refused_as_kube_refuses_them() {
    let test = json!({"op": "test", "path": "/a", "value": 1});
    let err = patched(json!({"a": 1}), Value::Array(vec![test.clone(); 10_001])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    assert!(err.is_too_large());
    assert!(patched(json!({"a": 1}), Value::Array(vec![test; 10_000])).is_ok());
}

#[test]
fn a_document_may_grow_to_the_limit_but_not_past_it() {
    // {"a":""} is 8 bytes; the string fills the rest of the limit exactly.
    let fill = |extra: usize| {
        let value = "x".repeat(3 * MIB - 8 + extra);
        json!([{"op": "replace", "path": "/a", "value": value}])
    };
    assert_eq!(
        compact_len(&patched(json!({"a": ""}), fill(0)).unwrap()),
        3 * MIB
    );
    let err = patched(json!({"a": ""}), fill(1)).unwrap_err();
    assert!(
        matches!(err, PatchError::TooLarge { size, .. } if size == 3 * MIB + 1),
        "{err}"
    );
}

#[test]
fn a_document_over_the_limit_may_still_shrink() {
    let big = json!({"a": "x".repeat(4 * MIB), "b": 1});
    let shrunk = patched(big.clone(), json!([{"op": "remove", "path": "/b"}])).unwrap();
    assert_eq!(shrunk["a"].as_str().map(str::len), Some(4 * MIB));
    let err = patched(big, json!([{"op": "add", "path": "/c", "value": 1}])).unwrap_err();
    assert!(err.is_too_large(), "{err}");
}

#[test]
fn copying_and_removing_again_is_bounded_by_what_the_copies_add_up_to() {
    // The document never grows past 1 MiB, but every copy clones 0.5 MiB
    // (the string's quotes included).
    let doc = json!({"a": "x".repeat(MIB / 2 - 2)});
    let round = [
        json!({"op": "copy", "from": "/a", "path": "/b"}),
        json!({"op": "remove", "path": "/b"}),
    ];
    let patch: Vec<Value> = round.iter().cycle().take(20).cloned().collect();
    let err = patched(doc, Value::Array(patch)).unwrap_err();
    match &err {
        PatchError::CopiesTooMuch { at, copied, max } => {
            // The seventh copy, operation 12, would bring the copies to 3.5 MiB.
            assert_eq!((at.index, at.op), (12, "copy"), "{err}");
            assert!(copied > max, "{err}");
        }
        other => panic!("{other}"),
    }
    assert!(err.is_too_large());
}

#[test]
fn a_legal_patch_near_every_limit_applies() {
    let big = "b".repeat(200 * 1024);
    let mut patch = vec![json!({"op": "add", "path": "/big", "value": big})];
    for i in 0..12 {
        patch.push(json!({"op": "copy", "from": "/big", "path": format!("/copy{i}")}));
    }
    for i in 0..12 {
        patch.push(json!({"op": "remove", "path": format!("/copy{i}")}));
    }
    for n in patch.len()..MAX_OPERATIONS {
        patch.push(json!({"op": "add", "path": "/n", "value": n}));
    }
    let done = patched(json!({}), Value::Array(patch)).unwrap();
    assert_eq!(done["big"].as_str().map(str::len), Some(200 * 1024));
    assert_eq!(done["n"], MAX_OPERATIONS - 1);
}

/// `{"a":{"a":…}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
}

#[test]
fn no_operation_may_nest_the_document_past_the_depth_limit() {
    // The root object is one level; the value adds the rest.
    let fits = json!([{"op": "add", "path": "/x", "value": nested(MAX_DEPTH - 1)}]);
    assert!(patched(json!({}), fits).is_ok());
    let deeper = json!([{"op": "add", "path": "/x", "value": nested(MAX_DEPTH)}]);
    let err = patched(json!({}), deeper).unwrap_err();
    assert!(
        matches!(err, PatchError::TooDeep { max: MAX_DEPTH, .. }),
        "{err}"
    );
    assert!(!err.is_too_large());
}

#[test]
fn copying_a_nest_into_its_own_deepest_point_is_refused_before_it_doubles() {
    // Each copy would double the depth while adding little size: the way to
    // build a document whose drop or encoding would overflow the stack.
    let mut doc = json!({"x": nested(40)});
    let deepest = |levels: usize| format!("/x{}", "/a".repeat(levels));
    let patch = json!([
        {"op": "copy", "from": "/x", "path": deepest(39)},
        {"op": "copy", "from": "/x", "path": deepest(79)},
    ]);
    let err = apply(&mut doc, &ops(patch), &limits()).unwrap_err();
    match err {
        PatchError::TooDeep { at, .. } => assert_eq!(at.index, 1),
        other => panic!("{other}"),
    }
}

#[test]
fn moving_a_nest_deeper_is_measured_when_the_bound_is_not_enough() {
    // The document is 51 deep at its deepest ("/deep"); "/x" holds a shallow
    // object. Moving "/x" 60 levels down fits, but only measuring shows it.
    let mut doc = json!({"deep": nested(50), "x": {"y": 1}});
    let down = format!("/deep{}", "/a".repeat(49));
    let fits = ops(json!([
        {"op": "replace", "path": down.clone(), "value": nested(9)},
        {"op": "move", "from": "/x", "path": format!("{down}{}/b", "/a".repeat(8))},
    ]));
    apply_checking_the_books(&mut doc, &fits, &limits()).unwrap();
    // A nest moved so deep that it does not fit, measured or not.
    let mut doc = json!({"deep": nested(60), "x": nested(45)});
    let too_deep =
        ops(json!([{"op": "move", "from": "/deep", "path": format!("/x{}/z", "/a".repeat(44))}]));
    assert_eq!(
        apply_checking_the_books(&mut doc, &too_deep, &limits()),
        Err(Refusal::TooDeep)
    );
}

#[test]
fn moving_scalars_deeper_never_raises_the_depth_bound() {
    let mut doc = json!({"a": {"b": {"c": {}}}, "v": 1});
    let mut patch = Vec::new();
    for _ in 0..200 {
        patch.push(json!({"op": "move", "from": "/v", "path": "/a/b/c/v"}));
        patch.push(json!({"op": "move", "from": "/a/b/c/v", "path": "/v"}));
    }
    apply_checking_the_books(&mut doc, &ops(Value::Array(patch)), &limits()).unwrap();
}

#[test]
fn copying_a_dense_value_is_bounded_by_what_its_copies_take_to_hold_not_only_by_their_bytes() {
    // 10,000 one-member objects: 80 KB of JSON, about 8 MB of tree. Thirty
    // copies stay under the byte limits, and would hold 240 MB.
    let dense = Value::Array(vec![json!({"a": 0}); 10_000]);
    assert!(compact_len(&dense) * 31 < 3 * MIB);
    let patch: Vec<Value> = (0..30)
        .map(|i| json!({"op": "copy", "from": "/dense", "path": format!("/copy{i}")}))
        .collect();
    let mut doc = json!({ "dense": dense });
    let err = apply(&mut doc, &ops(Value::Array(patch)), &limits()).unwrap_err();
    match &err {
        PatchError::CopiesCostTooMuch { at, cost, max } => {
            assert_eq!(at.op, "copy", "{err}");
            assert!(at.index < 2, "{err}");
            assert!(cost > max, "{err}");
            assert_eq!(*max, limits().max_copied_cost);
        }
        other => panic!("{other}"),
    }
    assert!(err.is_too_large());
}
