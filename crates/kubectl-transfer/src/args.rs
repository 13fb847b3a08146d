//! The command line of `kubectl transfer`: its commands, kubectl's global
//! flags it honours, and the checks of its arguments that need no server,
//! among them what a target names: a claim (`db`), or a VolumeSnapshot
//! (`snapshot/nightly`).

use std::fmt;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use transfer_api::namespace_transfer::SOURCE_KIND_VOLUME_SNAPSHOT;
use transfer_api::validation;

/// Move a PersistentVolumeClaim's volume, or a VolumeSnapshot, to another
/// namespace. Both namespaces consent: the source side offers, the
/// destination side requests. No data is copied.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-transfer",
    bin_name = "kubectl transfer",
    version,
    about,
    after_help = "Flags go after the command: `kubectl transfer offer db --to dev -n prod`.\n\
                  A VolumeSnapshot is named snapshot/NAME: `kubectl transfer offer snapshot/nightly --to dev -n prod`.\n\
                  Exit codes: 0 done (Completed), 1 refused or an error, 2 bad usage, \
                  3 Failed, 4 Cancelled, 5 --timeout passed."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub global: Global,
}

/// kubectl's global flags that the plugin honours.
#[derive(Debug, Clone, Default, Args)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// The namespace this side of the transfer is in (default: the context's).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The user to impersonate.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// A group to impersonate; repeat for more.
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// The uid to impersonate.
    #[arg(long = "as-uid", global = true, value_name = "UID")]
    pub as_uid: Option<String>,
    /// How long one request to the server may take (e.g. 30s, 1m; 0 = no limit).
    #[arg(long = "request-timeout", global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Accepted as kubectl accepts it; the plugin keeps no cache.
    #[arg(long = "cache-dir", global = true, hide = true)]
    pub cache_dir: Option<String>,
    /// Accepted as kubectl accepts it; the plugin has one level of output.
    #[arg(short = 'v', long = "v", global = true, hide = true)]
    pub verbosity: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The source side: offer CLAIM (or snapshot/NAME, a VolumeSnapshot), in
    /// this namespace, to another namespace.
    Offer(Offer),
    /// The destination side: ask for NAMESPACE/CLAIM (or
    /// NAMESPACE/snapshot/NAME) to be moved into this namespace.
    Request(Request),
    /// Show a transfer's phase and the steps it has passed.
    Status(Status),
    /// List transfers: their role, peer and phase.
    #[command(visible_alias = "ls")]
    List(List),
    /// Delete a transfer. Before the commit point that cancels it and the
    /// source stays as it was; after it, the transfer completes first.
    Cancel(Cancel),
    /// Print a shell completion script.
    Completion(Completion),
}

/// What offer and request share.
#[derive(Debug, Clone, Args)]
pub struct Create {
    /// The name of the claim (or snapshot) to create on the destination side
    /// (default: the source's).
    #[arg(long, value_name = "NEW")]
    pub name: Option<String>,
    /// Hand over a clone of the claim and keep the original (mode Clone).
    /// On offer without --name: a standing offer, one clone per request.
    /// For a snapshot: a claim restored from it, which the snapshot stays.
    #[arg(long)]
    pub clone: bool,
    /// The NamespaceTransfer's own name (default: NAME-to-NAMESPACE or NAME-from-NAMESPACE).
    #[arg(long = "transfer-name", value_name = "NAME")]
    pub transfer_name: Option<String>,
    #[command(flatten)]
    pub wait: Wait,
    /// `server`: ask the server's admission without creating anything;
    /// `client`: only print what would be sent.
    #[arg(long = "dry-run", value_enum, default_value = "none", num_args = 0..=1, require_equals = true, default_missing_value = "client")]
    pub dry_run: DryRun,
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(Debug, Clone, Args)]
pub struct Offer {
    /// What to give away, in this namespace: CLAIM, a PersistentVolumeClaim
    /// (or pvc/CLAIM); snapshot/NAME (or volumesnapshot/NAME), a VolumeSnapshot.
    #[arg(value_name = "[snapshot/]NAME")]
    pub source: String,
    /// The namespace that receives the volume or the snapshot.
    #[arg(long, value_name = "NAMESPACE")]
    pub to: String,
    #[command(flatten)]
    pub create: Create,
}

#[derive(Debug, Clone, Args)]
pub struct Request {
    /// What to receive: NAMESPACE/CLAIM, a PersistentVolumeClaim (or
    /// NAMESPACE/pvc/CLAIM); NAMESPACE/snapshot/NAME (or
    /// NAMESPACE/volumesnapshot/NAME), a VolumeSnapshot.
    #[arg(value_name = "NAMESPACE/[snapshot/]NAME")]
    pub source: String,
    /// Create no claim: the claims of this namespace whose dataSourceRef names
    /// the transfer receive the volume (a volume populator). Not with --name;
    /// for a snapshot, only with --clone.
    #[arg(long, conflicts_with = "name")]
    pub populate: bool,
    #[command(flatten)]
    pub create: Create,
}

#[derive(Debug, Clone, Args)]
pub struct Status {
    /// The transfer's name.
    pub name: String,
    /// Follow the transfer until it finishes.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// With --watch: give up after this long (e.g. 90s, 5m); 0 = never.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0")]
    pub timeout: Duration,
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(Debug, Clone, Args)]
pub struct List {
    /// List the transfers of every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub output: OutputArg,
}

#[derive(Debug, Clone, Args)]
pub struct Cancel {
    /// The transfer's name.
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct Completion {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
}

#[derive(Debug, Clone, Args)]
pub struct Wait {
    /// Follow the transfer until it finishes, showing its progress.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (e.g. 90s, 5m); 0 = never.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct OutputArg {
    /// Print the object(s) as yaml or json, or only their names.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Output>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Yaml,
    Json,
    Name,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    None,
    Server,
    Client,
}

/// A command line that parses but asks for something impossible: exit 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a transfer moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A PersistentVolumeClaim's volume: `db`, or `pvc/db`.
    Claim,
    /// A VolumeSnapshot (`spec.source.kind: VolumeSnapshot`): `snapshot/db`
    /// or `volumesnapshot/db`. It moves as a snapshot, or with `--clone` a
    /// claim restored from it moves.
    Snapshot,
}

impl Kind {
    /// The kind a target's first word names, as kubectl would accept it.
    fn from_word(word: &str) -> Option<Kind> {
        match word {
            "pvc" | "pvcs" | "persistentvolumeclaim" | "persistentvolumeclaims" => {
                Some(Kind::Claim)
            }
            "snapshot" | "snapshots" | "volumesnapshot" | "volumesnapshots" => Some(Kind::Snapshot),
            _ => None,
        }
    }

    /// The word a person uses for it: `claim` or `snapshot`.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Claim => "claim",
            Kind::Snapshot => "snapshot",
        }
    }

    /// `spec.source.kind`: left empty for a claim (the server's default),
    /// `VolumeSnapshot` for a snapshot.
    pub fn source_kind(self) -> &'static str {
        match self {
            Kind::Claim => "",
            Kind::Snapshot => SOURCE_KIND_VOLUME_SNAPSHOT,
        }
    }
}

/// What a command names: a claim or a snapshot, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

impl Target {
    pub fn claim(name: &str) -> Self {
        Self {
            kind: Kind::Claim,
            name: name.to_owned(),
        }
    }

    pub fn snapshot(name: &str) -> Self {
        Self {
            kind: Kind::Snapshot,
            name: name.to_owned(),
        }
    }
}

/// As the plugin writes it back in a hint: `db` for a claim, as always;
/// `snapshot/nightly` for a snapshot.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Claim => f.write_str(&self.name),
            Kind::Snapshot => write!(f, "snapshot/{}", self.name),
        }
    }
}

/// `NAME` or `KIND/NAME`: the kind and the name, if `text` has that shape
/// and names a kind; the name is not checked yet.
fn split_target(text: &str) -> Option<(Kind, &str)> {
    let (kind, name) = match text.split_once('/') {
        None => (Kind::Claim, text),
        Some((word, name)) => (Kind::from_word(word)?, name),
    };
    (!name.is_empty() && !name.contains('/')).then_some((kind, name))
}

/// What `offer` gives away: `CLAIM`, `pvc/CLAIM`, `snapshot/NAME` or
/// `volumesnapshot/NAME`, the name a valid one.
pub fn parse_target(text: &str) -> Result<Target, Usage> {
    let (kind, name) = split_target(text).ok_or_else(|| {
        Usage(format!(
            "{text:?} is neither CLAIM nor snapshot/NAME: give the claim's name, as in db, or the VolumeSnapshot's, as in snapshot/nightly"
        ))
    })?;
    check_name(kind, name)?;
    Ok(Target {
        kind,
        name: name.to_owned(),
    })
}

/// What `request` receives: `NAMESPACE/CLAIM` or `NAMESPACE/snapshot/NAME`
/// (or the other words [`parse_target`] takes), each part a valid name.
pub fn parse_source(text: &str) -> Result<(String, Target), Usage> {
    let bad = || {
        Usage(format!(
            "{text:?} is not NAMESPACE/CLAIM or NAMESPACE/snapshot/NAME: give the source namespace and the claim's name, as in prod/db, or the VolumeSnapshot's, as in prod/snapshot/nightly"
        ))
    };
    let (namespace, rest) = text.split_once('/').ok_or_else(bad)?;
    if namespace.is_empty() {
        return Err(bad());
    }
    let (kind, name) = split_target(rest).ok_or_else(bad)?;
    check_namespace(namespace)?;
    check_name(kind, name)?;
    Ok((
        namespace.to_owned(),
        Target {
            kind,
            name: name.to_owned(),
        },
    ))
}

/// A namespace name: a DNS-1123 label.
pub fn check_namespace(name: &str) -> Result<(), Usage> {
    match validation::is_dns1123_label(name).first() {
        None => Ok(()),
        Some(why) => Err(Usage(format!(
            "{name:?} is not a valid namespace name: {why}"
        ))),
    }
}

/// A claim's or a snapshot's name: a DNS-1123 subdomain.
pub fn check_name(kind: Kind, name: &str) -> Result<(), Usage> {
    match validation::is_dns1123_subdomain(name).first() {
        None => Ok(()),
        Some(why) => Err(Usage(format!(
            "{name:?} is not a valid {} name: {why}",
            kind.noun()
        ))),
    }
}

/// `90s`, `5m`, `1h30m`, `250ms` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err("empty duration".to_owned());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{text:?} is not a duration such as 90s, 5m or 1h"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?} is too long a duration"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(format!("{text:?} is not a duration such as 90s, 5m or 1h")),
        };
        total = total.saturating_add(unit);
        rest = &rest[unit_len..];
    }
    Ok(total)
}
