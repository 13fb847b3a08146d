//! The crate's layers depend downward only (`api ← storage ← registry ←
//! endpoints ← server`, with the modules beside that path placed between
//! them): a module may name, through `crate::`, only modules of a lower
//! layer than its own. The compiler cannot say so; this reads every source
//! file outside the tests and does.
//!
//! A new top-level module needs a layer here before this passes, and so
//! does any other name used through `crate::`. Paths through `super::` are
//! not read: they stay inside one top-level module here (a file two levels
//! down could reach out with `super::super::`; none here does).

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
    ("metrics", 1),
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

/// `text` without its comments: a `//` ends a line's code unless a `:`
/// comes right before it (as in a URL in a string).
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        let mut end = line.len();
        let mut from = 0;
        while let Some(at) = line[from..].find("//") {
            let at = from + at;
            if !line[..at].ends_with(':') {
                end = at;
                break;
            }
            from = at + 2;
        }
        code.push_str(&line[..end]);
        code.push('\n');
    }
    code
}

/// The top-level modules `code` names as `crate::<module>` or within
/// `crate::{…}`, each with its line (from 1).
fn named(code: &str) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, word) in code.match_indices("crate::") {
        // `$crate::` and `other_crate::` are not ours.
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[at + word.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            found.push((line, ident(rest)));
            continue;
        };
        // A group: the first segment of each of its items.
        let (mut depth, mut item_start) = (0usize, 0usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    found.push((line, ident(&group[item_start..i])));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    found.push((line, ident(&group[item_start..i])));
                    item_start = i + 1;
                }
                _ => {}
            }
        }
    }
    found.retain(|(_, name)| !name.is_empty() && name != "self");
    found
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
        let at = file.strip_prefix(&src).unwrap().display();
        for (line, used) in named(&code_of(&text)) {
            if used == module {
                continue;
            }
            match layer(&used) {
                Some(theirs) if theirs < own => {}
                Some(theirs) => wrong.push(format!(
                    "{at}:{line}: {module} (layer {own}) uses {used} (layer {theirs})"
                )),
                None => wrong.push(format!(
                    "{at}:{line}: {module} uses crate::{used}, which has no layer here"
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_finds_what_code_names_and_leaves_comments_and_other_crates() {
    let names =
        |text: &str| -> Vec<String> { named(&code_of(text)).into_iter().map(|(_, n)| n).collect() };
    assert_eq!(
        names("use crate::registry::{Store, Context}; // crate::server"),
        ["registry"]
    );
    assert_eq!(
        names("let x = crate::wire::MAX_BODY_BYTES + crate::api::X;"),
        ["wire", "api"]
    );
    assert_eq!(
        names("use crate::{\n    audit::Sink,\n    endpoints::{Body, Call},\n    self,\n};"),
        ["audit", "endpoints"]
    );
    assert_eq!(
        names("let url = \"https://x\"; let y = crate::server::Z; // crate::audit"),
        ["server"]
    );
    assert!(names("$crate::api::GROUP_VERSION; kube_crate::x").is_empty());
    assert!(names("//! see crate::endpoints").is_empty());
    let lines: Vec<usize> = named(&code_of("\n\nuse crate::{a,\n b};"))
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(lines, [3, 3], "a group's names are reported at its line");
    assert_eq!(layer("server"), Some(7));
    assert_eq!(layer("nonexistent"), None);
}
