//! Gathering the facts a decision rests on: our objects live from etcd;
//! claims and volumes from the watch copies, or live where a copy may be
//! behind the controller's own writes; classes; and, when the decision
//! asks, pods, both parties' rights and admission dry runs, always live.

use futures::FutureExt as _;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use crate::admission::first_missing;
use crate::api::namespace_transfer::{
    NamespaceTransfer, Role, TransferMode, ANNOTATION_ALLOW_NAMESPACE_TRANSFER,
};
use crate::controller::cluster::{Cluster, ClusterError};
use crate::controller::{object_key, Error};
use crate::registry::namespace_transfer::transfer_rights;

use super::decide::snapshot as snapshot_decide;
use super::decide::{
    destination_claim, destination_of, moved_claim_name_of, peer_or_self, recorded_destination,
    recorded_source, restore_shape, uid_of, Refusal, RestoreBasis, Side,
};
use super::facts::{claimants_of, Admission, Claim, ClaimShape, ClassPolicy, Facts, Peer, Volume};
use super::matching::{is_active, is_named, role_of};
use super::{matching, snapshot, TransferController};

/// The annotations that make a StorageClass the default, GA and beta.
const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// What [`TransferController::snapshot_origin`] found.
#[derive(Debug, Default)]
struct SnapshotOrigin {
    /// The snapshot as its restore would be; `None`: it does not exist.
    origin: Option<Claim>,
    /// Why it cannot be restored yet.
    not_ready: Option<String>,
    /// Why it can never be restored as asked.
    refused: Option<String>,
}

impl TransferController {
    /// Reads every fact the decision needs: our objects live from etcd,
    /// claims and volumes from the watch copies where they can be trusted
    /// (cluster::ReadCache), pods and rights live when the decision asks.
    pub(super) async fn gather(&self, s: NamespaceTransfer) -> Result<Facts, Error> {
        self.gather_from(&self.cluster, s, false).await
    }

    /// The facts with every claim and volume read live: what a step that no
    /// precondition fences is decided on (see `decide::needs_live_facts`).
    pub(super) async fn gather_live(&self, s: NamespaceTransfer) -> Result<Facts, Error> {
        self.gather_from(&self.cluster.uncached(), s, true).await
    }

    pub(super) async fn gather_from(
        &self,
        cluster: &Cluster,
        s: NamespaceTransfer,
        live: bool,
    ) -> Result<Facts, Error> {
        let recorded = s.status.as_ref().and_then(|st| st.peer.clone());
        let peer = if role_of(&s) == Some(Role::Both) {
            Peer::Itself
        } else if let Some(p) = &recorded {
            match self.get(&p.namespace, &p.name).await? {
                Some(d) if is_named(&d, p, &s) => Peer::Found(Box::new(d)),
                _ => Peer::Gone,
            }
        } else {
            let all = self.pair_transfers(&s).await?;
            match matching::peer_of(&s, &all) {
                Some(d) => Peer::Found(Box::new(d.clone())),
                None => Peer::Unmatched,
            }
        };
        if s.moves_snapshot() {
            return self.gather_snapshot(s, peer).await;
        }
        let source_ns = s.source_namespace().to_owned();
        let clone_mode = s.mode() == TransferMode::Clone;
        // The claim the protocol moves: the source claim, or its clone.
        let moved = moved_claim_name_of(&s, &peer);
        // A populating request's claim is the one R3 recorded (before that
        // it has none, and candidates: `claimants`).
        let populating = match &peer {
            Peer::Found(d) if d.populates() => Some(d.as_ref()),
            _ => None,
        };
        // Without its peer, the pair still knows the claim R3 recorded: the
        // one it goes by from then on (a peer let go at the completion may
        // be gone before `tidy` lets that claim go).
        let destination = match &peer {
            Peer::Itself => Some(destination_of(&s, &s)),
            Peer::Found(d) => Some(destination_of(&s, d)),
            _ => recorded_destination(&s).map(|r| (r.namespace.as_str(), r.name.as_str())),
        }
        .map(|(ns, name)| (ns.to_owned(), name.to_owned()));
        // The three claims are independent reads: asked side by side.
        let claim = |namespace: &str, name: Option<&str>| {
            let namespace = namespace.to_owned();
            let name = name.filter(|n| !n.is_empty()).map(str::to_owned);
            async move {
                match name {
                    Some(name) => Ok::<_, Error>(
                        cluster
                            .claim(&namespace, &name)
                            .await?
                            .as_ref()
                            .map(Claim::from),
                    ),
                    None => Ok(None),
                }
            }
        };
        let snapshot_origin = s.clones_snapshot();
        let (moved_claim, clone_source, destination_claim) = tokio::try_join!(
            claim(&source_ns, moved.as_deref()),
            claim(
                &source_ns,
                (clone_mode && !snapshot_origin).then_some(s.spec.source.name.as_str())
            ),
            claim(
                destination.as_ref().map_or("", |(ns, _)| ns.as_str()),
                destination.as_ref().map(|(_, name)| name.as_str()),
            ),
        )?;
        let claimants = match populating.filter(|_| recorded_destination(&s).is_none()) {
            Some(d) => claimants_of(
                d,
                cluster
                    .claims_naming_transfers(d.own_namespace())
                    .await?
                    .iter()
                    .map(Claim::from),
            ),
            None => Vec::new(),
        };
        // A snapshot's clone is its restore: shaped only before C1 makes it.
        let mut origin_not_ready = None;
        let mut origin_refused = None;
        // Only before R1 does anything decide on the origin; before C1 on
        // its restore's shape.
        let before_lock = recorded_source(&s).is_none()
            && !s
                .status
                .as_ref()
                .and_then(|st| st.phase)
                .is_some_and(|p| p.is_finished());
        let clone_source = if snapshot_origin && before_lock {
            let restore = self
                .snapshot_origin(
                    cluster,
                    &s,
                    claimants.first(),
                    moved_claim.is_none() && !matches!(peer, Peer::Unmatched | Peer::Gone),
                )
                .await?;
            origin_not_ready = restore.not_ready;
            origin_refused = restore.refused;
            // Once the restore exists, it is the shape its class is read from.
            restore.origin.map(|mut origin| {
                if let Some(clone) = &moved_claim {
                    origin.shape = clone.shape.clone();
                }
                origin
            })
        } else if snapshot_origin {
            None
        } else {
            clone_source
        };
        let clone_failure = match moved_claim
            .as_ref()
            .filter(|c| clone_mode && c.phase != "Bound")
        {
            Some(clone) => cluster.provisioning_failure(&source_ns, &clone.uid).await?,
            None => None,
        };
        // Before C1 only, once there is a pair to clone for: a clone is
        // made in its origin's class.
        let clone_waits_for_consumer = match clone_source
            .as_ref()
            .filter(|_| moved_claim.is_none() && !matches!(peer, Peer::Unmatched | Peer::Gone))
            .and_then(|o| o.shape.storage_class_name.as_deref())
        {
            Some(class) => self
                .storage_class(class)
                .await?
                .filter(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
                .map(|_| class.to_owned()),
            None => None,
        };
        let volume_name = recorded_source(&s)
            .map(|snap| snap.volume_name.clone())
            .or_else(|| moved_claim.as_ref().and_then(|c| c.volume_name.clone()));
        let volume = match &volume_name {
            Some(name) => cluster.volume(name).await?.as_ref().map(Volume::from),
            None => None,
        };
        let class = match (&volume, &clone_source) {
            (Some(v), _) => {
                let object = format!("PersistentVolume {}", v.name);
                self.class_policy(&object, v.storage_class_name.as_deref())
                    .await?
            }
            (None, _) if origin_refused.is_some() => {
                ClassPolicy::Refused(origin_refused.unwrap_or_default())
            }
            // A snapshot not ready has no restore shaped yet.
            (None, _) if origin_not_ready.is_some() => ClassPolicy::Unknown,
            // A clone is made in the source claim's class, a restore in the
            // class restore_shape chose.
            (None, Some(o)) => {
                let object = if snapshot_origin {
                    format!("the restore of VolumeSnapshot {source_ns}/{}", o.name)
                } else {
                    format!("PersistentVolumeClaim {source_ns}/{}", o.name)
                };
                self.class_policy(&object, o.shape.storage_class_name.as_deref())
                    .await?
            }
            (None, None) => ClassPolicy::Unknown,
        };
        let at_capacity = match (s.max_clones(), &peer) {
            (Some(max), Peer::Found(d))
                if recorded_source(&s).is_none() && moved_claim.is_none() =>
            {
                let all = self.all_transfers().await?;
                let pairs: Vec<&NamespaceTransfer> = matching::standing_pairs(&s, &all).collect();
                let alive = self
                    .clones_alive(cluster, &s, &pairs, d.metadata.uid.as_deref())
                    .await?;
                alive >= usize::try_from(max).unwrap_or(0)
            }
            _ => false,
        };
        let mine = uid_of(&s).to_owned();
        let lock_holder_active = match moved_claim.as_ref() {
            Some(c) if c.lock.as_deref().is_some_and(|holder| holder != mine) => {
                let holder = c.lock.as_deref().unwrap_or_default();
                self.lock_holder_is_active(holder, s.source_namespace(), &c.name)
                    .await?
            }
            _ => false,
        };
        Ok(Facts {
            now: Timestamp::now().as_second(),
            allow_all_storage_classes: self.options.allow_all_storage_classes,
            source: s,
            peer,
            moved_claim,
            clone_source,
            origin_not_ready,
            clone_failure,
            clone_timeout: i64::try_from(self.options.clone_timeout.as_secs()).unwrap_or(i64::MAX),
            clone_waits_for_consumer,
            at_capacity,
            destination_claim,
            claimants,
            volume,
            class,
            users: None,
            lock_holder_active,
            rights: None,
            admission: None,
            live,
            refused: None,
            snapshot: None,
        })
    }

    /// The origin of a clone of a VolumeSnapshot (Clone mode, DESIGN
    /// §2.1.7), live: the snapshot, as the claim its restore would be. Only
    /// `before_clone` (a pair that has no clone yet) is the restore shaped
    /// ([`restore_shape`]), which reads the snapshot's content, the claim it
    /// was taken from and the StorageClasses; afterwards only the snapshot's
    /// presence matters, as an origin claim's does.
    async fn snapshot_origin(
        &self,
        cluster: &Cluster,
        s: &NamespaceTransfer,
        claimant: Option<&Claim>,
        before_clone: bool,
    ) -> Result<SnapshotOrigin, Error> {
        let ns = s.source_namespace();
        let name = s.spec.source.name.as_str();
        let Some(found) = cluster.volume_snapshot(ns, name).await? else {
            return Ok(SnapshotOrigin::default());
        };
        let snap = snapshot::Snapshot::from(&found);
        let mut origin = SnapshotOrigin {
            origin: Some(Claim::restore_of(
                &snap.name,
                &snap.uid,
                ClaimShape::default(),
            )),
            ..SnapshotOrigin::default()
        };
        if !before_clone {
            return Ok(origin);
        }
        let object = format!("VolumeSnapshot {ns}/{name}");
        let content = content_named(
            cluster,
            snap.bound_content.as_deref().filter(|_| snap.ready),
        )
        .await?;
        let content = match content {
            Some(content) if !snap.deleting => content,
            _ => {
                let why = if snap.deleting {
                    "is being deleted".to_owned()
                } else {
                    match &snap.error {
                        Some(error) => format!("is not ready to use: {error}"),
                        None => "is not ready to use yet".to_owned(),
                    }
                };
                origin.not_ready = Some(format!("{object} {why}"));
                return Ok(origin);
            }
        };
        let taken_from = match snap.volume_source.as_deref() {
            Some(pvc) => cluster.claim(ns, pvc).await?.as_ref().map(Claim::from),
            None => None,
        };
        let Some(default_class) = self.default_storage_class() else {
            origin.not_ready = Some("the StorageClasses are not known yet".to_owned());
            return Ok(origin);
        };
        let shape = restore_shape(&RestoreBasis {
            restore_size: snap.restore_size.as_deref(),
            source_volume_mode: content.source_volume_mode.as_deref(),
            claimant,
            taken_from: taken_from.as_ref(),
            default_class: default_class.as_deref(),
        });
        let shape = match shape {
            Ok(shape) => shape,
            Err(why) => {
                origin.refused = Some(format!("{object} cannot be restored: {why}"));
                return Ok(origin);
            }
        };
        // A class of another driver could never restore it.
        if let Some(class) = shape.storage_class_name.as_deref() {
            let provisioner = self.storage_class(class).await?.map(|c| c.provisioner);
            if provisioner.as_deref() != Some(content.driver.as_str()) {
                origin.refused = Some(format!(
                    "{object} cannot be restored into StorageClass {class:?}: {}",
                    match provisioner {
                        Some(p) => format!(
                            "its provisioner {p:?} is not the snapshot's driver {:?}",
                            content.driver
                        ),
                        None => "it does not exist".to_owned(),
                    }
                ));
                return Ok(origin);
            }
        }
        origin.origin = Some(Claim::restore_of(&snap.name, &snap.uid, shape));
        Ok(origin)
    }

    /// The cluster's default StorageClass, as kube's DefaultStorageClass
    /// admission picks it: of the classes annotated as default, the newest
    /// (then the first by name); `None` while the watch copy of the classes
    /// has not loaded yet (an empty copy is no proof there is none).
    fn default_storage_class(&self) -> Option<Option<String>> {
        self.classes
            .wait_until_ready()
            .now_or_never()
            .and_then(Result::ok)?;
        let default = |c: &StorageClass| {
            c.metadata.annotations.as_ref().is_some_and(|a| {
                DEFAULT_CLASS_ANNOTATIONS
                    .iter()
                    .any(|key| a.get(*key).is_some_and(|v| v == "true"))
            })
        };
        self.classes
            .state()
            .into_iter()
            .filter(|c| default(c))
            .max_by(|a, b| {
                let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
                created(a)
                    .cmp(&created(b))
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            })
            .and_then(|c| c.metadata.name.clone())
            .into()
    }

    /// The facts of a snapshot move (DESIGN §2.1.7), all read live: the
    /// snapshot controller's objects have no watch copy here. The claim and
    /// volume facts stay empty.
    async fn gather_snapshot(&self, s: NamespaceTransfer, peer: Peer) -> Result<Facts, Error> {
        let c = &self.cluster;
        let source_ns = s.source_namespace().to_owned();
        let record = snapshot_decide::recorded_source(&s).cloned();
        let recorded_dest = snapshot_decide::recorded_destination(&s).cloned();
        let destination = match (&recorded_dest, &peer) {
            (Some(dest), _) => Some((dest.namespace.as_str(), dest.name.as_str())),
            (None, Peer::Itself) => Some(destination_of(&s, &s)),
            (None, Peer::Found(d)) => Some(destination_of(&s, d)),
            (None, _) => None,
        }
        .map(|(ns, name)| (ns.to_owned(), name.to_owned()));
        let source_name = record
            .as_ref()
            .map_or(s.spec.source.name.clone(), |r| r.name.clone());
        let new_content_name = snapshot::content_name(&s);
        let (source, new_content, dest) = tokio::try_join!(
            c.volume_snapshot(&source_ns, &source_name),
            c.snapshot_content(&new_content_name),
            async {
                match &destination {
                    Some((ns, name)) if !name.is_empty() => c.volume_snapshot(ns, name).await,
                    _ => Ok(None),
                }
            },
        )?;
        let source = source.as_ref().map(snapshot::Snapshot::from);
        let old_name = record
            .as_ref()
            .map(|r| r.content_name.clone())
            .or_else(|| source.as_ref().and_then(|x| x.bound_content.clone()));
        let old_content = content_named(c, old_name.as_deref()).await?;
        // The content's class decides, not the snapshot's, which its
        // tenant may change; before the content is known, nothing is
        // decided on it (the move waits for a bound, ready snapshot).
        let refused_by_class = match &old_content {
            Some(content) => {
                self.snapshot_class_policy(&source_ns, &source_name, content)
                    .await?
            }
            None => None,
        };
        let mine = uid_of(&s).to_owned();
        let lock_holder_active = match source.as_ref().and_then(|x| x.lock.clone()) {
            Some(holder) if holder != mine => self
                .all_transfers()
                .await?
                .iter()
                .any(|t| is_active(t) && t.metadata.uid.as_deref() == Some(holder.as_str())),
            _ => false,
        };
        let snapshots = snapshot::SnapshotFacts {
            source,
            old_content,
            new_content: new_content.as_ref().map(snapshot::Content::from),
            destination: dest.as_ref().map(snapshot::Snapshot::from),
            refused_by_class,
            lock_holder_active,
        };
        let mut facts = Facts::of_snapshot_move(Timestamp::now().as_second(), s, peer, snapshots);
        facts.allow_all_storage_classes = self.options.allow_all_storage_classes;
        Ok(facts)
    }

    /// Why the VolumeSnapshotClass of `content` (the snapshot
    /// `namespace/name`'s) keeps it from moving, if it does: there is none,
    /// or it lacks the opt-in (unless the server allows every class), or it
    /// is another driver's, or its snapshotter secret is templated by the
    /// snapshot's namespace or name.
    async fn snapshot_class_policy(
        &self,
        namespace: &str,
        name: &str,
        content: &snapshot::Content,
    ) -> Result<Option<String>, Error> {
        let object = format!("VolumeSnapshot {namespace}/{name}");
        let Some(class) = content.class.as_deref() else {
            return Ok((!self.options.allow_all_storage_classes).then(|| {
                format!("{object} has no VolumeSnapshotClass, and this server does not run with --allow-all-storage-classes")
            }));
        };
        let Some(found) = self.cluster.snapshot_class(class).await? else {
            return Ok(Some(format!(
                "VolumeSnapshotClass {class:?} of {object} does not exist"
            )));
        };
        let parameters: std::collections::BTreeMap<String, String> = found
            .data
            .get("parameters")
            .cloned()
            .and_then(|p| serde_json::from_value(p).ok())
            .unwrap_or_default();
        let driver = found.data.get("driver").and_then(serde_json::Value::as_str);
        if driver != Some(content.driver.as_str()) {
            return Ok(Some(format!(
                "VolumeSnapshotClass {class:?} of {object} is for driver {:?}, not the snapshot's {:?}",
                driver.unwrap_or_default(),
                content.driver
            )));
        }
        if let Some(why) = snapshot::templated_secret(&parameters) {
            return Ok(Some(format!(
                "VolumeSnapshotClass {class:?} of {object} cannot move it: {why}"
            )));
        }
        if self.options.allow_all_storage_classes {
            return Ok(None);
        }
        let allowed = found
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_ALLOW_NAMESPACE_TRANSFER))
            .is_some_and(|v| v == "true");
        Ok((!allowed).then(|| {
            format!(
                "VolumeSnapshotClass {class:?} of {object} does not allow namespace transfers: it lacks the annotation {ANNOTATION_ALLOW_NAMESPACE_TRANSFER}: \"true\""
            )
        }))
    }

    /// Whether the volume's StorageClass allows transfers.
    /// Whether the class of `object` (a volume, or the claim a clone is
    /// made from) allows transfers.
    pub(super) async fn class_policy(
        &self,
        object: &str,
        class: Option<&str>,
    ) -> Result<ClassPolicy, Error> {
        if self.options.allow_all_storage_classes {
            return Ok(ClassPolicy::Allowed);
        }
        let Some(class) = class.filter(|c| !c.is_empty()).map(str::to_owned) else {
            return Ok(ClassPolicy::Refused(format!(
                "{object} has no StorageClass, and this server does not run with --allow-all-storage-classes"
            )));
        };
        let allowed = self
            .storage_class(&class)
            .await?
            .and_then(|c| c.metadata.annotations)
            .is_some_and(|a| {
                a.get(ANNOTATION_ALLOW_NAMESPACE_TRANSFER)
                    .is_some_and(|v| v == "true")
            });
        Ok(if allowed {
            ClassPolicy::Allowed
        } else {
            ClassPolicy::Refused(format!(
                "StorageClass {class:?} of {object} does not allow namespace transfers: it lacks the annotation {ANNOTATION_ALLOW_NAMESPACE_TRANSFER}: \"true\""
            ))
        })
    }

    /// The StorageClass `name`, from the watch copy, or read live when the
    /// copy does not have it (yet).
    pub(super) async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, Error> {
        match self.classes.get(&ObjectRef::new(name)) {
            Some(class) => Ok(Some(class.as_ref().clone())),
            None => Ok(self.cluster.storage_class(name).await?),
        }
    }

    /// Whether an active transfer holds the lock `holder` read on claim
    /// `namespace/name` ([`matching::holds_claim`]).
    pub(super) async fn lock_holder_is_active(
        &self,
        holder: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool, Error> {
        Ok(self
            .all_transfers()
            .await?
            .iter()
            .any(|t| is_active(t) && matching::holds_claim(t, holder, namespace, name)))
    }

    /// The pods that use the claim the protocol moves (the source claim or
    /// its clone): live (`fresh`), or for a report from kube-apiserver's
    /// cache.
    pub(super) async fn users_of(&self, f: &Facts, fresh: bool) -> Result<Vec<String>, Error> {
        if f.source.moves_snapshot() {
            // A snapshot's users are the claims being restored from it.
            let s = &f.source;
            let name = snapshot_decide::recorded_source(s)
                .map_or(s.spec.source.name.as_str(), |r| r.name.as_str());
            return Ok(self
                .cluster
                .claims_restoring_from(s.source_namespace(), name)
                .await?);
        }
        let Some(name) = moved_claim_name_of(&f.source, &f.peer) else {
            // The decision asks only once the claim is known; never answer
            // "nobody" for a claim that is not.
            return Err(ClusterError::NotFound {
                message: "the claim to check for users is not known yet".to_owned(),
            }
            .into());
        };
        let namespace = f.source.source_namespace();
        Ok(if fresh {
            self.cluster
                .pods_using_for_transfer(namespace, &name)
                .await?
        } else {
            self.cluster.pods_using_cached(namespace, &name).await?
        })
    }

    /// Re-runs the create-time SubjectAccessReviews for both stored
    /// requesters, never from a cache.
    pub(super) async fn check_rights(&self, f: &Facts) -> Result<Result<(), Refusal>, Error> {
        let s = &f.source;
        let mut parties = vec![(s, Side::Source)];
        if let Some(d) = peer_or_self(f).filter(|d| d.metadata.uid != s.metadata.uid) {
            parties.push((d, Side::Destination));
        }
        // Both parties are asked side by side; the answer is read in order.
        let missing = futures::future::join_all(parties.iter().map(|(t, _)| async move {
            match &t.spec.requester {
                Some(requester) => {
                    first_missing(
                        self.authorizer.as_ref(),
                        requester,
                        transfer_rights(t),
                        true,
                    )
                    .await
                }
                None => Ok(None),
            }
        }))
        .await;
        for ((t, side), missing) in parties.into_iter().zip(missing) {
            let Some(requester) = &t.spec.requester else {
                return Ok(Err(Refusal {
                    side,
                    message: format!("NamespaceTransfer {} records no requester", object_key(t)),
                }));
            };
            if let Some(right) = missing? {
                return Ok(Err(Refusal {
                    side,
                    message: format!(
                        "User {:?}, who created NamespaceTransfer {}, can no longer {}, which {} requires",
                        requester.username,
                        object_key(t),
                        right.describe(),
                        right.because
                    ),
                }));
            }
        }
        Ok(Ok(()))
    }

    /// Asks kube-apiserver, with `dryRun=All`, whether it would admit the R3
    /// create and the R5 delete, so that a policy that would refuse them
    /// after the commit refuses them before anything is touched.
    pub(super) async fn check_admission(&self, f: &Facts) -> Result<Admission, Error> {
        let s = &f.source;
        let (Some(d), Some(snapshot), Some(volume)) =
            (peer_or_self(f), recorded_source(s), &f.volume)
        else {
            return Ok(Admission::Admitted);
        };
        // A populating request creates no claim: the claim it adopts was
        // admitted (quota and all) when its tenant created it.
        if !d.populates() {
            let (dest_ns, dest_name) = destination_of(s, d);
            let claim = destination_claim(s, dest_ns, dest_name, snapshot, volume);
            match self.cluster.create_claim_dry_run(dest_ns, &claim).await {
                Ok(()) | Err(ClusterError::AlreadyExists { .. }) => {}
                Err(ClusterError::Refused { message, .. }) => {
                    return Ok(Admission::DestinationRefused(message))
                }
                Err(e) => return Err(e.into()),
            }
        }
        match self
            .cluster
            .delete_claim_dry_run(s.source_namespace(), &snapshot.name, &snapshot.uid)
            .await
        {
            Ok(()) | Err(ClusterError::NotFound { .. }) => Ok(Admission::Admitted),
            Err(ClusterError::Refused { message, .. }) => {
                Ok(Admission::SourceReleaseRefused(message))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// The VolumeSnapshotContent `name`, live, as a move or a restore sees it;
/// `None` also when there is no name to read.
async fn content_named(
    cluster: &Cluster,
    name: Option<&str>,
) -> Result<Option<snapshot::Content>, Error> {
    Ok(match name {
        Some(name) => cluster
            .snapshot_content(name)
            .await?
            .as_ref()
            .map(snapshot::Content::from),
        None => None,
    })
}
