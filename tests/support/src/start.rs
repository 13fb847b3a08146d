//! Starting a control plane's components, one module each, every one an
//! `impl ControlPlane` block of the starters and helpers of its component:
//! [`etcd`] (the control plane's etcd, and what every etcd here shares),
//! [`kube`] (kube-apiserver, kube-controller-manager, ServiceAccount
//! kubeconfigs and the APIService), [`csi`] (the CSI driver and its
//! sidecars) and [`server`] (our server, its restarts and replicas). The
//! order in which they start is
//! [`ControlPlane::start`](crate::ControlPlane::start)'s.

mod csi;
pub(crate) mod etcd;
mod kube;
pub(crate) mod server;
