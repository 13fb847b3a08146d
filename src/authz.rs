//! Authorization through SubjectAccessReview, with a TTL cache of allow and deny
//! answers keyed on the whole review spec (DESIGN §3.2).
//!
//! Owns what a known user may do; never who they are.
//!
//! Empty in the walking skeleton: delegated authorization has an issue of its own.
