//! The etcd v3 backend of [`Storage`].
//!
//! Every write is one transaction guarded on the key's revision, so optimistic
//! concurrency holds across any number of server replicas sharing the cluster.

mod endpoints;
pub mod version;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions,
    Identity, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};

use super::barrier::RevisionBarrier;
use super::{
    prefix_end, Event, Fence, Guard, KeyValue, ListOptions, ListPage, Release, Result, Revision,
    Storage, StorageError, WatchMessage, WatchStream,
};

/// How to reach etcd: `--etcd-servers` and the client TLS flags.
#[derive(Debug, Clone, Default)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// The largest etcd answer we decode, as kube-apiserver's etcd client allows
/// (`MaxCallRecvMsgSize: math.MaxInt32`). gRPC's default of 4 MiB would fail
/// every list page, watch batch or consistent read past it, and with it the
/// watch cache's list at start-up: the server could not start once its
/// objects outgrew 4 MiB. What one answer can hold is bounded by the list's
/// page size and etcd's own limit on a value.
const MAX_MESSAGE: usize = i32::MAX as usize;

/// [`Storage`] on an etcd cluster.
#[derive(Clone)]
pub struct EtcdStorage {
    client: Client,
    /// Reads of the current revision, shared by callers that wait together.
    barrier: RevisionBarrier,
    /// Keeps the client on the members that answer (several endpoints only);
    /// stopped with the last clone.
    _members: Option<Arc<Stop>>,
}

/// Aborts a task when dropped.
struct Stop(tokio::task::JoinHandle<()>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for EtcdStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStorage").finish_non_exhaustive()
    }
}

impl EtcdStorage {
    /// Connects to the endpoints in `config`. The connection is lazy and
    /// reconnects by itself; a wrong flag (unreadable file) fails here.
    pub async fn connect(config: &EtcdConfig) -> Result<Self> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(std::time::Duration::from_secs(5))
            .with_timeout(std::time::Duration::from_secs(30))
            .with_keep_alive(
                std::time::Duration::from_secs(10),
                std::time::Duration::from_secs(5),
            );
        if config.ca_file.is_some() || config.cert_file.is_some() {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &config.ca_file {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            match (&config.cert_file, &config.key_file) {
                (Some(cert), Some(key)) => {
                    tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
                }
                (None, None) => {}
                _ => {
                    return Err(StorageError::Unavailable(
                        "--etcd-certfile and --etcd-keyfile go together".to_owned(),
                    ))
                }
            }
            options = options.with_tls(tls);
        }
        let client = Client::connect(&config.endpoints, Some(options.clone()))
            .await
            .map_err(map_err)?;
        let members = endpoints::keep_healthy(client.clone(), config.endpoints.clone(), options)
            .map(|task| Arc::new(Stop(task)));
        let reader = client.clone();
        let barrier = RevisionBarrier::new(move || {
            let mut kv = reader.kv_client();
            Box::pin(async move {
                // A count-only range over an empty key range is the cheapest
                // linearizable read that carries the header revision.
                let resp = kv
                    .get("\0", Some(GetOptions::new().with_count_only()))
                    .await
                    .map_err(map_err)?;
                Ok(header_revision(resp.header()))
            })
        });
        Ok(Self {
            client,
            barrier,
            _members: members,
        })
    }

    /// The version the etcd member this client reaches reports, for example
    /// `3.6.16`.
    pub async fn server_version(&self) -> Result<String> {
        let status = self
            .client
            .maintenance_client()
            .status()
            .await
            .map_err(map_err)?;
        Ok(status.version().to_owned())
    }

    /// The raw client, for tests and leader election.
    fn kv(&self) -> etcd_client::KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE)
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| StorageError::Unavailable(format!("reading {}: {e}", path.display())))
}

fn map_err(e: etcd_client::Error) -> StorageError {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            if message.contains("required revision has been compacted") {
                StorageError::Compacted { requested: 0 }
            } else if message.contains("required revision is a future revision") {
                StorageError::FutureRevision {
                    requested: 0,
                    current: 0,
                }
            } else {
                match status.code() {
                    // Unknown and Cancelled are what a connection lost in the
                    // middle of a call comes to ("transport error", a member
                    // killed): the call's fate is unknown, and another member
                    // may well answer the retry.
                    tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled => StorageError::Unavailable(message.to_owned()),
                    _ => StorageError::Internal(message.to_owned()),
                }
            }
        }
        etcd_client::Error::TransportError(e) => StorageError::Unavailable(e.to_string()),
        etcd_client::Error::IoError(e) => StorageError::Unavailable(e.to_string()),
        other => StorageError::Internal(other.to_string()),
    }
}

fn convert(kv: &etcd_client::KeyValue) -> Result<KeyValue> {
    Ok(KeyValue {
        key: kv
            .key_str()
            .map_err(|e| StorageError::Internal(format!("non-UTF-8 key: {e}")))?
            .to_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        memo: Default::default(),
    })
}

/// The current value of `key` from the else-branch `get` of a failed transaction.
fn existing(responses: &[TxnOpResponse]) -> Result<Option<KeyValue>> {
    for r in responses {
        if let TxnOpResponse::Get(get) = r {
            return get.kvs().first().map(convert).transpose();
        }
    }
    Ok(None)
}

/// Why a guarded create failed, from what its else branch read: the object
/// first, then each guard key.
fn create_failure(key: &str, guards: &[Guard], found: &[Option<KeyValue>]) -> StorageError {
    if found.first().is_some_and(Option::is_some) {
        return StorageError::AlreadyExists {
            key: key.to_owned(),
        };
    }
    for (i, guard) in guards.iter().enumerate() {
        let actual = found
            .get(i + 1)
            .and_then(Option::as_ref)
            .map_or(0, |kv| kv.mod_revision);
        let expected = guard.expected.unwrap_or(0);
        if actual != expected {
            return StorageError::Conflict {
                key: guard.key.clone(),
                expected,
                actual,
            };
        }
    }
    StorageError::Internal(format!(
        "the create of {key} failed although nothing it depends on has moved"
    ))
}

/// One nested transaction per release key: deleted if it is still at the
/// revision it was read at, left alone otherwise, without failing the outer
/// write.
fn release_ops(releases: &[Release]) -> impl Iterator<Item = TxnOp> + '_ {
    releases.iter().map(|release| {
        TxnOp::txn(
            Txn::new()
                .when([Compare::mod_revision(
                    release.key.as_str(),
                    CompareOp::Equal,
                    release.revision,
                )])
                .and_then([TxnOp::delete(release.key.as_str(), None)]),
        )
    })
}

/// The fence's comparison, for a transaction's `when`, and the read of its key,
/// appended last to the transaction's else branch.
fn fence_ops(fence: Option<&Fence>) -> (Option<Compare>, Option<TxnOp>) {
    match fence {
        Some(f) => (
            Some(Compare::create_revision(
                f.key.as_str(),
                CompareOp::Equal,
                f.create_revision,
            )),
            Some(TxnOp::get(f.key.as_str(), None)),
        ),
        None => (None, None),
    }
}

/// Whether a failed transaction failed on its fence, from the else branch's
/// last read (the fence key's): the fence is checked before anything else,
/// since a writer whose right has ended must stop, not retry.
fn fence_failure(fence: Option<&Fence>, responses: &[TxnOpResponse]) -> Option<StorageError> {
    let fence = fence?;
    let read = responses.iter().rev().find_map(|r| match r {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    })?;
    let actual = read.kvs().first().map_or(0, |kv| kv.create_revision());
    (actual != fence.create_revision).then(|| StorageError::Fenced {
        key: fence.key.clone(),
        expected: fence.create_revision,
        actual,
    })
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map(|h| h.revision()).unwrap_or_default()
}

#[async_trait::async_trait]
impl Storage for EtcdStorage {
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[Guard],
        fence: Option<&Fence>,
    ) -> Result<KeyValue> {
        let mut when = vec![Compare::create_revision(key, CompareOp::Equal, 0)];
        let mut and_then = vec![TxnOp::put(key, value.to_vec(), None)];
        let mut or_else = vec![TxnOp::get(key, None)];
        for guard in guards {
            when.push(match guard.expected {
                Some(revision) => {
                    Compare::mod_revision(guard.key.as_str(), CompareOp::Equal, revision)
                }
                None => Compare::create_revision(guard.key.as_str(), CompareOp::Equal, 0),
            });
            and_then.push(TxnOp::put(guard.key.as_str(), guard.value.to_vec(), None));
            or_else.push(TxnOp::get(guard.key.as_str(), None));
        }
        let (fenced, fence_read) = fence_ops(fence);
        when.extend(fenced);
        or_else.extend(fence_read);
        let txn = Txn::new().when(when).and_then(and_then).or_else(or_else);
        let resp = self.kv().txn(txn).await.map_err(map_err)?;
        if !resp.succeeded() {
            if let Some(fenced) = fence_failure(fence, resp.op_responses().as_slice()) {
                return Err(fenced);
            }
            // The else branch read the object and then every guard key, in
            // order, at the revision the comparison failed at.
            let mut found = Vec::with_capacity(guards.len() + 1);
            for r in resp.op_responses() {
                if let TxnOpResponse::Get(get) = r {
                    found.push(get.kvs().first().map(convert).transpose()?);
                }
            }
            return Err(create_failure(key, guards, &found));
        }
        let revision = header_revision(resp.header());
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: revision,
            mod_revision: revision,
            memo: Default::default(),
        })
    }

    async fn get(&self, key: &str) -> Result<KeyValue> {
        let resp = self.kv().get(key, None).await.map_err(map_err)?;
        match resp.kvs().first() {
            Some(kv) => convert(kv),
            None => Err(StorageError::NotFound {
                key: key.to_owned(),
            }),
        }
    }

    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[Release],
        fence: Option<&Fence>,
    ) -> Result<KeyValue> {
        let and_then: Vec<TxnOp> = std::iter::once(TxnOp::put(key, value.to_vec(), None))
            .chain(release_ops(releases))
            .collect();
        let (fenced, fence_read) = fence_ops(fence);
        let txn = Txn::new()
            .when(
                std::iter::once(Compare::mod_revision(key, CompareOp::Equal, expected))
                    .chain(fenced)
                    .collect::<Vec<_>>(),
            )
            .and_then(and_then)
            .or_else(
                std::iter::once(TxnOp::get(key, None))
                    .chain(fence_read)
                    .collect::<Vec<_>>(),
            );
        let resp = self.kv().txn(txn).await.map_err(map_err)?;
        if !resp.succeeded() {
            let responses = resp.op_responses();
            if let Some(fenced) = fence_failure(fence, &responses) {
                return Err(fenced);
            }
            return Err(match existing(&responses)? {
                Some(current) => StorageError::Conflict {
                    key: key.to_owned(),
                    expected,
                    actual: current.mod_revision,
                },
                None => StorageError::NotFound {
                    key: key.to_owned(),
                },
            });
        }
        let revision = header_revision(resp.header());
        // The create revision is unchanged by a put; the caller knows it, but
        // return it right: read it back only if the caller ever needs it.
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: 0,
            mod_revision: revision,
            memo: Default::default(),
        })
    }

    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[Release],
        fence: Option<&Fence>,
    ) -> Result<(KeyValue, Revision)> {
        let and_then: Vec<TxnOp> = std::iter::once(TxnOp::delete(
            key,
            Some(DeleteOptions::new().with_prev_key()),
        ))
        .chain(release_ops(releases))
        .collect();
        let (fenced, fence_read) = fence_ops(fence);
        let txn = Txn::new()
            .when(
                std::iter::once(Compare::mod_revision(key, CompareOp::Equal, expected))
                    .chain(fenced)
                    .collect::<Vec<_>>(),
            )
            .and_then(and_then)
            .or_else(
                std::iter::once(TxnOp::get(key, None))
                    .chain(fence_read)
                    .collect::<Vec<_>>(),
            );
        let resp = self.kv().txn(txn).await.map_err(map_err)?;
        let responses = resp.op_responses();
        if !resp.succeeded() {
            if let Some(fenced) = fence_failure(fence, &responses) {
                return Err(fenced);
            }
            return Err(match existing(&responses)? {
                Some(current) => StorageError::Conflict {
                    key: key.to_owned(),
                    expected,
                    actual: current.mod_revision,
                },
                None => StorageError::NotFound {
                    key: key.to_owned(),
                },
            });
        }
        let revision = header_revision(resp.header());
        for r in &responses {
            if let TxnOpResponse::Delete(d) = r {
                if let Some(prev) = d.prev_kvs().first() {
                    return Ok((convert(prev)?, revision));
                }
            }
        }
        Err(StorageError::NotFound {
            key: key.to_owned(),
        })
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListPage> {
        let start = match &opts.start_after {
            // The smallest key after `after`.
            Some(after) => {
                let mut k = after.as_bytes().to_vec();
                k.push(0);
                k
            }
            None => prefix.as_bytes().to_vec(),
        };
        let mut get = GetOptions::new().with_range(prefix_end(prefix));
        if let Some(rev) = opts.revision.filter(|r| *r > 0) {
            get = get.with_revision(rev);
        }
        if let Some(limit) = opts.limit.filter(|l| *l > 0) {
            get = get.with_limit(limit);
        }
        let resp = match self.kv().get(start, Some(get)).await {
            Ok(resp) => resp,
            Err(e) => {
                return Err(match map_err(e) {
                    StorageError::Compacted { .. } => StorageError::Compacted {
                        requested: opts.revision.unwrap_or_default(),
                    },
                    StorageError::FutureRevision { .. } => StorageError::FutureRevision {
                        requested: opts.revision.unwrap_or_default(),
                        // For the message only: 0 if etcd cannot say.
                        current: self.current_revision().await.unwrap_or_default(),
                    },
                    other => other,
                });
            }
        };
        let items = resp.kvs().iter().map(convert).collect::<Result<Vec<_>>>()?;
        let remaining = resp.count() - items.len() as i64;
        Ok(ListPage {
            revision: opts
                .revision
                .filter(|r| *r > 0)
                .unwrap_or_else(|| header_revision(resp.header())),
            more: resp.more(),
            remaining: remaining.max(0),
            items,
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.barrier.current().await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<Box<dyn WatchStream>> {
        let options = WatchOptions::new()
            .with_range(prefix_end(prefix))
            .with_start_revision(after + 1)
            .with_prev_key()
            .with_progress_notify();
        let stream = self
            .client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE)
            .watch(prefix, Some(options))
            .await
            .map_err(map_err)?;
        Ok(Box::new(EtcdWatch { stream, after }))
    }
}

/// An etcd watch, translated into [`WatchMessage`]s.
struct EtcdWatch {
    stream: etcd_client::WatchStream,
    after: Revision,
}

impl std::fmt::Debug for EtcdWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdWatch")
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl WatchStream for EtcdWatch {
    async fn next(&mut self) -> Result<Option<WatchMessage>> {
        loop {
            let Some(resp) = self.stream.message().await.map_err(map_err)? else {
                return Ok(None);
            };
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    return Err(StorageError::Compacted {
                        requested: self.after,
                    });
                }
                return Err(StorageError::Unavailable(format!(
                    "watch canceled: {}",
                    resp.cancel_reason()
                )));
            }
            if resp.events().is_empty() {
                // The creation response says nothing about delivered events;
                // a later empty response is a progress notification.
                if resp.created() {
                    continue;
                }
                return Ok(Some(WatchMessage::Progress(header_revision(resp.header()))));
            }
            let mut events = Vec::with_capacity(resp.events().len());
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let prev = e.prev_kv().map(convert).transpose()?;
                events.push(match e.event_type() {
                    EventType::Put => Event::Put {
                        kv: convert(kv)?,
                        prev,
                    },
                    EventType::Delete => Event::Delete {
                        revision: kv.mod_revision(),
                        prev: match prev {
                            Some(p) => p,
                            None => KeyValue {
                                key: convert(kv)?.key,
                                value: Bytes::new(),
                                create_revision: 0,
                                mod_revision: kv.mod_revision(),
                                memo: Default::default(),
                            },
                        },
                    },
                });
            }
            if let Some(last) = events.last() {
                self.after = last.revision();
            }
            return Ok(Some(WatchMessage::Events(events)));
        }
    }

    async fn request_progress(&mut self) -> Result<()> {
        self.stream.request_progress().await.map_err(map_err)
    }
}

#[cfg(test)]
mod tests;
