//! The facts one reconcile of a transfer pair decides on: everything the
//! rebind protocol needs to know, read afresh every time, as plain data.
//!
//! Owns the shapes of those facts and their conversion from the Kubernetes
//! objects they are read from. No I/O: the controller gathers, this module
//! only describes, and [`super::decide`] decides. A model checker builds the
//! same structs from a model of the cluster.
//!
//! What a fact means:
//! - [`Facts::source`] is the object that drives the pair (role Source or
//!   Both); its `status` is the protocol's memory, which only the controller
//!   writes (the registry refuses clients' status writes), and which the
//!   decision still checks against the cluster's objects below.
//! - [`Facts::peer`] is the Destination-role object, found by the uid the
//!   source recorded for it (derived from its uid, see
//!   [`super::matching::peer_uid`]), or by matching before anything was
//!   recorded.
//! - [`Facts::moved_claim`] (the claim whose volume is handed over: the
//!   source claim in Move mode, the clone in Clone mode),
//!   [`Facts::clone_source`] (in Clone mode, the source claim the clone is
//!   made from), [`Facts::destination_claim`] and [`Facts::volume`] are the
//!   cluster's objects: from the watch copies where those can be trusted,
//!   live where a copy may be behind this controller's own writes, and all
//!   live before a step no precondition fences (`gather`).
//! - [`Facts::users`], [`Facts::rights`] and [`Facts::admission`] are only
//!   gathered when the decision asks for them, right before the write they
//!   guard: the users are a live LIST of pods, which kube-apiserver answers
//!   only once its cache has caught up with etcd (tens of milliseconds), so
//!   the steps that do not depend on them do not pay for them.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::api::namespace_transfer::{
    names_a_transfer, NamespaceTransfer, ANNOTATION_CLONE_FOR, ANNOTATION_DESTINATION_LOST,
    ANNOTATION_ORIGINAL_RECLAIM_POLICY, ANNOTATION_PROVISIONER_FINALIZER, ANNOTATION_TRANSFER_LOCK,
    FINALIZER_TRANSFER_PROTECTION, SNAPSHOT_GROUP, SOURCE_KIND_VOLUME_SNAPSHOT,
};

/// Everything one decision is made on.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Unix seconds, for deadlines.
    pub now: i64,
    /// `--allow-all-storage-classes`.
    pub allow_all_storage_classes: bool,
    /// The object that drives the pair: role Source, or Both (a rename).
    pub source: NamespaceTransfer,
    /// Its Destination-role peer.
    pub peer: Peer,
    /// The claim the protocol moves, live: in Move mode the claim
    /// `spec.source.name`; in Clone mode the clone C1 makes beside it
    /// (`None` until a peer is known and the clone exists).
    pub moved_claim: Option<Claim>,
    /// Clone mode only: the claim `spec.source.name` the clone is made from,
    /// live. Never locked, annotated or waited on. For a VolumeSnapshot
    /// source, what the snapshot's restore would be: the snapshot's name, and
    /// the shape `decide::restore_shape` gives the restore (once the restore
    /// exists, its own shape); `None` from R1 on, when nothing decides on it.
    pub clone_source: Option<Claim>,
    /// Clone mode of a VolumeSnapshot, before the clone is made: why it
    /// cannot be restored yet (not ready to use, being deleted).
    pub origin_not_ready: Option<String>,
    /// Clone mode only, while the clone is Pending: the message of the
    /// latest `ProvisioningFailed` Event on it.
    pub clone_failure: Option<String>,
    /// `--clone-timeout`: how long a clone may stay unbound before the
    /// transfer fails and the clone is deleted.
    pub clone_timeout: i64,
    /// Clone mode only, before the clone is made: the origin's StorageClass
    /// when it binds `WaitForFirstConsumer` (no clone of it can bind
    /// without a pod).
    pub clone_waits_for_consumer: Option<String>,
    /// A standing clone offer's pair that has no clone yet: whether the
    /// offer's other clones alive already reach its `maxClones`.
    pub at_capacity: bool,
    /// The claim at the destination's namespace and name, live; `None` also
    /// while the destination is not known (no peer). For a populating
    /// request ([`NamespaceTransfer::populates`]), the claim recorded at R3,
    /// and `None` before that.
    pub destination_claim: Option<Claim>,
    /// A populating request's candidates (DESIGN §2.3), before R3 records
    /// one: the claims of its namespace whose `dataSourceRef` names it,
    /// oldest first (by creationTimestamp, then name). Any tenant of that
    /// namespace can write them; `decide::adopt` says which one fits.
    pub claimants: Vec<Claim>,
    /// The volume the transfer is about, live: the one recorded at R1, or
    /// before that the one the source claim is bound to.
    pub volume: Option<Volume>,
    /// Whether the volume's StorageClass allows transfers.
    pub class: ClassPolicy,
    /// The pods that use the source claim now (live LIST): not Succeeded or
    /// Failed, scheduled or not; `None` until the decision asks for them.
    pub users: Option<Vec<String>>,
    /// When the source claim carries another transfer's lock: whether that
    /// transfer exists and is active.
    pub lock_holder_active: bool,
    /// Both parties' rights, re-checked with uncached SubjectAccessReviews;
    /// `None` until the decision asks for them.
    pub rights: Option<Result<(), Refusal>>,
    /// Whether kube-apiserver would admit the R3 create and the R5 delete
    /// (`dryRun=All`); `None` until the decision asks.
    pub admission: Option<Admission>,
    /// Whether the claims and the volume were read live, not from the watch
    /// copies (which may be behind this controller's own writes).
    pub live: bool,
    /// A write of this reconcile that kube-apiserver refused (quota,
    /// admission, a webhook): the step and the API's message. The decision
    /// says what that means; nothing was made.
    pub refused: Option<Refused>,
    /// For a VolumeSnapshot source (DESIGN §2.1.7): the snapshots and
    /// contents the move decides on. The claim and volume facts above are
    /// then all empty.
    pub snapshot: Option<super::snapshot::SnapshotFacts>,
}

impl Facts {
    /// The facts of a snapshot move (DESIGN §2.1.7) at `now`: the pair and
    /// `snapshots`, every claim and volume fact empty, the questions not
    /// asked yet, read live.
    pub fn of_snapshot_move(
        now: i64,
        source: NamespaceTransfer,
        peer: Peer,
        snapshots: super::snapshot::SnapshotFacts,
    ) -> Self {
        Self {
            now,
            allow_all_storage_classes: false,
            source,
            peer,
            moved_claim: None,
            clone_source: None,
            origin_not_ready: None,
            clone_failure: None,
            clone_timeout: 0,
            clone_waits_for_consumer: None,
            at_capacity: false,
            destination_claim: None,
            claimants: Vec::new(),
            volume: None,
            class: ClassPolicy::Unknown,
            users: None,
            lock_holder_active: false,
            rights: None,
            admission: None,
            live: true,
            refused: None,
            snapshot: Some(snapshots),
        }
    }
}

/// A create or delete of a protocol step that kube-apiserver refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The step whose write was refused: C1, R3 or R5.
    pub step: super::Step,
    /// The API's message.
    pub message: String,
}

/// The Destination-role side of the pair.
#[derive(Debug, Clone)]
pub enum Peer {
    /// A rename: the source object is its own peer.
    Itself,
    /// The peer, found by the recorded uid or by matching.
    Found(Box<NamespaceTransfer>),
    /// A peer was recorded, and no object with its namespace, name and uid
    /// exists any more.
    Gone,
    /// No peer was recorded and none matches yet.
    Unmatched,
}

/// Which party a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

/// A party that no longer holds a right it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub side: Side,
    pub message: String,
}

/// What kube-apiserver's admission answered to the dry runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// The R3 create would be refused; the API's message.
    DestinationRefused(String),
    /// The R5 delete would be refused; the API's message.
    SourceReleaseRefused(String),
}

/// Whether the volume's class allows transfers (DESIGN §2.1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassPolicy {
    Allowed,
    /// Why not.
    Refused(String),
    /// Not looked up (no volume yet).
    Unknown,
}

/// A PersistentVolumeClaim, as the protocol sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// `metadata.creationTimestamp`, Unix seconds (0 if unknown).
    pub created: i64,
    /// `status.phase`: Pending, Bound or Lost.
    pub phase: String,
    /// `spec.volumeName`.
    pub volume_name: Option<String>,
    /// Our lock annotation: the uid of the transfer that holds the claim.
    pub lock: Option<String>,
    /// A clone's `clone-for` annotation: the receiving transfer's uid.
    pub clone_for: Option<String>,
    /// `spec.dataSourceRef`, when it names a NamespaceTransfer: a claim that
    /// asks a populating request for its volume (DESIGN §2.3).
    pub populator: Option<PopulatorRef>,
    pub deleting: bool,
    /// Carries `pv.kubernetes.io/bind-completed`: kube-controller-manager's
    /// binder syncs it as a bound claim (one whose volume names another
    /// claim is made `Lost`), not as one waiting for its volume.
    pub bind_completed: bool,
    /// `metadata.finalizers`, ours (transfer-protection) among them or not.
    pub finalizers: Vec<String>,
    /// What R3 sets, to tell a claim exactly as R3 makes it from any other.
    pub shape: ClaimShape,
}

impl Claim {
    /// A VolumeSnapshot as the origin of a clone (Clone mode of a snapshot):
    /// named as it, shaped as its restore.
    pub fn restore_of(name: &str, uid: &str, shape: ClaimShape) -> Self {
        Self {
            name: name.to_owned(),
            uid: uid.to_owned(),
            resource_version: String::new(),
            created: 0,
            phase: String::new(),
            volume_name: None,
            lock: None,
            clone_for: None,
            populator: None,
            deleting: false,
            bind_completed: false,
            finalizers: Vec::new(),
            shape,
        }
    }

    /// Whether the claim carries the transfer-protection finalizer, which
    /// keeps a destination claim from going between the commit and the end
    /// of the transfer.
    pub fn protected(&self) -> bool {
        self.finalizers
            .iter()
            .any(|f| f == FINALIZER_TRANSFER_PROTECTION)
    }
}

/// A claim's `spec.dataSourceRef` naming one of our transfers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PopulatorRef {
    pub name: String,
    /// `dataSourceRef.namespace`, when set: a claim that names another
    /// namespace's request is never served.
    pub namespace: Option<String>,
}

impl Claim {
    /// Whether the claim names the request `name` of `namespace`, the
    /// claim's own namespace, in `dataSourceRef`.
    pub fn names_request(&self, namespace: &str, name: &str) -> bool {
        self.populator.as_ref().is_some_and(|p| {
            p.name == name && p.namespace.as_deref().is_none_or(|ns| ns == namespace)
        })
    }

    /// Whether the claim is one the populating request `d` may serve: it
    /// names `d` (or, for a request made for one claim, `d`'s standing
    /// request, and is that claim, uid and all).
    pub fn asks(&self, d: &NamespaceTransfer) -> bool {
        self.names_request(d.own_namespace(), d.populated_name())
            && d.served_claim_uid().is_none_or(|uid| uid == self.uid)
    }
}

/// The claims among `claims` that populating request `d` may serve
/// ([`Claim::asks`]), oldest first (by creation, then name): R3's
/// candidates.
pub fn claimants_of(d: &NamespaceTransfer, claims: impl IntoIterator<Item = Claim>) -> Vec<Claim> {
    let mut found: Vec<Claim> = claims.into_iter().filter(|c| c.asks(d)).collect();
    found.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    found
}

/// The parts of a claim's spec the destination claim copies, and what else
/// would make a claim something R3 did not make.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClaimShape {
    pub storage_class_name: Option<String>,
    pub access_modes: Vec<String>,
    pub volume_mode: Option<String>,
    /// `resources.requests.storage`.
    pub request: Option<String>,
    pub volume_attributes_class_name: Option<String>,
    /// `spec.volumeName`.
    pub volume_name: Option<String>,
    /// `spec.dataSource` when it names a claim (`dataSourceRef` the same or
    /// unset): what C1 sets.
    pub data_source_claim: Option<String>,
    /// `spec.dataSource` when it names a VolumeSnapshot (`dataSourceRef` the
    /// same or unset): what C1 sets for a clone of a snapshot.
    pub data_source_snapshot: Option<String>,
    /// A selector, any other data source, ownerReferences or limits: R3 and
    /// C1 set none.
    pub extras: bool,
    /// A selector or resource limits, which no claim that receives a moved
    /// volume may carry (an adopted claim's data source and owners are its
    /// tenant's business).
    pub selector_or_limits: bool,
}

/// A PersistentVolume, as the protocol sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Volume {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub claim_ref: Option<ClaimRef>,
    /// `spec.persistentVolumeReclaimPolicy`.
    pub reclaim_policy: String,
    /// The policy R2 recorded, to restore.
    pub original_policy: Option<String>,
    /// The uid of the transfer whose R2 marked the volume.
    pub marker: Option<String>,
    /// The uid of a destination claim deleted after the commit, which the
    /// volume was held for (Retain) before the claim was let go.
    pub destination_lost: Option<String>,
    /// `status.phase`: Available, Bound, Released or Failed.
    pub phase: String,
    pub storage_class_name: Option<String>,
    /// `spec.capacity.storage`.
    pub capacity: Option<String>,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.volumeMode` (unset means Filesystem).
    pub volume_mode: Option<String>,
    /// `spec.volumeAttributesClassName`.
    pub volume_attributes_class_name: Option<String>,
    /// Carries `volume.alpha.kubernetes.io/pre-resize-capacity`: a resize
    /// is under way, and the binder, not the controller, says what capacity
    /// a claim bound to it has.
    pub resizing: bool,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// Its `deletionTimestamp` is set: no finalizer may be added.
    pub deleting: bool,
    /// R2 took the CSI provisioner's finalizer off, for R6 to put back.
    pub took_provisioner_finalizer: bool,
}

/// A volume's `claimRef`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    /// Empty when the reference names no uid (pre-bound by name).
    pub uid: String,
}

impl ClaimRef {
    /// Whether it names exactly this claim, uid and all.
    pub fn is(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.namespace == namespace && self.name == name && !uid.is_empty() && self.uid == uid
    }
}

impl Volume {
    /// Whether the volume's `claimRef` names exactly this claim.
    pub fn names(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.claim_ref
            .as_ref()
            .is_some_and(|r| r.is(namespace, name, uid))
    }
}

/// The annotation of the volume's marker, naming the transfer whose R2 took
/// it (the same key as the claims' lock).
pub const VOLUME_MARKER: &str = ANNOTATION_TRANSFER_LOCK;

/// kube-controller-manager's mark of a claim whose binding is complete
/// (`pv.kubernetes.io/bind-completed`).
pub const ANNOTATION_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// kube-controller-manager's mark of a claim whose `spec.volumeName` a
/// controller set (`pv.kubernetes.io/bound-by-controller`).
pub const ANNOTATION_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// The capacity a volume had before a resize still under way; while it is
/// there, the binder sets a claim's capacity from it.
pub const ANNOTATION_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";

fn annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<String> {
    meta.annotations.as_ref()?.get(key).cloned()
}

impl From<&PersistentVolumeClaim> for Claim {
    fn from(c: &PersistentVolumeClaim) -> Self {
        let spec = c.spec.clone().unwrap_or_default();
        let request = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone());
        let limits = spec
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|l| !l.is_empty());
        // What C1 sets: a claim or a VolumeSnapshot beside it.
        let source_of =
            |group: &Option<String>, kind: &str| match (group.as_deref().unwrap_or_default(), kind)
            {
                ("", "PersistentVolumeClaim") => Some(false),
                (SNAPSHOT_GROUP, SOURCE_KIND_VOLUME_SNAPSHOT) => Some(true),
                _ => None,
            };
        let data_source = spec.data_source.as_ref().and_then(|d| {
            source_of(&d.api_group, &d.kind).map(|snapshot| (snapshot, d.name.clone()))
        });
        let ref_is_same = match (&spec.data_source_ref, &data_source) {
            (None, _) => true,
            (Some(r), Some((snapshot, name))) => {
                source_of(&r.api_group, &r.kind) == Some(*snapshot)
                    && &r.name == name
                    && r.namespace.as_deref().unwrap_or_default().is_empty()
            }
            (Some(_), None) => false,
        };
        let extras = spec.selector.is_some()
            || (spec.data_source.is_some() && data_source.is_none())
            || !ref_is_same
            || limits
            || c.metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| !o.is_empty());
        Self {
            name: c.metadata.name.clone().unwrap_or_default(),
            uid: c.metadata.uid.clone().unwrap_or_default(),
            resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
            created: c
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            phase: c
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            volume_name: spec.volume_name.clone().filter(|v| !v.is_empty()),
            lock: annotation(&c.metadata, ANNOTATION_TRANSFER_LOCK),
            clone_for: annotation(&c.metadata, ANNOTATION_CLONE_FOR),
            populator: spec
                .data_source_ref
                .as_ref()
                .filter(|r| names_a_transfer(r))
                .map(|r| PopulatorRef {
                    name: r.name.clone(),
                    namespace: r.namespace.clone().filter(|ns| !ns.is_empty()),
                }),
            deleting: c.metadata.deletion_timestamp.is_some(),
            bind_completed: annotation(&c.metadata, ANNOTATION_BIND_COMPLETED).is_some(),
            finalizers: c.metadata.finalizers.clone().unwrap_or_default(),
            shape: ClaimShape {
                storage_class_name: spec.storage_class_name,
                access_modes: spec.access_modes.unwrap_or_default(),
                volume_mode: spec.volume_mode,
                request,
                volume_attributes_class_name: spec.volume_attributes_class_name,
                volume_name: spec.volume_name.filter(|v| !v.is_empty()),
                data_source_claim: data_source
                    .clone()
                    .filter(|(snapshot, _)| !snapshot)
                    .map(|(_, name)| name),
                data_source_snapshot: data_source
                    .filter(|(snapshot, _)| *snapshot)
                    .map(|(_, name)| name),
                extras,
                selector_or_limits: spec.selector.is_some() || limits,
            },
        }
    }
}

impl From<&PersistentVolume> for Volume {
    fn from(v: &PersistentVolume) -> Self {
        let spec = v.spec.clone().unwrap_or_default();
        Self {
            name: v.metadata.name.clone().unwrap_or_default(),
            uid: v.metadata.uid.clone().unwrap_or_default(),
            resource_version: v.metadata.resource_version.clone().unwrap_or_default(),
            claim_ref: spec.claim_ref.as_ref().map(|r| ClaimRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            }),
            reclaim_policy: spec
                .persistent_volume_reclaim_policy
                .clone()
                .unwrap_or_else(|| "Retain".to_owned()),
            original_policy: annotation(&v.metadata, ANNOTATION_ORIGINAL_RECLAIM_POLICY),
            marker: annotation(&v.metadata, VOLUME_MARKER),
            destination_lost: annotation(&v.metadata, ANNOTATION_DESTINATION_LOST),
            phase: v
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            storage_class_name: spec.storage_class_name.filter(|c| !c.is_empty()),
            capacity: spec
                .capacity
                .as_ref()
                .and_then(|c| c.get("storage"))
                .map(|q| q.0.clone()),
            access_modes: spec.access_modes.unwrap_or_default(),
            volume_mode: spec.volume_mode,
            volume_attributes_class_name: spec.volume_attributes_class_name,
            resizing: annotation(&v.metadata, ANNOTATION_PRE_RESIZE_CAPACITY).is_some(),
            finalizers: v.metadata.finalizers.clone().unwrap_or_default(),
            deleting: v.metadata.deletion_timestamp.is_some(),
            took_provisioner_finalizer: annotation(&v.metadata, ANNOTATION_PROVISIONER_FINALIZER)
                .is_some_and(|a| a == "taken"),
        }
    }
}

/// A `volumeMode` as kube reads it: unset means `Filesystem`.
pub fn volume_mode_or_default(mode: &Option<String>) -> String {
    mode.clone().unwrap_or_else(|| "Filesystem".to_owned())
}

/// A resource quantity (`1Gi`, `500M`, `1.5Ti`, `1e9`) in bytes; `None` when
/// it does not parse. Enough precision to compare volume sizes.
pub fn quantity_bytes(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

/// The larger of two quantities, as written; `a` when they cannot be
/// compared.
pub fn larger_quantity(a: Option<&str>, b: Option<&str>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => match (quantity_bytes(a), quantity_bytes(b)) {
            (Some(x), Some(y)) if y > x => Some(b.to_owned()),
            _ => Some(a.to_owned()),
        },
        (a, b) => a.or(b).map(str::to_owned),
    }
}

#[cfg(test)]
mod tests;
