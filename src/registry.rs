//! The generic [`Store`] and the per-resource strategies: CRUD, preconditions,
//! finalizers, generation, selectors, dry-run and watch.
//!
//! As in k8s.io/apiserver, the store is written once and every resource brings
//! only a [`Strategy`]: its object type (which carries defaulting and
//! validation), its Table columns and its field selectors. This is the one place
//! where [`StorageError`]s become [`ApiError`]s, with the resource and name
//! added. It must not parse HTTP.

pub mod admission;
pub mod ephemeral_claim;
pub mod fields;
pub mod namespace_transfer;
pub mod rights;
pub mod selectors;
pub mod shared;
pub mod store;
pub mod strategy;
pub mod table;

pub use admission::{Attributes, Chain, Notes, Operation, Plugin};
pub use selectors::{FieldSelector, LabelSelector};
pub use shared::Shared;
pub use store::{
    Config as StoreConfig, DeleteOptions, DeleteOutcome, ListOptions, ObjectList, Part, Store,
    Watch, WatchEvent, WatchOptions,
};
pub use strategy::{Strategy, UniqueClaim};

use crate::api::errors::{ApiError, GroupResource};
use crate::api::meta::{Requester, SYSTEM_MASTERS};
use crate::storage::{Fence, StorageError};

/// Who is asking, and how: what every write needs besides its object.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The authenticated user; stamped into `spec.requester` on create.
    pub user: Requester,
    /// `dryRun=All`: run every step but the write.
    pub dry_run: bool,
    /// Whether the write comes from a client or from this server's controllers.
    pub writer: Writer,
    /// The field manager the write is recorded under in `managedFields`:
    /// the `fieldManager` parameter, or derived from the User-Agent. Empty
    /// for the controllers, which write as [`CONTROLLER_MANAGER`].
    pub manager: String,
    /// Warnings and audit annotations the request collects.
    pub notes: Notes,
    /// The controllers' term of leadership: every write made with this
    /// context goes through only while the term's election key still exists
    /// (checked by etcd in the write's transaction). `None` for requests.
    pub fence: Option<Fence>,
}

/// The field manager of this server's own controllers.
pub const CONTROLLER_MANAGER: &str = "storage-transfer-apiserver";

/// Where a write comes from. Only the controllers write status and their own
/// finalizers: status is the protocol's output, never a tenant's input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Writer {
    /// A request through the API; every HTTP request is one.
    #[default]
    Client,
    /// This server's own controllers, in process. No request can claim it.
    Controller,
}

impl Context {
    /// A write the controllers make in a tenant's name, as if `user` made
    /// it: admitted as a client write (the cluster's policies and webhooks
    /// govern it as one the tenant filed itself), recorded under this
    /// server's field manager, fenced by the controllers' term.
    pub fn on_behalf_of(user: Requester, fence: Fence) -> Self {
        Self {
            user,
            dry_run: false,
            writer: Writer::Client,
            manager: CONTROLLER_MANAGER.to_owned(),
            notes: Notes::default(),
            fence: Some(fence),
        }
    }

    /// The name the write's fields are recorded under.
    pub fn field_manager(&self) -> &str {
        if self.manager.is_empty() && self.writer == Writer::Controller {
            CONTROLLER_MANAGER
        } else {
            &self.manager
        }
    }

    /// Whether this write may change status and the controllers' finalizers:
    /// the controllers themselves, or a cluster administrator.
    pub fn may_write_controller_fields(&self) -> bool {
        self.writer == Writer::Controller || self.user.groups.iter().any(|g| g == SYSTEM_MASTERS)
    }
}

/// The one mapping from storage errors to API errors.
pub(crate) fn storage_error(err: StorageError, resource: &GroupResource, name: &str) -> ApiError {
    match err {
        StorageError::NotFound { .. } => ApiError::NotFound {
            resource: resource.clone(),
            name: name.to_owned(),
        },
        StorageError::AlreadyExists { .. } => ApiError::AlreadyExists {
            resource: resource.clone(),
            name: name.to_owned(),
        },
        StorageError::Conflict { .. } => ApiError::Conflict {
            resource: resource.clone(),
            name: name.to_owned(),
            message: "the object has been modified; please apply your changes to the latest version and try again".to_owned(),
        },
        StorageError::Compacted { requested } => ApiError::Expired(format!(
            "The resourceVersion for the provided list is too old (resourceVersion {requested} has been compacted)."
        )),
        StorageError::FutureRevision { requested, current } => {
            ApiError::TooLargeResourceVersion { requested, current }
        }
        fenced @ StorageError::Fenced { .. } => ApiError::Fenced(format!(
            "{resource} \"{name}\" was not written: this replica no longer leads the controllers ({fenced})"
        )),
        StorageError::Unavailable(message) => ApiError::ServiceUnavailable(format!(
            "storage is unavailable: {message}"
        )),
        StorageError::Internal(message) => ApiError::Internal(message),
    }
}
