//! Starting a control plane's components, one module each, every one an
//! `impl ControlPlane` block of the starters and helpers of its component:
//! [`etcd`] (the control plane's etcd, and what every etcd here shares) and
//! [`server`] (our server, its restarts and replicas). The order in which
//! they start is [`ControlPlane::start`](crate::ControlPlane::start)'s.

pub(crate) mod etcd;
pub(crate) mod server;
