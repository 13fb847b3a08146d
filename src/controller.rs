//! The reconcilers: the NamespaceTransfer rebind protocol and the EphemeralClaim
//! lifecycle. They act on our objects through `registry`, and on core objects
//! (PVs, PVCs, pods) through kube-rs, only while this replica is the leader.
//!
//! Empty in the walking skeleton: each controller has an issue of its own.
