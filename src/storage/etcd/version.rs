//! Which etcd releases this server runs on, decided from the version string an
//! etcd member reports in its `Status`. Pure: the caller asks etcd.
//!
//! The watch cache serves consistent lists after a progress notification
//! (`RequestProgress`): it answers once its watch has seen a revision at least
//! as new as etcd's. Before 3.5.13 etcd could send that notification ahead of
//! events it covered (etcd issue 17507), so a "consistent" list could miss a
//! write; kube-apiserver v1.36 turns the same feature off for such an etcd.
//! Rather than serve stale lists, the server refuses to start on one.

/// The oldest etcd this server runs on.
pub const MINIMUM: (u64, u64, u64) = (3, 5, 13);

/// Why an etcd cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsupportedEtcd {
    #[error("etcd {version} is older than 3.5.13, the oldest this server runs on: its progress notifications can run ahead of the events they cover (etcd issue 17507), and the watch cache relies on them for consistent lists; upgrade etcd to 3.5.13 or newer (3.6 is what Kubernetes v1.36 ships)")]
    TooOld { version: String },
    #[error("etcd reported the version {version:?}, which is not MAJOR.MINOR.PATCH")]
    Unparsable { version: String },
}

/// Whether the etcd that reported `version` (for example `3.6.16`) can be used.
pub fn check(version: &str) -> Result<(), UnsupportedEtcd> {
    let parsed = parse(version).ok_or_else(|| UnsupportedEtcd::Unparsable {
        version: version.to_owned(),
    })?;
    if parsed < MINIMUM {
        return Err(UnsupportedEtcd::TooOld {
            version: version.to_owned(),
        });
    }
    Ok(())
}

/// `3.6.16`, `v3.5.13` or `3.6.0-rc.1` as (major, minor, patch); a
/// pre-release counts as its release.
fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

#[cfg(test)]
mod tests;
