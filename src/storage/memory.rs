//! An in-memory [`Storage`] with etcd's revision semantics, for unit tests of
//! the layers above. Integration tests use real etcd.

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::broadcast;

use super::{
    Event, Fence, Guard, KeyValue, ListOptions, ListPage, Release, Result, Revision, Storage,
    StorageError, WatchMessage, WatchStream,
};

#[derive(Debug)]
struct State {
    revision: Revision,
    compacted: Revision,
    data: BTreeMap<String, KeyValue>,
    history: Vec<Event>,
}

/// A single-process store: one global revision counter, full history.
#[derive(Debug)]
pub(crate) struct MemoryStorage {
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                revision: 1,
                compacted: 0,
                data: BTreeMap::new(),
                history: Vec::new(),
            }),
            events: broadcast::channel(10_000).0,
        }
    }
}

impl MemoryStorage {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `key` at the current revision, as one put of a transaction.
    fn put(&self, state: &mut State, key: &str, value: Bytes) -> KeyValue {
        let prev = state.data.get(key).cloned();
        let kv = KeyValue {
            key: key.to_owned(),
            value,
            create_revision: prev.as_ref().map_or(state.revision, |p| p.create_revision),
            mod_revision: state.revision,
            memo: Default::default(),
        };
        state.data.insert(key.to_owned(), kv.clone());
        self.record(
            state,
            Event::Put {
                kv: kv.clone(),
                prev,
            },
        );
        kv
    }

    /// `Fenced` unless `fence` (if any) still holds, as the transaction's
    /// first comparison.
    fn check_fence(state: &State, fence: Option<&Fence>) -> Result<()> {
        let Some(fence) = fence else { return Ok(()) };
        let actual = state
            .data
            .get(&fence.key)
            .map_or(0, |kv| kv.create_revision);
        if actual == fence.create_revision {
            Ok(())
        } else {
            Err(StorageError::Fenced {
                key: fence.key.clone(),
                expected: fence.create_revision,
                actual,
            })
        }
    }

    /// Deletes each release key still at its revision, at the current
    /// revision, as the nested transaction of one write.
    fn release(&self, state: &mut State, releases: &[Release]) {
        for release in releases {
            let current = state.data.get(&release.key).map(|kv| kv.mod_revision);
            if current == Some(release.revision) {
                if let Some(prev) = state.data.remove(&release.key) {
                    let revision = state.revision;
                    self.record(state, Event::Delete { prev, revision });
                }
            }
        }
    }

    fn record(&self, state: &mut State, event: Event) {
        state.history.push(event.clone());
        let _ = self.events.send(event);
    }
}

#[async_trait::async_trait]
impl Storage for MemoryStorage {
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[Guard],
        fence: Option<&Fence>,
    ) -> Result<KeyValue> {
        let mut state = self.lock();
        Self::check_fence(&state, fence)?;
        if state.data.contains_key(key) {
            return Err(StorageError::AlreadyExists {
                key: key.to_owned(),
            });
        }
        for guard in guards {
            let actual = state.data.get(&guard.key).map_or(0, |kv| kv.mod_revision);
            let expected = guard.expected.unwrap_or(0);
            if actual != expected {
                return Err(StorageError::Conflict {
                    key: guard.key.clone(),
                    expected,
                    actual,
                });
            }
        }
        // One transaction: every put at one revision, as etcd does it.
        state.revision += 1;
        let created = self.put(&mut state, key, value);
        for guard in guards {
            self.put(&mut state, &guard.key, guard.value.clone());
        }
        Ok(created)
    }

    async fn get(&self, key: &str) -> Result<KeyValue> {
        self.lock()
            .data
            .get(key)
            .cloned()
            .ok_or_else(|| StorageError::NotFound {
                key: key.to_owned(),
            })
    }

    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[Release],
        fence: Option<&Fence>,
    ) -> Result<KeyValue> {
        let mut state = self.lock();
        Self::check_fence(&state, fence)?;
        let Some(prev) = state.data.get(key).cloned() else {
            return Err(StorageError::NotFound {
                key: key.to_owned(),
            });
        };
        if prev.mod_revision != expected {
            return Err(StorageError::Conflict {
                key: key.to_owned(),
                expected,
                actual: prev.mod_revision,
            });
        }
        state.revision += 1;
        let kv = KeyValue {
            value,
            mod_revision: state.revision,
            memo: Default::default(),
            ..prev.clone()
        };
        state.data.insert(key.to_owned(), kv.clone());
        self.record(
            &mut state,
            Event::Put {
                kv: kv.clone(),
                prev: Some(prev),
            },
        );
        self.release(&mut state, releases);
        Ok(kv)
    }

    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[Release],
        fence: Option<&Fence>,
    ) -> Result<(KeyValue, Revision)> {
        let mut state = self.lock();
        Self::check_fence(&state, fence)?;
        let Some(prev) = state.data.get(key).cloned() else {
            return Err(StorageError::NotFound {
                key: key.to_owned(),
            });
        };
        if prev.mod_revision != expected {
            return Err(StorageError::Conflict {
                key: key.to_owned(),
                expected,
                actual: prev.mod_revision,
            });
        }
        state.revision += 1;
        let revision = state.revision;
        state.data.remove(key);
        self.record(
            &mut state,
            Event::Delete {
                prev: prev.clone(),
                revision,
            },
        );
        self.release(&mut state, releases);
        Ok((prev, revision))
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListPage> {
        let state = self.lock();
        // Only the latest revision is kept; older reads are refused as etcd
        // refuses compacted ones.
        if let Some(rev) = opts.revision.filter(|r| *r > 0) {
            if rev < state.revision && rev <= state.compacted {
                return Err(StorageError::Compacted { requested: rev });
            }
            if rev > state.revision {
                return Err(StorageError::FutureRevision {
                    requested: rev,
                    current: state.revision,
                });
            }
        }
        let all: Vec<&KeyValue> = state
            .data
            .values()
            .filter(|kv| kv.key.starts_with(prefix))
            .filter(|kv| {
                opts.start_after
                    .as_ref()
                    .is_none_or(|a| kv.key.as_str() > a.as_str())
            })
            .collect();
        let limit = opts
            .limit
            .filter(|l| *l > 0)
            .map_or(all.len(), |l| l as usize);
        let items: Vec<KeyValue> = all.iter().take(limit).map(|kv| (*kv).clone()).collect();
        Ok(ListPage {
            more: all.len() > items.len(),
            remaining: (all.len() - items.len()) as i64,
            items,
            revision: opts.revision.filter(|r| *r > 0).unwrap_or(state.revision),
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.lock().revision)
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<Box<dyn WatchStream>> {
        let state = self.lock();
        if after < state.compacted {
            return Err(StorageError::Compacted { requested: after });
        }
        let backlog: Vec<Event> = state
            .history
            .iter()
            .filter(|e| e.revision() > after && e.key().starts_with(prefix))
            .cloned()
            .collect();
        Ok(Box::new(MemoryWatch {
            prefix: prefix.to_owned(),
            backlog,
            live: self.events.subscribe(),
            revision: state.revision,
            progress_due: false,
        }))
    }
}

#[derive(Debug)]
struct MemoryWatch {
    prefix: String,
    backlog: Vec<Event>,
    live: broadcast::Receiver<Event>,
    revision: Revision,
    progress_due: bool,
}

#[async_trait::async_trait]
impl WatchStream for MemoryWatch {
    async fn next(&mut self) -> Result<Option<WatchMessage>> {
        if !self.backlog.is_empty() {
            return Ok(Some(WatchMessage::Events(std::mem::take(
                &mut self.backlog,
            ))));
        }
        loop {
            if self.progress_due {
                self.progress_due = false;
                // Drain what is already queued so that progress is truthful.
                let mut pending = Vec::new();
                while let Ok(e) = self.live.try_recv() {
                    self.revision = self.revision.max(e.revision());
                    if e.key().starts_with(&self.prefix) {
                        pending.push(e);
                    }
                }
                if !pending.is_empty() {
                    self.progress_due = true;
                    return Ok(Some(WatchMessage::Events(pending)));
                }
                return Ok(Some(WatchMessage::Progress(self.revision)));
            }
            match self.live.recv().await {
                Ok(e) => {
                    self.revision = self.revision.max(e.revision());
                    if e.key().starts_with(&self.prefix) {
                        return Ok(Some(WatchMessage::Events(vec![e])));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    return Err(StorageError::Compacted {
                        requested: self.revision,
                    })
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(None),
            }
        }
    }

    async fn request_progress(&mut self) -> Result<()> {
        self.progress_due = true;
        Ok(())
    }
}
