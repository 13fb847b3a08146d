//! The objects the protocol makes, and how it recognises them again: the
//! source snapshot R1 records and the destination claim R3 creates.

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::controller::transfer::facts::{
    larger_quantity, quantity_bytes, volume_mode_or_default, Claim, ClaimShape, Volume,
};

use crate::api::namespace_transfer::{
    NamespaceTransfer, SourceClaimSnapshot, ANNOTATION_TRANSFERRED_FROM, ANNOTATION_TRANSFER_LOCK,
    FINALIZER_TRANSFER_PROTECTION,
};
use crate::controller::transfer::matching::destination_lock;

/// What R3 and R4 need of the source claim, taken at R1.
pub fn snapshot_of(claim: &Claim, volume: &Volume) -> SourceClaimSnapshot {
    SourceClaimSnapshot {
        name: claim.name.clone(),
        uid: claim.uid.clone(),
        volume_name: volume.name.clone(),
        storage_request: claim.shape.request.clone().map(Quantity),
        storage_class_name: claim.shape.storage_class_name.clone(),
        access_modes: claim.shape.access_modes.clone(),
        volume_mode: claim.shape.volume_mode.clone(),
        volume_attributes_class_name: claim.shape.volume_attributes_class_name.clone(),
    }
}

/// The destination claim R3 makes: pre-bound to the volume, in the
/// volume's class (named explicitly, even when empty, so that no default
/// class is chosen for it), requesting the whole volume (so that the
/// destination's quota counts what it receives), shaped like the source,
/// locked as ours (by a [`destination_lock`], which the destination cannot
/// trace to any object of the source's), held by our finalizer until the
/// transfer is done with it, with no ownerReferences.
pub fn destination_claim(
    s: &NamespaceTransfer,
    dest_ns: &str,
    dest_name: &str,
    snapshot: &SourceClaimSnapshot,
    volume: &Volume,
) -> PersistentVolumeClaim {
    // The claim the destination asked for, never the clone that carries it
    // (in Move mode they are the same).
    let annotations = [
        (
            ANNOTATION_TRANSFERRED_FROM.to_owned(),
            format!("{}/{}", s.source_namespace(), s.spec.source.name),
        ),
        (
            ANNOTATION_TRANSFER_LOCK.to_owned(),
            destination_lock(s, dest_ns, dest_name),
        ),
    ];
    let request = larger_quantity(
        snapshot.storage_request.as_ref().map(|q| q.0.as_str()),
        volume.capacity.as_deref(),
    );
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(dest_name.to_owned()),
            namespace: Some(dest_ns.to_owned()),
            annotations: Some(annotations.into_iter().collect()),
            finalizers: Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: Some(volume.name.clone()),
            storage_class_name: Some(volume.storage_class_name.clone().unwrap_or_default()),
            access_modes: (!snapshot.access_modes.is_empty())
                .then(|| snapshot.access_modes.clone()),
            volume_mode: snapshot.volume_mode.clone(),
            volume_attributes_class_name: snapshot.volume_attributes_class_name.clone(),
            resources: request.map(|q| VolumeResourceRequirements {
                requests: Some([("storage".to_owned(), Quantity(q))].into_iter().collect()),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Whether `claim` is exactly what R3 makes as `expected`: adopting such a
/// claim after a crash right after R3 gives nobody anything R3 would not
/// have given (a tenant's look-alike with a smaller request, another class,
/// a data source or an owner is refused).
pub fn made_as(claim: &Claim, expected: &PersistentVolumeClaim) -> bool {
    same_shape(&claim.shape, &Claim::from(expected).shape)
}

/// Whether a claim's shape is `want`'s, request compared as a quantity.
pub(super) fn same_shape(have: &ClaimShape, want: &ClaimShape) -> bool {
    let mut want_modes = want.access_modes.clone();
    let mut have_modes = have.access_modes.clone();
    want_modes.sort();
    have_modes.sort();
    let same_request = match (&want.request, &have.request) {
        (Some(a), Some(b)) => quantity_bytes(a).is_some() && quantity_bytes(a) == quantity_bytes(b),
        (None, None) => true,
        _ => false,
    };
    !have.extras
        && have.volume_name == want.volume_name
        && have.data_source_claim == want.data_source_claim
        && have.data_source_snapshot == want.data_source_snapshot
        && have.storage_class_name.clone().unwrap_or_default()
            == want.storage_class_name.clone().unwrap_or_default()
        && want_modes == have_modes
        && volume_mode_or_default(&have.volume_mode) == volume_mode_or_default(&want.volume_mode)
        && have.volume_attributes_class_name == want.volume_attributes_class_name
        && same_request
}
