//! What can go wrong in `kubectl transfer`, each as one sentence that says
//! what to do next, and the exit code each gets.

use std::fmt;

use kube::core::Status;

use transfer_api::GROUP;

/// Why the plugin stops with a non-zero exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The command line asks for something impossible (exit 2).
    Usage(String),
    /// The server, or the cluster, refused or could not be reached (exit 1).
    Refused(String),
    /// The transfer ended `Failed` (exit 3).
    Failed { reason: String, message: String },
    /// The transfer ended `Cancelled`, or was deleted unfinished (exit 4).
    Cancelled { reason: String, message: String },
    /// `--timeout` passed before the transfer finished (exit 5).
    Timeout(String),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Refused(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Failed { .. } => 3,
            Failure::Cancelled { .. } => 4,
            Failure::Timeout(_) => 5,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(text) | Failure::Refused(text) | Failure::Timeout(text) => {
                f.write_str(text)
            }
            Failure::Failed { reason, message } => write!(f, "Failed ({reason}): {message}"),
            Failure::Cancelled { reason, message } => {
                write!(f, "Cancelled ({reason}): {message}")
            }
        }
    }
}

impl From<super::args::Usage> for Failure {
    fn from(usage: super::args::Usage) -> Self {
        Failure::Usage(usage.0)
    }
}

/// What the plugin was doing when the server answered, for the sentence.
#[derive(Debug, Clone, Copy)]
pub struct Doing<'a> {
    /// `create`, `get`, `list`, `watch` or `delete`.
    pub verb: &'a str,
    /// The namespace asked about (empty for all namespaces).
    pub namespace: &'a str,
    /// The transfer's name, if one was named.
    pub name: Option<&'a str>,
}

/// Whether the aggregated API answers, asked when a request got 404 or 503.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    Yes,
    /// Discovery of the group version said 404: no APIService.
    NotInstalled,
    /// Registered but unavailable (503), with the server's words.
    Unavailable(String),
}

/// One sentence for the server's answer `status` to what the plugin was
/// `doing`, with what to do next.
pub fn explain(status: &Status, doing: Doing<'_>, served: &Served) -> String {
    let message = status.message.trim_end_matches('.');
    let ns = doing.namespace;
    match served {
        Served::NotInstalled => return not_installed(),
        Served::Unavailable(why) => return unavailable(why),
        Served::Yes => {}
    }
    match (status.code, status.reason.as_str()) {
        (403, _) if ns.is_empty() => format!(
            "{message}. Ask a cluster administrator for that right, or list one namespace (-n)."
        ),
        (403, _) => format!(
            "{message}. Ask an administrator of namespace {ns} for that right, or run as a user who has it (--as)."
        ),
        (409, "AlreadyExists") => {
            let name = doing.name.unwrap_or_default();
            format!(
                "A NamespaceTransfer named {name} already exists in namespace {ns}. See it with `kubectl transfer status {name} -n {ns}`, or choose another name with --transfer-name."
            )
        }
        (409, _) => match holder_of(message) {
            Some((holder_ns, holder)) => format!(
                "{}. Wait for {holder_ns}/{holder} to finish (`kubectl transfer status {holder} -n {holder_ns}`), or cancel it (`kubectl transfer cancel {holder} -n {holder_ns}`).",
                capitalized(after_colon(message))
            ),
            None => format!("{message}. Try again: the object changed meanwhile."),
        },
        (422, _) => format!("The server refused the transfer as invalid: {message}. Correct what it names and try again."),
        (404, _) => match doing.name {
            Some(name) => format!(
                "There is no NamespaceTransfer {name} in namespace {ns}. `kubectl transfer list -n {ns}` shows the ones there."
            ),
            None => format!("{message}."),
        },
        (401, _) => format!(
            "The cluster does not know who you are: {message}. Check the credentials of your kubeconfig context."
        ),
        (429, _) => format!("The server is busy: {message}. Try again in a moment."),
        _ => format!("The server could not {} the transfer: {message}.", doing.verb),
    }
}

/// The storage-transfer-apiserver is not registered in the cluster.
pub fn not_installed() -> String {
    format!(
        "The storage-transfer-apiserver is not installed in this cluster: it does not serve {GROUP}/v1alpha1 (no APIService v1alpha1.{GROUP}). Ask a cluster administrator to install it (deploy/README.md)."
    )
}

fn unavailable(why: &str) -> String {
    let why = why.trim_end_matches('.');
    format!(
        "The storage-transfer-apiserver is installed but not answering: {why}. Ask a cluster administrator to look at `kubectl get apiservice v1alpha1.{GROUP}`."
    )
}

/// The transfer named at the end of the server's one-active-transfer 409:
/// `… already has an active NamespaceTransfer: <namespace>/<name>`.
pub fn holder_of(message: &str) -> Option<(&str, &str)> {
    let (_, tail) = message.rsplit_once("active NamespaceTransfer: ")?;
    let (ns, name) = tail.trim().split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(char::is_whitespace))
        .then_some((ns, name))
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// kube's conflict message without its `Operation cannot be fulfilled on …:`
/// preamble, which names our transfer, not the one in the way.
fn after_colon(message: &str) -> &str {
    match message.split_once("\": ") {
        Some((head, tail)) if head.starts_with("Operation cannot be fulfilled") => tail,
        _ => message,
    }
}
