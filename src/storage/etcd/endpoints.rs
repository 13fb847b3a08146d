//! Which etcd members the client sends requests to.
//!
//! etcd-client balances requests over every `--etcd-servers` endpoint, and
//! tonic's balancer does not skip one that is down: a member that was killed
//! fails every request sent its way with "tcp connect error", and one that
//! stopped answering holds them until the keep-alive gives up on it. With
//! one member of three down, about half of our writes failed although the
//! other two had quorum (issue 19). Go's clientv3 skips such members; this
//! module does the same.
//!
//! Every [`PROBE_EVERY`], each member gets a `Status` call on a client of its
//! own, given [`PROBE_TIMEOUT`]. A member is healthy when it answers in time
//! and has a leader. The shared client's balancer then holds exactly the
//! healthy members, but never none: with every member failing it keeps the
//! ones it has, so that requests fail with etcd's own error rather than the
//! client's "no endpoint".
//!
//! Owns the probing and the balancer's membership; the decision is
//! [`changes`], a pure function of what the balancer holds and what the
//! probes found.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use futures::future::join_all;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// How often every member is probed.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long a member may take to answer its probe.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A change to the balancer's members, by index into the endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Add(usize),
    Remove(usize),
}

/// What to change so that the balancer, holding `held`, holds the members
/// found `healthy`; when none is healthy, nothing changes. Additions come
/// first, so the balancer is never empty in between.
pub(super) fn changes(held: &BTreeSet<usize>, healthy: &[bool]) -> Vec<Change> {
    if !healthy.iter().any(|h| *h) {
        return Vec::new();
    }
    let add = (0..healthy.len())
        .filter(|i| healthy[*i] && !held.contains(i))
        .map(Change::Add);
    let remove = held
        .iter()
        .filter(|i| !healthy.get(**i).copied().unwrap_or(false))
        .map(|i| Change::Remove(*i));
    add.chain(remove).collect()
}

/// Keeps `client`'s balancer on the healthy members of `endpoints`, until
/// the returned task is aborted. Nothing to do for a single endpoint.
pub(super) fn keep_healthy(
    client: Client,
    endpoints: Vec<String>,
    options: ConnectOptions,
) -> Option<JoinHandle<()>> {
    if endpoints.len() < 2 {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut probes = Vec::with_capacity(endpoints.len());
        for endpoint in &endpoints {
            // Lazy: connecting happens at the first probe.
            match Client::connect([endpoint.as_str()], Some(options.clone())).await {
                Ok(probe) => probes.push(probe),
                Err(error) => {
                    warn!(%endpoint, %error, "cannot probe etcd members; requests go to all of them");
                    return;
                }
            }
        }
        let mut held: BTreeSet<usize> = (0..endpoints.len()).collect();
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let healthy = join_all(probes.iter().map(probe)).await;
            for change in changes(&held, &healthy) {
                let applied = match change {
                    Change::Add(i) => client.add_endpoint(&endpoints[i]).await,
                    Change::Remove(i) => client.remove_endpoint(&endpoints[i]).await,
                };
                match (change, applied) {
                    (Change::Add(i), Ok(())) => {
                        info!(endpoint = %endpoints[i], "etcd member answers again; sending requests to it");
                        held.insert(i);
                    }
                    (Change::Remove(i), Ok(())) => {
                        warn!(endpoint = %endpoints[i], "etcd member does not answer; sending requests elsewhere");
                        held.remove(&i);
                    }
                    // The balancer is gone: the client is being dropped.
                    (_, Err(_)) => return,
                }
            }
        }
    }))
}

/// Whether a member answers `Status` in time and has a leader.
async fn probe(client: &Client) -> bool {
    let mut maintenance = client.maintenance_client();
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, maintenance.status()).await,
        Ok(Ok(status)) if status.leader() != 0
    )
}

#[cfg(test)]
mod tests;
