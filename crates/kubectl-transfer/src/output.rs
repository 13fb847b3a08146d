//! What `kubectl transfer` prints: objects as `-o yaml|json|name`, the table
//! of `list`, the summary of `status` (which names a VolumeSnapshot source as
//! one), and the advice a finished transfer's reason carries.

use std::borrow::Cow;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::args::Output;
use super::progress::{self, closing, outcome, plain, timeline};
use transfer_api::namespace_transfer::{NamespaceTransfer, TransferReason};
use transfer_api::{GROUP, GROUP_VERSION, NAMESPACE_TRANSFERS};

/// `text` as one line safe to print on a terminal: every control character
/// (newlines too) and every bidirectional or invisible formatting character
/// is shown escaped (`\u{1b}`), so that nothing relayed in a message (a
/// webhook's words, a driver's event, a user name) can move the cursor,
/// retitle the window, forge a line of progress or reorder what is shown.
/// For the plugin's own human output; objects (`-o`) are escaped by their
/// encoders.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `namespacetransfer.storage.transfer.k8s.io/<name>`, as `kubectl -o name`.
pub fn qualified_name(name: &str) -> String {
    format!("{}.{GROUP}/{name}", NAMESPACE_TRANSFERS.singular)
}

/// An object with its `apiVersion` and `kind`, which list items lack.
pub fn typed(mut t: NamespaceTransfer) -> NamespaceTransfer {
    if t.api_version.is_empty() {
        t.api_version = GROUP_VERSION.to_owned();
    }
    if t.kind.is_empty() {
        t.kind = NAMESPACE_TRANSFERS.kind.to_owned();
    }
    t
}

/// One object as `-o`.
pub fn object(t: &NamespaceTransfer, output: Output) -> String {
    let t = typed(t.clone());
    match output {
        Output::Yaml => yaml(&t),
        Output::Json => json(&t),
        Output::Name => format!(
            "{}\n",
            qualified_name(t.metadata.name.as_deref().unwrap_or_default())
        ),
    }
}

/// Several objects as `-o`: a `v1` `List`, as kubectl prints one.
pub fn objects(items: &[NamespaceTransfer], output: Output) -> String {
    match output {
        Output::Name => items.iter().map(|t| object(t, Output::Name)).collect(),
        Output::Yaml | Output::Json => {
            let list = List {
                api_version: "v1",
                kind: "List",
                items: items.iter().cloned().map(typed).collect(),
                metadata: Meta {
                    resource_version: "",
                },
            };
            if output == Output::Yaml {
                yaml(&list)
            } else {
                json(&list)
            }
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List {
    api_version: &'static str,
    items: Vec<NamespaceTransfer>,
    kind: &'static str,
    metadata: Meta,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    resource_version: &'static str,
}

/// YAML that a YAML 1.1 reader (kubectl's) reads the same: a string it
/// would take for a boolean or a number, `"yes"` or `"017"`, is quoted.
fn yaml(value: &impl Serialize) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|e| format!("# cannot encode: {e}\n"))
}

/// JSON as kubectl prints it, with DEL, the C1 controls and the formatting
/// characters, which serde_json leaves raw, written as `\u00XX` escapes: they
/// can only stand inside strings, so the document means the same.
fn json(value: &impl Serialize) -> String {
    let text =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("\"cannot encode: {e}\""));
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        // serde_json escapes C0 controls itself: one left raw is layout.
        if c >= '\u{7f}' && is_unsafe(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

/// The table of `list`: NAME ROLE MODE PEER PHASE REASON AGE, with a
/// NAMESPACE column first for every namespace.
pub fn table(items: &[NamespaceTransfer], all_namespaces: bool, now: Timestamp) -> String {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(items.len() + 1);
    let mut header = vec!["NAME", "ROLE", "MODE", "PEER", "PHASE", "REASON", "AGE"];
    if all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    rows.push(header.into_iter().map(str::to_owned).collect());
    for t in items {
        let st = t.status.as_ref();
        let role = st
            .and_then(|s| s.role)
            .or_else(|| t.role().ok())
            .map(|r| r.as_str().to_owned())
            .unwrap_or_else(|| "-".to_owned());
        let peer = match st.and_then(|s| s.peer.as_ref()) {
            Some(p) if p.namespace == t.own_namespace() && p.name == name_of(t) => {
                "(itself)".to_owned()
            }
            Some(p) => format!("{}/{}", p.namespace, p.name),
            None if t.is_standing_offer() => format!("{}/*", t.destination_namespace()),
            None => "-".to_owned(),
        };
        let phase = st
            .and_then(|s| s.phase)
            .map(|p| p.as_str())
            .unwrap_or("Pending");
        let reason = st
            .and_then(|s| s.reason.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "-".to_owned());
        let age = t
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|c| age(c.0, now))
            .unwrap_or_else(|| "<unknown>".to_owned());
        let mut row = vec![
            name_of(t).to_owned(),
            role,
            t.mode().as_str().to_owned(),
            peer,
            phase.to_owned(),
            reason,
            age,
        ];
        if all_namespaces {
            row.insert(0, t.own_namespace().to_owned());
        }
        rows.push(row);
    }
    columns(&rows)
}

fn name_of(t: &NamespaceTransfer) -> &str {
    t.metadata.name.as_deref().unwrap_or_default()
}

/// Rows padded into columns three spaces apart, as kubectl prints them.
fn columns(raw: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = raw
        .iter()
        .map(|r| r.iter().map(|c| one_line(c).into_owned()).collect())
        .collect();
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..width)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// kubectl's age: `45s`, `12m`, `3h`, `2d`.
pub fn age(created: Timestamp, now: Timestamp) -> String {
    let s = now.as_second().saturating_sub(created.as_second()).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The summary `status` prints: what the transfer is, its peer and phase,
/// the stages it has passed, and what it waits for or how it ended.
pub fn summary(t: &NamespaceTransfer, now: Timestamp) -> String {
    let st = t.status.as_ref();
    let role = st
        .and_then(|s| s.role)
        .or_else(|| t.role().ok())
        .map(|r| r.as_str())
        .unwrap_or("-");
    let destination = if t.spec.destination.name.is_empty() {
        format!("{}/(any name)", t.destination_namespace())
    } else {
        format!("{}/{}", t.destination_namespace(), t.spec.destination.name)
    };
    // A claim is `prod/db`, as always; a snapshot says what it is.
    let kind = if t.source_is_snapshot() {
        "VolumeSnapshot "
    } else {
        ""
    };
    let mut out = format!(
        "NamespaceTransfer {}/{}: {role} side of a {} of {kind}{}/{} to {destination}\n",
        t.own_namespace(),
        name_of(t),
        t.mode(),
        t.source_namespace(),
        t.spec.source.name,
    );
    let peer = match st.and_then(|s| s.peer.as_ref()) {
        Some(p) => {
            let phase = st
                .and_then(|s| s.peer_phase)
                .map(|p| format!(" ({p})"))
                .unwrap_or_default();
            format!("{}/{}{phase}", p.namespace, p.name)
        }
        None => "not matched yet".to_owned(),
    };
    out.push_str(&format!("Peer:   {peer}\n"));
    let phase = st
        .and_then(|s| s.phase)
        .map(|p| p.as_str())
        .unwrap_or("Pending");
    out.push_str(&format!("Phase:  {phase}\n"));
    let created = t.metadata.creation_timestamp.as_ref().map(|c| c.0);
    let (lines, waiting) = timeline(t);
    let waits = waiting
        .as_ref()
        .filter(|w| matches!(w.what, progress::What::Waiting(_)));
    for line in lines.iter().chain(waits) {
        out.push_str(&plain(line, created, now));
        out.push('\n');
    }
    if let Some(end) = outcome(t) {
        out.push_str(&closing(&end));
        out.push('\n');
    }
    out
}

/// What to do next about a transfer that ended with `reason`. Every reason
/// of the vocabulary is named here, so that a new one is a decision.
pub fn advice(reason: &str) -> Option<&'static str> {
    use TransferReason as R;
    Some(match TransferReason::parse(reason)? {
        R::Forbidden => "A side no longer holds a right the transfer needs. Restore the right, then create both transfers again.",
        R::SourceNotFound => "Check the source's name in the source namespace (`kubectl get pvc`, or `kubectl get volumesnapshot` for a snapshot), then create both transfers again.",
        R::DestinationExists => "A claim (for a snapshot, a VolumeSnapshot) of that name exists in the destination namespace. Request it under another name with --name NEW.",
        R::DeadlineExceeded => "The transfer waited longer than its activeDeadlineSeconds. Create it again when the other side is ready.",
        R::StorageClassNotAllowed => "Ask a cluster administrator to allow transfers for the volume's StorageClass (the annotation storage.transfer.k8s.io/allow-namespace-transfer: \"true\").",
        R::DestinationRefused => "The destination namespace's quota or admission refused the new claim (or snapshot). Make room or ask its administrator, then create both transfers again.",
        R::Deleted => "A side's transfer was deleted before the volume was handed over; the source is as it was. To move it after all, both sides create their transfers again.",
        R::ModeNotSupported => "Both sides must ask for the same mode: --clone on both, or on neither.",
        R::CloneFailed => "The storage driver could not clone the claim. See `kubectl get events` in the source namespace.",
        R::CloneNeedsConsumer => "The source claim's StorageClass binds WaitForFirstConsumer, so a clone would never be provisioned. Offer a claim of a class with volumeBindingMode Immediate.",
        R::VolumeChanged => "The volume (or the snapshot) changed while the transfer ran. Create both transfers again.",
        R::SnapshotClassNotAllowed => "Ask a cluster administrator to allow transfers for the snapshot's VolumeSnapshotClass (the annotation storage.transfer.k8s.io/allow-namespace-transfer: \"true\"). A class whose snapshotter secret is named after the snapshot's namespace or name cannot allow them.",
        R::SnapshotInGroup => "The snapshot belongs to a VolumeGroupSnapshot, which owns it: it cannot move on its own.",
        // Reasons of a transfer still under way, or whose message says all
        // there is to do.
        R::WaitingForPeer
        | R::PeerTaken
        | R::SourceNotBound
        | R::SourceInUse
        | R::SourceLocked
        | R::SourceReleaseRefused
        | R::Cloning
        | R::WaitingForCapacity
        | R::WaitingForBinding
        | R::DestinationLost
        | R::WaitingForClaim
        | R::ClaimMismatch
        | R::SnapshotNotReady
        | R::Completed
        | R::Matched
        | R::NotInUse
        | R::RightsConfirmed
        | R::Offering
        | R::Serving
        | R::RequestRefused
        | R::TransferNotFound
        | R::TransferNotPopulating
        | R::NotAdopted
        | R::ClaimNotServed
        | R::Locked
        | R::Authorized
        | R::Committed
        | R::CloneCreated => return None,
    })
}

/// The closing line a follower prints, for tests and the guide.
pub fn closing_line(t: &NamespaceTransfer) -> Option<String> {
    outcome(t).map(|o| progress::closing(&o))
}
