//! What reading a large apply body as YAML costs: the peak resident memory
//! it adds per byte of input, and the time it takes, for the two readings
//! the server makes of YAML: the apply handler's (`apply`) and the audit
//! log's (`audit`), on a 1 MiB NamespaceTransfer written as block YAML and
//! as JSON (what kubectl sends).
//!
//! `cargo run --release --example yaml_memory` prints a table. Each figure
//! comes from a child process of its own that reads its input from a file,
//! so that nothing freed before the parse is reused by it; the memory is the
//! growth of the peak resident set (`VmHWM`, reset through
//! `/proc/self/clear_refs`) over the resident set just before the parse.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use storage_transfer_apiserver::wire::json_cost;
use storage_transfer_apiserver::wire::yaml::{self, DuplicateKeys};

/// How large the bodies are.
const BODY_BYTES: usize = 1024 * 1024;

/// How many parses the time is the median of.
const TIMED_RUNS: usize = 9;

/// A NamespaceTransfer of about `BODY_BYTES`: labels of the longest names
/// and values, and annotations of free text, as a large real object has.
fn transfer() -> Value {
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut size = 0;
    let mut i = 0;
    while size < BODY_BYTES {
        let key = format!("example.com/l{i:06}{}", "k".repeat(48));
        let value = format!("v{i:06}{}", "x".repeat(56));
        size += key.len() + value.len() + 8;
        labels.insert(key, json!(value));
        if i % 4 == 0 {
            let key = format!("example.com/note-{i:06}");
            let value = format!("note {i}: {}", "some words, ".repeat(16));
            size += key.len() + value.len() + 10;
            annotations.insert(key, json!(value));
        }
        i += 1;
    }
    json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {
            "name": "big",
            "namespace": "team-a",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "source": {"namespace": "team-a", "claims": ["db", "cache", "logs"]},
            "destination": {"namespace": "team-b"},
            "retries": 3,
            "dryRun": false,
        },
    })
}

/// `value` as block YAML, two spaces a level, strings double-quoted only
/// where they must be.
fn block_yaml(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                out.push_str(&format!("{pad}{k}:"));
                if v.is_object() || v.is_array() {
                    out.push('\n');
                    block_yaml(v, indent + 2, out);
                } else {
                    out.push(' ');
                    out.push_str(&scalar(v));
                    out.push('\n');
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                out.push_str(&format!("{pad}- {}\n", scalar(v)));
            }
        }
        v => out.push_str(&format!("{pad}{}\n", scalar(v))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if s.contains([':', ',']) => format!("{v}"),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// The reading `parser` makes of `body`; what it keeps until it is dropped.
/// `apply` is all the apply handler does to a body without a duplicate key.
fn parse(parser: &str, body: &[u8]) -> Result<Value, String> {
    match parser {
        "apply" => {
            let tree = yaml::to_json(body, DuplicateKeys::Refuse).map_err(|e| e.to_string())?;
            json_cost::check_tree(&tree, body.len()).map_err(|e| e.to_string())?;
            Ok(tree)
        }
        "audit" => yaml::to_json(body, DuplicateKeys::LastWins).map_err(|e| e.to_string()),
        other => Err(format!("no parser {other}")),
    }
}

/// A figure of `/proc/self/status`, in bytes.
fn status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// In the child: one parse measured for memory, then `TIMED_RUNS` for time.
fn measure(parser: &str, input: &Path) -> Result<(), String> {
    let body = std::fs::read(input).map_err(|e| e.to_string())?;
    // Writing 5 resets the peak resident set to the current one.
    std::fs::write("/proc/self/clear_refs", "5").map_err(|e| e.to_string())?;
    let before = status("VmRSS");
    let value = parse(parser, &body)?;
    let peak = status("VmHWM");
    drop(value);
    let mut times: Vec<Duration> = (0..TIMED_RUNS)
        .map(|_| {
            let start = Instant::now();
            let value = parse(parser, &body);
            let took = start.elapsed();
            drop(value);
            took
        })
        .collect();
    times.sort();
    println!(
        "{} {}",
        peak.saturating_sub(before),
        times[TIMED_RUNS / 2].as_micros()
    );
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, parser, input] = args.as_slice() {
        if mode == "--child" {
            return measure(parser, Path::new(input));
        }
    }
    let doc = transfer();
    let mut yaml_body = String::new();
    block_yaml(&doc, 0, &mut yaml_body);
    let json_body = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir();
    let inputs: Vec<(&str, PathBuf, usize)> = [("yaml", yaml_body), ("json", json_body)]
        .into_iter()
        .map(|(shape, text)| {
            let path = dir.join(format!("yaml-memory-{}-{shape}", std::process::id()));
            std::fs::write(&path, &text).map(|()| (shape, path, text.len()))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    println!("| reading | body | bytes | peak memory added | per input byte | median time |");
    println!("|---|---|---|---|---|---|");
    for parser in ["apply", "audit"] {
        for (shape, path, len) in &inputs {
            let out = Command::new(&me)
                .args(["--child", parser])
                .arg(path)
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout);
            let figures: Vec<u64> = text
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            let [peak, micros] = figures.as_slice() else {
                return Err(format!(
                    "{parser} {shape}: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            };
            println!(
                "| {parser} | {shape} | {len} | {:.1} MiB | {:.1} | {:.1} ms |",
                *peak as f64 / (1024.0 * 1024.0),
                *peak as f64 / *len as f64,
                *micros as f64 / 1000.0,
            );
        }
    }
    for (_, path, _) in &inputs {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}
