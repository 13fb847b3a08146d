//! The one table of the kinds this server serves ([`Kinds::served`]): each
//! kind is its type (in the API crate), its strategy (in `registry`) and one
//! line here. Everything else is built from this list:
//! - routing and request parsing ([`Kinds::resource`]);
//! - the stores, each with its watch cache, and their handlers
//!   ([`super::Api::new`]);
//! - discovery and OpenAPI, with each kind's schemas and merge markers
//!   ([`Kinds::schemas`]);
//! - admission's rights and field management, which each store takes from
//!   its kind.
//!
//! A test build may serve one more kind: [`Kinds::with`].

use std::sync::Arc;

use crate::api::schema::KindSchema;
use crate::api::ResourceInfo;
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Store, StoreConfig, Strategy};

use super::handler::{Handler, Resource};

/// One served kind: what the documents say of it, and how its store and
/// handler are made.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    schema: KindSchema,
    install: fn(&StoreConfig) -> Arc<dyn Resource>,
}

impl Kind {
    /// The kind of strategy `S`'s objects.
    pub fn of<S: Strategy + Default>() -> Self {
        fn install<S: Strategy + Default>(config: &StoreConfig) -> Arc<dyn Resource> {
            let store = Store::configured(S::default(), config);
            Arc::new(Handler::new(Arc::new(store)))
        }
        Self {
            schema: KindSchema::of::<S::Object>(),
            install: install::<S>,
        }
    }

    pub fn resource(&self) -> &'static ResourceInfo {
        self.schema.resource
    }

    /// Its store, with its watch cache started, and the handler over it.
    pub(super) fn install(&self, config: &StoreConfig) -> Arc<dyn Resource> {
        (self.install)(config)
    }
}

/// The kinds a server serves, in discovery order.
#[derive(Debug, Clone)]
pub struct Kinds(Vec<Kind>);

impl Kinds {
    /// What this server serves.
    pub fn served() -> Self {
        Self(vec![
            Kind::of::<NamespaceTransferStrategy>(),
            Kind::of::<EphemeralClaimStrategy>(),
        ])
    }

    /// These and `kind` after them.
    pub fn with(mut self, kind: Kind) -> Self {
        self.0.push(kind);
        self
    }

    pub fn iter(&self) -> impl Iterator<Item = &Kind> {
        self.0.iter()
    }

    /// The served resource of a URL's plural name.
    pub fn resource(&self, plural: &str) -> Option<&'static ResourceInfo> {
        self.0
            .iter()
            .map(Kind::resource)
            .find(|r| r.plural == plural)
    }

    /// What discovery and OpenAPI describe.
    pub fn schemas(&self) -> Vec<KindSchema> {
        self.0.iter().map(|k| k.schema).collect()
    }
}

#[cfg(test)]
mod tests;
