//! Persistence of our objects in etcd: the `Storage` trait and its etcd backend.
//!
//! Owns the key layout (`<prefix>/storage.transfer.k8s.io/<resource>/<ns>/<name>`),
//! transactions on `mod_revision`, consistent lists, watches and the watch cache
//! (DESIGN §3 "etcd layout"). It speaks its own error type; nothing above
//! `registry` ever sees it. It knows nothing of HTTP, users or strategies.
//!
//! Empty in the walking skeleton: the API machinery arrives with the core issue.
