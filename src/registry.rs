//! The generic `Store<Strategy>` and the per-resource strategies: CRUD,
//! preconditions, finalizers, generation, selectors, dry-run.
//!
//! This is the one place where storage errors become [`crate::api::errors::ApiError`]s,
//! with the resource and name added. It must not parse HTTP.
//!
//! Empty in the walking skeleton: the API machinery arrives with the core issue.
