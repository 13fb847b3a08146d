use serde_json::json;

use super::*;

/// `a: &a [0, 0, …]` (`n` zeros) and `b: [*a, *a, …]` (`m` aliases):
/// `n × m` values once expanded.
fn bomb(n: usize, m: usize) -> Vec<u8> {
    let mut doc = String::from("a: &a [");
    doc.push_str(&vec!["0"; n].join(","));
    doc.push_str("]\nb: [");
    doc.push_str(&vec!["*a"; m].join(","));
    doc.push_str("]\n");
    doc.into_bytes()
}

fn read(body: &[u8]) -> Result<Value, YamlError> {
    to_json(body, DuplicateKeys::Refuse)
}

#[test]
fn an_alias_bomb_is_refused_without_being_expanded() {
    // 40,000 × 40,000: 1.6 billion values from 280 KB.
    assert_eq!(read(&bomb(40_000, 40_000)), Err(YamlError::Expands));
}

#[test]
fn a_billion_laughs_is_refused_as_excessive_aliasing() {
    // Ten levels of ten aliases of the level below: 10^10 values from 700 bytes.
    let mut doc = String::from("l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n");
    for i in 1..10 {
        let p = i - 1;
        let aliases = vec![format!("*l{p}"); 10].join(",");
        doc.push_str(&format!("l{i}: &l{i} [{aliases}]\n"));
    }
    assert_eq!(read(doc.as_bytes()), Err(YamlError::Expands));
}

#[test]
fn one_long_string_repeated_by_aliases_is_refused_as_excessive_aliasing() {
    // 51 copies of 100 KB: 5 MB of text from 100 KB, with few values.
    let mut doc = format!("a: &a \"{}\"\nb: [", "x".repeat(100_000));
    doc.push_str(&vec!["*a"; 50].join(","));
    doc.push_str("]\n");
    assert_eq!(read(doc.as_bytes()), Err(YamlError::Expands));
}

#[test]
fn nested_anchors_that_would_copy_each_value_into_every_one_are_refused() {
    // 120 anchored mappings inside each other around 3,500 entries, with no
    // alias at all: each key and value would be kept once per open anchor,
    // 840,000 copies from 45 KB (under serde-saphyr's default of a million,
    // far over our node bound).
    let mut doc = String::new();
    for i in 0..120 {
        doc.push_str(&format!("{}k: &a{i}\n", "  ".repeat(i)));
    }
    let values: Vec<String> = (0..3_500).map(|i| format!("v{i}: 0")).collect();
    doc.push_str(&format!(
        "{}k: {{{}}}\n",
        "  ".repeat(120),
        values.join(", ")
    ));
    assert!(doc.len() < 100_000, "{}", doc.len());
    assert_eq!(read_on_a_worker_stack(doc), Err(YamlError::Expands));
}

#[test]
fn a_small_alias_is_expanded_as_yaml_means_it() {
    let v = read(b"base: &b {x: 1}\ncopy: *b\n").unwrap();
    assert_eq!(v, json!({"base": {"x": 1}, "copy": {"x": 1}}));
}

#[test]
fn yaml_that_is_not_json_shaped_is_invalid_not_a_panic() {
    for body in [
        &b"? [a, b]\n: c\n"[..],
        b"~: c\n",
        b"a: [\n",
        b"a: *nowhere\n",
    ] {
        assert!(
            matches!(read(body), Err(YamlError::Invalid(_))),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn three_million_brackets_are_refused_at_the_flow_bound() {
    let deep = "[".repeat(3 * 1024 * 1024);
    assert_eq!(
        read(deep.as_bytes()),
        Err(YamlError::TooDeep(MAX_YAML_NESTING))
    );
    let at_bound = format!(
        "a: {}{}",
        "[".repeat(MAX_YAML_NESTING - 1),
        "]".repeat(MAX_YAML_NESTING - 1)
    );
    assert!(read(at_bound.as_bytes()).is_ok());
}

/// `read(body)` on a thread with the stack of the server's workers
/// (`server::WORKER_STACK_BYTES`): the parser recurses once a level, and an
/// unoptimised build spends about 23 KiB a level, more than a test
/// thread's 2 MiB holds at the depth bound.
fn read_on_a_worker_stack(body: String) -> Result<Value, YamlError> {
    std::thread::Builder::new()
        .stack_size(8 * 1024 * 1024)
        .spawn(move || read(body.as_bytes()))
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn block_nesting_is_bounded_at_twice_the_flow_bound() {
    let nested = |levels: usize| {
        (0..levels)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect::<String>()
    };
    // The innermost key's value is null, not a level.
    assert!(read_on_a_worker_stack(nested(MAX_YAML_DEPTH)).is_ok());
    assert_eq!(
        read_on_a_worker_stack(nested(MAX_YAML_DEPTH + 2)),
        Err(YamlError::TooDeep(MAX_YAML_DEPTH))
    );
}

#[test]
fn the_deepest_document_within_both_bounds_is_read_on_a_worker_stack() {
    // Flow at its bound inside blocks up to the overall one.
    let blocks = MAX_YAML_DEPTH - MAX_YAML_NESTING;
    let mut body: String = (0..blocks)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    body.push_str(&" ".repeat(blocks));
    body.push_str(&format!(
        "x: {}{}\n",
        "[".repeat(MAX_YAML_NESTING - 1),
        "]".repeat(MAX_YAML_NESTING - 1)
    ));
    assert!(read_on_a_worker_stack(body).is_ok());
}

#[test]
fn a_body_of_more_values_than_the_bound_is_refused_without_aliases() {
    let wide = format!("a: [{}]", "[],".repeat(1024 * 1024));
    assert_eq!(read(wide.as_bytes()), Err(YamlError::TooManyElements));
    let within = format!("a: [{}]", vec!["0"; MAX_YAML_NODES - 10].join(","));
    assert!(read(within.as_bytes()).is_ok());
}

#[test]
fn a_key_given_twice_is_refused_or_the_last_wins_as_asked() {
    let body = b"labels:\n  a: x\n  a: y\n";
    let Err(YamlError::DuplicateKey(says)) = read(body) else {
        panic!("a duplicate key was read");
    };
    assert_eq!(says, r#"duplicate entry with key "a" at line 3 column 3"#);
    assert_eq!(
        to_json(body, DuplicateKeys::LastWins),
        Ok(json!({"labels": {"a": "y"}}))
    );
}

#[test]
fn more_than_one_document_is_invalid() {
    let Err(YamlError::Invalid(says)) = read(b"a: 1\n---\nb: 2\n") else {
        panic!("two documents were read as one");
    };
    assert!(says.contains("multiple found"), "{says}");
}

#[test]
fn bytes_that_are_not_utf_8_are_invalid() {
    let Err(YamlError::Invalid(says)) = read(b"a: \xff\xfe\n") else {
        panic!("invalid UTF-8 was read");
    };
    assert!(says.contains("not valid UTF-8"), "{says}");
}

#[test]
fn a_refusal_is_one_line_without_the_body_quoted() {
    let Err(YamlError::Invalid(says)) = read(b"secret: hunter2\nb: [\n") else {
        panic!("an unclosed bracket was read");
    };
    assert!(!says.contains('\n') && !says.contains("hunter2"), "{says}");
}
