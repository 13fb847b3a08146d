//! Flow control: how many API requests are served at once, who waits when
//! they are all taken, and who is refused. What kube-apiserver gives with its
//! max-in-flight filter and API Priority and Fairness (APF), in one fixed,
//! documented form (docs/operations.md, "Overload"):
//!
//! - Two pools of seats, as `--max-requests-inflight` (read-only requests:
//!   get, list, and non-resource GETs) and `--max-mutating-requests-inflight`
//!   (everything else that is not a watch). 0 means no limit, as in kube.
//! - A request takes one seat, except a list, which takes one per 100
//!   objects it may return, up to 10, as APF's work estimator counts them
//!   (the objects in the list's scope, or `limit` if that is fewer and the
//!   list honours it). A seat is held until the connection has taken the
//!   response's last frame (in frames of 16 KiB, so that the hold covers the
//!   writing but for what hyper, TLS and the socket buffer, a few hundred
//!   KiB), or for at most [`MAX_SEAT_HOLD`] after the handler answered, so
//!   that a client that stops reading cannot keep it.
//! - No user holds more than all but an eighth of a pool's seats (all of a
//!   pool of fewer than 8): while one user keeps the pool busy, the rest
//!   stays free for the others. (Two busy users can still hold it all
//!   between them; then the queue's turns share it.)
//! - When a request does not fit, it waits in the queue of its user (the
//!   authenticated user name), and freed seats go to the users in
//!   round-robin order, one request per user in turn: a user who floods the
//!   server fills only their own queue. A wide request at the head of the
//!   turn is never overtaken by narrower ones behind it. Queues are bounded per user
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
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response};
use http_body_util::BodyExt;
use hyper::body::Frame;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::oneshot;

use crate::api::errors::ApiError;
use crate::authn::UserInfo;
use crate::endpoints::request::{ResourceRequest, Verb};
use crate::endpoints::Body;
use crate::metrics::count;

/// The group whose members are never limited, as APF's exempt level.
pub const EXEMPT_GROUP: &str = crate::api::meta::SYSTEM_MASTERS;

/// What a refused client is told to wait before it retries, in seconds: the
/// `Retry-After` kube-apiserver's max-in-flight filter sends.
pub const RETRY_AFTER_SECONDS: i32 = 1;

/// How long a seat stays taken after its handler answered, at most, while
/// the response is still being written: kube-apiserver's default
/// `--request-timeout`.
pub const MAX_SEAT_HOLD: Duration = Duration::from_secs(60);

/// The objects a list may return per seat it takes, and the most seats one
/// request takes: APF's list work estimator's.
pub const OBJECTS_PER_SEAT: usize = 100;
pub const MAX_WIDTH: usize = 10;

/// The most objects a list's width depends on: past them it takes
/// [`MAX_WIDTH`] seats whatever it returns.
pub const MAX_WEIGHED_OBJECTS: usize = OBJECTS_PER_SEAT * MAX_WIDTH;

/// The seats a list takes: one per [`OBJECTS_PER_SEAT`] of the `objects`
/// it may return, from 1 to [`MAX_WIDTH`].
pub fn list_width(objects: usize) -> usize {
    objects.div_ceil(OBJECTS_PER_SEAT).clamp(1, MAX_WIDTH)
}

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

/// A seat (or several) handed to a waiting request by
/// [`FairQueue::release`] or [`FairQueue::dispatch`]: the seats stay taken
/// in `user`'s name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    pub ticket: Ticket,
    pub user: String,
    pub width: usize,
}

/// A waiting request: its place and the seats it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiter {
    ticket: Ticket,
    width: usize,
}

/// One pool of seats and the per-user queues in front of it. Pure: no clock,
/// no I/O, no locking; the caller says when a request arrives, gives up or
/// gives its seats back, and is told who is seated.
///
/// Invariants: a request waits only while it does not fit (too few seats
/// free, or its user would hold more than [`FairQueue::user_cap`]), or a
/// request of another user that could be seated but for the free seats is
/// ahead of it in turn; no count goes below zero; each user's queue and all
/// queues together stay within their bounds.
#[derive(Debug)]
pub struct FairQueue {
    /// Seats in the pool; 0: no limit.
    seats: usize,
    in_use: usize,
    /// The seats each user holds now; a user with none has no entry.
    held: HashMap<String, usize>,
    max_per_user: usize,
    max_total: usize,
    /// Each waiting user's requests, oldest first. A user with none has no
    /// entry.
    queues: HashMap<String, VecDeque<Waiter>>,
    /// The users with waiting requests, in the order they are served: the
    /// first that may be seated gets the next seats and goes to the back.
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
            held: HashMap::new(),
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

    /// Seats `user` holds now.
    pub fn held_by(&self, user: &str) -> usize {
        self.held.get(user).copied().unwrap_or(0)
    }

    /// Requests waiting now, all users together.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Requests of `user` waiting now.
    pub fn queued_for(&self, user: &str) -> usize {
        self.queues.get(user).map_or(0, VecDeque::len)
    }

    /// The most seats one user may hold: all but an eighth of the pool (all
    /// of a pool of fewer than 8), so that one busy user leaves some free.
    pub fn user_cap(&self) -> usize {
        self.seats - self.seats / 8
    }

    /// The seats a request asking for `width` takes: at least one, and never
    /// more than one user may hold, so that it can always be seated.
    pub fn width_for(&self, width: usize) -> usize {
        if self.seats == 0 {
            return 1;
        }
        width.clamp(1, self.user_cap())
    }

    /// Whether `user` may take `width` more seats without passing the cap.
    fn under_cap(&self, user: &str, width: usize) -> bool {
        self.held_by(user) + width <= self.user_cap()
    }

    /// Whether some waiting user's oldest request could be seated now but
    /// for the free seats: then it goes first.
    fn someone_waits_for_seats(&self) -> bool {
        self.turns.iter().any(|u| self.head_fits_cap(u))
    }

    fn head_fits_cap(&self, user: &str) -> bool {
        self.queues
            .get(user)
            .and_then(VecDeque::front)
            .is_some_and(|w| self.under_cap(user, w.width))
    }

    fn take(&mut self, user: &str, width: usize) {
        self.in_use += width;
        // The user's name is copied only for their first seat.
        match self.held.get_mut(user) {
            Some(held) => *held += width,
            None => {
                self.held.insert(user.to_owned(), width);
            }
        }
    }

    /// A request of `user` that needs `width` seats arrives (clamped by
    /// [`Self::width_for`]; the caller gives the same width back).
    pub fn arrive(&mut self, user: &str, width: usize) -> Arrival {
        let width = self.width_for(width);
        if self.seats == 0 {
            self.take(user, width);
            return Arrival::Seated;
        }
        if self.in_use + width <= self.seats
            && self.under_cap(user, width)
            && self.queued_for(user) == 0
            && !self.someone_waits_for_seats()
        {
            self.take(user, width);
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
        queue.push_back(Waiter { ticket, width });
        self.queued += 1;
        Arrival::Queued { ticket, evicted }
    }

    /// Drops the newest request of the longest queue (the first such in
    /// turn order) if that queue is longer than `mine` + 1, the length of
    /// `user`'s queue once the new request joins it; else nothing. The
    /// dropped request is never its queue's oldest, so who is served next
    /// does not change.
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
        let waiter = self.queues.get_mut(&longest)?.pop_back()?;
        self.queued -= 1;
        self.forget_if_empty(&longest);
        Some(waiter.ticket)
    }

    /// `user` gives back the `width` seats a request held. Returns the
    /// waiting requests seated in its place (their seats stay taken).
    pub fn release(&mut self, user: &str, width: usize) -> Vec<Handed> {
        self.in_use = self.in_use.saturating_sub(width);
        if let Some(held) = self.held.get_mut(user) {
            *held = held.saturating_sub(width);
            if *held == 0 {
                self.held.remove(user);
            }
        }
        self.dispatch()
    }

    /// Seats waiting requests while they fit, in turn: the first user whose
    /// oldest request would stay within the user cap is served if there are
    /// seats enough for it, and nobody behind it is until there are.
    pub fn dispatch(&mut self) -> Vec<Handed> {
        let mut handed = Vec::new();
        while let Some(at) = self.turns.iter().position(|u| self.head_fits_cap(u)) {
            let user = self.turns[at].clone();
            let Some(width) = self
                .queues
                .get(&user)
                .and_then(VecDeque::front)
                .map(|w| w.width)
            else {
                break;
            };
            if self.in_use + width > self.seats && self.seats != 0 {
                break;
            }
            let Some(waiter) = self.queues.get_mut(&user).and_then(VecDeque::pop_front) else {
                break;
            };
            self.turns.remove(at);
            self.queued -= 1;
            if self.queued_for(&user) == 0 {
                self.queues.remove(&user);
            } else {
                self.turns.push_back(user.clone());
            }
            self.take(&user, waiter.width);
            handed.push(Handed {
                ticket: waiter.ticket,
                user,
                width: waiter.width,
            });
        }
        handed
    }

    /// A waiting request gives up (its wait timed out, or its client went
    /// away). Returns whether it was still waiting; if not, it was seated or
    /// evicted before, and the caller must act on that instead. Its leaving
    /// may let others be seated: the caller then calls [`Self::dispatch`].
    pub fn withdraw(&mut self, user: &str, ticket: Ticket) -> bool {
        let Some(queue) = self.queues.get_mut(user) else {
            return false;
        };
        let Some(at) = queue.iter().position(|w| w.ticket == ticket) else {
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
        /// `Some(held)` when seats were free but the user already held
        /// `held`, as many as one user may.
        at_cap: Option<usize>,
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
            format!(
                "all {seats} seats for {} requests ({}) are taken",
                kind_name(kind),
                seat_flag(kind)
            )
        };
        let seats = |kind: RequestKind, limits: &FlowControlLimits| match kind {
            RequestKind::Mutating => limits.max_mutating,
            _ => limits.max_read_only,
        };
        let detail = match self {
            Self::Full {
                kind,
                seats,
                at_cap,
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
                let pool = match at_cap {
                    Some(held) => format!(
                        "you hold {held} of the {seats} seats for {} requests, the most one user may (all but an eighth of {})",
                        kind_name(*kind),
                        seat_flag(*kind)
                    ),
                    None => pool(*kind, *seats),
                };
                format!("{pool} and {queue}")
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

/// How a message names the pool of `kind`.
fn kind_name(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Mutating => "mutating",
        _ => "read-only",
    }
}

/// The flag that sets the seats of `kind`.
fn seat_flag(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Mutating => "--max-mutating-requests-inflight",
        _ => "--max-requests-inflight",
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
    /// Requests given a seat, at once or after a wait.
    dispatched: Counter,
    /// How long each of them waited.
    waits: Histogram,
}

#[derive(Debug)]
struct PoolState {
    queue: FairQueue,
    waiting: HashMap<Ticket, oneshot::Sender<Turn>>,
    rejected: HashMap<Reason, u64>,
}

impl Pool {
    fn new(
        kind: RequestKind,
        seats: usize,
        limits: &FlowControlLimits,
        dispatched: Counter,
        waits: Histogram,
    ) -> Self {
        Self {
            kind,
            dispatched,
            waits,
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

    /// Counts a request given a seat after `waited`.
    fn seated(&self, waited: Duration) {
        self.dispatched.inc();
        self.waits.observe(waited.as_secs_f64());
    }
}

impl PoolState {
    /// `user` gives `width` seats back: to the waiting requests they now
    /// fit, in turn, or to the pool.
    fn release(&mut self, user: &str, width: usize) {
        let handed = self.queue.release(user, width);
        self.hand_out(handed);
    }

    /// Tells each seated waiter. A waiter whose receiver is gone cannot take
    /// its seats, so they are given back and go on to the next.
    fn hand_out(&mut self, mut handed: Vec<Handed>) {
        while let Some(h) = handed.pop() {
            let taken = self
                .waiting
                .remove(&h.ticket)
                .is_some_and(|tx| tx.send(Turn::Seated).is_ok());
            if !taken {
                handed.extend(self.queue.release(&h.user, h.width));
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
    /// `apiserver_flowcontrol_dispatched_requests_total`, of both pools.
    dispatched: Family<LevelLabel, Counter>,
    /// `apiserver_flowcontrol_request_wait_duration_seconds`, of both pools.
    waits: Family<LevelLabel, Histogram, fn() -> Histogram>,
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
        let dispatched = Family::<LevelLabel, Counter>::default();
        let waits: Family<LevelLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(wait_histogram);
        let pool = |kind: RequestKind, seats| {
            let level = LevelLabel {
                priority_level: kind.label(),
            };
            Arc::new(Pool::new(
                kind,
                seats,
                &limits,
                dispatched.get_or_create(&level).clone(),
                waits.get_or_create(&level).clone(),
            ))
        };
        Self {
            read_only: pool(RequestKind::ReadOnly, limits.max_read_only),
            mutating: pool(RequestKind::Mutating, limits.max_mutating),
            watches: Arc::default(),
            limits,
            dispatched,
            waits,
        }
    }

    /// Admits a request of `kind` by `user` that takes one seat.
    pub async fn admit(&self, user: &UserInfo, kind: RequestKind) -> Result<Permit, Rejection> {
        self.admit_wide(user, kind, 1).await
    }

    /// Admits a request of `kind` by `user` that needs `width` seats (a
    /// list: [`list_width`]): at once, after a wait in the user's queue, or
    /// not at all. Holding the returned permit is holding the seats (or the
    /// watch).
    pub async fn admit_wide(
        &self,
        user: &UserInfo,
        kind: RequestKind,
        width: usize,
    ) -> Result<Permit, Rejection> {
        if user.groups.iter().any(|g| g == EXEMPT_GROUP) {
            return Ok(Permit(Held::Exempt));
        }
        let pool = match kind {
            RequestKind::ReadOnly => &self.read_only,
            RequestKind::Mutating => &self.mutating,
            RequestKind::Watch => return self.open_watch(&user.username),
        };
        let (tx, rx) = oneshot::channel();
        let seat = |width| {
            Permit(Held::Seat {
                pool: pool.clone(),
                user: user.username.clone(),
                width,
            })
        };
        let (ticket, width) = {
            let mut state = pool.lock();
            let width = state.queue.width_for(width);
            match state.queue.arrive(&user.username, width) {
                Arrival::Seated => {
                    pool.seated(Duration::ZERO);
                    return Ok(seat(width));
                }
                Arrival::Refused(why) => {
                    let seats = self.seats(kind);
                    let at_cap = (state.queue.in_use() + width <= seats)
                        .then(|| state.queue.held_by(&user.username));
                    let rejection = Rejection::Full {
                        kind,
                        seats,
                        at_cap,
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
                    (ticket, width)
                }
            }
        };
        let queued_at = tokio::time::Instant::now();
        let mut waiting = Waiting {
            pool: pool.clone(),
            user: user.username.clone(),
            ticket,
            width,
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
                    let handed = state.queue.dispatch();
                    state.hand_out(handed);
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
            Turn::Seated => {
                pool.seated(queued_at.elapsed());
                Ok(seat(width))
            }
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

    /// This module's part of `/metrics`, under kube-apiserver's names,
    /// added to `registry` at a scrape:
    /// - `apiserver_current_inflight_requests{request_kind}` and
    ///   `apiserver_current_inqueue_requests{request_kind}`, the names of
    ///   kube's max-in-flight filter, whose two pools ours are;
    /// - APF's series, labelled by `priority_level` (one level per kind:
    ///   `readOnly`, `mutating`, `watch`; kube also labels by flow schema,
    ///   of which ours has one, so that label is left out):
    ///   `apiserver_flowcontrol_current_executing_seats`,
    ///   `apiserver_flowcontrol_current_inqueue_requests`,
    ///   `apiserver_flowcontrol_nominal_limit_seats`,
    ///   `apiserver_flowcontrol_dispatched_requests_total`,
    ///   `apiserver_flowcontrol_rejected_requests_total{reason}` and
    ///   `apiserver_flowcontrol_request_wait_duration_seconds`;
    /// - `storage_transfer_watches`.
    pub fn scrape(&self, registry: &mut Registry) {
        let pools = [RequestKind::ReadOnly, RequestKind::Mutating];
        let inflight = Family::<KindLabel, Gauge>::default();
        let inqueue = Family::<KindLabel, Gauge>::default();
        let executing = Family::<LevelLabel, Gauge>::default();
        let queued = Family::<LevelLabel, Gauge>::default();
        let nominal = Family::<LevelLabel, Gauge>::default();
        let rejected = Family::<RejectedLabels, Counter>::default();
        for kind in pools {
            let (request_kind, level) = (
                KindLabel {
                    request_kind: kind.label(),
                },
                LevelLabel {
                    priority_level: kind.label(),
                },
            );
            inflight
                .get_or_create(&request_kind)
                .set(count(self.in_flight(kind)));
            inqueue
                .get_or_create(&request_kind)
                .set(count(self.in_queue(kind)));
            executing
                .get_or_create(&level)
                .set(count(self.in_flight(kind)));
            queued.get_or_create(&level).set(count(self.in_queue(kind)));
            nominal.get_or_create(&level).set(count(self.seats(kind)));
            for reason in Reason::ALL {
                rejected
                    .get_or_create(&RejectedLabels {
                        priority_level: kind.label(),
                        reason: reason.label(),
                    })
                    .inc_by(self.rejected(kind, reason));
            }
        }
        rejected
            .get_or_create(&RejectedLabels {
                priority_level: RequestKind::Watch.label(),
                reason: Reason::ConcurrencyLimit.label(),
            })
            .inc_by(self.rejected(RequestKind::Watch, Reason::ConcurrencyLimit));
        registry.register(
            "apiserver_current_inflight_requests",
            "Seats taken now, by kind (a request takes one, a list one per 100 objects it may return, up to 10); exempt requests and watches take none",
            inflight,
        );
        registry.register(
            "apiserver_current_inqueue_requests",
            "Requests waiting for a seat now, by kind",
            inqueue,
        );
        registry.register(
            "apiserver_flowcontrol_current_executing_seats",
            "Seats occupied now by requests executing, by priority level",
            executing,
        );
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Requests waiting in the queues now, by priority level",
            queued,
        );
        registry.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Seats of each priority level (0: no limit)",
            nominal,
        );
        registry.register(
            "apiserver_flowcontrol_dispatched_requests",
            "Requests given a seat, by priority level",
            self.dispatched.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Requests refused with 429 (or given up by their client while queued), by priority level and reason",
            rejected,
        );
        registry.register(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "How long requests given a seat waited for it, by priority level",
            self.waits.clone(),
        );
        let watches = Gauge::<i64>::default();
        watches.set(count(self.in_flight(RequestKind::Watch)));
        registry.register(
            "storage_transfer_watches",
            "Watches open now (exempt users' not counted)",
            watches,
        );
    }
}

/// The label of kube's max-in-flight gauges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    request_kind: &'static str,
}

/// APF's label: our priority level is the request's kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LevelLabel {
    priority_level: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RejectedLabels {
    priority_level: &'static str,
    reason: &'static str,
}

/// kube's buckets for APF's wait: 0 to a minute.
fn wait_histogram() -> Histogram {
    Histogram::new([
        0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0,
    ])
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
    width: usize,
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
            let handed = state.queue.dispatch();
            state.hand_out(handed);
        } else if self.rx.try_recv() == Ok(Turn::Seated) {
            state.release(&self.user, self.width);
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
    Seat {
        pool: Arc<Pool>,
        user: String,
        width: usize,
    },
    Watch {
        watches: Arc<Mutex<Watches>>,
        user: String,
    },
}

impl Permit {
    /// Keeps the permit until the connection has taken `resp`'s last frame,
    /// or the body is dropped (the client went away), as kube-apiserver
    /// holds a seat while its handler writes the response: a watch's for as
    /// long as it runs, and a large list's while it is sent, in frames of at
    /// most [`FRAME_BYTES`], which the connection takes as it writes (hyper
    /// buffers a few hundred KiB ahead, so the last of a response may still
    /// be on its way). A seat is given back at most [`MAX_SEAT_HOLD`] after
    /// this call. Call it on the final response, after anything that reads
    /// the body (the audit record).
    pub fn hold_through(self, resp: Response<Body>) -> Response<Body> {
        let timed = match &self.0 {
            Held::Exempt => return resp,
            // Taken whole by the connection at its first write.
            Held::Seat { .. }
                if hyper::body::Body::size_hint(resp.body())
                    .exact()
                    .is_some_and(|n| n <= FRAME_BYTES as u64) =>
            {
                return resp
            }
            Held::Seat { .. } => true,
            Held::Watch { .. } => false,
        };
        let permit = Arc::new(Mutex::new(Some(self)));
        let timer = timed.then(|| {
            let permit = Arc::downgrade(&permit);
            tokio::spawn(async move {
                tokio::time::sleep(MAX_SEAT_HOLD).await;
                if let Some(permit) = permit.upgrade() {
                    let released = permit.lock().unwrap_or_else(|p| p.into_inner()).take();
                    drop(released);
                }
            })
            .abort_handle()
        });
        resp.map(|body| {
            WithPermit {
                body,
                rest: Bytes::new(),
                permit,
                timer,
            }
            .boxed_unsync()
        })
    }

    /// Which kind of permit this is, for tests and logs.
    pub fn kind(&self) -> Option<RequestKind> {
        match &self.0 {
            Held::Exempt => None,
            Held::Seat { pool, .. } => Some(pool.kind),
            Held::Watch { .. } => Some(RequestKind::Watch),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        match &self.0 {
            Held::Exempt => {}
            Held::Seat { pool, user, width } => pool.lock().release(user, *width),
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

/// The largest data frame a body holding a permit passes on: a TLS record.
pub const FRAME_BYTES: usize = 16 * 1024;

/// A response body that holds a permit until its last frame is taken or it
/// is dropped (or, for a seat, [`MAX_SEAT_HOLD`] has passed), passing large
/// data frames on in pieces of [`FRAME_BYTES`].
#[derive(Debug)]
struct WithPermit {
    body: Body,
    /// What is left of the data frame being passed on.
    rest: Bytes,
    /// Shared with the timer, which may give a seat back first.
    permit: Arc<Mutex<Option<Permit>>>,
    timer: Option<tokio::task::AbortHandle>,
}

impl WithPermit {
    fn give_back(&mut self) {
        let permit = self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(permit);
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
    }
}

impl Drop for WithPermit {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl hyper::body::Body for WithPermit {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.rest.is_empty() {
            match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.rest = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.give_back();
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
        let piece = this.rest.split_to(this.rest.len().min(FRAME_BYTES));
        if this.rest.is_empty() && this.body.is_end_stream() {
            this.give_back();
        }
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = hyper::body::SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint.set_lower(inner.lower() + rest);
        hint
    }
}

#[cfg(test)]
mod tests;
