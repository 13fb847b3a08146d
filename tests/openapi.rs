//! The OpenAPI documents and aggregated discovery: the checked-in copies under
//! `openapi/` against the code, then the real thing end to end, straight to our
//! server and through kube-apiserver's aggregator with the real kubectl.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use sta_testenv::{shared, ControlPlane};
use storage_transfer_apiserver::discovery::openapi;
use storage_transfer_apiserver::endpoints::kinds::Kinds;

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V3_PATH: &str = "/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1";

/// With `UPDATE_OPENAPI=1` (`make openapi`) this rewrites the files instead.
#[test]
fn checked_in_openapi_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi");
    if std::env::var("UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        openapi::write_checked_in(&dir, &Kinds::served().schemas()).unwrap();
        return;
    }
    let mut stale = Vec::new();
    for (relative, want) in openapi::checked_in(&Kinds::served().schemas()).unwrap() {
        let path = dir.join(&relative);
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("openapi/{} differs", relative.display())),
            Err(e) => stale.push(format!("openapi/{}: {e}", relative.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "the checked-in OpenAPI documents no longer match the API types ({}); \
         run `make openapi` and commit the result",
        stale.join("; ")
    );
}

/// Retries `check` for up to 30 s: the aggregator downloads our OpenAPI in the
/// background after the APIService becomes available.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check() {
            Ok(value) => return value,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

#[test]
fn our_server_answers_aggregated_discovery_with_its_content_type_and_etag() {
    let http = cp().server_http().unwrap();
    let resp = http
        .request("GET", "/apis", &[("Accept", AGGREGATED_V2)], b"")
        .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.header("Content-Type"), Some(AGGREGATED_V2));
    let body = resp.json();
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    assert_eq!(
        body["items"][0]["metadata"]["name"],
        "storage.transfer.k8s.io"
    );

    let etag = resp.header("ETag").unwrap().to_owned();
    let again = http
        .request(
            "GET",
            "/apis",
            &[("Accept", AGGREGATED_V2), ("If-None-Match", &etag)],
            b"",
        )
        .unwrap();
    assert_eq!(again.status, 304);

    let legacy = http.request("GET", "/apis", &[], b"").unwrap();
    assert_eq!(legacy.json()["kind"], "APIGroupList");
}

#[test]
fn our_server_serves_the_v3_document_its_root_points_at() {
    let http = cp().server_http().unwrap();
    let root = http.request("GET", "/openapi/v3", &[], b"").unwrap();
    assert_eq!(root.status, 200, "{}", root.text());
    let url = root.json()["paths"]["apis/storage.transfer.k8s.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = http.request("GET", &url, &[], b"").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Cache-Control"), Some("public, immutable"));
    let hash = url.split_once("?hash=").unwrap().1;
    assert_eq!(resp.header("ETag"), Some(format!("\"{hash}\"").as_str()));
    let etag = resp.header("ETag").unwrap().to_owned();
    let again = http
        .request("GET", V3_PATH, &[("If-None-Match", &etag)], b"")
        .unwrap();
    assert_eq!(again.status, 304);
    let v2 = http.request("GET", "/openapi/v2", &[], b"").unwrap();
    assert_eq!(v2.json()["swagger"], "2.0");
}

#[test]
fn kubectl_explain_describes_spec_source_from_our_schema() {
    // Start the control plane before the clock of `eventually` does.
    let k = cp().kubectl();
    let out = eventually("kubectl explain namespacetransfer.spec.source", || {
        k.try_ok(&["explain", "namespacetransfer.spec.source"])
            .map_err(|e| e.to_string())
    });
    assert!(out.contains("KIND:       NamespaceTransfer"), "{out}");
    assert!(
        out.contains("What is given away: the claim whose volume moves"),
        "{out}"
    );
    for field in ["kind", "name", "namespace"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(&format!("{field}\t"))),
            "{field} missing: {out}"
        );
    }
}

#[test]
fn kubectl_explain_shows_enum_values_of_ephemeral_claim_release_policy() {
    let k = cp().kubectl();
    let out = eventually("kubectl explain ephemeralclaim.spec.releasePolicy", || {
        k.try_ok(&["explain", "ephemeralclaim.spec.releasePolicy"])
            .map_err(|e| e.to_string())
    });
    assert!(out.contains("FIELD: releasePolicy <string>"), "{out}");
    assert!(out.contains("ENUM:"), "{out}");
    assert!(out.contains("Retain"), "{out}");
}

#[test]
fn the_aggregator_serves_our_v3_document_with_our_schemas() {
    let k = cp().kubectl();
    let url = eventually("our group-version in the aggregated /openapi/v3", || {
        let root: Value = serde_json::from_str(
            &k.try_ok(&["get", "--raw", "/openapi/v3"])
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        root["paths"]["apis/storage.transfer.k8s.io/v1alpha1"]["serverRelativeURL"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "not listed yet".to_owned())
    });
    let doc: Value = serde_json::from_str(&k.ok(&["get", "--raw", &url])).unwrap();
    let schemas = &doc["components"]["schemas"];
    for name in [
        "io.k8s.transfer.storage.v1alpha1.NamespaceTransfer",
        "io.k8s.transfer.storage.v1alpha1.EphemeralClaimList",
    ] {
        assert!(schemas[name].is_object(), "{name} missing");
    }
}

#[test]
fn the_aggregator_merges_our_definitions_into_openapi_v2() {
    let k = cp().kubectl();
    eventually("our definitions in the aggregated /openapi/v2", || {
        let doc: Value = serde_json::from_str(
            &k.try_ok(&["get", "--raw", "/openapi/v2"])
                .map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        let nst = &doc["definitions"]["io.k8s.transfer.storage.v1alpha1.NamespaceTransfer"];
        if nst["x-kubernetes-group-version-kind"][0]["kind"] == "NamespaceTransfer"
            && doc["paths"]["/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{namespace}/namespacetransfers/{name}/status"]["patch"].is_object()
        {
            Ok(())
        } else {
            Err("not merged yet".to_owned())
        }
    });
}

#[test]
fn kubectl_sends_strict_field_validation_because_our_openapi_advertises_it() {
    let ns = cp().namespace("openapi-strict").unwrap();
    let yaml = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\n\
         kind: NamespaceTransfer\n\
         metadata:\n  name: strict\n  namespace: {}\n\
         spec:\n  source:\n    name: db\n  bogus: true\n",
        ns.name
    );
    // Server-side validation answers with our decoder's message; kubectl's own
    // client-side validation would word it differently.
    let run = eventually("kubectl create with an unknown field", || {
        let run = cp()
            .kubectl()
            .run_with_stdin(&["create", "--dry-run=server", "-f", "-"], Some(&yaml));
        if run.stderr.contains("strict decoding error") {
            Ok(run)
        } else {
            Err(format!("{run:?}"))
        }
    });
    assert!(!run.success);
    assert!(run.stderr.contains("spec.bogus"), "{}", run.stderr);
}

/// Every field path of `schema` below `prefix`, depth first, as `kubectl
/// explain` takes them (`namespacetransfer.spec.source.name`): through
/// references (`$ref`, or kube-openapi's `allOf: [{$ref}]`), array items and
/// map values, stopping where a type would contain itself, as kubectl does.
fn field_paths(
    schemas: &Value,
    schema: &Value,
    prefix: &str,
    seen: &mut Vec<String>,
) -> Vec<String> {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str());
    if let Some(reference) = reference {
        let name = reference.rsplit('/').next().unwrap_or_default().to_owned();
        if seen.contains(&name) {
            return Vec::new();
        }
        seen.push(name.clone());
        let paths = field_paths(schemas, &schemas[&name], prefix, seen);
        seen.pop();
        return paths;
    }
    if schema["items"].is_object() {
        return field_paths(schemas, &schema["items"], prefix, seen);
    }
    if schema["additionalProperties"].is_object() {
        return field_paths(schemas, &schema["additionalProperties"], prefix, seen);
    }
    let mut paths = Vec::new();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let path = format!("{prefix}.{name}");
            paths.push(path.clone());
            paths.extend(field_paths(schemas, property, &path, seen));
        }
    }
    paths
}

/// The sentences that repeat one another within one description of
/// `kubectl explain`'s output: the same sentence twice, or one that is the
/// start of another ("The claim whose volume is transferred." and "The claim
/// whose volume is transferred, or the VolumeSnapshot."). A description is
/// what kubectl prints under DESCRIPTION (the field's own, then its type's:
/// where the bug was) or under one field of FIELDS. Sibling fields may share
/// a sentence, as kube's ObjectMeta shares "Populated by the system.".
/// Headers, names, types and enum values are not sentences; neither are
/// the short ones ("Required.", "Final.").
fn repeated_sentences(output: &str) -> Vec<String> {
    let mut descriptions: Vec<Vec<String>> = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let mut in_enum = false;
    for line in output.lines() {
        let text = line.trim();
        let field = line.contains('\t');
        if text == "DESCRIPTION:" || field {
            descriptions.extend(current.take());
            current = Some(Vec::new());
            continue;
        }
        if text == "FIELDS:" || text.starts_with("FIELD:") {
            descriptions.extend(current.take());
            continue;
        }
        if text.starts_with("ENUM:") {
            in_enum = true;
        }
        let skipped = in_enum || text.starts_with("enum:") || text.starts_with("- ");
        if text.is_empty() {
            in_enum = false;
        }
        if let Some(lines) = current.as_mut() {
            // A blank or an enum value ends a paragraph.
            lines.push(if skipped {
                String::new()
            } else {
                text.to_owned()
            });
        }
    }
    descriptions.extend(current.take());

    let mut repeated = Vec::new();
    for lines in descriptions {
        let sentences: Vec<String> = lines
            .split(String::is_empty)
            .flat_map(|paragraph| sentences_of(&paragraph.join(" ")))
            .filter(|s| s.split_whitespace().count() >= 4)
            .collect();
        let stem = |s: &str| s.trim_end_matches(['.', ':']).to_owned();
        let starts = |long: &str, short: &str| {
            long.strip_prefix(short)
                .is_some_and(|rest| rest.starts_with([',', ':', ';', ' ', '(']))
        };
        for (i, a) in sentences.iter().enumerate() {
            for b in &sentences[i + 1..] {
                let (sa, sb) = (stem(a), stem(b));
                if sa == sb || starts(&sa, &sb) || starts(&sb, &sa) {
                    repeated.push(format!("{a:?} and {b:?}"));
                }
            }
        }
    }
    repeated
}

/// `paragraph` cut after each word that ends a sentence: one ending in a
/// full stop (but "e.g." and the like) before a capital, a quote or the end.
fn sentences_of(paragraph: &str) -> Vec<String> {
    let words: Vec<&str> = paragraph.split_whitespace().collect();
    let mut sentences = Vec::new();
    let mut sentence: Vec<&str> = Vec::new();
    for (i, word) in words.iter().enumerate() {
        sentence.push(word);
        let next_starts = words
            .get(i + 1)
            .is_none_or(|w| w.starts_with(|c: char| c.is_uppercase() || c == '`' || c == '"'));
        let abbreviation = ["e.g.", "i.e.", "etc."].contains(word);
        if word.ends_with(['.', '?', '!']) && next_starts && !abbreviation {
            sentences.push(sentence.join(" "));
            sentence.clear();
        }
    }
    if !sentence.is_empty() {
        sentences.push(sentence.join(" "));
    }
    sentences
}

#[test]
fn repeated_sentences_finds_a_field_doc_that_its_type_repeats() {
    let output = "KIND:       NamespaceTransfer\nVERSION:    v1alpha1\n\n\
        FIELD: source <TransferSource>\n\nDESCRIPTION:\n    \
        The claim whose volume is transferred.\n    \
        The claim whose volume is transferred, or the\n    VolumeSnapshot.\n\n\
        FIELDS:\n  kind\t<string>\n    The kind of the source object. Must be set.\n\n  \
        name\t<string>\n    The name of the source claim. Must be set.\n";
    assert_eq!(
        repeated_sentences(output),
        ["\"The claim whose volume is transferred.\" and \
          \"The claim whose volume is transferred, or the VolumeSnapshot.\""]
    );
    let distinct = output.replace(
        "The claim whose volume is transferred, or the",
        "A claim, or a",
    );
    assert_eq!(repeated_sentences(&distinct), Vec::<String>::new());
}

#[test]
fn kubectl_explain_prints_each_description_once() {
    let k = cp().kubectl();
    let document = openapi::openapi_v3_group_version(&Kinds::served().schemas());
    let schemas = &document["components"]["schemas"];
    let mut paths = Vec::new();
    for (resource, kind) in [
        ("namespacetransfer", "NamespaceTransfer"),
        ("ephemeralclaim", "EphemeralClaim"),
    ] {
        let schema = &schemas[format!("io.k8s.transfer.storage.v1alpha1.{kind}")];
        assert!(schema.is_object(), "{kind} is not in the document");
        paths.push(resource.to_owned());
        paths.extend(field_paths(schemas, schema, resource, &mut Vec::new()));
    }
    assert!(
        paths.contains(&"namespacetransfer.spec.source.name".to_owned())
            && paths.contains(&"ephemeralclaim.spec.claimTemplate.spec.resources".to_owned()),
        "the walk missed fields: {paths:?}"
    );
    // Wait until the aggregator has our OpenAPI, then explain every path.
    eventually("kubectl explain namespacetransfer.spec.source", || {
        k.try_ok(&["explain", "namespacetransfer.spec.source"])
            .map_err(|e| e.to_string())
    });
    let mut repeats = Vec::new();
    for path in &paths {
        let out = k.ok(&["explain", path]);
        for repeat in repeated_sentences(&out) {
            repeats.push(format!("kubectl explain {path}: {repeat}"));
        }
    }
    assert!(
        repeats.is_empty(),
        "{} repeats over {} outputs of kubectl explain:\n{}",
        repeats.len(),
        paths.len(),
        repeats.join("\n")
    );
}
