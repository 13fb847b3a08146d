//! The crate's layers depend downward only (`api ← storage ← registry ←
//! endpoints ← server`, with the modules beside that path placed between
//! them): a module may name, through `crate::`, only modules of a lower
//! layer than its own. The compiler cannot say so; this reads every source
//! file outside the tests and does.
//!
//! A new top-level module needs a layer here before this passes.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::{Path, PathBuf};

/// Every top-level module of `src/`, by layer: a module may use only
/// modules of a lower layer.
const LAYERS: &[(&str, u8)] = &[
    // The API crate, named `api` here.
    ("api", 0),
    // Wire-level bounds, and a watch of the cluster's objects: they know
    // nothing of ours but `api`.
    ("wire", 1),
    ("reflect", 1),
    // etcd, the OpenAPI and discovery documents, and the cache of reviews.
    ("storage", 2),
    ("discovery", 2),
    ("review_cache", 2),
    // Who asks, and the one generic store with its strategies.
    ("authn", 3),
    ("registry", 3),
    // What they may do.
    ("authz", 4),
    // The cluster's admission chain and the audit log, run by the registry
    // and the server.
    ("admission", 5),
    ("audit", 5),
    // HTTP handlers, and the controllers that act through the registry.
    ("endpoints", 6),
    ("controller", 6),
    // Everything wired together.
    ("server", 7),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The module a file of `src/` belongs to: `src/registry/fields.rs` and
/// `src/registry.rs` are both `registry`; `lib.rs` and `main.rs` none.
fn owner(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first.as_os_str().to_str()?;
    let name = name.strip_suffix(".rs").unwrap_or(name);
    (name != "lib" && name != "main").then(|| name.to_owned())
}

/// The top-level modules a line of code names as `crate::<module>`,
/// comments left out.
fn named(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or_default();
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `$crate::` and `other_crate::` are not ours.
            !code[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(at, word)| {
            code[at + word.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn no_module_uses_a_module_of_its_own_layer_or_a_higher_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for file in &files {
        let Some(module) = owner(&src, file) else {
            continue;
        };
        let Some(own) = layer(&module) else {
            wrong.push(format!("src/{module}: no layer in tests/layers.rs"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (number, line) in text.lines().enumerate() {
            for used in named(line) {
                if used == module {
                    continue;
                }
                match layer(&used) {
                    Some(theirs) if theirs < own => {}
                    Some(theirs) => wrong.push(format!(
                        "{}:{}: {module} (layer {own}) uses {used} (layer {theirs})",
                        file.strip_prefix(&src).unwrap().display(),
                        number + 1
                    )),
                    None => {}
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_finds_what_a_line_names_and_leaves_comments_and_other_crates() {
    assert_eq!(
        named("use crate::registry::{Store, Context}; // crate::server"),
        ["registry"]
    );
    assert_eq!(
        named("let x = crate::wire::MAX_BODY_BYTES + crate::api::X;"),
        ["wire", "api"]
    );
    assert!(named("$crate::api::GROUP_VERSION; kube_crate::x").is_empty());
    assert!(named("//! see crate::endpoints").is_empty());
    assert_eq!(layer("server"), Some(7));
    assert_eq!(layer("nonexistent"), None);
}
