use super::*;
use clap::Parser;

#[test]
fn durations_accept_kube_style_units() {
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
    assert!(parse_duration("soon").is_err());
    assert!(parse_duration("3h").is_err());
}

#[test]
fn a_duration_too_long_to_hold_is_refused_not_a_panic() {
    let minutes = format!("{}m", u64::MAX);
    assert!(parse_duration(&minutes).unwrap_err().contains("too long"));
}

#[test]
fn a_cert_without_a_key_is_rejected_by_the_flag_parser() {
    let err = Options::try_parse_from(["x", "--tls-cert-file", "/a.crt"]).unwrap_err();
    assert!(err.to_string().contains("--tls-private-key-file"), "{err}");
}

#[test]
fn a_missing_cert_file_is_an_error_naming_the_flag() {
    let opts = Options::try_parse_from([
        "x",
        "--insecure-allow-all",
        "--tls-cert-file",
        "/nonexistent/a.crt",
        "--tls-private-key-file",
        "/nonexistent/a.key",
    ])
    .unwrap();
    let err = opts.complete().unwrap_err().to_string();
    assert!(err.starts_with("--tls-cert-file"), "{err}");
    assert!(err.contains("/nonexistent/a.crt"), "{err}");
}

#[test]
fn without_cert_flags_a_self_signed_identity_is_generated() {
    let opts =
        Options::try_parse_from(["x", "--secure-port", "0", "--insecure-allow-all"]).unwrap();
    let config = opts.complete().unwrap();
    assert_eq!(config.bind.port(), 0);
    assert_eq!(
        config.tls.alpn_protocols,
        [b"h2".to_vec(), b"http/1.1".to_vec()]
    );
}

#[test]
fn authentication_is_delegated_unless_told_it_is_insecure() {
    let opts = Options::try_parse_from(["x"]).unwrap();
    assert_eq!(
        opts.complete().unwrap().auth,
        AuthMode::Delegated {
            kubeconfig: None,
            api_audiences: Vec::new(),
        }
    );
    let opts = Options::try_parse_from(["x", "--insecure-allow-all"]).unwrap();
    assert_eq!(opts.complete().unwrap().auth, AuthMode::InsecureAllowAll);
}

#[test]
fn api_audiences_are_a_comma_separated_list() {
    let opts =
        Options::try_parse_from(["x", "--api-audiences=https://kubernetes.default.svc, api,"])
            .unwrap();
    assert_eq!(
        opts.complete().unwrap().auth,
        AuthMode::Delegated {
            kubeconfig: None,
            api_audiences: vec![
                "https://kubernetes.default.svc".to_owned(),
                "api".to_owned()
            ],
        }
    );
}

#[test]
fn a_missing_kubeconfig_is_an_error_naming_the_flag() {
    let opts = Options::try_parse_from(["x", "--kubeconfig", "/nonexistent/kubeconfig"]).unwrap();
    let err = opts.complete().unwrap_err().to_string();
    assert!(err.starts_with("--kubeconfig"), "{err}");
}

#[test]
fn etcd_flags_are_checked_and_name_the_flag() {
    for (args, flag) in [
        (vec!["--etcd-servers", "127.0.0.1:2379"], "--etcd-servers"),
        (vec!["--etcd-prefix", "registry"], "--etcd-prefix"),
    ] {
        let mut all = vec!["x", "--insecure-allow-all"];
        all.extend(args);
        let err = Options::try_parse_from(all)
            .unwrap()
            .complete()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(flag), "{err}");
    }
    let opts = Options::try_parse_from([
        "x",
        "--insecure-allow-all",
        "--etcd-servers",
        "http://a:1,http://b:2",
        "--etcd-prefix",
        "/custom/",
    ])
    .unwrap();
    let config = opts.complete().unwrap();
    assert_eq!(config.etcd.endpoints, ["http://a:1", "http://b:2"]);
    assert_eq!(config.etcd_prefix, "/custom");
}

#[test]
fn controllers_are_enabled_and_disabled_in_order_as_kube_controller_manager_reads_them() {
    let enabled = |list: &str| {
        Options::try_parse_from([
            "x",
            "--insecure-allow-all",
            &format!("--controllers={list}"),
        ])
        .unwrap()
        .complete()
        .map(|c| c.controllers.enabled)
    };
    let all = Options::try_parse_from(["x", "--insecure-allow-all"])
        .unwrap()
        .complete()
        .unwrap()
        .controllers
        .enabled;
    assert!(all.transfers && all.claims, "all run by default");
    let only_transfers = enabled("*,-ephemeralclaim").unwrap();
    assert!(only_transfers.transfers && !only_transfers.claims);
    let only_claims = enabled("ephemeralclaim").unwrap();
    assert!(!only_claims.transfers && only_claims.claims);
    let none = enabled("-namespacetransfer,-ephemeralclaim").unwrap();
    assert!(!none.any());
    assert!(!enabled("").unwrap().any(), "an empty list runs none");
    let err = enabled("*,pvc-protection").unwrap_err().to_string();
    assert!(
        err.starts_with("--controllers") && err.contains("pvc-protection"),
        "{err}"
    );
    assert!(enabled("-*").is_err(), "'-*' is not a thing");
}

fn completed(args: &[&str]) -> Result<CompletedConfig, ConfigError> {
    let mut all = vec!["x", "--insecure-allow-all"];
    all.extend_from_slice(args);
    Options::try_parse_from(all).unwrap().complete()
}

#[test]
fn connection_limits_default_to_bounds_that_close_idle_clients_within_seconds() {
    let limits = completed(&[]).unwrap().connections;
    assert_eq!(
        limits,
        ConnectionLimits {
            tls_handshake_timeout: Duration::from_secs(10),
            read_header_timeout: Duration::from_secs(10),
            http2_read_idle_timeout: Duration::from_secs(30),
            http2_ping_timeout: Duration::from_secs(15),
            http2_max_streams_per_connection: 1000,
            idle_connection_timeout: Duration::from_secs(90),
            max_connections: 1024,
        }
    );
}

#[test]
fn connection_limits_are_read_from_their_flags() {
    let limits = completed(&[
        "--tls-handshake-timeout=3s",
        "--read-header-timeout=500ms",
        "--http2-read-idle-timeout=1m",
        "--http2-ping-timeout=5",
        "--http2-max-streams-per-connection=250",
        "--idle-connection-timeout=2m",
        "--max-connections=64",
    ])
    .unwrap()
    .connections;
    assert_eq!(
        limits,
        ConnectionLimits {
            tls_handshake_timeout: Duration::from_secs(3),
            read_header_timeout: Duration::from_millis(500),
            http2_read_idle_timeout: Duration::from_secs(60),
            http2_ping_timeout: Duration::from_secs(5),
            http2_max_streams_per_connection: 250,
            idle_connection_timeout: Duration::from_secs(120),
            max_connections: 64,
        }
    );
}

#[test]
fn a_connection_limit_that_is_not_a_number_is_refused_by_the_flag_parser() {
    for (arg, flag) in [
        ("--tls-handshake-timeout=soon", "--tls-handshake-timeout"),
        ("--read-header-timeout=1h", "--read-header-timeout"),
        ("--http2-read-idle-timeout=-1s", "--http2-read-idle-timeout"),
        ("--http2-ping-timeout=", "--http2-ping-timeout"),
        (
            "--idle-connection-timeout=idle",
            "--idle-connection-timeout",
        ),
        ("--max-connections=-1", "--max-connections"),
        ("--max-connections=many", "--max-connections"),
    ] {
        let err = Options::try_parse_from(["x", arg]).unwrap_err().to_string();
        assert!(err.contains(flag), "{arg}: {err}");
    }
}

#[test]
fn a_connection_limit_that_would_refuse_every_connection_is_an_error_naming_the_flag() {
    for (arg, says) in [
        (
            "--tls-handshake-timeout=0s",
            "--tls-handshake-timeout: must be longer than 0s",
        ),
        (
            "--read-header-timeout=0ms",
            "--read-header-timeout: must be longer than 0s",
        ),
        (
            "--http2-read-idle-timeout=0",
            "--http2-read-idle-timeout: must be longer than 0s",
        ),
        (
            "--http2-ping-timeout=0s",
            "--http2-ping-timeout: must be longer than 0s",
        ),
        (
            "--idle-connection-timeout=0s",
            "--idle-connection-timeout: must be longer than 0s",
        ),
        (
            "--max-connections=0",
            "--max-connections: must be at least 1",
        ),
    ] {
        let err = completed(&[arg]).unwrap_err().to_string();
        assert_eq!(err, says, "{arg}");
    }
}

#[test]
fn flow_control_limits_default_to_kube_apiservers() {
    let limits = completed(&[]).unwrap().flow_control;
    assert_eq!(
        limits,
        FlowControlLimits {
            max_read_only: 400,
            max_mutating: 200,
            max_queued_per_user: 50,
            max_queued_total: 1000,
            queue_timeout: Duration::from_secs(15),
            max_watches_per_user: 100,
        }
    );
    assert_eq!(limits, FlowControlLimits::default());
}

#[test]
fn flow_control_limits_are_read_from_their_flags_and_zero_means_no_limit() {
    let limits = completed(&[
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=1",
        "--max-queued-requests-per-user=0",
        "--max-queued-requests=0",
        "--request-queue-timeout=500ms",
        "--max-watches-per-user=0",
    ])
    .unwrap()
    .flow_control;
    assert_eq!(
        limits,
        FlowControlLimits {
            max_read_only: 0,
            max_mutating: 1,
            max_queued_per_user: 0,
            max_queued_total: 0,
            queue_timeout: Duration::from_millis(500),
            max_watches_per_user: 0,
        }
    );
}

#[test]
fn a_flow_control_limit_that_is_negative_or_not_a_number_is_refused_naming_the_flag() {
    for (arg, flag, says) in [
        (
            "--max-requests-inflight=-1",
            "--max-requests-inflight",
            "'-1' is negative",
        ),
        (
            "--max-mutating-requests-inflight=many",
            "--max-mutating-requests-inflight",
            "'many' is not a whole number",
        ),
        (
            "--max-queued-requests-per-user=-5",
            "--max-queued-requests-per-user",
            "'-5' is negative",
        ),
        (
            "--max-queued-requests=1.5",
            "--max-queued-requests",
            "'1.5' is not a whole number",
        ),
        (
            "--max-watches-per-user=",
            "--max-watches-per-user",
            "'' is not a whole number",
        ),
        (
            "--request-queue-timeout=-1s",
            "--request-queue-timeout",
            "is not a duration",
        ),
    ] {
        let err = Options::try_parse_from(["x", arg]).unwrap_err().to_string();
        assert!(err.contains(flag) && err.contains(says), "{arg}: {err}");
    }
}

#[test]
fn flow_control_limits_that_contradict_each_other_are_an_error_naming_the_flag() {
    for (args, says) in [
        (
            &["--request-queue-timeout=0s"][..],
            "--request-queue-timeout: must be longer than 0s",
        ),
        (
            &[
                "--max-queued-requests=10",
                "--max-queued-requests-per-user=20",
            ][..],
            "--max-queued-requests: 10 is less than --max-queued-requests-per-user=20",
        ),
    ] {
        let err = completed(args).unwrap_err().to_string();
        assert!(err.starts_with(says), "{args:?}: {err}");
    }
    // Without queues, a wait of 0s contradicts nothing.
    assert!(completed(&[
        "--request-queue-timeout=0s",
        "--max-queued-requests-per-user=0"
    ])
    .is_ok());
}

#[test]
fn max_objects_per_namespace_defaults_to_a_thousand_and_zero_means_no_limit() {
    assert_eq!(completed(&[]).unwrap().max_objects_per_namespace, 1000);
    assert_eq!(
        completed(&["--max-objects-per-namespace=0"])
            .unwrap()
            .max_objects_per_namespace,
        0
    );
    for bad in ["-1", "many"] {
        let err =
            Options::try_parse_from(["x".to_owned(), format!("--max-objects-per-namespace={bad}")])
                .unwrap_err()
                .to_string();
        assert!(err.contains("--max-objects-per-namespace"), "{err}");
    }
}

#[test]
fn the_pod_fence_is_namespace_slash_name_or_empty_for_none() {
    assert_eq!(
        parse_pod_fence("storage-transfer-system/storage-transfer-fence"),
        Ok(PodFenceName(Some((
            "storage-transfer-system".to_owned(),
            "storage-transfer-fence".to_owned()
        ))))
    );
    assert_eq!(parse_pod_fence(""), Ok(PodFenceName(None)));
    for bad in [
        "fence",
        "/fence",
        "ns/",
        "Ns/fence",
        "a.b/fence",
        "ns/-fence",
        "ns/fence/x",
        "ns/fence pod",
    ] {
        assert!(parse_pod_fence(bad).is_err(), "{bad:?} accepted");
    }
    let long = format!("ns/{}", "a".repeat(254));
    assert!(parse_pod_fence(&long).is_err());
}

/// A cause is printed once: in the message, not again as a `source()` that
/// an error reporter walking the chain would print after it.
#[test]
fn a_configuration_error_prints_its_cause_once() {
    use std::error::Error as _;
    let tls = crate::server::tls::TlsError::from(rustls::Error::General("no key".to_owned()));
    let err = ConfigError::from(tls);
    assert!(err.to_string().contains("no key"), "{err}");
    assert!(err.source().is_none(), "{err}");
    let tls = crate::server::tls::TlsError::from(rustls::Error::General("no key".to_owned()));
    assert!(tls.source().is_none(), "{tls}");
}
