//! Loads `kube-system/extension-apiserver-authentication` and keeps it
//! current: a watch on that one ConfigMap replaces the shared configuration
//! whole whenever it changes, so a rotated CA is trusted by new connections
//! within seconds, without a restart.

use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;

use super::config::{AuthConfig, CONFIGMAP_NAME, CONFIGMAP_NAMESPACE};
use super::SharedConfig;

/// Why the configuration is not usable yet, for `/readyz?verbose`.
pub type Problem = Arc<RwLock<Option<String>>>;

/// Starts watching the ConfigMap; returns the shared configuration (empty
/// until the first good read) and the current problem, if any.
pub fn watch(client: kube::Client) -> (SharedConfig, Problem) {
    let shared: SharedConfig = Arc::new(RwLock::new(None));
    let problem: Problem = Arc::new(RwLock::new(Some(format!(
        "{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} has not been read yet"
    ))));
    let (config, why) = (shared.clone(), problem.clone());
    tokio::spawn(async move {
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, CONFIGMAP_NAMESPACE);
        let selector =
            watcher::Config::default().fields(&format!("metadata.name={CONFIGMAP_NAME}"));
        let mut events = watcher(api, selector).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => apply(&config, &why, &cm),
                Ok(watcher::Event::Delete(_)) => set(
                    &why,
                    Some(format!("{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} was deleted; keeping the last configuration")),
                ),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watching the authentication ConfigMap");
                    if config.read().unwrap_or_else(|p| p.into_inner()).is_none() {
                        set(&why, Some(format!("cannot read {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}: {e}")));
                    }
                }
            }
        }
    });
    (shared, problem)
}

fn apply(config: &SharedConfig, why: &Problem, cm: &ConfigMap) {
    let data = cm.data.clone().unwrap_or_default();
    match AuthConfig::from_data(&data) {
        Ok(parsed) => {
            tracing::info!(
                client_ca = parsed.client_ca.is_some(),
                request_header = parsed.request_header.is_some(),
                "loaded the authentication configuration"
            );
            *config.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(parsed));
            set(why, None);
        }
        Err(e) => {
            tracing::error!(error = %e, "the authentication ConfigMap is invalid; keeping the last good configuration");
            set(
                why,
                Some(format!("{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}: {e}")),
            );
        }
    }
}

fn set(why: &Problem, value: Option<String>) {
    *why.write().unwrap_or_else(|p| p.into_inner()) = value;
}
