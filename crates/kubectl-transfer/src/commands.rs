//! The commands of `kubectl transfer`, each a few API calls as the user the
//! kubeconfig names: offer and request create a NamespaceTransfer (or ask
//! the server's admission about one, `--dry-run=server`) for a claim or a
//! VolumeSnapshot, status and `--wait` follow one by watching it, list
//! lists, cancel deletes.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Api, Client, Config};

use super::args::{self, Cli, Command, Create, DryRun, Global, Kind, Output, Shell, Target};
use super::error::{explain, Doing, Failure, Served};
use super::output;
use super::progress::{self, Follower};
use transfer_api::meta::is_condition_true;
use transfer_api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferSpec, TransferDestination,
    TransferMode, TransferReason, TransferSource, TransferStepName, CONDITION_REBOUND,
    SNAPSHOT_GROUP, SOURCE_KIND_VOLUME_SNAPSHOT,
};
use transfer_api::{GROUP_VERSION, NAMESPACE_TRANSFERS};

/// The connection and the namespace a command works in.
#[derive(Clone)]
struct Session {
    client: Client,
    namespace: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Session {
    fn transfers(&self) -> Api<NamespaceTransfer> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The server's refusal as one sentence. A 404 or 503 first asks
    /// discovery whether our API is served at all.
    async fn refused(&self, err: kube::Error, doing: Doing<'_>) -> Failure {
        match err {
            kube::Error::Api(status) => {
                let served = if matches!(status.code, 404 | 503) {
                    served(&self.client).await
                } else {
                    Served::Yes
                };
                Failure::Refused(explain(&status, doing, &served))
            }
            kube::Error::SerdeError(e) => Failure::Refused(format!(
                "The server's answer could not be read ({e}). This plugin may be older than the server: update it."
            )),
            other => Failure::Refused(format!(
                "Cannot reach the cluster: {other}. Check the server of your kubeconfig context."
            )),
        }
    }
}

/// Whether the cluster serves `storage.transfer.k8s.io/v1alpha1`.
async fn served(client: &Client) -> Served {
    let request = match http::Request::get(format!("/apis/{GROUP_VERSION}")).body(Vec::new()) {
        Ok(r) => r,
        Err(_) => return Served::Yes,
    };
    match client.request_text(request).await {
        Ok(_) => Served::Yes,
        Err(kube::Error::Api(status)) if status.code == 404 => Served::NotInstalled,
        Err(kube::Error::Api(status)) if status.code == 503 => {
            Served::Unavailable(status.message.clone())
        }
        Err(_) => Served::Yes,
    }
}

/// Runs one command line.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Completion(c) = &cli.command {
        return completion(c.shell);
    }
    let session = connect(&cli.global).await?;
    match cli.command {
        Command::Offer(a) => offer(&session, a).await,
        Command::Request(a) => request(&session, a).await,
        Command::Status(a) => status(&session, a).await,
        Command::List(a) => list(&session, a).await,
        Command::Cancel(a) => cancel(&session, a).await,
        Command::Completion(_) => Ok(()),
    }
}

/// A client as kubectl would make one from the same flags.
async fn connect(g: &Global) -> Result<Session, Failure> {
    let options = KubeConfigOptions {
        context: g.context.clone(),
        cluster: g.cluster.clone(),
        user: g.user.clone(),
    };
    let named = g.context.is_some() || g.cluster.is_some() || g.user.is_some();
    let loaded = match &g.kubeconfig {
        Some(path) => match Kubeconfig::read_from(path) {
            Ok(kc) => Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => {
                return Err(Failure::Refused(format!(
                    "Cannot read --kubeconfig {path}: {e}."
                )))
            }
        },
        None if named => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| e.to_string()),
        // $KUBECONFIG, ~/.kube/config, or in a pod its ServiceAccount.
        None => Config::infer().await.map_err(|e| e.to_string()),
    };
    let mut config = loaded.map_err(|e| {
        Failure::Refused(format!(
            "Cannot load a kubeconfig: {e}. Pass --kubeconfig, set KUBECONFIG, or check --context."
        ))
    })?;
    if g.as_uid.is_some() && g.as_user.is_none() {
        return Err(Failure::Usage(
            "--as-uid needs --as: kubernetes impersonates the uid of a user".to_owned(),
        ));
    }
    if let Some(user) = &g.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !g.as_group.is_empty() {
        if config.auth_info.impersonate.is_none() {
            return Err(Failure::Usage(
                "--as-group needs --as: kubernetes impersonates groups of a user".to_owned(),
            ));
        }
        config.auth_info.impersonate_groups = Some(g.as_group.clone());
    }
    if let Some(uid) = &g.as_uid {
        config.auth_info.impersonate_uid = Some(uid.clone());
    }
    if let Some(timeout) = g.request_timeout.filter(|t| !t.is_zero()) {
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
    }
    let namespace = g
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    args::check_namespace(&namespace)?;
    let client = Client::try_from(config)
        .map_err(|e| Failure::Refused(format!("cannot make a client for the cluster: {e}")))?;
    Ok(Session { client, namespace })
}

async fn offer(session: &Session, a: args::Offer) -> Result<(), Failure> {
    let (t, hint) = plan_offer(&session.namespace, &a)?;
    if a.create.dry_run != DryRun::Client {
        let source = &t.spec.source.name;
        if t.source_is_snapshot() {
            snapshot_exists(session, source).await?;
        } else {
            claim_exists(session, source).await?;
        }
    }
    create(session, t, &a.create, hint).await
}

/// A snapshot that moves is received as a snapshot: `--populate` goes with
/// `--clone` only (a claim restored from it), never with a move.
fn refuse_for_snapshot(target: &Target, clone: bool, populate: bool) -> Result<(), Failure> {
    if target.kind == Kind::Snapshot && populate && !clone {
        return Err(Failure::Usage(format!(
            "--populate without --clone cannot go with {target}: a moved VolumeSnapshot is received as a VolumeSnapshot, not into a claim; add --clone to fill each claim with a restore of it, or drop --populate"
        )));
    }
    Ok(())
}

/// The transfer `offer` creates in namespace `ns`, and the line that tells
/// the user what the other side runs; or why the command line cannot be.
pub fn plan_offer(
    ns: &str,
    a: &args::Offer,
) -> Result<(NamespaceTransfer, Option<String>), Failure> {
    let target = args::parse_target(&a.source)?;
    refuse_for_snapshot(&target, a.create.clone, false)?;
    let noun = target.kind.noun();
    args::check_namespace(&a.to)?;
    if let Some(name) = &a.create.name {
        args::check_name(target.kind, name)?;
    }
    if a.to == ns {
        match &a.create.name {
            None => {
                return Err(Failure::Usage(format!(
                    "--to {ns} is the {noun}'s own namespace: that is a rename, so pass --name NEW, the {noun}'s new name"
                )))
            }
            Some(name) if *name == target.name => {
                return Err(Failure::Usage(format!(
                    "--name {name} is the {noun}'s own name: a rename needs another name"
                )))
            }
            Some(_) => {}
        }
    }
    let name = transfer_name(&a.create, &target.name, "to", &a.to)?;
    if a.create.clone && a.create.name.is_none() && a.create.wait.wait {
        return Err(Failure::Usage(format!(
            "--clone without --name is a standing offer, which never finishes by itself: drop --wait, and follow each request in {} instead",
            a.to
        )));
    }
    let t = transfer(
        &name,
        ns,
        TransferSource {
            kind: target.kind.source_kind().to_owned(),
            name: target.name.clone(),
            ..TransferSource::default()
        },
        TransferDestination {
            namespace: a.to.clone(),
            name: a.create.name.clone().unwrap_or_default(),
            ..TransferDestination::default()
        },
        a.create.clone,
    );
    let hint = (a.to != ns).then(|| {
        let mut line = format!(
            "Next, in namespace {}: kubectl transfer request {ns}/{target}",
            a.to
        );
        if let Some(new) = &a.create.name {
            line.push_str(&format!(" --name {new}"));
        }
        if a.create.clone {
            line.push_str(" --clone");
        }
        line.push_str(&format!(" -n {}", a.to));
        line
    });
    Ok((t, hint))
}

async fn request(session: &Session, a: args::Request) -> Result<(), Failure> {
    let (t, hint) = plan_request(&session.namespace, &a)?;
    create(session, t, &a.create, hint).await
}

/// The transfer `request` creates in namespace `ns`, and the line that
/// tells the user what the source side runs.
pub fn plan_request(
    ns: &str,
    a: &args::Request,
) -> Result<(NamespaceTransfer, Option<String>), Failure> {
    let (source_ns, target) = args::parse_source(&a.source)?;
    refuse_for_snapshot(&target, a.create.clone, a.populate)?;
    if let Some(name) = &a.create.name {
        args::check_name(target.kind, name)?;
    }
    if source_ns == ns {
        return Err(Failure::Usage(format!(
            "{} is in this namespace ({ns}): a transfer within one namespace is a rename; run `kubectl transfer offer {target} --to {ns} --name NEW -n {ns}`",
            a.source
        )));
    }
    let name = transfer_name(&a.create, &target.name, "from", &source_ns)?;
    let t = transfer(
        &name,
        ns,
        TransferSource {
            kind: target.kind.source_kind().to_owned(),
            namespace: source_ns.clone(),
            name: target.name.clone(),
        },
        TransferDestination {
            namespace: String::new(),
            name: a.create.name.clone().unwrap_or_default(),
            populate: a.populate.then_some(true),
        },
        a.create.clone,
    );
    let hint = Some(format!(
        "The owner of namespace {source_ns} offers it with: kubectl transfer offer {target} --to {ns}{}{} -n {source_ns}",
        a.create
            .name
            .as_ref()
            .map(|n| format!(" --name {n}"))
            .unwrap_or_default(),
        if a.create.clone { " --clone" } else { "" },
    ))
    .map(|mut hint| {
        if a.populate {
            let which = if a.create.clone {
                "Every claim in {ns} gets a clone of its own"
            } else {
                "A claim in {ns} receives the volume"
            }
            .replace("{ns}", ns);
            hint.push_str(&format!(
                "\n{which} when its spec.dataSourceRef is {{apiGroup: storage.transfer.k8s.io, kind: NamespaceTransfer, name: {name}}}"
            ));
        }
        hint
    });
    Ok((t, hint))
}

/// `--transfer-name`, or `<claim or snapshot>-<to|from>-<namespace>`.
fn transfer_name(c: &Create, source: &str, word: &str, other: &str) -> Result<String, Failure> {
    let name = c
        .transfer_name
        .clone()
        .unwrap_or_else(|| format!("{source}-{word}-{other}"));
    if let Some(why) = transfer_api::validation::is_dns1123_subdomain(&name).first() {
        return Err(Failure::Usage(format!(
            "{name:?} cannot name a transfer ({why}): choose a name with --transfer-name"
        )));
    }
    Ok(name)
}

fn transfer(
    name: &str,
    namespace: &str,
    source: TransferSource,
    destination: TransferDestination,
    clone: bool,
) -> NamespaceTransfer {
    NamespaceTransfer {
        api_version: GROUP_VERSION.to_owned(),
        kind: NAMESPACE_TRANSFERS.kind.to_owned(),
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: NamespaceTransferSpec {
            source,
            destination,
            mode: clone.then_some(TransferMode::Clone),
            ..NamespaceTransferSpec::default()
        },
        status: None,
    }
}

/// The source side names a claim of its own namespace: one that does not
/// exist is a mistake better caught now than as `SourceNotFound` once the
/// other side has answered. A user who may not read claims is not stopped.
async fn claim_exists(session: &Session, claim: &str) -> Result<(), Failure> {
    let ns = &session.namespace;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(session.client.clone(), ns);
    match claims.get(claim).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            // Without our API the transfer could not be made either; say so.
            let text = match served(&session.client).await {
                Served::NotInstalled => super::error::not_installed(),
                _ => format!(
                    "There is no PersistentVolumeClaim {claim} in namespace {ns}. `kubectl get pvc -n {ns}` lists the claims there."
                ),
            };
            Err(Failure::Refused(text))
        }
        _ => Ok(()),
    }
}

/// `snapshot.storage.k8s.io/v1` VolumeSnapshots, read without the
/// snapshot controller's types.
fn volume_snapshots() -> ApiResource {
    let gvk = GroupVersionKind::gvk(SNAPSHOT_GROUP, "v1", SOURCE_KIND_VOLUME_SNAPSHOT);
    ApiResource::from_gvk_with_plural(&gvk, "volumesnapshots")
}

/// As [`claim_exists`], for a VolumeSnapshot: one that does not exist is
/// caught now rather than as `SourceNotFound`. A cluster that serves no
/// VolumeSnapshots is told apart from a snapshot that is not there; a user
/// who may not read snapshots is not stopped.
async fn snapshot_exists(session: &Session, snapshot: &str) -> Result<(), Failure> {
    let ns = &session.namespace;
    let snapshots: Api<DynamicObject> =
        Api::namespaced_with(session.client.clone(), ns, &volume_snapshots());
    match snapshots.get(snapshot).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            // A missing object names itself in the details; a missing
            // resource does not.
            let missing_object = status.details.as_ref().is_some_and(|d| d.name == snapshot);
            let text = match served(&session.client).await {
                Served::NotInstalled => super::error::not_installed(),
                _ if missing_object => format!(
                    "There is no VolumeSnapshot {snapshot} in namespace {ns}. `kubectl get volumesnapshot -n {ns}` lists the snapshots there."
                ),
                _ => format!(
                    "This cluster serves no VolumeSnapshots ({SNAPSHOT_GROUP}/v1), so there is no snapshot {snapshot} to move. Ask a cluster administrator to install the snapshot controller and its CRDs."
                ),
            };
            Err(Failure::Refused(text))
        }
        _ => Ok(()),
    }
}

async fn create(
    session: &Session,
    t: NamespaceTransfer,
    c: &Create,
    hint: Option<String>,
) -> Result<(), Failure> {
    let name = t.metadata.name.clone().unwrap_or_default();
    if c.dry_run == DryRun::Client {
        print(&output::object(&t, c.output.output.unwrap_or(Output::Yaml)));
        return Ok(());
    }
    let params = PostParams {
        dry_run: c.dry_run == DryRun::Server,
        field_manager: Some("kubectl-transfer".to_owned()),
    };
    let made = match session.transfers().create(&params, &t).await {
        Ok(made) => made,
        Err(e) => {
            let doing = Doing {
                verb: "create",
                namespace: &session.namespace,
                name: Some(&name),
            };
            return Err(session.refused(e, doing).await);
        }
    };
    let dry = if c.dry_run == DryRun::Server {
        " (server dry run)"
    } else {
        ""
    };
    match c.output.output {
        Some(o) => print(&output::object(&made, o)),
        None => {
            print(&format!("{} created{dry}\n", output::qualified_name(&name)));
            if let (Some(hint), false) = (&hint, c.dry_run == DryRun::Server) {
                print(&format!("{hint}\n"));
            }
        }
    }
    if c.wait.wait && c.dry_run == DryRun::None {
        follow(session, &name, c.wait.timeout, c.output.output.is_some()).await?;
    }
    Ok(())
}

async fn status(session: &Session, a: args::Status) -> Result<(), Failure> {
    let api = session.transfers();
    let t = get(session, &api, &a.name).await?;
    if let Some(o) = a.output.output {
        print(&output::object(&t, o));
        if !a.watch {
            return Ok(());
        }
    } else if !a.watch {
        print(&output::summary(&t, Timestamp::now()));
        return Ok(());
    }
    follow(session, &a.name, a.timeout, a.output.output.is_some()).await
}

async fn get(
    session: &Session,
    api: &Api<NamespaceTransfer>,
    name: &str,
) -> Result<NamespaceTransfer, Failure> {
    match api.get(name).await {
        Ok(t) => Ok(t),
        Err(e) => {
            let doing = Doing {
                verb: "get",
                namespace: &session.namespace,
                name: Some(name),
            };
            Err(session.refused(e, doing).await)
        }
    }
}

/// Watches transfer `name` until it finishes, drawing its progress; its end
/// becomes the exit code. `to_stderr`: stdout carries an object (`-o`).
async fn follow(
    session: &Session,
    name: &str,
    timeout: Duration,
    to_stderr: bool,
) -> Result<(), Failure> {
    let terminal = if to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let mut follower = Follower::new(terminal, to_stderr);
    let mut last: Option<NamespaceTransfer> = None;
    let watching = watch_until_finished(session, name, &mut follower, &mut last);
    let ended = if timeout.is_zero() {
        watching.await
    } else {
        match tokio::time::timeout(timeout, watching).await {
            Ok(ended) => ended,
            Err(_) => {
                let state = last
                    .as_ref()
                    .and_then(|t| Some((t, t.status.as_ref()?)))
                    .map(|(t, st)| {
                        let phase = st.phase.unwrap_or(Phase::Pending);
                        let why = st
                            .message
                            .clone()
                            .unwrap_or_else(|| progress::phase_text(t, phase).to_owned());
                        format!("it is still {phase}: {why}")
                    })
                    .unwrap_or_else(|| "it has no status yet".to_owned());
                follower.finish(&format!("Timed out after {}", show(timeout)));
                return Err(Failure::Timeout(format!(
                    "transfer {name} did not finish within --timeout {}: {state}. `kubectl transfer status {name} --watch -n {}` follows it on.",
                    show(timeout),
                    session.namespace
                )));
            }
        }
    };
    let t = match ended {
        Ok(t) => t,
        Err(failure) => {
            follower.abandon();
            return Err(failure);
        }
    };
    let Some(end) = progress::outcome(&t) else {
        follower.finish("the transfer was deleted before it finished");
        return Err(Failure::Cancelled {
            reason: TransferReason::Deleted.as_str().to_owned(),
            message: format!("transfer {name} was deleted before it finished"),
        });
    };
    follower.finish(&progress::closing(&end));
    match end.phase {
        Phase::Completed => Ok(()),
        Phase::Cancelled => Err(Failure::Cancelled {
            reason: end.reason,
            message: end.message,
        }),
        _ => Err(Failure::Failed {
            reason: end.reason,
            message: end.message,
        }),
    }
}

/// The transfer as it ends, or as it was when it was deleted unfinished.
///
/// A watch that ends, is cut or says its version is too old is taken up
/// again from a fresh read; a transient refusal (429, 5xx) or a lost
/// connection is retried after a pause that doubles up to 5 s, so a server
/// that fails at once is not asked again in a tight loop. The object is
/// followed by uid: one deleted and made again under the same name is not it.
async fn watch_until_finished(
    session: &Session,
    name: &str,
    follower: &mut Follower,
    last: &mut Option<NamespaceTransfer>,
) -> Result<NamespaceTransfer, Failure> {
    let api = session.transfers();
    let doing = Doing {
        verb: "watch",
        namespace: &session.namespace,
        name: Some(name),
    };
    let mut current = get(session, &api, name).await?;
    let uid = current.metadata.uid.clone();
    let mut pause = Pause::default();
    loop {
        follower.update(&current);
        *last = Some(current.clone());
        if progress::outcome(&current).is_some() {
            return Ok(current);
        }
        let version = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        match api.watch(&params, &version).await {
            Ok(stream) => {
                let mut stream = stream.boxed();
                loop {
                    match stream.try_next().await {
                        Ok(Some(WatchEvent::Added(t) | WatchEvent::Modified(t))) => {
                            if t.metadata.uid != uid {
                                return Ok(last.clone().unwrap_or(t));
                            }
                            pause.reset();
                            current = t;
                            follower.update(&current);
                            *last = Some(current.clone());
                            if progress::outcome(&current).is_some() {
                                return Ok(current);
                            }
                        }
                        Ok(Some(WatchEvent::Deleted(t))) => {
                            let seen = if t.metadata.uid == uid {
                                t
                            } else {
                                current.clone()
                            };
                            *last = Some(seen.clone());
                            return Ok(seen);
                        }
                        Ok(Some(WatchEvent::Bookmark(b))) => {
                            current.metadata.resource_version = Some(b.metadata.resource_version);
                        }
                        // Too old (410) or cut: read it afresh and watch on.
                        Ok(Some(WatchEvent::Error(_)) | None) | Err(_) => break,
                    }
                }
            }
            Err(e) if transient(&e) => {}
            Err(e) => return Err(session.refused(e, doing).await),
        }
        pause.wait().await;
        current = loop {
            match api.get(name).await {
                Ok(t) if t.metadata.uid == uid => break t,
                // Deleted while the watch was down: as it was last seen.
                Ok(_) => return Ok(current),
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(current),
                Err(e) if transient(&e) => pause.wait().await,
                Err(e) => return Err(session.refused(e, doing).await),
            }
        };
    }
}

/// A refusal worth asking again: throttled, the server's trouble, or no
/// answer at all.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// A pause that doubles from 200 ms up to 5 s, and starts again after a
/// watch event arrives.
#[derive(Debug, Default)]
struct Pause(u32);

impl Pause {
    async fn wait(&mut self) {
        let ms = 200u64.saturating_mul(1 << self.0.min(5)).min(5_000);
        self.0 = self.0.saturating_add(1);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    fn reset(&mut self) {
        self.0 = 0;
    }
}

async fn list(session: &Session, a: args::List) -> Result<(), Failure> {
    let api: Api<NamespaceTransfer> = if a.all_namespaces {
        Api::all(session.client.clone())
    } else {
        session.transfers()
    };
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(e) => {
                let ns = if a.all_namespaces {
                    ""
                } else {
                    session.namespace.as_str()
                };
                let doing = Doing {
                    verb: "list",
                    namespace: ns,
                    name: None,
                };
                return Err(session.refused(e, doing).await);
            }
        };
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    match a.output.output {
        Some(o) => print(&output::objects(&items, o)),
        None if items.is_empty() => {
            let mut err = std::io::stderr();
            let _ = if a.all_namespaces {
                writeln!(err, "No transfers found.")
            } else {
                writeln!(
                    err,
                    "No transfers found in {} namespace.",
                    session.namespace
                )
            };
        }
        None => print(&output::table(&items, a.all_namespaces, Timestamp::now())),
    }
    Ok(())
}

async fn cancel(session: &Session, a: args::Cancel) -> Result<(), Failure> {
    let api = session.transfers();
    let t = get(session, &api, &a.name).await?;
    let noun = if t.moves_snapshot() {
        "snapshot"
    } else {
        "claim"
    };
    let st = t.status.as_ref();
    let phase = st.and_then(|s| s.phase);
    let committed = st.is_some_and(|s| {
        s.step_time(TransferStepName::Committed).is_some()
            || is_condition_true(&s.conditions, CONDITION_REBOUND)
    });
    let params = DeleteParams {
        preconditions: t.metadata.uid.clone().map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    if let Err(e) = api.delete(&a.name, &params).await {
        let doing = Doing {
            verb: "delete",
            namespace: &session.namespace,
            name: Some(&a.name),
        };
        return Err(session.refused(e, doing).await);
    }
    let what = output::qualified_name(&a.name);
    let line = match phase {
        Some(p) if p.is_finished() => format!("{what} deleted (it had already {p})"),
        _ if committed => format!(
            "{what} deleted: it is past its commit point, so it completes first and then goes"
        ),
        _ => format!("{what} cancelled: the source {noun} stays as it was"),
    };
    print(&format!("{line}\n"));
    Ok(())
}

/// Answers kubectl's completion of `kubectl transfer WORDS…`: the
/// candidates, one per line, then cobra's directive. Quiet on any error: a
/// shell completing a word has nowhere to show one.
pub async fn complete(words: Vec<String>) {
    use clap::CommandFactory;
    let mut root = Cli::command();
    root.build();
    let (mut found, need) = super::complete::candidates(&root, &words);
    if let super::complete::Need::TransferNames { prefix } = need {
        let flag = |name: &str| {
            let long = format!("--{name}");
            let mut iter = words.iter();
            while let Some(w) = iter.next() {
                if *w == long {
                    return iter.next().cloned();
                }
                if let Some(v) = w.strip_prefix(&format!("{long}=")) {
                    return Some(v.to_owned());
                }
            }
            None
        };
        let global = Global {
            kubeconfig: flag("kubeconfig"),
            context: flag("context"),
            namespace: super::complete::namespace_in(&words),
            as_user: flag("as"),
            request_timeout: Some(Duration::from_secs(5)),
            ..Global::default()
        };
        if let Ok(session) = connect(&global).await {
            if let Ok(list) = session.transfers().list(&ListParams::default()).await {
                found.extend(
                    list.items
                        .into_iter()
                        .filter_map(|t| t.metadata.name)
                        .filter(|n| n.starts_with(&prefix)),
                );
            }
        }
    }
    let mut out = std::io::stdout().lock();
    for candidate in found {
        let _ = writeln!(out, "{candidate}");
    }
    let _ = writeln!(out, ":{}", super::complete::NO_FILE_COMPLETION);
    let _ = out.flush();
}

fn completion(shell: Shell) -> Result<(), Failure> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
    };
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, "kubectl-transfer", &mut out);
    let _ = out.flush();
    Ok(())
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// `90s`, `5m`, `1h30m`.
fn show(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}
