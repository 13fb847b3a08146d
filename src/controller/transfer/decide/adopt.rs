//! A claim the tenant wrote, adopted at R3 instead of created (DESIGN
//! §2.3): which of the claims that name a populating request may receive
//! the volume, and what is wrong with the others.
//!
//! Every field of such a claim is the destination tenant's input. kube's
//! PV controller binds a claim to a volume whose `claimRef` names it
//! without comparing classes, so every rule it would skip is checked here,
//! before R3 records the claim and again before R4 points the volume at it.

use crate::controller::transfer::facts::{
    quantity_bytes, volume_mode_or_default, Claim, Facts, Volume,
};

use super::recorded_source;

/// Why `claim` cannot receive `volume`; `None` when it can: Pending with no
/// `volumeName`, not deleting, no selector, the volume's class, access
/// modes within the volume's, the same volumeMode and volume attributes
/// class (kube binds no claim to a volume of another), and a request no
/// larger than the volume and no smaller than `charged`, the request of
/// the claim the volume comes from ([`charged`]): a namespace's quota counts
/// a claim by its request, so a smaller one would receive more than its
/// quota was charged for (a claim the transfer makes copies that request).
pub fn misfit(claim: &Claim, volume: &Volume, charged: Option<&str>) -> Option<String> {
    let shape = &claim.shape;
    if claim.deleting {
        return Some("it is being deleted".to_owned());
    }
    if let Some(bound) = &claim.volume_name {
        return Some(format!("it names volume {bound:?} in spec.volumeName"));
    }
    if !matches!(claim.phase.as_str(), "" | "Pending") {
        return Some(format!("it is {}, not Pending", claim.phase));
    }
    let class = |c: &Option<String>| c.clone().unwrap_or_default();
    if class(&shape.storage_class_name) != class(&volume.storage_class_name) {
        return Some(format!(
            "its storageClassName {:?} is not the volume's {:?}",
            class(&shape.storage_class_name),
            class(&volume.storage_class_name)
        ));
    }
    if let Some(mode) = shape
        .access_modes
        .iter()
        .find(|m| !volume.access_modes.contains(m))
    {
        return Some(format!(
            "it asks for access mode {mode}, and the volume offers only {}",
            volume.access_modes.join(", ")
        ));
    }
    let (mode, volume_mode) = (
        volume_mode_or_default(&shape.volume_mode),
        volume_mode_or_default(&volume.volume_mode),
    );
    if mode != volume_mode {
        return Some(format!(
            "its volumeMode {mode} is not the volume's {volume_mode}"
        ));
    }
    if shape.volume_attributes_class_name != volume.volume_attributes_class_name {
        return Some(format!(
            "its volumeAttributesClassName {:?} is not the volume's {:?}",
            shape
                .volume_attributes_class_name
                .as_deref()
                .unwrap_or_default(),
            volume
                .volume_attributes_class_name
                .as_deref()
                .unwrap_or_default()
        ));
    }
    let requested = shape.request.as_deref().and_then(quantity_bytes);
    let capacity = volume.capacity.as_deref().and_then(quantity_bytes);
    match (requested, capacity) {
        (Some(r), Some(c)) if r <= c => {}
        _ => {
            return Some(format!(
                "it requests {}, more than the volume's {}",
                shape.request.as_deref().unwrap_or("no storage"),
                volume.capacity.as_deref().unwrap_or("unknown capacity")
            ))
        }
    }
    if let (Some(r), Some(least)) = (requested, charged.and_then(quantity_bytes)) {
        if r < least {
            return Some(format!(
                "it requests {}, less than the {} the volume's claim requests: the namespace's quota counts a claim by its request, so ask for at least that",
                shape.request.as_deref().unwrap_or_default(),
                charged.unwrap_or_default()
            ));
        }
    }
    if shape.selector_or_limits {
        return Some(
            "it sets a selector or resource limits, which a moved volume does not answer to"
                .to_owned(),
        );
    }
    None
}

/// Why the claim R3 adopted can no longer receive `volume`: as [`misfit`],
/// except that naming `volume` itself is what the hold before R4 does.
pub fn adopted_misfit(f: &Facts, claim: &Claim, volume: &Volume) -> Option<String> {
    let charged = charged(f);
    if claim.volume_name.as_deref() == Some(volume.name.as_str()) {
        let unpinned = Claim {
            volume_name: None,
            ..claim.clone()
        };
        return misfit(&unpinned, volume, charged);
    }
    misfit(claim, volume, charged)
}

/// The request the claim that holds the pair's volume makes: the one R1
/// recorded, or before R1 the moved claim's (the source claim, or its
/// clone), or before C1 the origin's (which the clone copies). A claim that
/// receives the volume is charged at least that.
pub fn charged(f: &Facts) -> Option<&str> {
    if let Some(snapshot) = recorded_source(&f.source) {
        return snapshot.storage_request.as_ref().map(|q| q.0.as_str());
    }
    f.moved_claim
        .as_ref()
        .or(f.clone_source.as_ref())?
        .shape
        .request
        .as_deref()
}

/// The claim R3 adopts: the oldest of the candidates that fits `volume`.
pub fn candidate<'a>(f: &'a Facts, volume: &Volume) -> Option<&'a Claim> {
    let charged = charged(f);
    f.claimants
        .iter()
        .find(|c| misfit(c, volume, charged).is_none())
}

/// The candidates that do not fit `volume`, each with why.
pub fn misfits<'a>(f: &'a Facts, volume: &Volume) -> Vec<(&'a Claim, String)> {
    let charged = charged(f);
    f.claimants
        .iter()
        .filter_map(|c| misfit(c, volume, charged).map(|why| (c, why)))
        .collect()
}
