//! Authentication, as k8s.io/apiserver's delegated authenticators do it: front-proxy
//! request headers, client certificates, bearer tokens (local ServiceAccount JWT
//! verification, else TokenReview), then anonymous (DESIGN §3.2).
//!
//! Owns who the caller is; never what they may do.
//!
//! Empty in the walking skeleton: delegated authentication has an issue of its own.
