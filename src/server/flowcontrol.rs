//! Flow control: how many API requests are served at once, who waits when
//! they are all taken, and who is refused. What kube-apiserver gives with its
//! max-in-flight filter and API Priority and Fairness (APF), in one fixed,
//! documented form (docs/operations.md, "Overload"):
//!
//! - Two pools of seats, as `--max-requests-inflight` (read-only requests:
//!   get, list, and non-resource GETs) and `--max-mutating-requests-inflight`
//!   (everything else that is not a watch). 0 means no limit, as in kube.
//! - When a pool is full, a request waits in the queue of its user (the
//!   authenticated user name), and every freed seat goes to the users in
//!   round-robin order, one request per user in turn: a user who floods the
//!   server fills only their own queue. Queues are bounded per user
//!   (`--max-queued-requests-per-user`) and in all (`--max-queued-requests`),
//!   and a request waits at most `--request-queue-timeout`. When every
//!   queue is full, a user with a shorter queue than the longest one takes
//!   the place of that queue's newest request, so that many flooding users
//!   cannot lock out one more.
//! - Watches are long-running and take no seat, as in kube; instead a user
//!   may hold at most `--max-watches-per-user` at once.
//! - Members of `system:masters` are exempt from all of it, as APF's exempt
//!   priority level exempts them.
//!
//! Every refusal is a [`Rejection`], which becomes a 429 `TooManyRequests`
//! Status with `Retry-After` ([`ApiError::TooManyRequests`]).
//!
//! The queue itself, [`FairQueue`], is a plain data structure with no clock
//! and no I/O, so that fairness is tested deterministically; [`FlowControl`]
//! wraps it with a mutex, the waiting and the timeout. What a request holds
//! is a [`Permit`], which gives its seat (or watch) back when dropped, so a
//! handler that panics or a client that goes away never leaks one.
//!
//! This module owns admission by load only. Health checks and `/metrics`
//! never reach it (the caller in `super::dispatch` sees to that), and it
//! does not know what a request does beyond its [`RequestKind`].

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response};
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::sync::oneshot;

use crate::api::errors::ApiError;
use crate::authn::UserInfo;
use crate::endpoints::request::{ResourceRequest, Verb};
use crate::endpoints::Body;

/// The group whose members are never limited, as APF's exempt level.
pub const EXEMPT_GROUP: &str = "system:masters";

/// What a refused client is told to wait before it retries, in seconds: the
/// `Retry-After` kube-apiserver's max-in-flight filter sends.
pub const RETRY_AFTER_SECONDS: i32 = 1;

/// The limits, as the flags of the same names set them (see
/// [`super::options::Options`]). A zero seat or watch limit means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowControlLimits {
    /// `--max-requests-inflight`: read-only requests served at once.
    pub max_read_only: usize,
    /// `--max-mutating-requests-inflight`: mutating requests served at once.
    pub max_mutating: usize,
    /// `--max-queued-requests-per-user`: how many requests of one user may
    /// wait for a seat of one kind; 0: none wait, a full pool refuses.
    pub max_queued_per_user: usize,
    /// `--max-queued-requests`: how many requests may wait for a seat of one
    /// kind, all users together. Bounds the memory of the queues.
    pub max_queued_total: usize,
    /// `--request-queue-timeout`: how long a request waits for a seat.
    pub queue_timeout: Duration,
    /// `--max-watches-per-user`: watches one user may hold open at once.
    pub max_watches_per_user: usize,
}

impl Default for FlowControlLimits {
    /// kube-apiserver's defaults where it has the flag; ours otherwise.
    fn default() -> Self {
        Self {
            max_read_only: 400,
            max_mutating: 200,
            max_queued_per_user: 50,
            max_queued_total: 1000,
            queue_timeout: Duration::from_secs(15),
            max_watches_per_user: 100,
        }
    }
}

/// Which limit a request counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// get, list, and non-resource GET or HEAD: `--max-requests-inflight`.
    ReadOnly,
    /// create, update, patch, delete, deletecollection and any other
    /// method: `--max-mutating-requests-inflight`.
    Mutating,
    /// Long-running: no seat, but `--max-watches-per-user`.
    Watch,
}

impl RequestKind {
    /// The kind of a request: by its verb when it names one of our
    /// resources, else by its HTTP method (as kube-apiserver, for which
    /// every verb but get, list and watch is mutating).
    pub fn of(resource: Option<&ResourceRequest>, method: &Method) -> Self {
        match resource.map(|r| r.verb) {
            Some(Verb::Watch) => Self::Watch,
            Some(Verb::Get | Verb::List) => Self::ReadOnly,
            Some(_) => Self::Mutating,
            None if method == Method::GET || method == Method::HEAD => Self::ReadOnly,
            None => Self::Mutating,
        }
    }

    /// The `request_kind` label kube-apiserver uses.
    pub fn label(self) -> &'static str {
        match self {
            Self::ReadOnly => "readOnly",
            Self::Mutating => "mutating",
            Self::Watch => "watch",
        }
    }
}

/// A queued request's place, handed out by [`FairQueue::arrive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Why a request could not wait for a seat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueFull {
    /// Queuing is off (`--max-queued-requests-per-user=0`).
    NoQueue,
    /// The user already has as many requests waiting as one may.
    UserQueueFull,
    /// Every place in every queue is taken, and the user's queue is at
    /// least as long as the longest.
    AllQueuesFull,
}

/// What became of an arriving request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// It has a seat now.
    Seated,
    /// It waits for a seat as `ticket`. To make room, `evicted` (the newest
    /// request of the longest queue) was dropped from its queue and must be
    /// refused.
    Queued {
        ticket: Ticket,
        evicted: Option<Ticket>,
    },
    /// It may not wait: refuse it.
    Refused(QueueFull),
}

/// One pool of seats and the per-user queues in front of it. Pure: no clock,
/// no I/O, no locking; the caller says when a request arrives, gives up or
/// gives its seat back, and is told who is seated.
///
/// Invariants: a request waits only while every seat is taken; no count
/// goes below zero; each user's queue and all queues together stay within
/// their bounds.
#[derive(Debug)]
pub struct FairQueue {
    /// Seats in the pool; 0: no limit.
    seats: usize,
    in_use: usize,
    max_per_user: usize,
    max_total: usize,
    /// Each waiting user's requests, oldest first. A user with none has no
    /// entry.
    queues: HashMap<String, VecDeque<Ticket>>,
    /// The users with waiting requests, in the order they are served: the
    /// first gets the next seat and goes to the back.
    turns: VecDeque<String>,
    /// Every queue's length, summed.
    queued: usize,
    next_ticket: u64,
}

impl FairQueue {
    pub fn new(seats: usize, max_per_user: usize, max_total: usize) -> Self {
        Self {
            seats,
            in_use: 0,
            max_per_user,
            max_total,
            queues: HashMap::new(),
            turns: VecDeque::new(),
            queued: 0,
            next_ticket: 0,
        }
    }

    /// Seats taken now.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Requests waiting now, all users together.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Requests of `user` waiting now.
    pub fn queued_for(&self, user: &str) -> usize {
        self.queues.get(user).map_or(0, VecDeque::len)
    }

    /// A request of `user` arrives.
    pub fn arrive(&mut self, user: &str) -> Arrival {
        if self.seats == 0 || self.in_use < self.seats {
            self.in_use += 1;
            return Arrival::Seated;
        }
        if self.max_per_user == 0 || self.max_total == 0 {
            return Arrival::Refused(QueueFull::NoQueue);
        }
        let mine = self.queued_for(user);
        if mine >= self.max_per_user {
            return Arrival::Refused(QueueFull::UserQueueFull);
        }
        let mut evicted = None;
        if self.queued >= self.max_total {
            match self.evict_for(user, mine) {
                Some(ticket) => evicted = Some(ticket),
                None => return Arrival::Refused(QueueFull::AllQueuesFull),
            }
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let queue = self.queues.entry(user.to_owned()).or_default();
        if queue.is_empty() {
            self.turns.push_back(user.to_owned());
        }
        queue.push_back(ticket);
        self.queued += 1;
        Arrival::Queued { ticket, evicted }
    }

    /// Drops the newest request of the longest queue (the first such in
    /// turn order) if that queue is longer than `mine` + 1, the length of
    /// `user`'s queue once the new request joins it; else nothing.
    fn evict_for(&mut self, user: &str, mine: usize) -> Option<Ticket> {
        let (longest, len) = self.turns.iter().map(|u| (u, self.queued_for(u))).fold(
            None,
            |best: Option<(&String, usize)>, (u, len)| match best {
                Some((_, l)) if l >= len => best,
                _ => Some((u, len)),
            },
        )?;
        if longest == user || len <= mine + 1 {
            return None;
        }
        let longest = longest.clone();
        let ticket = self.queues.get_mut(&longest)?.pop_back()?;
        self.queued -= 1;
        self.forget_if_empty(&longest);
        Some(ticket)
    }

    /// A request gives its seat back. Returns the waiting request that takes
    /// the seat, if any (the seat stays taken); else the seat is free.
    pub fn release(&mut self) -> Option<Ticket> {
        while let Some(user) = self.turns.pop_front() {
            let Some(queue) = self.queues.get_mut(&user) else {
                continue;
            };
            let Some(ticket) = queue.pop_front() else {
                self.queues.remove(&user);
                continue;
            };
            self.queued -= 1;
            if queue.is_empty() {
                self.queues.remove(&user);
            } else {
                self.turns.push_back(user);
            }
            return Some(ticket);
        }
        self.in_use = self.in_use.saturating_sub(1);
        None
    }

    /// A waiting request gives up (its wait timed out, or its client went
    /// away). Returns whether it was still waiting; if not, it was seated or
    /// evicted before, and the caller must act on that instead.
    pub fn withdraw(&mut self, user: &str, ticket: Ticket) -> bool {
        let Some(queue) = self.queues.get_mut(user) else {
            return false;
        };
        let Some(at) = queue.iter().position(|t| *t == ticket) else {
            return false;
        };
        queue.remove(at);
        self.queued -= 1;
        self.forget_if_empty(user);
        true
    }

    /// Removes `user`'s queue and turn once it has nothing waiting.
    fn forget_if_empty(&mut self, user: &str) {
        if self.queues.get(user).is_some_and(VecDeque::is_empty) {
            self.queues.remove(user);
            self.turns.retain(|u| u != user);
        }
    }
}

/// Why a request was refused: one per limit, for the message and the
/// `reason` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Every seat of `kind` was taken and the request could not wait.
    Full {
        kind: RequestKind,
        seats: usize,
        why: QueueFull,
        limits: FlowControlLimits,
    },
    /// It waited in its queue and was dropped to make room for another
    /// user's request.
    Evicted {
        kind: RequestKind,
        limits: FlowControlLimits,
    },
    /// It waited `--request-queue-timeout` without getting a seat.
    TimedOut {
        kind: RequestKind,
        limits: FlowControlLimits,
    },
    /// The user holds `--max-watches-per-user` watches already.
    TooManyWatches { max: usize },
}

impl Rejection {
    /// The kind of request refused.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::Full { kind, .. } | Self::Evicted { kind, .. } | Self::TimedOut { kind, .. } => {
                *kind
            }
            Self::TooManyWatches { .. } => RequestKind::Watch,
        }
    }

    /// APF's `reason` label of `apiserver_flowcontrol_rejected_requests_total`.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Full {
                why: QueueFull::NoQueue,
                ..
            }
            | Self::TooManyWatches { .. } => Reason::ConcurrencyLimit,
            Self::Full { .. } | Self::Evicted { .. } => Reason::QueueFull,
            Self::TimedOut { .. } => Reason::TimeOut,
        }
    }

    /// What the client reads: which limit was hit, by its flag.
    fn message(&self) -> String {
        let pool = |kind: RequestKind, seats: usize| {
            let flag = match kind {
                RequestKind::Mutating => "--max-mutating-requests-inflight",
                _ => "--max-requests-inflight",
            };
            let kind = match kind {
                RequestKind::Mutating => "mutating",
                _ => "read-only",
            };
            format!("all {seats} seats for {kind} requests ({flag}) are taken")
        };
        let seats = |kind: RequestKind, limits: &FlowControlLimits| match kind {
            RequestKind::Mutating => limits.max_mutating,
            _ => limits.max_read_only,
        };
        let detail = match self {
            Self::Full {
                kind,
                seats,
                why,
                limits,
            } => {
                let queue = match why {
                    QueueFull::NoQueue => {
                        "no request may wait for one (--max-queued-requests-per-user=0)".to_owned()
                    }
                    QueueFull::UserQueueFull => format!(
                        "{} of your requests are waiting already (--max-queued-requests-per-user)",
                        limits.max_queued_per_user
                    ),
                    QueueFull::AllQueuesFull => format!(
                        "{} requests are waiting already (--max-queued-requests)",
                        limits.max_queued_total
                    ),
                };
                format!("{} and {queue}", pool(*kind, *seats))
            }
            Self::Evicted { kind, limits } => format!(
                "{}, and your request left the queue to make room for another user's (--max-queued-requests={})",
                pool(*kind, seats(*kind, limits)),
                limits.max_queued_total
            ),
            Self::TimedOut { kind, limits } => format!(
                "{}, and your request waited {}s for one (--request-queue-timeout)",
                pool(*kind, seats(*kind, limits)),
                limits.queue_timeout.as_secs_f64()
            ),
            Self::TooManyWatches { max } => {
                format!("you have {max} watches open, the most allowed (--max-watches-per-user)")
            }
        };
        format!("Too many requests, please try again later: {detail}")
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> Self {
        ApiError::TooManyRequests {
            message: rejection.message(),
            retry_after_seconds: RETRY_AFTER_SECONDS,
        }
    }
}

/// APF's reasons for a refusal, the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Refused at once: no seat and no queue (or no watch left).
    ConcurrencyLimit,
    /// Its queue, or every queue, was full.
    QueueFull,
    /// It waited for a seat until `--request-queue-timeout`.
    TimeOut,
    /// Its client went away while it waited (nobody is answered).
    Cancelled,
}

impl Reason {
    const ALL: [Reason; 4] = [
        Reason::ConcurrencyLimit,
        Reason::QueueFull,
        Reason::TimeOut,
        Reason::Cancelled,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Reason::ConcurrencyLimit => "concurrency-limit",
            Reason::QueueFull => "queue-full",
            Reason::TimeOut => "time-out",
            Reason::Cancelled => "cancelled",
        }
    }
}

/// What the queue tells a waiting request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Seated,
    Evicted,
}

/// One pool: its queue, the waiting requests' wake-ups and its refusals.
#[derive(Debug)]
struct Pool {
    kind: RequestKind,
    state: Mutex<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    queue: FairQueue,
    waiting: HashMap<Ticket, oneshot::Sender<Turn>>,
    rejected: HashMap<Reason, u64>,
}

impl Pool {
    fn new(kind: RequestKind, seats: usize, limits: &FlowControlLimits) -> Self {
        Self {
            kind,
            state: Mutex::new(PoolState {
                queue: FairQueue::new(seats, limits.max_queued_per_user, limits.max_queued_total),
                waiting: HashMap::new(),
                rejected: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PoolState {
    /// Gives a seat back: to the next waiting request in turn, or to the
    /// pool. A waiter whose receiver is gone cannot take it, so it goes on.
    fn release(&mut self) {
        while let Some(ticket) = self.queue.release() {
            let taken = self
                .waiting
                .remove(&ticket)
                .is_some_and(|tx| tx.send(Turn::Seated).is_ok());
            if taken {
                return;
            }
        }
    }

    fn count(&mut self, reason: Reason) {
        *self.rejected.entry(reason).or_default() += 1;
    }
}

/// Admission by load for the whole server: the two pools and the watches.
#[derive(Debug)]
pub struct FlowControl {
    limits: FlowControlLimits,
    read_only: Arc<Pool>,
    mutating: Arc<Pool>,
    watches: Arc<Mutex<Watches>>,
}

/// The open watches of each user, and the watches refused.
#[derive(Debug, Default)]
struct Watches {
    /// Users with none have no entry.
    open: HashMap<String, usize>,
    rejected: u64,
}

impl FlowControl {
    pub fn new(limits: FlowControlLimits) -> Self {
        Self {
            read_only: Arc::new(Pool::new(
                RequestKind::ReadOnly,
                limits.max_read_only,
                &limits,
            )),
            mutating: Arc::new(Pool::new(
                RequestKind::Mutating,
                limits.max_mutating,
                &limits,
            )),
            watches: Arc::default(),
            limits,
        }
    }

    /// Admits a request of `kind` by `user`: at once, after a wait in the
    /// user's queue, or not at all. Holding the returned permit is holding
    /// the seat (or the watch).
    pub async fn admit(&self, user: &UserInfo, kind: RequestKind) -> Result<Permit, Rejection> {
        if user.groups.iter().any(|g| g == EXEMPT_GROUP) {
            return Ok(Permit(Held::Exempt));
        }
        let pool = match kind {
            RequestKind::ReadOnly => &self.read_only,
            RequestKind::Mutating => &self.mutating,
            RequestKind::Watch => return self.open_watch(&user.username),
        };
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut state = pool.lock();
            match state.queue.arrive(&user.username) {
                Arrival::Seated => return Ok(Permit(Held::Seat(pool.clone()))),
                Arrival::Refused(why) => {
                    let rejection = Rejection::Full {
                        kind,
                        seats: self.seats(kind),
                        why,
                        limits: self.limits,
                    };
                    state.count(rejection.reason());
                    return Err(rejection);
                }
                Arrival::Queued { ticket, evicted } => {
                    state.waiting.insert(ticket, tx);
                    if let Some(evicted) = evicted {
                        if let Some(tx) = state.waiting.remove(&evicted) {
                            let _ = tx.send(Turn::Evicted);
                        }
                    }
                    ticket
                }
            }
        };
        let mut waiting = Waiting {
            pool: pool.clone(),
            user: user.username.clone(),
            ticket,
            rx,
            settled: false,
        };
        let turn = match tokio::time::timeout(self.limits.queue_timeout, &mut waiting.rx).await {
            Ok(Ok(turn)) => Some(turn),
            // The sender is only dropped after it sent, or by a withdrawal,
            // which this waiter alone makes.
            Ok(Err(_)) => Some(Turn::Evicted),
            Err(_elapsed) => None,
        };
        let turn = match turn {
            Some(turn) => turn,
            None => {
                let mut state = pool.lock();
                if state.queue.withdraw(&waiting.user, ticket) {
                    state.waiting.remove(&ticket);
                    state.count(Reason::TimeOut);
                    waiting.settled = true;
                    return Err(Rejection::TimedOut {
                        kind,
                        limits: self.limits,
                    });
                }
                // Seated or evicted just as the wait ran out: the answer is
                // in the channel already, sent under the lock held here.
                waiting.rx.try_recv().unwrap_or(Turn::Evicted)
            }
        };
        waiting.settled = true;
        match turn {
            Turn::Seated => Ok(Permit(Held::Seat(pool.clone()))),
            Turn::Evicted => {
                pool.lock().count(Reason::QueueFull);
                Err(Rejection::Evicted {
                    kind,
                    limits: self.limits,
                })
            }
        }
    }

    fn seats(&self, kind: RequestKind) -> usize {
        match kind {
            RequestKind::ReadOnly => self.limits.max_read_only,
            RequestKind::Mutating => self.limits.max_mutating,
            RequestKind::Watch => self.limits.max_watches_per_user,
        }
    }

    fn open_watch(&self, user: &str) -> Result<Permit, Rejection> {
        let mut watches = lock(&self.watches);
        let max = self.limits.max_watches_per_user;
        let open = watches.open.get(user).copied().unwrap_or(0);
        if max != 0 && open >= max {
            watches.rejected += 1;
            return Err(Rejection::TooManyWatches { max });
        }
        watches.open.insert(user.to_owned(), open + 1);
        Ok(Permit(Held::Watch {
            watches: self.watches.clone(),
            user: user.to_owned(),
        }))
    }

    /// Seats of `kind` taken now.
    pub fn in_flight(&self, kind: RequestKind) -> usize {
        match kind {
            RequestKind::ReadOnly => self.read_only.lock().queue.in_use(),
            RequestKind::Mutating => self.mutating.lock().queue.in_use(),
            RequestKind::Watch => lock(&self.watches).open.values().sum(),
        }
    }

    /// Requests of `kind` waiting for a seat now.
    pub fn in_queue(&self, kind: RequestKind) -> usize {
        match kind {
            RequestKind::ReadOnly => self.read_only.lock().queue.queued(),
            RequestKind::Mutating => self.mutating.lock().queue.queued(),
            RequestKind::Watch => 0,
        }
    }

    /// Requests of `kind` refused (or given up) for `reason` so far.
    pub fn rejected(&self, kind: RequestKind, reason: Reason) -> u64 {
        let pool = match kind {
            RequestKind::ReadOnly => &self.read_only,
            RequestKind::Mutating => &self.mutating,
            RequestKind::Watch => {
                return match reason {
                    Reason::ConcurrencyLimit => lock(&self.watches).rejected,
                    _ => 0,
                }
            }
        };
        pool.lock().rejected.get(&reason).copied().unwrap_or(0)
    }

    /// This module's part of `/metrics`, under kube-apiserver's names:
    /// `apiserver_current_inflight_requests{request_kind}`,
    /// `apiserver_current_inqueue_requests{request_kind}` and
    /// `apiserver_flowcontrol_rejected_requests_total{request_kind,reason}`
    /// (kube labels the last by priority level and flow schema; ours has
    /// one fixed level per kind), and `storage_transfer_watches`.
    pub fn metrics(&self) -> String {
        let pools = [RequestKind::ReadOnly, RequestKind::Mutating];
        let mut out = String::from(
            "# HELP apiserver_current_inflight_requests Requests being served now, by kind; exempt requests and watches take no seat.\n# TYPE apiserver_current_inflight_requests gauge\n",
        );
        for kind in pools {
            let _ = writeln!(
                out,
                "apiserver_current_inflight_requests{{request_kind=\"{}\"}} {}",
                kind.label(),
                self.in_flight(kind)
            );
        }
        out.push_str("# HELP apiserver_current_inqueue_requests Requests waiting for a seat now, by kind.\n# TYPE apiserver_current_inqueue_requests gauge\n");
        for kind in pools {
            let _ = writeln!(
                out,
                "apiserver_current_inqueue_requests{{request_kind=\"{}\"}} {}",
                kind.label(),
                self.in_queue(kind)
            );
        }
        out.push_str("# HELP apiserver_flowcontrol_rejected_requests_total Requests refused with 429 (or given up by their client while queued), by kind and reason.\n# TYPE apiserver_flowcontrol_rejected_requests_total counter\n");
        for kind in pools {
            for reason in Reason::ALL {
                let _ = writeln!(
                    out,
                    "apiserver_flowcontrol_rejected_requests_total{{request_kind=\"{}\",reason=\"{}\"}} {}",
                    kind.label(),
                    reason.label(),
                    self.rejected(kind, reason)
                );
            }
        }
        let _ = writeln!(
            out,
            "apiserver_flowcontrol_rejected_requests_total{{request_kind=\"watch\",reason=\"concurrency-limit\"}} {}",
            self.rejected(RequestKind::Watch, Reason::ConcurrencyLimit)
        );
        let _ = writeln!(
            out,
            "# HELP storage_transfer_watches Watches open now (exempt users' not counted).\n# TYPE storage_transfer_watches gauge\nstorage_transfer_watches {}",
            self.in_flight(RequestKind::Watch)
        );
        out
    }
}

fn lock(watches: &Mutex<Watches>) -> MutexGuard<'_, Watches> {
    watches.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request waiting in its queue. If it is dropped before it settles (its
/// client went away), it leaves the queue, or gives back the seat it was
/// handed in the meantime.
#[derive(Debug)]
struct Waiting {
    pool: Arc<Pool>,
    user: String,
    ticket: Ticket,
    rx: oneshot::Receiver<Turn>,
    /// Whether the outcome was taken care of by [`FlowControl::admit`].
    settled: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = self.pool.lock();
        if state.queue.withdraw(&self.user, self.ticket) {
            state.waiting.remove(&self.ticket);
            state.count(Reason::Cancelled);
        } else if self.rx.try_recv() == Ok(Turn::Seated) {
            state.release();
        }
    }
}

/// The right to be served: a seat, a watch, or an exemption. Given back when
/// dropped.
#[derive(Debug)]
pub struct Permit(Held);

#[derive(Debug)]
enum Held {
    Exempt,
    Seat(Arc<Pool>),
    Watch {
        watches: Arc<Mutex<Watches>>,
        user: String,
    },
}

impl Permit {
    /// Keeps the permit for as long as `resp` needs it: a watch's until its
    /// body ends or is dropped (the client went away), anything else's not
    /// past this call, the handler having answered.
    pub fn hold_through(self, resp: Response<Body>) -> Response<Body> {
        if matches!(self.0, Held::Watch { .. }) {
            resp.map(|body| {
                WithPermit {
                    body,
                    _permit: self,
                }
                .boxed_unsync()
            })
        } else {
            resp
        }
    }

    /// Which kind of permit this is, for tests and logs.
    pub fn kind(&self) -> Option<RequestKind> {
        match &self.0 {
            Held::Exempt => None,
            Held::Seat(pool) => Some(pool.kind),
            Held::Watch { .. } => Some(RequestKind::Watch),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        match &self.0 {
            Held::Exempt => {}
            Held::Seat(pool) => pool.lock().release(),
            Held::Watch { watches, user } => {
                let mut watches = lock(watches);
                if let Some(open) = watches.open.get_mut(user) {
                    *open = open.saturating_sub(1);
                    if *open == 0 {
                        watches.open.remove(user);
                    }
                }
            }
        }
    }
}

/// A response body that holds a permit until it is dropped.
#[derive(Debug)]
struct WithPermit {
    body: Body,
    _permit: Permit,
}

impl hyper::body::Body for WithPermit {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
