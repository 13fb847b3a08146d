//! The triggers' local copy of every object of one kind, by queue key
//! (`namespace/name`), and an index of it by *tags*: short strings that
//! say what the object may be concerned by (a namespace, a claim, a
//! volume). An event names the tags it can concern, and only the objects
//! filed under them are tested, so that an event costs the objects it may
//! concern, not every object known: with a full scan, a fleet of transfers
//! cost each other quadratically.
//!
//! The index only narrows; the trigger's own test still decides. So it is
//! correct as long as every object an event concerns is filed under one of
//! the event's tags, which each trigger's tests check against a full scan.
//!
//! The copy holds the objects the store's watch hands out ([`Shared`]), so
//! it shares them with the watch cache: an event costs no copy of its
//! object, and the copy no memory of its own for the objects.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::registry::Shared;

/// The tags an object is filed under.
pub(crate) type Tags<O> = fn(&O) -> Vec<String>;

/// A shared, indexed copy of every object of one kind.
#[derive(Debug)]
pub(crate) struct Known<O>(Arc<RwLock<Index<O>>>);

impl<O> Clone for Known<O> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<O> Known<O> {
    /// An empty copy whose objects are filed under `tags`.
    pub(crate) fn new(tags: Tags<O>) -> Self {
        Self(Arc::new(RwLock::new(Index {
            objects: HashMap::new(),
            tagged: HashMap::new(),
            tags,
        })))
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Index<O>> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Index<O>> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The objects by key, and the keys by tag.
#[derive(Debug)]
pub(crate) struct Index<O> {
    objects: HashMap<String, Shared<O>>,
    tagged: HashMap<String, HashSet<String>>,
    tags: Tags<O>,
}

impl<O> Index<O> {
    /// Every object, with its key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &O)> {
        self.objects.iter().map(|(key, o)| (key, &**o))
    }

    /// Every key.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.objects.keys().cloned().collect()
    }

    /// The keys of the objects filed under any of `tags` that `concerns`
    /// keeps, each once.
    pub(crate) fn concerned<'t>(
        &self,
        tags: impl IntoIterator<Item = &'t String>,
        concerns: impl Fn(&O) -> bool,
    ) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut keys = Vec::new();
        for key in tags
            .into_iter()
            .filter_map(|t| self.tagged.get(t))
            .flatten()
        {
            if seen.insert(key) && self.objects.get(key).is_some_and(|o| concerns(o)) {
                keys.push(key.clone());
            }
        }
        keys
    }

    /// Puts `o` under `key`, in place of whatever was there.
    pub(crate) fn insert(&mut self, key: String, o: Shared<O>) {
        self.remove(&key);
        for tag in (self.tags)(&o) {
            self.tagged.entry(tag).or_default().insert(key.clone());
        }
        self.objects.insert(key, o);
    }

    /// Takes the object under `key` out, if any.
    pub(crate) fn remove(&mut self, key: &str) {
        let Some(old) = self.objects.remove(key) else {
            return;
        };
        for tag in (self.tags)(&old) {
            if let Some(keys) = self.tagged.get_mut(&tag) {
                keys.remove(key);
                if keys.is_empty() {
                    self.tagged.remove(&tag);
                }
            }
        }
    }

    /// Empties the copy.
    pub(crate) fn clear(&mut self) {
        self.objects.clear();
        self.tagged.clear();
    }

    /// How many tags hold at least one object (for tests: none is left
    /// behind by an object that moved or went).
    #[cfg(test)]
    pub(crate) fn tag_count(&self) -> usize {
        self.tagged.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_letters(s: &(char, char)) -> Vec<String> {
        vec![s.0.to_string(), s.1.to_string()]
    }

    #[test]
    fn an_object_is_found_under_each_of_its_tags_once_and_only_while_it_has_them() {
        let known = Known::new(first_letters);
        let mut index = known.write();
        index.insert("k".into(), Shared::new(('a', 'b')));
        index.insert("l".into(), Shared::new(('b', 'c')));
        let both = [String::from("a"), String::from("b")];
        let mut found = index.concerned(&both, |_| true);
        found.sort();
        assert_eq!(found, ["k", "l"], "k is under a and b, and is listed once");

        index.insert("k".into(), Shared::new(('c', 'c')));
        assert_eq!(
            index.concerned(&[String::from("a")], |_| true),
            Vec::<String>::new()
        );
        assert_eq!(index.tag_count(), 2, "a is gone with k's old tags");

        index.remove("l");
        index.remove("k");
        assert_eq!(index.tag_count(), 0);
        assert!(index.keys().is_empty());
    }

    #[test]
    fn the_trigger_s_own_test_still_decides_among_the_tagged() {
        let known = Known::new(first_letters);
        let mut index = known.write();
        index.insert("k".into(), Shared::new(('a', 'x')));
        index.insert("l".into(), Shared::new(('a', 'y')));
        assert_eq!(index.concerned(&[String::from("a")], |o| o.1 == 'y'), ["l"]);
    }
}
