//! Field management: `metadata.managedFields` on every write, and
//! server-side apply, as kube-apiserver does them for a custom resource of
//! the same schema.
//!
//! - [`path`] and [`set`]: field paths and sets of them, and their
//!   `fieldsV1` encoding;
//! - [`schema`]: how each node merges, read from our OpenAPI definitions
//!   (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//!   `x-kubernetes-map-type`);
//! - [`typed`]: field sets, comparison, merge and removal over an object
//!   and its schema (structured-merge-diff's algorithms);
//! - [`manager`]: who owns what, on update and on apply (kube's
//!   managedfields layers).
//!
//! The store calls [`manager::FieldManager`]; nothing here does I/O.

pub mod manager;
pub mod path;
pub mod schema;
pub mod set;
pub mod typed;

pub use manager::{ApplyError, FieldManager, Write};

use crate::api::meta::Object;
use crate::api::schema as schema_of;
use crate::api::{self};

/// The field manager of `T`, from the schemas our OpenAPI documents
/// publish for it.
pub fn for_kind<T: Object>() -> FieldManager {
    let kind = T::resource().kind;
    let definition = schema_of::kind_definition(kind);
    let definitions = schema_of::definitions(&[schema_of::KindSchema::of::<T>()]);
    let schema = schema::Schema::from_definitions(&definitions, &[definition.as_str()]);
    FieldManager::new(schema, &definition, api::GROUP_VERSION, kind)
}

#[cfg(test)]
mod tests;
