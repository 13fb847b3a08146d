//! The controllers' view of the cluster they extend: the core objects they read
//! and change (PersistentVolumes, PersistentVolumeClaims, pods), through
//! kube-rs, with the server's own ServiceAccount.
//!
//! Owns the calls and the one mapping of their failures to [`ClusterError`].
//! Every read here is live (a GET or LIST against kube-apiserver, never a
//! cache), because the protocol decides on them; the reflectors in
//! [`super::watch`] only say *when* to look again.

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::Value;

/// Why a call to kube-apiserver failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("{message}")]
    NotFound { message: String },
    #[error("{message}")]
    AlreadyExists { message: String },
    /// A resourceVersion or uid precondition failed: someone else wrote first.
    #[error("{message}")]
    Conflict { message: String },
    /// The API refused the request for good: forbidden, invalid, over quota.
    /// Retrying the same request will not help.
    #[error("{message}")]
    Refused {
        code: u16,
        reason: String,
        message: String,
    },
    /// Anything that may pass: timeouts, 5xx, 429, transport errors.
    #[error("{0}")]
    Unavailable(String),
}

impl From<kube::Error> for ClusterError {
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => {
                let message = status.message.clone();
                match (status.code, status.reason.as_str()) {
                    (404, _) => ClusterError::NotFound { message },
                    (409, "AlreadyExists") => ClusterError::AlreadyExists { message },
                    (409, _) => ClusterError::Conflict { message },
                    (429, _) => ClusterError::Unavailable(message),
                    (code @ 400..=499, reason) => ClusterError::Refused {
                        code,
                        reason: reason.to_owned(),
                        message,
                    },
                    _ => ClusterError::Unavailable(format!("{} ({})", message, status.code)),
                }
            }
            other => ClusterError::Unavailable(other.to_string()),
        }
    }
}

/// `Ok(None)` for a 404.
fn found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, ClusterError> {
    match result.map_err(ClusterError::from) {
        Ok(v) => Ok(Some(v)),
        Err(ClusterError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Typed calls on the core objects the controllers touch.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").finish_non_exhaustive()
    }
}

impl Cluster {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn claims(&self, namespace: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub async fn claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, ClusterError> {
        found(self.claims(namespace).get(name).await)
    }

    pub async fn volume(&self, name: &str) -> Result<Option<PersistentVolume>, ClusterError> {
        found(self.volumes().get(name).await)
    }

    /// The volumes labelled `key=value`, live.
    pub async fn volumes_labelled(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Vec<PersistentVolume>, ClusterError> {
        let params = ListParams::default().labels(&format!("{key}={value}"));
        Ok(self.volumes().list(&params).await?.items)
    }

    /// A StorageClass's metadata (its annotations carry the transfer policy).
    pub async fn storage_class(&self, name: &str) -> Result<Option<ObjectMeta>, ClusterError> {
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        Ok(found(classes.get_metadata(name).await)?.map(|m| m.metadata))
    }

    /// A JSON merge patch; put `metadata.resourceVersion` in it to make it
    /// conditional.
    pub async fn patch_claim(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        Ok(self
            .claims(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?)
    }

    /// A JSON merge patch; put `metadata.resourceVersion` in it to make it
    /// conditional.
    pub async fn patch_volume(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<PersistentVolume, ClusterError> {
        Ok(self
            .volumes()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?)
    }

    pub async fn create_claim(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        Ok(self
            .claims(namespace)
            .create(&PostParams::default(), claim)
            .await?)
    }

    /// Whether kube-apiserver would create `claim` (`dryRun=All`): quota,
    /// admission and validation run, nothing is stored.
    pub async fn create_claim_dry_run(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), ClusterError> {
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.claims(namespace).create(&params, claim).await?;
        Ok(())
    }

    /// Whether kube-apiserver would delete the claim with `uid`
    /// (`dryRun=All`).
    pub async fn delete_claim_dry_run(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), ClusterError> {
        let params = DeleteParams {
            dry_run: true,
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.claims(namespace).delete(name, &params).await?;
        Ok(())
    }

    /// Deletes the claim if it is still the one with `uid`; a claim already
    /// gone is not an error.
    pub async fn delete_claim(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), ClusterError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.claims(namespace).delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(e) => match ClusterError::from(e) {
                ClusterError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// The message of the latest `ProvisioningFailed` Event on the claim
    /// with `uid` (the external-provisioner's report of a failed
    /// `CreateVolume`), if any.
    pub async fn provisioning_failure(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Option<String>, ClusterError> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default()
            .fields(&format!(
                "involvedObject.uid={uid},reason=ProvisioningFailed"
            ))
            .limit(50);
        let list = events.list(&params).await?;
        let when = |e: &Event| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
        };
        Ok(list
            .items
            .iter()
            .max_by_key(|e| when(e))
            .and_then(|e| e.message.clone()))
    }

    /// Every pod in `namespace`, live: what the EphemeralClaim controller
    /// decides its owner's state and the claim's use on.
    pub async fn pods(&self, namespace: &str) -> Result<Vec<Pod>, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        Ok(pods.list(&ListParams::default()).await?.items)
    }

    /// The pods in `namespace` that use claim `name` or may start to: not
    /// Succeeded or Failed, scheduled or not yet (a pod waiting for the
    /// scheduler may be placed any moment), naming the claim in a volume. A
    /// live LIST, never a cache: what a transfer must not move a volume
    /// from under.
    pub async fn pods_using_for_transfer(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<String>, ClusterError> {
        Ok(self
            .pods(namespace)
            .await?
            .iter()
            .filter(|pod| pod_may_use_claim(pod, name))
            .filter_map(|pod| pod.metadata.name.clone())
            .collect())
    }
}

/// Whether `pod` uses `claim` or may start to: [`pod_uses_claim`] without
/// the requirement that it be scheduled yet.
pub fn pod_may_use_claim(pod: &Pod, claim: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    names_claim(pod, spec, claim)
}

fn names_claim(pod: &Pod, spec: &k8s_openapi::api::core::v1::PodSpec, claim: &str) -> bool {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    spec.volumes.iter().flatten().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
            || (v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == claim)
    })
}

/// The pvc-protection rule for one pod.
pub fn pod_uses_claim(pod: &Pod, claim: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    if spec.node_name.as_deref().unwrap_or_default().is_empty() {
        return false;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    names_claim(pod, spec, claim)
}

#[cfg(test)]
mod tests;
