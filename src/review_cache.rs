//! The cache in front of the cluster's reviews (TokenReview,
//! SubjectAccessReview): answers kept for a short TTL, at most `capacity` of
//! them, the least recently used evicted first; and concurrent requests for
//! the same key sharing one review (single-flight), as k8s.io/apiserver's
//! cached token authenticator shares one lookup among its callers.
//!
//! A full cache evicts one answer per new one, so a flood of distinct keys
//! (random bearer tokens) pushes out the answers nobody uses, never all of
//! them at once. Only answers are cached; a failed review (the cluster did
//! not answer) is shared by the callers waiting for it and then forgotten.
//!
//! At most [`MAX_FLIGHTS`] reviews are under way at once: past it a request
//! that needs a new review is refused with 429 at once, rather than sent, so
//! that a flood of distinct keys (random tokens, unique paths) costs the
//! cluster a bounded number of reviews, all sent under this server's own
//! identity, whose flow control in kube-apiserver the controllers share.
//! Answers already cached are served meanwhile.
//!
//! A cache may also bound how many new reviews it starts a second
//! ([`Rate`], a token bucket), as k8s.io/apiserver bounds its delegated
//! clients' QPS: the reviews a flood causes then cost the cluster a bounded
//! rate, not just a bounded concurrency (a fast cluster answers 64 at once
//! many times a second). Past it a new review is refused with 429, as past
//! the flights.
//!
//! Owns when to ask again; never what a review means.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::time::Instant;

use crate::api::errors::ApiError;

/// Counts of how answers were found, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Answered without a review of their own: from the cache, or by joining
    /// a review already under way.
    pub hits: u64,
    /// Reviews started.
    pub misses: u64,
    /// Refused because [`MAX_FLIGHTS`] reviews were under way, or (with a
    /// [`Rate`]) the rate of new reviews was spent.
    pub refused: u64,
}

/// One review under way, shared by everyone who asks for its key meanwhile.
type Flight<V> = Shared<BoxFuture<'static, Result<V, ApiError>>>;

/// A bounded LRU cache of review answers with a TTL and single-flight.
#[derive(Debug)]
pub struct ReviewCache<K, V> {
    inner: Arc<Inner<K, V>>,
}

impl<K, V> Clone for ReviewCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

/// The most reviews under way at once, per cache.
pub const MAX_FLIGHTS: usize = 64;

/// How many new reviews a cache may start: `per_second` on average, and up
/// to `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

/// The rate of new reviews the caches of callers' requests (TokenReview,
/// SubjectAccessReview) may start: a quarter of what k8s.io/apiserver's
/// delegated clients may send (200 a second, bursts of 400), for each of
/// the two.
pub const REQUEST_REVIEW_RATE: Rate = Rate {
    per_second: 50.0,
    burst: 100.0,
};

/// The tokens of a [`Rate`]'s bucket, and when it was last filled.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    filled: Instant,
}

#[derive(Debug)]
struct Inner<K, V> {
    ttl: Duration,
    capacity: usize,
    max_flights: usize,
    rate: Option<Rate>,
    state: Mutex<State<K, V>>,
}

struct State<K, V> {
    entries: HashMap<K, Entry<V>>,
    /// Keys by when they were last used, oldest first.
    recency: BTreeMap<u64, K>,
    clock: u64,
    flights: HashMap<K, Flight<V>>,
    /// `Some` when [`Inner::rate`] is.
    bucket: Option<Bucket>,
    stats: CacheStats,
}

impl<K, V> std::fmt::Debug for State<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("entries", &self.entries.len())
            .field("flights", &self.flights.len())
            .field("stats", &self.stats)
            .finish()
    }
}

struct Entry<V> {
    value: V,
    stored: Instant,
    used: u64,
}

impl<K, V> ReviewCache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A cache of at most `capacity` answers (at least one), each reused for
    /// `ttl`.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self::with_max_flights(ttl, capacity, MAX_FLIGHTS)
    }

    /// [`Self::new`], with at most `max_flights` (at least one) reviews
    /// under way at once.
    pub fn with_max_flights(ttl: Duration, capacity: usize, max_flights: usize) -> Self {
        Self::with_limits(ttl, capacity, max_flights, None)
    }

    /// [`Self::with_max_flights`], starting new reviews at most at `rate`
    /// (`None`: as fast as they are asked for).
    pub fn with_limits(
        ttl: Duration,
        capacity: usize,
        max_flights: usize,
        rate: Option<Rate>,
    ) -> Self {
        let rate = rate.map(|r| Rate {
            per_second: r.per_second.max(f64::MIN_POSITIVE),
            burst: r.burst.max(1.0),
        });
        Self {
            inner: Arc::new(Inner {
                ttl,
                capacity: capacity.max(1),
                max_flights: max_flights.max(1),
                rate,
                state: Mutex::new(State {
                    entries: HashMap::new(),
                    recency: BTreeMap::new(),
                    clock: 0,
                    flights: HashMap::new(),
                    bucket: rate.map(|r| Bucket {
                        tokens: r.burst,
                        filled: Instant::now(),
                    }),
                    stats: CacheStats::default(),
                }),
            }),
        }
    }

    /// The cached answer for `key`, or else the answer of `review()`: a
    /// review already under way for `key` is joined, otherwise one is
    /// started. The review runs to its end even if every caller gives up
    /// waiting, so that its answer is cached for the next one.
    pub async fn get_or_review<F, Fut>(&self, key: K, review: F) -> Result<V, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<V, ApiError>> + Send + 'static,
    {
        let flight = {
            let mut state = self.inner.lock();
            if let Some(value) = self.inner.fresh(&mut state, &key) {
                state.stats.hits += 1;
                return Ok(value);
            }
            match state.flights.get(&key).cloned() {
                Some(flight) => {
                    state.stats.hits += 1;
                    flight
                }
                None if state.flights.len() >= self.inner.max_flights => {
                    state.stats.refused += 1;
                    return Err(ApiError::TooManyRequests {
                        message: format!(
                            "too many requests: {} reviews of credentials or rights are already under way; try again",
                            self.inner.max_flights
                        ),
                        retry_after_seconds: 1,
                    });
                }
                None if !self.inner.take_token(&mut state) => {
                    state.stats.refused += 1;
                    let per_second = self.inner.rate.map_or(0.0, |r| r.per_second);
                    return Err(ApiError::TooManyRequests {
                        message: format!(
                            "too many requests: more than {per_second} new reviews of credentials or rights a second; try again"
                        ),
                        retry_after_seconds: 1,
                    });
                }
                None => {
                    state.stats.misses += 1;
                    let flight = self.start(key.clone(), review());
                    state.flights.insert(key, flight.clone());
                    flight
                }
            }
        };
        flight.await
    }

    /// Spawns `review`, which caches its answer and then retires its flight
    /// (both under the lock that [`Self::get_or_review`] holds while it
    /// registers the flight, so neither can happen before that).
    fn start<Fut>(&self, key: K, review: Fut) -> Flight<V>
    where
        Fut: std::future::Future<Output = Result<V, ApiError>> + Send + 'static,
    {
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            let answer = review.await;
            let mut state = inner.lock();
            if let Ok(value) = &answer {
                inner.store(&mut state, key.clone(), value.clone());
            }
            state.flights.remove(&key);
            answer
        });
        async move {
            task.await.unwrap_or_else(|e| {
                Err(ApiError::Internal(format!("a review did not finish: {e}")))
            })
        }
        .boxed()
        .shared()
    }

    /// The cached answer for `key`, if it is fresh (marking it used).
    pub fn get(&self, key: &K) -> Option<V> {
        let mut state = self.inner.lock();
        self.inner.fresh(&mut state, key)
    }

    /// Caches `value` for `key` (an answer obtained without the cache, such
    /// as a fresh re-check, refreshes it for everyone).
    pub fn insert(&self, key: K, value: V) {
        let mut state = self.inner.lock();
        self.inner.store(&mut state, key, value);
    }

    /// How many answers are cached (fresh or not yet evicted).
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether no answer is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> CacheStats {
        self.inner.lock().stats
    }
}

impl<K, V> Inner<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    fn lock(&self) -> std::sync::MutexGuard<'_, State<K, V>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a token from the bucket for a new review; false when it is
    /// empty. Always true without a rate.
    fn take_token(&self, state: &mut State<K, V>) -> bool {
        let (Some(rate), Some(bucket)) = (self.rate, state.bucket.as_mut()) else {
            return true;
        };
        let now = Instant::now();
        let refill = now.duration_since(bucket.filled).as_secs_f64() * rate.per_second;
        bucket.tokens = (bucket.tokens + refill).min(rate.burst);
        bucket.filled = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    fn fresh(&self, state: &mut State<K, V>, key: &K) -> Option<V> {
        let (stored, used) = state.entries.get(key).map(|e| (e.stored, e.used))?;
        state.recency.remove(&used);
        if stored.elapsed() >= self.ttl {
            state.entries.remove(key);
            return None;
        }
        state.clock += 1;
        let now = state.clock;
        state.recency.insert(now, key.clone());
        let entry = state.entries.get_mut(key)?;
        entry.used = now;
        Some(entry.value.clone())
    }

    fn store(&self, state: &mut State<K, V>, key: K, value: V) {
        if let Some(old) = state.entries.get(&key) {
            let used = old.used;
            state.recency.remove(&used);
        }
        state.clock += 1;
        let now = state.clock;
        state.recency.insert(now, key.clone());
        state.entries.insert(
            key,
            Entry {
                value,
                stored: Instant::now(),
                used: now,
            },
        );
        while state.entries.len() > self.capacity {
            let Some((_, oldest)) = state.recency.pop_first() else {
                break;
            };
            state.entries.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests;
