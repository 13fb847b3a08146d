use super::*;

#[test]
fn singular_is_the_lowercase_kind() {
    for r in [NAMESPACE_TRANSFERS, EPHEMERAL_CLAIMS] {
        assert_eq!(r.singular, r.kind.to_lowercase());
    }
}

#[test]
fn a_finalizer_is_put_on_once_and_taken_off_leaving_the_others_in_order() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let mut meta = ObjectMeta::default();
    crate::meta::set_finalizer(&mut meta, "b", true);
    crate::meta::set_finalizer(&mut meta, "b", true);
    assert_eq!(meta.finalizers.as_deref(), Some(&["b".to_owned()][..]));
    meta.finalizers = Some(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]);
    crate::meta::set_finalizer(&mut meta, "b", false);
    assert_eq!(
        meta.finalizers.as_deref(),
        Some(&["a".to_owned(), "c".to_owned()][..])
    );
    meta.finalizers = Some(vec!["b".to_owned()]);
    crate::meta::set_finalizer(&mut meta, "b", false);
    assert_eq!(meta.finalizers, None, "an empty list is stored as none");
}

/// The reasons are written into objects and read by clients: their words
/// are API, and must not change with a rename.
#[test]
fn every_reason_is_written_as_its_word_and_read_back_from_it() {
    use crate::ephemeral_claim::ClaimReason;
    use crate::namespace_transfer::TransferReason;

    let transfer = [
        "WaitingForPeer",
        "PeerTaken",
        "SourceNotFound",
        "SourceNotBound",
        "SourceInUse",
        "SourceLocked",
        "StorageClassNotAllowed",
        "DestinationExists",
        "DestinationRefused",
        "Forbidden",
        "SourceReleaseRefused",
        "VolumeChanged",
        "Deleted",
        "DeadlineExceeded",
        "ModeNotSupported",
        "Cloning",
        "CloneFailed",
        "CloneNeedsConsumer",
        "WaitingForCapacity",
        "WaitingForBinding",
        "DestinationLost",
        "WaitingForClaim",
        "ClaimMismatch",
        "SnapshotNotReady",
        "SnapshotInGroup",
        "SnapshotClassNotAllowed",
        "Locked",
        "Authorized",
        "Committed",
        "CloneCreated",
        "Completed",
        "Matched",
        "NotInUse",
        "RightsConfirmed",
        "Offering",
        "Serving",
        "RequestRefused",
        "TransferNotFound",
        "TransferNotPopulating",
        "NotAdopted",
        "ClaimNotServed",
    ];
    let claim = [
        "WaitingForOwner",
        "WaitingForBinding",
        "ClaimBound",
        "PodRunning",
        "OwnerFinished",
        "ClaimRefused",
        "Forbidden",
        "UnsafeTemplate",
        "Created",
        "ClaimConflict",
        "WaitingForConsent",
        "Cloning",
        "Offered",
        "ClaimLost",
        "NoLongerUsed",
        "OwnerGone",
        "EphemeralClaimDeleted",
        "ClaimDeleted",
    ];
    for word in transfer {
        let reason = TransferReason::parse(word).unwrap_or_else(|| panic!("{word}"));
        assert_eq!(reason.as_str(), word);
        assert_eq!(reason.to_string(), word);
    }
    for word in claim {
        let reason = ClaimReason::parse(word).unwrap_or_else(|| panic!("{word}"));
        assert_eq!(reason.as_str(), word);
    }
    assert_eq!(TransferReason::parse("forbidden"), None, "words are exact");
    assert_eq!(TransferReason::parse("Teleported"), None);
}
