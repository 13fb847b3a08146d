//! storage-transfer-apiserver: a Kubernetes aggregated API server for the API group
//! `storage.transfer.k8s.io`, serving NamespaceTransfer and EphemeralClaim.
//!
//! The crate is layered, and layers depend downward only:
//!
//! ```text
//! api ← storage ← registry ← endpoints ← server
//! ```
//!
//! `api` is the `transfer-api` crate: the types, their validation, their
//! reasons and their OpenAPI schemas, pure by its dependencies (no I/O, no
//! tokio). `wire` (the bounds every body is read within) sits just above
//! it. `discovery` (built from `api`), `authn`, `authz` (with the
//! `review_cache` they share), `admission` (the ordered plugins: the
//! tenant's rights, the cluster's policies, webhooks and quotas, run by the
//! registry through `registry::admission::Chain`),
//! `audit` and `controller` sit beside the request path, each at the layer
//! `tests/layers.rs` gives it; that test fails when a module uses one of
//! its own layer or a higher one. See `DESIGN.md` §3.
#![forbid(unsafe_code)]

pub mod admission;
/// The API's types, defaulting, validation and vocabularies, in a crate of
/// their own (`crates/transfer-api`) that `kubectl-transfer` shares: named
/// `api` here, the bottom layer.
pub use transfer_api as api;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod controller;
pub mod discovery;
pub mod endpoints;
pub mod metrics;
pub mod reflect;
pub mod registry;
pub mod review_cache;
pub mod server;
pub mod storage;
pub mod wire;
