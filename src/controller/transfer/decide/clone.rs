//! Clone mode before the hand-over: C1 makes the clone beside the source
//! claim (or restores the source VolumeSnapshot into a claim beside it), C2
//! waits for it to be bound, and which claim the protocol moves (the source
//! claim, or that clone) and under what name.

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, TypedLocalObjectReference,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::controller::transfer::facts::{
    larger_quantity, Claim, ClaimShape, ClassPolicy, Facts, Peer, Volume,
};

use super::adopt::{candidate, misfits};
use super::snapshot::REASON_SNAPSHOT_NOT_READY;
use super::{
    destination_of, destination_text, finish_failed, has_finalizer, recorded_source,
    rights_and_admission, uid_of, wait, Action, Report, REASON_CLAIM_MISMATCH,
    REASON_CLONE_NEEDS_CONSUMER, REASON_CLONING, REASON_SOURCE_NOT_FOUND,
    REASON_STORAGE_CLASS_NOT_ALLOWED, REASON_WAITING_FOR_CAPACITY,
};
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, TransferMode, ANNOTATION_CLONE_FOR,
    ANNOTATION_CLONE_OF, ANNOTATION_TRANSFER_LOCK, REASON_CLONE_FAILED, REASON_DESTINATION_EXISTS,
    SNAPSHOT_GROUP,
};
use crate::controller::transfer::matching::receiver_uid;

/// C1 and C2 (Clone mode): make the clone beside the source claim, and wait
/// until it is Bound; `None` once it is, and R1–R6 move it. The source claim
/// itself is only read.
pub(super) fn before_clone_bound(f: &Facts, d: &NamespaceTransfer) -> Option<Action> {
    let s = &f.source;
    let source_ns = s.source_namespace();
    let origin_name = s.spec.source.name.as_str();
    let origin_kind = s.source_kind();
    let missing = || {
        Some(finish_failed(origin_report(
            s,
            REASON_SOURCE_NOT_FOUND,
            format!("{origin_kind} {source_ns}/{origin_name} does not exist"),
        )))
    };
    // A snapshot's restore, once made, no longer needs it: the snapshot
    // controller lets a snapshot go as soon as its restore is provisioned,
    // and the restore is what moves.
    let origin = f.clone_source.as_ref();
    if origin.is_none() && !(s.source_is_snapshot() && f.moved_claim.is_some()) {
        return missing();
    }
    let (dest_ns, dest_name) = destination_of(s, d);
    if f.destination_claim.is_some() {
        return Some(finish_failed(Report::shared(
            REASON_DESTINATION_EXISTS,
            format!(
                "PersistentVolumeClaim {dest_ns}/{dest_name} already exists and was not created by this transfer"
            ),
        )));
    }
    if let ClassPolicy::Refused(why) = &f.class {
        return Some(finish_failed(Report::new(
            REASON_STORAGE_CLASS_NOT_ALLOWED,
            why.clone(),
        )));
    }
    let clone_name = moved_claim_name(s, d);
    let Some(clone) = &f.moved_claim else {
        let Some(origin) = origin else {
            return missing();
        };
        if let Some(class) = &f.clone_waits_for_consumer {
            return Some(finish_failed(Report::new(
                REASON_CLONE_NEEDS_CONSUMER,
                format!(
                    "StorageClass {class:?} of the clone of {origin_kind} {source_ns}/{origin_name} \
                     binds volumes WaitForFirstConsumer: a clone no pod uses would never be \
                     provisioned; clone into a class with volumeBindingMode Immediate"
                ),
            )));
        }
        if let Some(why) = &f.origin_not_ready {
            // A snapshot is restored only once it is ready to use.
            return Some(wait(
                Phase::WaitingForRelease,
                origin_report(s, REASON_SNAPSHOT_NOT_READY, why.clone()),
                false,
            ));
        }
        if d.populates() {
            // Nothing is cloned for a claim the clone could not be given to.
            if let Some(refusal) = unfit_for_clone(f, d, origin) {
                return Some(refusal);
            }
        }
        if !has_finalizer(s) || !has_finalizer(d) {
            return Some(Action::Protect);
        }
        if f.at_capacity {
            return Some(wait(
                Phase::WaitingForRelease,
                Report::new(
                    REASON_WAITING_FOR_CAPACITY,
                    format!(
                        "the offer's clones alive reach its maxClones ({}); waiting until one is deleted",
                        s.max_clones().unwrap_or_default()
                    ),
                ),
                false,
            ));
        }
        // C1 is a write under the server's identity: the parties' rights
        // first, as before R2 and R4.
        if let Some(action) = rights_and_admission(f, false) {
            return Some(action);
        }
        return Some(Action::CreateClone(Box::new(clone_claim(s, d, origin))));
    };
    if !is_our_clone(s, &receiver_uid(s, d), clone) {
        return Some(finish_failed(Report::new(
            REASON_CLONE_FAILED,
            format!(
                "PersistentVolumeClaim {source_ns}/{clone_name} already exists and was not made by this transfer"
            ),
        )));
    }
    if clone.deleting {
        return Some(finish_failed(Report::new(
            REASON_CLONE_FAILED,
            format!("the clone {source_ns}/{clone_name} was deleted before it was handed over"),
        )));
    }
    if clone.phase == "Bound" {
        return None;
    }
    // Unbound past the timeout, whatever the reason (a provisioner that
    // fails, or none that ever answers): the clone is given up, and with it
    // the quota and storage it holds in the source namespace.
    if f.now.saturating_sub(clone.created) >= f.clone_timeout {
        let why = match &f.clone_failure {
            Some(failure) => format!("could not be provisioned: {failure}"),
            None => format!("was not bound within {}s", f.clone_timeout),
        };
        return Some(finish_failed(Report::new(
            REASON_CLONE_FAILED,
            format!("the clone {source_ns}/{clone_name} of {source_ns}/{origin_name} {why}"),
        )));
    }
    let why = f
        .clone_failure
        .as_deref()
        .map(|m| format!("; the provisioner says: {m}"))
        .unwrap_or_default();
    Some(wait(
        Phase::WaitingForRelease,
        Report::new(
            REASON_CLONING,
            format!(
                "waiting for the clone {source_ns}/{clone_name} of {source_ns}/{origin_name} to be provisioned{why}"
            ),
        ),
        false,
    ))
}

/// A report about the clone's origin: for a snapshot source, the
/// destination reads the snapshot's fixed sentence for `reason`.
fn origin_report(s: &NamespaceTransfer, reason: &'static str, source: String) -> Report {
    if s.source_is_snapshot() {
        Report {
            reason,
            source,
            destination: super::snapshot::destination_text(reason).to_owned(),
        }
    } else {
        Report::new(reason, source)
    }
}

/// The volume a clone of `origin` gets: its class, access modes and
/// volumeMode, no volume attributes class (C1 asks for none), and at least
/// its request (a provisioner may round up, never down).
pub(super) fn volume_to_be(origin: &Claim) -> Volume {
    let shape = &origin.shape;
    Volume {
        name: String::new(),
        uid: String::new(),
        resource_version: String::new(),
        claim_ref: None,
        reclaim_policy: String::new(),
        original_policy: None,
        marker: None,
        destination_lost: None,
        phase: String::new(),
        storage_class_name: shape.storage_class_name.clone(),
        capacity: shape.request.clone(),
        access_modes: shape.access_modes.clone(),
        volume_mode: shape.volume_mode.clone(),
        volume_attributes_class_name: None,
        resizing: false,
        finalizers: Vec::new(),
        deleting: false,
        took_provisioner_finalizer: false,
    }
}

/// Before C1 of a populating Clone request: a refusal when no claim that
/// asks it could receive a clone of `origin` ([`volume_to_be`]), so that
/// nothing is made in the source namespace for a claim that cannot have it.
/// The request made for one claim fails (that claim cannot change into one
/// that fits: its class, modes and mode are immutable); `None` while a
/// claim fits.
fn unfit_for_clone(f: &Facts, d: &NamespaceTransfer, origin: &Claim) -> Option<Action> {
    let volume = volume_to_be(origin);
    if candidate(f, &volume).is_some() {
        return None;
    }
    let (ns, name) = (d.own_namespace(), d.populated_name());
    let destination = match misfits(f, &volume).first() {
        Some((claim, why)) => format!(
            "PersistentVolumeClaim {ns}/{} cannot receive a clone of the volume: {why}",
            claim.name
        ),
        None => format!(
            "no claim that names NamespaceTransfer {ns}/{name} is waiting for a volume any more; nothing was cloned"
        ),
    };
    Some(finish_failed(Report {
        reason: REASON_CLAIM_MISMATCH,
        source: destination_text(REASON_CLAIM_MISMATCH).to_owned(),
        destination,
    }))
}

/// The claim the protocol moves: the source claim in Move mode, its clone
/// in Clone mode.
pub fn moved_claim_name(s: &NamespaceTransfer, d: &NamespaceTransfer) -> String {
    match s.mode() {
        TransferMode::Move => s.spec.source.name.clone(),
        TransferMode::Clone => s.clone_claim_name(&receiver_uid(s, d)),
    }
}

/// [`moved_claim_name`] from what is known of the peer: the live one, or
/// the uid recorded at the match once it is gone (the clone is named after
/// that, see [`receiver_uid`]); `None` for a clone whose receiver is not
/// known yet.
pub fn moved_claim_name_of(s: &NamespaceTransfer, peer: &Peer) -> Option<String> {
    match (s.mode(), peer) {
        (TransferMode::Move, _) => Some(s.spec.source.name.clone()),
        (TransferMode::Clone, Peer::Itself) => Some(moved_claim_name(s, s)),
        (TransferMode::Clone, Peer::Found(d)) => Some(moved_claim_name(s, d)),
        (TransferMode::Clone, Peer::Gone | Peer::Unmatched) => s
            .status
            .as_ref()
            .and_then(|st| st.peer.as_ref())
            .and_then(|p| p.uid.as_deref())
            .map(|uid| s.clone_claim_name(uid)),
    }
}

/// The clone C1 makes: in the source namespace, cloned from the source
/// claim or restored from the source VolumeSnapshot (`dataSource`), in the
/// origin's shape (a snapshot's is [`restore_shape`]'s), born with our lock
/// so that R1 has nothing left to take.
pub fn clone_claim(
    s: &NamespaceTransfer,
    d: &NamespaceTransfer,
    origin: &Claim,
) -> PersistentVolumeClaim {
    let source_ns = s.source_namespace();
    let annotations = [
        (
            ANNOTATION_CLONE_OF.to_owned(),
            format!(
                "{}{source_ns}/{}",
                if s.source_is_snapshot() {
                    "volumesnapshot/"
                } else {
                    ""
                },
                origin.name
            ),
        ),
        (ANNOTATION_TRANSFER_LOCK.to_owned(), uid_of(s).to_owned()),
        (ANNOTATION_CLONE_FOR.to_owned(), receiver_uid(s, d)),
    ];
    let shape = &origin.shape;
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(moved_claim_name(s, d)),
            namespace: Some(source_ns.to_owned()),
            annotations: Some(annotations.into_iter().collect()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            data_source: Some(TypedLocalObjectReference {
                api_group: s.source_is_snapshot().then(|| SNAPSHOT_GROUP.to_owned()),
                kind: s.source_kind().to_owned(),
                name: origin.name.clone(),
            }),
            storage_class_name: shape.storage_class_name.clone(),
            access_modes: (!shape.access_modes.is_empty()).then(|| shape.access_modes.clone()),
            volume_mode: shape.volume_mode.clone(),
            resources: shape.request.clone().map(|q| VolumeResourceRequirements {
                requests: Some([("storage".to_owned(), Quantity(q))].into_iter().collect()),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Whether `clone` (found under the clone's name) is the one C1 made for
/// this pair: our lock, made for this receiver (`clone-for`: a standing
/// offer's pairs share its lock, and five characters of a uid may repeat),
/// cloned from the source claim (or restored from the source snapshot) and
/// from nothing else, and once R1 recorded
/// it, that very claim. A claim without our lock is
/// never adopted, and so never deleted by a rollback. (Only the source
/// namespace, which consented to the clone, can make a look-alike with our
/// lock; adopting it hands over nothing it did not offer.)
pub(super) fn is_our_clone(s: &NamespaceTransfer, receiver: &str, clone: &Claim) -> bool {
    clone.lock.as_deref() == Some(uid_of(s))
        && clone.clone_for.as_deref() == Some(receiver)
        && !clone.shape.extras
        && if s.source_is_snapshot() {
            &clone.shape.data_source_snapshot
        } else {
            &clone.shape.data_source_claim
        }
        .as_deref()
            == Some(s.spec.source.name.as_str())
        && recorded_source(s).is_none_or(|snapshot| snapshot.uid == clone.uid)
}

/// What a claim restored from a VolumeSnapshot can be shaped after (Clone
/// mode of a snapshot, C1), as gathered.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreBasis<'a> {
    /// The snapshot's `status.restoreSize`: the least a restore may ask.
    pub restore_size: Option<&'a str>,
    /// Its content's `spec.sourceVolumeMode`.
    pub source_volume_mode: Option<&'a str>,
    /// A populating request's oldest claim that names it: the claim the
    /// restore is for.
    pub claimant: Option<&'a Claim>,
    /// The claim the snapshot was taken from
    /// (`spec.source.persistentVolumeClaimName`), while it exists.
    pub taken_from: Option<&'a Claim>,
    /// The cluster's default StorageClass.
    pub default_class: Option<&'a str>,
}

/// The shape of the claim C1 restores from a VolumeSnapshot. The restore is
/// made in the source namespace, so the source decides where its data
/// lands:
/// - **class**: that of the claim the snapshot was taken from, while it
///   exists; else the cluster's default StorageClass, as kube restores a
///   claim that names none; only when the source has neither, that of the
///   claim a populating request is for;
/// - **volumeMode**: the snapshot's own (its content's `sourceVolumeMode`),
///   else that claim's or the origin's;
/// - **access modes**: those of the claim it is for, else the origin's,
///   else `ReadWriteOnce`;
/// - **size**: the larger of the snapshot's `restoreSize` and the request
///   of the claim it is for (a restore may be larger than its snapshot).
///
/// A claim it is for that does not fit the result (another class or
/// volumeMode) is then refused as any clone's misfit (`ClaimMismatch`).
/// Why no restore can be shaped, when none can.
pub fn restore_shape(b: &RestoreBasis<'_>) -> Result<ClaimShape, String> {
    let class_of = |c: Option<&Claim>| c.and_then(|c| c.shape.storage_class_name.clone());
    let Some(storage_class_name) = class_of(b.taken_from)
        .or(b.default_class.map(str::to_owned))
        .or(class_of(b.claimant))
    else {
        return Err(
            "the claim it was taken from is gone and the cluster has no default \
             StorageClass, so nothing says what to restore it into; request it with \
             --populate, and the claim that names the request gives its class"
                .to_owned(),
        );
    };
    let volume_mode = b
        .source_volume_mode
        .map(str::to_owned)
        .or(b.claimant.and_then(|c| c.shape.volume_mode.clone()))
        .or(b.taken_from.and_then(|c| c.shape.volume_mode.clone()));
    let access_modes = [b.claimant, b.taken_from]
        .into_iter()
        .flatten()
        .map(|c| c.shape.access_modes.clone())
        .find(|modes| !modes.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_owned()]);
    let request = larger_quantity(
        b.restore_size,
        b.claimant.and_then(|c| c.shape.request.as_deref()),
    )
    .or(b.taken_from.and_then(|c| c.shape.request.clone()));
    if request.is_none() {
        return Err(
            "it has no restoreSize, so nothing says how large a restore must be".to_owned(),
        );
    }
    Ok(ClaimShape {
        storage_class_name: Some(storage_class_name),
        access_modes,
        volume_mode,
        request,
        ..ClaimShape::default()
    })
}
