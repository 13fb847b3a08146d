#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::Duration;

use clap::Parser;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::Status;
use serde_json::json;

use super::args::Output;
use super::args::{parse_duration, parse_source, parse_target, Cli, Command, Kind, Target};
use super::commands::{plan_offer, plan_request};
use super::error::{explain, holder_of, Doing, Failure, Served};
use super::output::{advice, age, object, one_line, summary, table};
use super::progress::{timeline, Follower, Line, Stage, What};
use transfer_api::namespace_transfer::{NamespaceTransfer, TransferStepName};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn time(seconds: i64) -> String {
    Time(at(seconds)).0.to_string()
}

fn parse(line: &str) -> Cli {
    Cli::try_parse_from(line.split_whitespace()).unwrap()
}

fn offer_of(line: &str) -> super::args::Offer {
    match parse(line).command {
        Command::Offer(o) => o,
        other => panic!("not an offer: {other:?}"),
    }
}

fn request_of(line: &str) -> super::args::Request {
    match parse(line).command {
        Command::Request(r) => r,
        other => panic!("not a request: {other:?}"),
    }
}

/// A transfer as the server shows it, from its JSON.
fn shown(value: serde_json::Value) -> NamespaceTransfer {
    serde_json::from_value(value).unwrap()
}

fn source_side(status: serde_json::Value) -> NamespaceTransfer {
    shown(json!({
        "metadata": {"name": "db-to-dev", "namespace": "prod", "creationTimestamp": time(0)},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"}},
        "status": status,
    }))
}

#[test]
fn a_source_is_namespace_slash_claim_and_nothing_else() {
    assert_eq!(
        parse_source("prod/db").unwrap(),
        ("prod".to_owned(), Target::claim("db"))
    );
    for bad in [
        "db",
        "prod/",
        "/db",
        "prod/db/x",
        "Prod/db",
        "prod/DB",
        "pr od/db",
        "",
    ] {
        let err = parse_source(bad).unwrap_err();
        assert!(
            err.0.contains("NAMESPACE/CLAIM") || err.0.contains("not a valid"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn durations_read_as_kubectl_writes_them() {
    assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
    assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    for bad in ["", "m", "5x", "-5s", "1.5s"] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn an_offer_names_itself_after_the_claim_and_the_namespace_it_goes_to() {
    let (t, hint) = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer db --to dev --clone"),
    )
    .unwrap();
    assert_eq!(t.metadata.name.as_deref(), Some("db-to-dev"));
    assert_eq!(t.metadata.namespace.as_deref(), Some("prod"));
    assert_eq!(t.spec.source.name, "db");
    assert_eq!(t.spec.destination.namespace, "dev");
    assert_eq!(t.spec.destination.name, "");
    assert_eq!(t.mode().as_str(), "Clone");
    assert_eq!(
        hint.unwrap(),
        "Next, in namespace dev: kubectl transfer request prod/db --clone -n dev"
    );
}

#[test]
fn a_request_names_the_source_and_defaults_the_claim_name_on_the_server() {
    let (t, hint) = plan_request(
        "dev",
        &request_of("kubectl-transfer request prod/db --name db2 --transfer-name take"),
    )
    .unwrap();
    assert_eq!(t.metadata.name.as_deref(), Some("take"));
    assert_eq!(t.spec.source.namespace, "prod");
    assert_eq!(t.spec.source.name, "db");
    assert_eq!(t.spec.destination.namespace, "");
    assert_eq!(t.spec.destination.name, "db2");
    assert_eq!(t.role().unwrap().as_str(), "Destination");
    assert!(hint
        .unwrap()
        .contains("kubectl transfer offer db --to dev --name db2 -n prod"));
}

#[test]
fn a_populating_request_names_no_claim_and_tells_how_a_claim_names_it() {
    let (t, hint) = plan_request(
        "dev",
        &request_of("kubectl-transfer request prod/db --populate --transfer-name db-from-prod"),
    )
    .unwrap();
    assert_eq!(t.spec.destination.populate, Some(true));
    assert_eq!(t.spec.destination.name, "");
    assert!(t.populates());
    let hint = hint.unwrap();
    assert!(
        hint.contains("kubectl transfer offer db --to dev -n prod"),
        "{hint}"
    );
    assert!(
        hint.contains("kind: NamespaceTransfer, name: db-from-prod"),
        "{hint}"
    );
    // A populating request adopts a claim: it names none.
    let err =
        Cli::try_parse_from("kubectl-transfer request prod/db --populate --name data".split(' '))
            .unwrap_err();
    assert!(err.to_string().contains("--name"), "{err}");
}

#[test]
fn a_populating_clone_request_serves_every_claim_and_tells_how_to_offer_standing_clones() {
    let (t, hint) = plan_request(
        "dev",
        &request_of(
            "kubectl-transfer request prod/db --clone --populate --transfer-name db-clones",
        ),
    )
    .unwrap();
    assert!(t.is_standing_request(), "{t:?}");
    assert_eq!(transfer_api::meta::Object::validate_create(&t), Vec::new());
    let hint = hint.unwrap();
    // A standing offer: no --name.
    assert!(
        hint.contains("kubectl transfer offer db --to dev --clone -n prod"),
        "{hint}"
    );
    assert!(
        hint.contains("Every claim in dev gets a clone of its own when its spec.dataSourceRef is {apiGroup: storage.transfer.k8s.io, kind: NamespaceTransfer, name: db-clones}"),
        "{hint}"
    );
}

#[test]
fn a_destination_equal_to_the_source_without_a_new_name_is_a_usage_error() {
    let err = plan_offer("prod", &offer_of("kubectl-transfer offer db --to prod")).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("pass --name NEW"), "{err}");
    let err = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer db --to prod --name db"),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    let err = plan_request("prod", &request_of("kubectl-transfer request prod/db")).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("is a rename"), "{err}");
    let (rename, hint) = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer db --to prod --name db2"),
    )
    .unwrap();
    assert_eq!(rename.role().unwrap().as_str(), "Both");
    assert!(hint.is_none(), "a rename has no other side to tell");
}

#[test]
fn names_that_cannot_name_a_claim_or_a_transfer_are_usage_errors() {
    for line in [
        "kubectl-transfer offer Db --to dev",
        "kubectl-transfer offer db --to dev_ns",
        "kubectl-transfer offer db --to dev --name New",
        "kubectl-transfer offer db --to dev --transfer-name X",
    ] {
        let err = plan_offer("prod", &offer_of(line)).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{line}: {err}");
    }
    let long = "a".repeat(250);
    let err = plan_offer(
        "prod",
        &offer_of(&format!("kubectl-transfer offer {long} --to dev")),
    )
    .unwrap_err();
    assert!(err.to_string().contains("--transfer-name"), "{err}");
}

#[test]
fn global_flags_parse_after_the_command_as_kubectl_passes_them() {
    let cli = parse(
        "kubectl-transfer list -A --kubeconfig /k --context c -n prod --as alice --as-group g1 --as-group g2 --cache-dir /c -v 6 --request-timeout 30s",
    );
    assert_eq!(cli.global.kubeconfig.as_deref(), Some("/k"));
    assert_eq!(cli.global.context.as_deref(), Some("c"));
    assert_eq!(cli.global.namespace.as_deref(), Some("prod"));
    assert_eq!(cli.global.as_user.as_deref(), Some("alice"));
    assert_eq!(cli.global.as_group, vec!["g1", "g2"]);
    assert_eq!(cli.global.request_timeout, Some(Duration::from_secs(30)));
}

#[test]
fn an_unknown_flag_or_output_is_refused_by_the_parser() {
    assert!(Cli::try_parse_from(["kubectl-transfer", "list", "-o", "wide"]).is_err());
    assert!(Cli::try_parse_from(["kubectl-transfer", "offer", "db"]).is_err());
    assert!(Cli::try_parse_from(["kubectl-transfer", "cancel"]).is_err());
}

fn status_of(code: u16, reason: &str, message: &str) -> Status {
    serde_json::from_value(json!({
        "status": "Failure", "code": code, "reason": reason, "message": message,
    }))
    .unwrap()
}

const DOING: Doing<'static> = Doing {
    verb: "create",
    namespace: "prod",
    name: Some("db-to-dev"),
};

#[test]
fn a_409_names_the_transfer_that_holds_the_claim_and_how_to_free_it() {
    let message = "Operation cannot be fulfilled on namespacetransfers.storage.transfer.k8s.io \"db-to-dev\": source claim prod/db already has an active NamespaceTransfer: prod/older";
    assert_eq!(holder_of(message), Some(("prod", "older")));
    let text = explain(&status_of(409, "Conflict", message), DOING, &Served::Yes);
    assert!(
        text.starts_with(
            "Source claim prod/db already has an active NamespaceTransfer: prod/older."
        ),
        "{text}"
    );
    assert!(
        text.contains("kubectl transfer cancel older -n prod"),
        "{text}"
    );
    let exists = explain(
        &status_of(
            409,
            "AlreadyExists",
            "namespacetransfers \"db-to-dev\" already exists",
        ),
        DOING,
        &Served::Yes,
    );
    assert!(exists.contains("--transfer-name"), "{exists}");
}

#[test]
fn a_403_keeps_the_servers_words_naming_the_right_and_says_whom_to_ask() {
    let message = "namespacetransfers.storage.transfer.k8s.io \"db-to-dev\" is forbidden: User \"alice\" cannot delete persistentvolumeclaims \"db\" in namespace \"prod\", which giving a claim away requires";
    let text = explain(&status_of(403, "Forbidden", message), DOING, &Served::Yes);
    assert!(
        text.contains("cannot delete persistentvolumeclaims \"db\""),
        "{text}"
    );
    assert!(
        text.contains("Ask an administrator of namespace prod"),
        "{text}"
    );
    assert_eq!(
        text.matches(". ").count(),
        1,
        "two sentences at most: {text}"
    );
}

#[test]
fn a_404_from_a_cluster_without_the_api_says_the_server_is_not_installed() {
    let text = explain(
        &status_of(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
        DOING,
        &Served::NotInstalled,
    );
    assert!(text.contains("is not installed in this cluster"), "{text}");
    assert!(
        text.contains("APIService v1alpha1.storage.transfer.k8s.io"),
        "{text}"
    );
    let missing = explain(
        &status_of(404, "NotFound", "namespacetransfers \"x\" not found"),
        Doing {
            verb: "get",
            namespace: "prod",
            name: Some("x"),
        },
        &Served::Yes,
    );
    assert!(
        missing.contains("There is no NamespaceTransfer x in namespace prod"),
        "{missing}"
    );
}

#[test]
fn a_422_says_the_transfer_is_invalid_with_the_servers_causes() {
    let text = explain(
        &status_of(422, "Invalid", "NamespaceTransfer.storage.transfer.k8s.io \"x\" is invalid: spec.destination.name: Required value"),
        DOING,
        &Served::Yes,
    );
    assert!(
        text.contains("invalid") && text.contains("spec.destination.name"),
        "{text}"
    );
}

#[test]
fn exit_codes_tell_failed_cancelled_timeout_and_refused_apart() {
    let codes = [
        Failure::Refused(String::new()).exit_code(),
        Failure::Usage(String::new()).exit_code(),
        Failure::Failed {
            reason: String::new(),
            message: String::new(),
        }
        .exit_code(),
        Failure::Cancelled {
            reason: String::new(),
            message: String::new(),
        }
        .exit_code(),
        Failure::Timeout(String::new()).exit_code(),
    ];
    assert_eq!(codes, [1, 2, 3, 4, 5]);
}

#[test]
fn a_waiting_source_side_shows_the_pods_and_the_stages_passed_with_their_times() {
    let t = source_side(json!({
        "phase": "WaitingForRelease",
        "role": "Source",
        "reason": "SourceInUse",
        "message": "PersistentVolumeClaim prod/db is in use by pod(s) web-0",
        "peer": {"namespace": "dev", "name": "db-from-prod"},
        "conditions": [{"type": "PeerMatched", "status": "True", "reason": "Matched",
                        "message": "", "lastTransitionTime": time(3)}],
    }));
    let (lines, waiting) = timeline(&t);
    assert_eq!(
        lines,
        vec![Line {
            time: Some(at(3)),
            what: What::Passed(Stage::Peer),
            detail: "with dev/db-from-prod".to_owned(),
        }]
    );
    let waiting = waiting.unwrap();
    assert_eq!(waiting.what, What::Waiting("SourceInUse".to_owned()));
    assert!(waiting.detail.contains("web-0"));
    let text = summary(&t, at(10));
    assert!(
        text.contains("08:00:03  +3s     matched    with dev/db-from-prod"),
        "{text}"
    );
    assert!(
        text.contains(
            "waiting    PersistentVolumeClaim prod/db is in use by pod(s) web-0 (SourceInUse)"
        ),
        "{text}"
    );
}

#[test]
fn a_completed_transfer_shows_every_step_in_order_and_its_closing_line() {
    let steps: Vec<_> = TransferStepName::ALL
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"name": s.as_str(), "time": time(10 + i as i64)}))
        .collect();
    let t = source_side(json!({
        "phase": "Completed",
        "role": "Source",
        "reason": "Completed",
        "message": "volume pv-1 moved from prod/db to dev/db",
        "peer": {"namespace": "dev", "name": "db-from-prod"},
        "sourceClaim": {"name": "db", "uid": "u", "volumeName": "pv-1"},
        "destinationClaim": {"namespace": "dev", "name": "db", "uid": "v"},
        "conditions": [
            {"type": "PeerMatched", "status": "True", "reason": "Matched", "message": "", "lastTransitionTime": time(3)},
            {"type": "SourceReleased", "status": "True", "reason": "NotInUse", "message": "", "lastTransitionTime": time(10)},
        ],
        "steps": steps,
    }));
    let (lines, waiting) = timeline(&t);
    assert!(waiting.is_none());
    let words: Vec<_> = lines
        .iter()
        .map(|l| match l.what {
            What::Passed(s) => s.label(),
            What::Waiting(_) | What::Working(_) => "waiting",
        })
        .collect();
    assert_eq!(
        words,
        [
            "matched",
            "free",
            "locked",
            "retained",
            "created",
            "committed",
            "released",
            "settled"
        ]
    );
    assert_eq!(lines[2].detail, "prod/db (volume pv-1)");
    assert_eq!(lines[4].detail, "dev/db");
    assert_eq!(lines[7].time, Some(at(15)));
    let text = summary(&t, at(60));
    assert!(
        text.ends_with("Completed: volume pv-1 moved from prod/db to dev/db\n"),
        "{text}"
    );
}

#[test]
fn a_follower_prints_each_stage_once_however_often_it_sees_it() {
    let matched = source_side(json!({
        "phase": "WaitingForRelease", "role": "Source", "reason": "Matched", "message": "m",
        "peer": {"namespace": "dev", "name": "db-from-prod"},
    }));
    let mut follower = Follower::new(false, true);
    follower.update(&matched);
    follower.update(&matched);
    assert_eq!(follower.stages_shown(), 1);
    // A status that jumps two steps at once shows both, once.
    let mut locked = matched.clone();
    let st = locked.status.as_mut().unwrap();
    st.record_step(TransferStepName::Retained, &Time(at(5)));
    follower.update(&locked);
    follower.update(&matched);
    follower.update(&locked);
    assert_eq!(
        follower.stages_shown(),
        4,
        "matched, free, locked, retained"
    );
}

#[test]
fn the_list_table_shows_peer_and_phase_with_a_namespace_column_for_all() {
    let a = source_side(json!({
        "phase": "Rebinding", "role": "Source",
        "peer": {"namespace": "dev", "name": "db-from-prod"},
    }));
    let b = shown(json!({
        "metadata": {"name": "offer", "namespace": "prod", "creationTimestamp": time(0)},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "ci"}, "mode": "Clone"},
    }));
    let text = table(&[a, b], true, at(130));
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAMESPACE",
            "NAME",
            "ROLE",
            "MODE",
            "PEER",
            "PHASE",
            "REASON",
            "AGE"
        ]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "prod",
            "db-to-dev",
            "Source",
            "Move",
            "dev/db-from-prod",
            "Rebinding",
            "-",
            "2m"
        ]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["prod", "offer", "Source", "Clone", "ci/*", "Pending", "-", "2m"]
    );
}

#[test]
fn ages_read_as_kubectl_prints_them() {
    assert_eq!(age(at(0), at(45)), "45s");
    assert_eq!(age(at(0), at(600)), "10m");
    assert_eq!(age(at(0), at(3 * 3600)), "3h");
    assert_eq!(age(at(0), at(3 * 86_400)), "3d");
    assert_eq!(age(at(10), at(0)), "0s");
}

#[test]
fn only_real_waits_are_waits_and_the_notes_between_steps_are_not() {
    let what = |status: serde_json::Value| timeline(&source_side(status)).1.unwrap().what;
    assert_eq!(
        what(json!({"phase": "WaitingForPeer"})),
        What::Waiting("WaitingForPeer".to_owned())
    );
    assert_eq!(
        what(json!({"phase": "WaitingForRelease", "reason": "Matched"})),
        What::Working("WaitingForRelease".to_owned())
    );
    assert_eq!(
        what(json!({"phase": "Rebinding"})),
        What::Working("Rebinding".to_owned())
    );
    assert_eq!(
        what(json!({"phase": "Rebinding", "reason": "WaitingForBinding"})),
        What::Waiting("WaitingForBinding".to_owned())
    );
    assert!(timeline(&source_side(json!({"phase": "Failed"})))
        .1
        .is_none());
}

#[test]
fn control_characters_relayed_in_a_message_are_shown_escaped_not_obeyed() {
    assert_eq!(one_line("plain words, prod/db"), "plain words, prod/db");
    let hostile =
        "refused: \u{1b}]0;owned\u{7}\u{1b}[2Jgone\r\nCompleted: fake\u{9b}31m\u{202e}txt.exe";
    let shown = one_line(hostile);
    assert!(
        !shown.chars().any(|c| c.is_control() || c == '\u{202e}'),
        "{shown:?}"
    );
    assert!(shown.contains("\\u{1b}]0;owned"), "{shown:?}");
    let t =
        source_side(json!({"phase": "Failed", "reason": "DestinationRefused", "message": hostile}));
    let text = summary(&t, at(1));
    assert_eq!(
        text.lines().filter(|l| l.starts_with("Completed")).count(),
        0,
        "no forged line: {text}"
    );
    assert!(!text.contains('\u{1b}'), "{text:?}");
    // Objects stay exact: JSON escapes what it would leave raw, and parses back.
    let json = object(&t, Output::Json);
    assert!(
        !json.contains('\u{9b}') && !json.contains('\u{202e}'),
        "{json}"
    );
    let back: NamespaceTransfer = serde_json::from_str(&json).unwrap();
    assert_eq!(back.status.unwrap().message.as_deref(), Some(hostile));
}

fn complete(line: &str) -> (Vec<String>, super::complete::Need) {
    use clap::CommandFactory;
    let mut root = Cli::command();
    root.build();
    let mut words: Vec<String> = line.split(' ').map(str::to_owned).collect();
    if line.is_empty() {
        words = vec![String::new()];
    }
    super::complete::candidates(&root, &words)
}

#[test]
fn completion_offers_commands_flags_values_and_transfer_names() {
    use super::complete::Need;
    let (commands, _) = complete("");
    assert_eq!(
        commands,
        ["offer", "request", "status", "list", "cancel", "completion"]
    );
    assert_eq!(complete("st").0, ["status"]);
    let (flags, _) = complete("offer db --t");
    assert_eq!(flags, ["--to", "--transfer-name", "--timeout"]);
    assert_eq!(complete("list -o ").0, ["yaml", "json", "name"]);
    assert_eq!(complete("list --output j").0, ["json"]);
    assert_eq!(complete("completion ").0, ["bash", "zsh"]);
    assert_eq!(
        complete("status -n prod db").1,
        Need::TransferNames {
            prefix: "db".to_owned()
        }
    );
    assert_eq!(complete("status db-to-dev ").1, Need::Nothing);
    assert_eq!(
        super::complete::namespace_in(&["status".into(), "--namespace=prod".into()]),
        Some("prod".to_owned())
    );
}

#[test]
fn a_standing_offer_cannot_be_waited_for_and_dry_run_takes_its_value_with_equals() {
    let err = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer db --to ci --clone --wait"),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("standing offer"), "{err}");
    let o = offer_of("kubectl-transfer offer db --dry-run --to dev");
    assert_eq!(o.source, "db");
    assert_eq!(o.create.dry_run, super::args::DryRun::Client);
    let o = offer_of("kubectl-transfer offer db --dry-run=server --to dev");
    assert_eq!(o.create.dry_run, super::args::DryRun::Server);
}

fn snapshot_source_side(status: serde_json::Value) -> NamespaceTransfer {
    shown(json!({
        "metadata": {"name": "nightly-to-dev", "namespace": "prod", "creationTimestamp": time(0)},
        "spec": {"source": {"kind": "VolumeSnapshot", "name": "nightly"}, "destination": {"namespace": "dev"}},
        "status": status,
    }))
}

#[test]
fn a_target_names_a_claim_or_a_snapshot_and_no_other_kind() {
    assert_eq!(parse_target("db").unwrap(), Target::claim("db"));
    assert_eq!(parse_target("pvc/db").unwrap(), Target::claim("db"));
    for snapshot in [
        "snapshot/nightly",
        "volumesnapshot/nightly",
        "volumesnapshots/nightly",
    ] {
        assert_eq!(
            parse_target(snapshot).unwrap(),
            Target::snapshot("nightly"),
            "{snapshot}"
        );
    }
    for bad in ["secret/db", "snapshot/", "snapshot/a/b", "/db", ""] {
        let err = parse_target(bad).unwrap_err();
        assert!(err.0.contains("snapshot/NAME"), "{bad:?}: {err}");
    }
    let err = parse_target("snapshot/Nightly").unwrap_err();
    assert!(err.0.contains("not a valid snapshot name"), "{err}");
    let err = parse_target("Db").unwrap_err();
    assert!(err.0.contains("not a valid claim name"), "{err}");
}

#[test]
fn a_source_may_name_a_snapshot_between_its_namespace_and_its_name() {
    assert_eq!(
        parse_source("prod/snapshot/nightly").unwrap(),
        ("prod".to_owned(), Target::snapshot("nightly"))
    );
    assert_eq!(
        parse_source("prod/volumesnapshot/nightly").unwrap(),
        ("prod".to_owned(), Target::snapshot("nightly"))
    );
    assert_eq!(
        parse_source("prod/pvc/db").unwrap(),
        ("prod".to_owned(), Target::claim("db"))
    );
    // Two parts are always NAMESPACE/CLAIM: a namespace may be called
    // `snapshot`.
    assert_eq!(
        parse_source("snapshot/nightly").unwrap(),
        ("snapshot".to_owned(), Target::claim("nightly"))
    );
    for bad in [
        "prod/secret/db",
        "prod/snapshot/",
        "prod/snapshot/a/b",
        "/snapshot/nightly",
    ] {
        let err = parse_source(bad).unwrap_err();
        assert!(
            err.0.contains("NAMESPACE/snapshot/NAME") || err.0.contains("not a valid"),
            "{bad:?}: {err}"
        );
    }
    let err = parse_source("prod/snapshot/Nightly").unwrap_err();
    assert!(err.0.contains("not a valid snapshot name"), "{err}");
}

#[test]
fn an_offer_of_a_snapshot_sets_its_kind_and_tells_the_other_side_to_request_the_snapshot() {
    for line in [
        "kubectl-transfer offer snapshot/nightly --to dev",
        "kubectl-transfer offer volumesnapshot/nightly --to dev",
    ] {
        let (t, hint) = plan_offer("prod", &offer_of(line)).unwrap();
        assert_eq!(t.metadata.name.as_deref(), Some("nightly-to-dev"), "{line}");
        assert_eq!(t.spec.source.kind, "VolumeSnapshot");
        assert_eq!(t.spec.source.name, "nightly");
        assert_eq!(t.spec.source.namespace, "");
        assert_eq!(t.spec.destination.namespace, "dev");
        assert_eq!(t.spec.destination.name, "");
        assert!(t.moves_snapshot());
        assert_eq!(t.mode().as_str(), "Move");
        assert_eq!(t.role().unwrap().as_str(), "Source");
        assert_eq!(transfer_api::meta::Object::validate_create(&t), Vec::new());
        assert_eq!(
            hint.unwrap(),
            "Next, in namespace dev: kubectl transfer request prod/snapshot/nightly -n dev"
        );
        assert!(
            object(&t, Output::Yaml).contains("kind: VolumeSnapshot"),
            "what --dry-run=client prints names the kind"
        );
    }
    let (t, hint) = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer snapshot/nightly --to dev --name restored"),
    )
    .unwrap();
    assert_eq!(t.spec.destination.name, "restored");
    assert_eq!(
        hint.unwrap(),
        "Next, in namespace dev: kubectl transfer request prod/snapshot/nightly --name restored -n dev"
    );
}

#[test]
fn an_offer_of_a_claim_sends_no_kind_as_before() {
    let (t, _) = plan_offer("prod", &offer_of("kubectl-transfer offer pvc/db --to dev")).unwrap();
    assert_eq!(t.spec.source.kind, "");
    assert_eq!(t.spec.source.name, "db");
    assert_eq!(t.metadata.name.as_deref(), Some("db-to-dev"));
    assert!(!t.moves_snapshot());
    assert!(!object(&t, Output::Yaml).contains("kind: PersistentVolumeClaim"));
}

#[test]
fn a_request_for_a_snapshot_names_its_namespace_kind_and_name_and_how_the_source_offers_it() {
    for line in [
        "kubectl-transfer request prod/snapshot/nightly --name restored",
        "kubectl-transfer request prod/volumesnapshot/nightly --name restored",
    ] {
        let (t, hint) = plan_request("dev", &request_of(line)).unwrap();
        assert_eq!(
            t.metadata.name.as_deref(),
            Some("nightly-from-prod"),
            "{line}"
        );
        assert_eq!(t.metadata.namespace.as_deref(), Some("dev"));
        assert_eq!(t.spec.source.kind, "VolumeSnapshot");
        assert_eq!(t.spec.source.namespace, "prod");
        assert_eq!(t.spec.source.name, "nightly");
        assert_eq!(t.spec.destination.name, "restored");
        assert_eq!(t.spec.destination.populate, None);
        assert_eq!(t.role().unwrap().as_str(), "Destination");
        assert_eq!(transfer_api::meta::Object::validate_create(&t), Vec::new());
        assert_eq!(
            hint.unwrap(),
            "The owner of namespace prod offers it with: kubectl transfer offer snapshot/nightly --to dev --name restored -n prod"
        );
    }
    // Without --name the server names the new snapshot after the source's.
    let (t, _) = plan_request(
        "dev",
        &request_of("kubectl-transfer request prod/snapshot/nightly"),
    )
    .unwrap();
    assert_eq!(t.spec.destination.name, "");
}

#[test]
fn a_snapshot_may_be_cloned_and_populated_but_a_moved_one_is_never_populated() {
    let (t, hint) = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer snapshot/nightly --to dev --clone"),
    )
    .unwrap();
    assert!(t.clones_snapshot(), "{t:?}");
    assert!(t.is_standing_offer());
    assert_eq!(transfer_api::meta::Object::validate_create(&t), Vec::new());
    assert_eq!(
        hint.unwrap(),
        "Next, in namespace dev: kubectl transfer request prod/snapshot/nightly --clone -n dev"
    );
    for line in [
        "kubectl-transfer request prod/snapshot/nightly --clone --name copy",
        "kubectl-transfer request prod/snapshot/nightly --clone --populate",
    ] {
        let (t, _) = plan_request("dev", &request_of(line)).unwrap();
        assert!(t.clones_snapshot(), "{line}");
        assert_eq!(
            transfer_api::meta::Object::validate_create(&t),
            Vec::new(),
            "{line}"
        );
    }
    let err = plan_request(
        "dev",
        &request_of("kubectl-transfer request prod/snapshot/nightly --populate"),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("--populate"), "{err}");
    assert!(err.to_string().contains("not into a claim"), "{err}");
}

#[test]
fn a_snapshot_renamed_in_its_own_namespace_is_told_in_the_words_of_a_snapshot() {
    let err = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer snapshot/nightly --to prod"),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("the snapshot's own namespace: that is a rename"),
        "{err}"
    );
    let err = plan_request(
        "prod",
        &request_of("kubectl-transfer request prod/snapshot/nightly"),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("kubectl transfer offer snapshot/nightly --to prod --name NEW -n prod"),
        "{err}"
    );
    let err = plan_offer(
        "prod",
        &offer_of("kubectl-transfer offer snapshot/nightly --to dev --name Bad"),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("not a valid snapshot name"),
        "{err}"
    );
}

#[test]
fn a_snapshot_moves_summary_and_steps_speak_of_snapshots_not_claims() {
    let steps: Vec<_> = TransferStepName::ALL
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"name": s.as_str(), "time": time(10 + i as i64)}))
        .collect();
    let t = snapshot_source_side(json!({
        "phase": "Completed",
        "role": "Source",
        "reason": "Completed",
        "message": "VolumeSnapshot prod/nightly moved to dev/nightly",
        "peer": {"namespace": "dev", "name": "nightly-from-prod"},
        "sourceSnapshot": {"name": "nightly", "uid": "u", "contentName": "snapcontent-1"},
        "destinationSnapshot": {"namespace": "dev", "name": "nightly", "uid": "v",
                                "contentName": "snapcontent-transfer-w"},
        "conditions": [
            {"type": "PeerMatched", "status": "True", "reason": "Matched", "message": "", "lastTransitionTime": time(3)},
            {"type": "SourceReleased", "status": "True", "reason": "NotInUse", "message": "", "lastTransitionTime": time(10)},
        ],
        "steps": steps,
    }));
    let (lines, waiting) = timeline(&t);
    assert!(waiting.is_none());
    assert_eq!(lines.len(), 8);
    assert_eq!(
        lines[1].detail,
        "no claim is being restored from the snapshot"
    );
    assert_eq!(lines[2].detail, "prod/nightly (content snapcontent-1)");
    assert_eq!(
        lines[4].detail,
        "dev/nightly (content snapcontent-transfer-w)"
    );
    let text = summary(&t, at(60));
    assert!(
        text.starts_with(
            "NamespaceTransfer prod/nightly-to-dev: Source side of a Move of VolumeSnapshot prod/nightly to dev/(any name)\n"
        ),
        "{text}"
    );
    for claim_words in ["volume's reclaim policy", "claim is bound", "no pod uses"] {
        assert!(!text.contains(claim_words), "{claim_words}: {text}");
    }
    assert!(
        text.ends_with("Completed: VolumeSnapshot prod/nightly moved to dev/nightly\n"),
        "{text}"
    );
}

#[test]
fn the_destination_side_of_a_snapshot_move_never_names_the_sources_content() {
    let t = shown(json!({
        "metadata": {"name": "nightly-from-prod", "namespace": "dev", "creationTimestamp": time(0)},
        "spec": {"source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"},
                 "destination": {"name": "nightly"}},
        "status": {
            "phase": "Rebinding", "role": "Destination",
            "peer": {"namespace": "prod", "name": "nightly-to-dev"},
            "steps": [{"name": "Locked", "time": time(5)}, {"name": "Retained", "time": time(6)},
                      {"name": "Created", "time": time(7)}],
        },
    }));
    let (lines, waiting) = timeline(&t);
    let details: Vec<_> = lines.iter().map(|l| l.detail.as_str()).collect();
    assert_eq!(
        details,
        [
            "with prod/nightly-to-dev",
            "no claim is being restored from the snapshot",
            "the source snapshot",
            "the snapshot content's deletionPolicy is Retain",
            "the destination snapshot",
        ]
    );
    assert_eq!(waiting.unwrap().detail, "the snapshot is being handed over");
    let text = summary(&t, at(10));
    assert!(
        text.starts_with(
            "NamespaceTransfer dev/nightly-from-prod: Destination side of a Move of VolumeSnapshot prod/nightly to dev/nightly\n"
        ),
        "{text}"
    );
    assert!(!text.contains("snapcontent"), "{text}");
}

#[test]
fn a_snapshot_waiting_without_a_message_waits_for_the_snapshot_not_for_pods() {
    let t = snapshot_source_side(json!({"phase": "WaitingForRelease"}));
    let waiting = timeline(&t).1.unwrap();
    assert_eq!(
        waiting.detail,
        "waiting until the snapshot is ready and no claim is being restored from it"
    );
    let claim = source_side(json!({"phase": "WaitingForRelease"}));
    assert_eq!(
        timeline(&claim).1.unwrap().detail,
        "waiting until no pod uses the claim"
    );
}

#[test]
fn a_snapshot_moves_reasons_carry_advice() {
    let class = advice("SnapshotClassNotAllowed").unwrap();
    assert!(class.contains("VolumeSnapshotClass"), "{class}");
    assert!(
        class.contains("storage.transfer.k8s.io/allow-namespace-transfer"),
        "{class}"
    );
    assert!(advice("SnapshotInGroup")
        .unwrap()
        .contains("VolumeGroupSnapshot"));
    assert!(advice("SourceNotFound")
        .unwrap()
        .contains("kubectl get volumesnapshot"));
    assert_eq!(advice("SnapshotNotReady"), None, "a wait, not an end");
}

#[test]
fn the_kind_of_a_target_is_a_claim_unless_it_says_snapshot() {
    let o = offer_of("kubectl-transfer offer snapshot/nightly --to dev");
    assert_eq!(o.source, "snapshot/nightly");
    assert_eq!(parse_target(&o.source).unwrap().kind, Kind::Snapshot);
    assert_eq!(Kind::Snapshot.noun(), "snapshot");
    assert_eq!(Kind::Snapshot.source_kind(), "VolumeSnapshot");
    assert_eq!(Kind::Claim.source_kind(), "");
    assert_eq!(Target::snapshot("nightly").to_string(), "snapshot/nightly");
    assert_eq!(Target::claim("db").to_string(), "db");
}
