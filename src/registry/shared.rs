//! [`Shared`]: one stored revision of an object, decoded once and encoded to
//! JSON at most once, however many lists and watches read it.
//!
//! The watch cache keeps each revision's [`Shared`] in the value's
//! [`Memo`](crate::storage::Memo), so a list of 10k objects neither decodes
//! nor re-encodes any object a previous reader already did, and one event
//! reaches 1,000 watchers for the price of one encoding.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::api::errors::ApiError;
use crate::api::meta::Object;

/// A read-only object shared by its readers; derefs to the object.
pub struct Shared<O> {
    inner: Arc<Inner<O>>,
}

struct Inner<O> {
    object: O,
    json: OnceLock<Bytes>,
}

impl<O> Shared<O> {
    /// Wraps an object (already carrying its resourceVersion).
    pub fn new(object: O) -> Self {
        Self {
            inner: Arc::new(Inner {
                object,
                json: OnceLock::new(),
            }),
        }
    }
}

impl<O: Object> Shared<O> {
    /// The object as its JSON response representation, encoded by the first
    /// reader that asks.
    pub fn json(&self) -> Result<Bytes, ApiError> {
        if let Some(json) = self.inner.json.get() {
            return Ok(json.clone());
        }
        let json = serde_json::to_vec(&self.inner.object)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(format!("encoding response: {e}")))?;
        Ok(self.inner.json.get_or_init(|| json).clone())
    }

    /// The object itself, cloned unless this was its only reader.
    pub fn into_owned(self) -> O {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner.object,
            Err(shared) => shared.object.clone(),
        }
    }
}

impl<O> Clone for Shared<O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<O> Deref for Shared<O> {
    type Target = O;

    fn deref(&self) -> &O {
        &self.inner.object
    }
}

impl<O: std::fmt::Debug> std::fmt::Debug for Shared<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.object.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::namespace_transfer::NamespaceTransfer;

    #[test]
    fn clones_share_one_encoding_and_the_last_owner_gets_the_object_back_without_a_copy() {
        let mut obj = NamespaceTransfer::default();
        obj.metadata.name = Some("give".to_owned());
        obj.set_type_meta();
        let shared = Shared::new(obj.clone());
        let other = shared.clone();
        let first = shared.json().unwrap();
        let second = other.json().unwrap();
        assert_eq!(first, serde_json::to_vec(&obj).unwrap());
        assert_eq!(
            first.as_ptr(),
            second.as_ptr(),
            "the second reader reuses the first encoding"
        );
        assert_eq!(other.metadata.name.as_deref(), Some("give"));
        drop(shared);
        assert_eq!(other.into_owned(), obj);
    }
}
