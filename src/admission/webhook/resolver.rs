//! Where a webhook's `clientConfig.service` is, for a server that has
//! neither cluster DNS nor a route to ClusterIPs: an `ExternalName` Service
//! at its `externalName`, any other at a ready endpoint of its
//! EndpointSlices (k8s.io/apiserver's `proxy.ResolveEndpoint`, as
//! kube-aggregator routes to endpoints). The messages are kube's.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// A place to connect to: an IP address or DNS name, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// Turns a Service reference into an [`Endpoint`] (kube's
/// `webhookutil.ServiceResolver`).
#[async_trait::async_trait]
pub trait ServiceResolver: Send + Sync + std::fmt::Debug {
    /// Where port `port` of Service `namespace/name` is served; the error
    /// is the message kube reports for it.
    async fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<Endpoint, String>;
}

/// Resolves through kube-apiserver: the Service, then its EndpointSlices.
/// Needs `get` on services and `list` on endpointslices.
#[derive(Clone)]
pub struct KubeServiceResolver {
    client: kube::Client,
    /// Spreads calls over the ready endpoints (kube starts at a random one).
    next: std::sync::Arc<AtomicUsize>,
}

impl std::fmt::Debug for KubeServiceResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeServiceResolver")
            .finish_non_exhaustive()
    }
}

impl KubeServiceResolver {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            next: std::sync::Arc::new(AtomicUsize::new(0)),
        }
    }
}

#[async_trait::async_trait]
impl ServiceResolver for KubeServiceResolver {
    async fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<Endpoint, String> {
        let services: kube::Api<Service> = kube::Api::namespaced(self.client.clone(), namespace);
        let service = services
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("service {name:?} not found"))?;
        let spec = service.spec.unwrap_or_default();
        let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
        match kind {
            "ExternalName" => {
                let host = spec.external_name.unwrap_or_default();
                return Ok(Endpoint { host, port });
            }
            "ClusterIP" | "NodePort" | "LoadBalancer" => {}
            other => return Err(format!("unsupported service type {other:?}")),
        }
        let service_port = spec
            .ports
            .iter()
            .flatten()
            .find(|p| i64::from(p.port) == i64::from(port))
            .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
        let port_name = service_port.name.clone().unwrap_or_default();
        let slices: kube::Api<EndpointSlice> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let params =
            kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
        let mut slices = slices.list(&params).await.map_err(|e| e.to_string())?.items;
        if slices.is_empty() {
            return Err(format!("no endpoints available for service {name:?}"));
        }
        // The service's primary IP family first, as kube looks.
        if let Some(primary) = spec.ip_families.as_ref().and_then(|f| f.first()) {
            slices.sort_by_key(|s| s.address_type != *primary);
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        pick_endpoint(&slices, &port_name, start)
            .ok_or_else(|| format!("no endpoints available for service {name:?}"))
    }
}

/// A ready endpoint serving the service port named `port_name`, starting
/// the search at `start` within each slice.
pub(super) fn pick_endpoint(
    slices: &[EndpointSlice],
    port_name: &str,
    start: usize,
) -> Option<Endpoint> {
    for slice in slices {
        let endpoints = slice.endpoints.as_deref().unwrap_or_default();
        if endpoints.is_empty() {
            continue;
        }
        for slice_port in slice.ports.iter().flatten() {
            if slice_port.name.as_deref() != Some(port_name) {
                continue;
            }
            let Some(port) = slice_port.port.and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            for i in 0..endpoints.len() {
                let endpoint = &endpoints[(start + i) % endpoints.len()];
                let ready = endpoint
                    .conditions
                    .as_ref()
                    .and_then(|c| c.ready)
                    .unwrap_or(true);
                if let (true, Some(address)) = (ready, endpoint.addresses.first()) {
                    return Some(Endpoint {
                        host: address.clone(),
                        port,
                    });
                }
            }
        }
    }
    None
}
