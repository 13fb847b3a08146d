//! The bounds every body from a client or a webhook is read within, before
//! any layer looks at what it says: its size ([`MAX_BODY_BYTES`]), what its
//! JSON tree may cost ([`json_cost`]), how far a JSON Patch may grow it
//! ([`bounded_patch`]), and how deep and how aliased its YAML may be
//! ([`yaml`]).
//!
//! Owns the wire-level limits and the bounded readers. It knows nothing of
//! HTTP, routes or kinds, and depends on `api` alone, so that `endpoints`,
//! `admission` (a webhook's patch) and `audit` (a request body it records,
//! a policy file) all read through one set of bounds.

pub mod bounded_patch;
pub mod json_cost;
pub mod yaml;

/// Request bodies larger than this are refused with 413, as kube-apiserver does.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
