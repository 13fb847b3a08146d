//! The calls on VolumeSnapshots, their contents and classes (group
//! `snapshot.storage.k8s.io`, whose types are CRDs the cluster installs):
//! what moving a snapshot (DESIGN §2.1.7) reads and writes. The objects are
//! `DynamicObject`s here; `transfer::snapshot` reads the fields it needs.
//! Always live: no watch copy of them is kept.

use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::Api;
use serde_json::Value;

use super::{found, Cluster, ClusterError};
use crate::api::namespace_transfer::SNAPSHOT_GROUP;

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(SNAPSHOT_GROUP, "v1", kind), plural)
}

impl Cluster {
    fn snapshots(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resource("VolumeSnapshot", "volumesnapshots"),
        )
    }

    fn contents(&self) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &resource("VolumeSnapshotContent", "volumesnapshotcontents"),
        )
    }

    /// The VolumeSnapshot `namespace/name`, live.
    pub async fn volume_snapshot(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>, ClusterError> {
        found(self.snapshots(namespace).get(name).await)
    }

    /// The VolumeSnapshotContent `name`, live.
    pub async fn snapshot_content(
        &self,
        name: &str,
    ) -> Result<Option<DynamicObject>, ClusterError> {
        found(self.contents().get(name).await)
    }

    /// The VolumeSnapshotClass `name`, live.
    pub async fn snapshot_class(&self, name: &str) -> Result<Option<DynamicObject>, ClusterError> {
        let classes: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &resource("VolumeSnapshotClass", "volumesnapshotclasses"),
        );
        found(classes.get(name).await)
    }

    /// A merge patch of a VolumeSnapshot; put `metadata.resourceVersion` in
    /// it to make it conditional.
    pub async fn patch_volume_snapshot(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<(), ClusterError> {
        self.snapshots(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// A merge patch of a VolumeSnapshotContent; put
    /// `metadata.resourceVersion` in it to make it conditional.
    pub async fn patch_snapshot_content(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<(), ClusterError> {
        self.contents()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Creates the VolumeSnapshot `object` in `namespace`; its uid.
    pub async fn create_volume_snapshot(
        &self,
        namespace: &str,
        object: &Value,
    ) -> Result<String, ClusterError> {
        let object: DynamicObject = serde_json::from_value(object.clone())
            .map_err(|e| ClusterError::Unavailable(format!("a VolumeSnapshot to create: {e}")))?;
        let created = self
            .snapshots(namespace)
            .create(&PostParams::default(), &object)
            .await?;
        Ok(created.metadata.uid.unwrap_or_default())
    }

    /// Creates the VolumeSnapshotContent `object`; its uid.
    pub async fn create_snapshot_content(&self, object: &Value) -> Result<String, ClusterError> {
        let object: DynamicObject = serde_json::from_value(object.clone()).map_err(|e| {
            ClusterError::Unavailable(format!("a VolumeSnapshotContent to create: {e}"))
        })?;
        let created = self
            .contents()
            .create(&PostParams::default(), &object)
            .await?;
        Ok(created.metadata.uid.unwrap_or_default())
    }

    /// Deletes the VolumeSnapshot if it is still the one with `uid`; one
    /// already gone is not an error.
    pub async fn delete_volume_snapshot(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), ClusterError> {
        let params = delete_params(uid, None);
        gone_is_fine(self.snapshots(namespace).delete(name, &params).await)
    }

    /// Deletes the VolumeSnapshotContent if it is still the one with `uid`
    /// and, when given, at `resource_version` (what its deletion policy was
    /// decided on); one already gone is not an error.
    pub async fn delete_snapshot_content(
        &self,
        name: &str,
        uid: &str,
        resource_version: Option<&str>,
    ) -> Result<(), ClusterError> {
        let params = delete_params(uid, resource_version);
        gone_is_fine(self.contents().delete(name, &params).await)
    }

    /// The claims of `namespace` being restored from the VolumeSnapshot
    /// `name`: Pending, with a `dataSource` or `dataSourceRef` naming it.
    /// What the snapshot controller itself holds a snapshot's deletion for.
    /// A live LIST.
    pub async fn claims_restoring_from(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<String>, ClusterError> {
        use k8s_openapi::api::core::v1::PersistentVolumeClaim;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let list = claims.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
            .filter(|c| {
                let spec = c.spec.as_ref();
                let names = |group: Option<&String>, kind: &str, n: &str| {
                    group.map(String::as_str) == Some(SNAPSHOT_GROUP)
                        && kind == "VolumeSnapshot"
                        && n == name
                };
                spec.and_then(|s| s.data_source.as_ref())
                    .is_some_and(|r| names(r.api_group.as_ref(), &r.kind, &r.name))
                    || spec
                        .and_then(|s| s.data_source_ref.as_ref())
                        .is_some_and(|r| {
                            r.namespace.as_deref().is_none_or(|ns| ns == namespace)
                                && names(r.api_group.as_ref(), &r.kind, &r.name)
                        })
            })
            .filter_map(|c| c.metadata.name.clone())
            .collect())
    }
}

fn delete_params(uid: &str, resource_version: Option<&str>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: resource_version.map(str::to_owned),
        }),
        ..DeleteParams::default()
    }
}

fn gone_is_fine<T>(result: Result<T, kube::Error>) -> Result<(), ClusterError> {
    match result.map_err(ClusterError::from) {
        Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
