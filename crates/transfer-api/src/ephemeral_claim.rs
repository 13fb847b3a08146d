//! The EphemeralClaim kind (DESIGN §2.2): its types, defaulting and validation, and
//! the name of the claim it makes ([`EphemeralClaim::claim_name`]).
//!
//! This module owns only what can be decided from the object itself. Admission
//! (SubjectAccessReview) and the claim's life cycle live in the registry and the
//! controller.
//!
//! Enums (`releasePolicy`, `status.phase`) deserialize strictly: an unknown value is
//! a serde error whose message names the allowed values. `spec.owner` keeps
//! `apiVersion` and `kind` as strings, as an owner reference does, and validation
//! limits them to `v1` `Pod`.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use serde::{Deserialize, Serialize};

use crate::errors::FieldCause;
use crate::meta::{string_enum_schema, Object, Requester};
use crate::namespace_transfer::{
    NamespaceTransfer, SNAPSHOT_GROUP, SOURCE_KIND_PERSISTENT_VOLUME_CLAIM,
    SOURCE_KIND_VOLUME_SNAPSHOT,
};
use crate::validation::{self, BadValue, FieldErrors};
use crate::EPHEMERAL_CLAIMS;

pub mod reason;
pub use reason::*;

/// The only owner `apiVersion` of v1alpha1.
pub const OWNER_API_VERSION_V1: &str = "v1";
/// The only owner `kind` of v1alpha1.
pub const OWNER_KIND_POD: &str = "Pod";

/// The finalizer that holds an EphemeralClaim until the claim it made is deleted,
/// so that deleting the EphemeralClaim never orphans its claim.
pub const FINALIZER_CLAIM_PROTECTION: &str = "storage.transfer.k8s.io/ephemeral-claim-protection";

/// Condition: the claim was made (`True` from the moment the controller has seen it
/// exist). A claim once made is never made again: if it disappears, the
/// EphemeralClaim is `Deleted`.
pub const CONDITION_CLAIM_CREATED: &str = "ClaimCreated";

/// The annotation prefixes a claim template may not set (DESIGN §2.2, template
/// safety): kube's volume binding and provisioning read them from a claim, and
/// this server reads its own, so a tenant could steer what the server does
/// under its own identity.
pub const RESERVED_ANNOTATION_PREFIXES: &[&str] = &[
    "pv.kubernetes.io/",
    "volume.kubernetes.io/",
    "volume.beta.kubernetes.io/",
    "storage.transfer.k8s.io/",
];

/// The access modes a PersistentVolumeClaim accepts, sorted as kube lists them.
pub const SUPPORTED_ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// The volume modes a PersistentVolumeClaim accepts.
pub const SUPPORTED_VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

/// A PersistentVolumeClaim whose life is tied to an owner Pod: it is made from a
/// template, left alone until the pod has used it, and destroyed once the pod is done
/// with it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralClaim {
    /// APIVersion defines the versioned schema of this representation of an object:
    /// `storage.transfer.k8s.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Kind is the REST resource this object represents: `EphemeralClaim`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Standard object metadata. The claim is made in the same namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The claim to make and the pod that owns it. Immutable after create.
    #[serde(default)]
    pub spec: EphemeralClaimSpec,
    /// Where the claim stands, as the server last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EphemeralClaimStatus>,
}

/// The specification of an EphemeralClaim: its owner Pod, the template of its
/// claim, and what becomes of the claim once the pod is done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralClaimSpec {
    /// The Pod whose use of the claim decides its life. Required. The claim is named
    /// `<owner.name>-<metadata.name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ClaimOwner>,
    /// The PersistentVolumeClaim to make. Required. Set `spec.dataSourceRef` (or
    /// `spec.dataSource`) to start from a clone of a claim or snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_template: Option<ClaimTemplate>,
    /// What happens to the claim once its pod is done: `Delete` (the default) deletes
    /// it, and the volume follows its reclaim policy; `Retain` keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_policy: Option<ReleasePolicy>,
    /// The user who created this EphemeralClaim, whose rights the controller
    /// re-checks with a SubjectAccessReview before it makes the claim, so that the
    /// server's own rights never stand in for a tenant's. Set by the server from the
    /// authenticated user; anything a client sends is replaced, and it never changes
    /// afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<Requester>,
}

/// Names the owner of an EphemeralClaim. Only Pods (`apiVersion: v1`, `kind: Pod`) in
/// the same namespace can own one in v1alpha1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimOwner {
    /// The owner's API version. Must be `v1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The owner's kind. Must be `Pod`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The owner Pod's name, in the EphemeralClaim's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A PersistentVolumeClaim template: the labels, annotations and spec of a claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimTemplate {
    /// Labels and annotations copied onto the claim.
    #[serde(default, skip_serializing_if = "ClaimTemplateMetadata::is_empty")]
    pub metadata: ClaimTemplateMetadata,
    /// The spec of the claim, as for a PersistentVolumeClaim. `accessModes` and
    /// `resources.requests.storage` are required.
    #[serde(default)]
    pub spec: PersistentVolumeClaimSpec,
}

/// The metadata a claim template may set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimTemplateMetadata {
    /// Labels put on the claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on the claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl ClaimTemplateMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// A claim's fate once its pod is done: deleted or kept.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[schemars(transform = string_enum_schema)]
pub enum ReleasePolicy {
    /// The claim is deleted; its volume follows its reclaim policy.
    #[default]
    Delete,
    /// The claim is kept, and the phase becomes `Released`.
    Retain,
}

impl ReleasePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleasePolicy::Delete => "Delete",
            ReleasePolicy::Retain => "Retain",
        }
    }
}

impl fmt::Display for ReleasePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phases of an EphemeralClaim (DESIGN §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = string_enum_schema)]
pub enum EphemeralClaimPhase {
    /// The claim is being made, or waits to be bound.
    Pending,
    /// The claim is bound; its pod has not run yet. It is left alone however long
    /// that takes.
    Bound,
    /// A pod using the claim has run.
    InUse,
    /// The pod is done and `releasePolicy` is `Retain`: the claim is kept. Final.
    Released,
    /// The pod is done and `releasePolicy` is `Delete`: the claim is being
    /// deleted. The message names what still holds it (kube's pvc-protection
    /// keeps a claim while any scheduled pod names it, finished or not).
    Deleting,
    /// The claim is gone; its volume followed its reclaim policy. Final.
    Deleted,
    /// The claim could not be made, e.g. reason `ClaimConflict`. Final.
    Failed,
}

impl EphemeralClaimPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            EphemeralClaimPhase::Pending => "Pending",
            EphemeralClaimPhase::Bound => "Bound",
            EphemeralClaimPhase::InUse => "InUse",
            EphemeralClaimPhase::Released => "Released",
            EphemeralClaimPhase::Deleting => "Deleting",
            EphemeralClaimPhase::Deleted => "Deleted",
            EphemeralClaimPhase::Failed => "Failed",
        }
    }

    /// Released, Deleted or Failed: the claim will not move again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            EphemeralClaimPhase::Released
                | EphemeralClaimPhase::Deleted
                | EphemeralClaimPhase::Failed
        )
    }
}

impl fmt::Display for EphemeralClaimPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observed state of an EphemeralClaim, which the server writes through the
/// `/status` subresource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralClaimStatus {
    /// Where the claim is in its life. Released, Deleted and Failed are final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<EphemeralClaimPhase>,
    /// The name of the PersistentVolumeClaim made for this EphemeralClaim:
    /// `<spec.owner.name>-<metadata.name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The PersistentVolume bound to the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// When a pod using the claim was first seen running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_used_time: Option<Time>,
    /// When the claim was released by its pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_time: Option<Time>,
    /// The latest observations of the claim's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-patch-merge-key" = "type",
        "x-kubernetes-patch-strategy" = "merge"
    ))]
    pub conditions: Vec<Condition>,
    /// A CamelCase reason for the current phase, e.g. `ClaimConflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable explanation of the current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl EphemeralClaim {
    /// The name of the PersistentVolumeClaim this EphemeralClaim makes:
    /// `<spec.owner.name>-<metadata.name>` (the generic-ephemeral-volume convention).
    /// Meaningful only for an object that passed validation.
    pub fn claim_name(&self) -> String {
        let owner = self.spec.owner.as_ref().map_or("", |o| o.name.as_str());
        let name = self.metadata.name.as_deref().unwrap_or_default();
        format!("{owner}-{name}")
    }

    /// `spec.releasePolicy`, or its default, `Delete`.
    pub fn release_policy(&self) -> ReleasePolicy {
        self.spec.release_policy.unwrap_or_default()
    }

    /// What in another namespace the template clones: a `dataSourceRef` to a
    /// PersistentVolumeClaim, or to a VolumeSnapshot (group
    /// `snapshot.storage.k8s.io`), whose namespace is not this one (DESIGN
    /// §2.2, ephemeral clones across namespaces). That reference never
    /// reaches kube-apiserver: the clone comes through a standing clone offer
    /// in that namespace.
    pub fn cross_namespace_source(&self) -> Option<CrossSource<'_>> {
        let own = self.metadata.namespace.as_deref().unwrap_or_default();
        let source = self
            .spec
            .claim_template
            .as_ref()?
            .spec
            .data_source_ref
            .as_ref()?;
        let namespace = source
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty() && *ns != own)?;
        let kind = match (
            source.api_group.as_deref().unwrap_or_default(),
            source.kind.as_str(),
        ) {
            ("", SOURCE_KIND_PERSISTENT_VOLUME_CLAIM) => SOURCE_KIND_PERSISTENT_VOLUME_CLAIM,
            (SNAPSHOT_GROUP, SOURCE_KIND_VOLUME_SNAPSHOT) => SOURCE_KIND_VOLUME_SNAPSHOT,
            _ => return None,
        };
        Some(CrossSource {
            kind,
            namespace,
            name: source.name.as_str(),
        })
    }

    /// Why the claim template is unsafe to make a claim from, if it is
    /// (DESIGN §2.2, template safety). The server makes the claim under its
    /// own identity, so the template may not choose the volume (a
    /// `volumeName`, or a `selector` that matches one) nor set the
    /// annotations that volume binding, provisioning or this server act on:
    /// with them, a tenant could have another namespace's volume bound to its
    /// claim. Validation refuses such a template; the controller refuses to
    /// make a claim from one stored before it did.
    pub fn template_safety_causes(&self) -> Vec<FieldCause> {
        let mut errs = FieldErrors::new();
        if let Some(template) = &self.spec.claim_template {
            validate_template_safety(&mut errs, template);
        }
        errs.into_causes()
    }

    fn validate_spec(&self, errs: &mut FieldErrors) {
        match &self.spec.owner {
            None => errs.required("spec.owner", ""),
            Some(owner) => self.validate_owner(errs, owner),
        }
        match &self.spec.claim_template {
            None => errs.required("spec.claimTemplate", ""),
            Some(template) => validate_claim_template(errs, template),
        }
        let own = self.metadata.namespace.as_deref().unwrap_or_default();
        let foreign = self
            .spec
            .claim_template
            .as_ref()
            .and_then(|t| t.spec.data_source_ref.as_ref())
            .filter(|r| {
                r.namespace
                    .as_deref()
                    .is_some_and(|ns| !ns.is_empty() && ns != own)
            });
        if let Some(source) = foreign {
            if self.cross_namespace_source().is_none() {
                errs.invalid(
                    "spec.claimTemplate.spec.dataSourceRef.namespace",
                    source.namespace.as_deref().unwrap_or_default(),
                    "only a PersistentVolumeClaim or a VolumeSnapshot may be cloned from another \
                     namespace, through a standing clone offer there",
                );
            }
        }
    }

    fn validate_owner(&self, errs: &mut FieldErrors, owner: &ClaimOwner) {
        match owner.api_version.as_str() {
            "" => errs.required("spec.owner.apiVersion", ""),
            OWNER_API_VERSION_V1 => {}
            other => errs.not_supported("spec.owner.apiVersion", other, &[OWNER_API_VERSION_V1]),
        }
        match owner.kind.as_str() {
            "" => errs.required("spec.owner.kind", ""),
            OWNER_KIND_POD => {}
            other => errs.not_supported("spec.owner.kind", other, &[OWNER_KIND_POD]),
        }
        if owner.name.is_empty() {
            errs.required("spec.owner.name", "");
            return;
        }
        let before = errs.len();
        validation::validate_dns1123_subdomain(errs, "spec.owner.name", &owner.name);
        let name = self.metadata.name.as_deref().unwrap_or_default();
        // Only when both halves are valid on their own is the joined name worth a
        // word; before generateName is resolved there is no name to join.
        if errs.len() > before
            || name.is_empty()
            || !validation::is_dns1123_subdomain(name).is_empty()
        {
            return;
        }
        let claim_name = self.claim_name();
        for problem in validation::is_dns1123_subdomain(&claim_name) {
            errs.invalid(
                "metadata.name",
                name,
                &format!(
                    "the claim name {claim_name:?} (<spec.owner.name>-<metadata.name>) is not a \
                     valid PersistentVolumeClaim name: {problem}"
                ),
            );
        }
    }
}

fn validate_claim_template(errs: &mut FieldErrors, template: &ClaimTemplate) {
    validation::validate_labels(
        errs,
        "spec.claimTemplate.metadata.labels",
        &template.metadata.labels,
    );
    validation::validate_annotations(
        errs,
        "spec.claimTemplate.metadata.annotations",
        &template.metadata.annotations,
    );
    let spec = &template.spec;
    let access_modes = spec.access_modes.as_deref().unwrap_or_default();
    if access_modes.is_empty() {
        errs.required(
            "spec.claimTemplate.spec.accessModes",
            "at least 1 access mode is required",
        );
    }
    for mode in access_modes {
        if !SUPPORTED_ACCESS_MODES.contains(&mode.as_str()) {
            errs.not_supported(
                "spec.claimTemplate.spec.accessModes",
                mode,
                SUPPORTED_ACCESS_MODES,
            );
        }
    }
    if let Some(volume_mode) = &spec.volume_mode {
        if !SUPPORTED_VOLUME_MODES.contains(&volume_mode.as_str()) {
            errs.not_supported(
                "spec.claimTemplate.spec.volumeMode",
                volume_mode,
                SUPPORTED_VOLUME_MODES,
            );
        }
    }
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|requests| requests.get("storage"));
    const STORAGE_FIELD: &str = "spec.claimTemplate.spec.resources.requests[storage]";
    match storage {
        None => errs.required(STORAGE_FIELD, ""),
        Some(quantity) => validation::validate_positive_quantity(errs, STORAGE_FIELD, quantity),
    }
}

fn validate_template_safety(errs: &mut FieldErrors, template: &ClaimTemplate) {
    const BECAUSE: &str = "the server makes the claim under its own identity";
    if template
        .spec
        .volume_name
        .as_deref()
        .is_some_and(|v| !v.is_empty())
    {
        errs.forbidden(
            "spec.claimTemplate.spec.volumeName",
            &format!("may not be set: {BECAUSE}, so the template may not choose its volume"),
        );
    }
    if template.spec.selector.is_some() {
        errs.forbidden(
            "spec.claimTemplate.spec.selector",
            &format!("may not be set: {BECAUSE}, so the template may not choose its volume"),
        );
    }
    for key in template.metadata.annotations.keys() {
        let lower = key.to_ascii_lowercase();
        if let Some(prefix) = RESERVED_ANNOTATION_PREFIXES
            .iter()
            .find(|p| lower.starts_with(*p))
        {
            errs.forbidden(
                &format!("spec.claimTemplate.metadata.annotations[{key}]"),
                &format!(
                    "annotations under {prefix} may not be set: {BECAUSE}, and they steer how \
                     its volume is bound or provisioned"
                ),
            );
        }
    }
}

/// One `field is immutable` cause per spec field that differs, naming the leaf where
/// it is a plain value and the smallest enclosing field otherwise.
fn validate_spec_unchanged(
    errs: &mut FieldErrors,
    new: &EphemeralClaimSpec,
    old: &EphemeralClaimSpec,
) {
    match (&new.owner, &old.owner) {
        (Some(new_owner), Some(old_owner)) => {
            let fields = [
                (
                    "spec.owner.apiVersion",
                    &new_owner.api_version,
                    &old_owner.api_version,
                ),
                ("spec.owner.kind", &new_owner.kind, &old_owner.kind),
                ("spec.owner.name", &new_owner.name, &old_owner.name),
            ];
            for (field, new_value, old_value) in fields {
                if new_value != old_value {
                    errs.immutable(field, new_value);
                }
            }
        }
        (new_owner, old_owner) if new_owner != old_owner => {
            errs.immutable("spec.owner", BadValue::Omitted);
        }
        _ => {}
    }
    match (&new.claim_template, &old.claim_template) {
        (Some(new_template), Some(old_template)) => {
            validate_template_unchanged(errs, new_template, old_template);
        }
        (new_template, old_template) if new_template != old_template => {
            errs.immutable("spec.claimTemplate", BadValue::Omitted);
        }
        _ => {}
    }
    if new.release_policy != old.release_policy {
        errs.immutable(
            "spec.releasePolicy",
            new.release_policy.map(ReleasePolicy::as_str),
        );
    }
    if new.requester != old.requester {
        errs.immutable("spec.requester", BadValue::Omitted);
    }
}

fn validate_template_unchanged(errs: &mut FieldErrors, new: &ClaimTemplate, old: &ClaimTemplate) {
    let before = errs.len();
    if new.metadata.labels != old.metadata.labels {
        errs.immutable("spec.claimTemplate.metadata.labels", BadValue::Omitted);
    }
    if new.metadata.annotations != old.metadata.annotations {
        errs.immutable("spec.claimTemplate.metadata.annotations", BadValue::Omitted);
    }
    let (new, old) = (&new.spec, &old.spec);
    let strings = [
        (
            "spec.claimTemplate.spec.storageClassName",
            &new.storage_class_name,
            &old.storage_class_name,
        ),
        (
            "spec.claimTemplate.spec.volumeAttributesClassName",
            &new.volume_attributes_class_name,
            &old.volume_attributes_class_name,
        ),
        (
            "spec.claimTemplate.spec.volumeMode",
            &new.volume_mode,
            &old.volume_mode,
        ),
        (
            "spec.claimTemplate.spec.volumeName",
            &new.volume_name,
            &old.volume_name,
        ),
    ];
    for (field, new_value, old_value) in strings {
        if new_value != old_value {
            errs.immutable(field, new_value.as_ref());
        }
    }
    if new.access_modes != old.access_modes {
        errs.immutable("spec.claimTemplate.spec.accessModes", BadValue::Omitted);
    }
    if new.resources != old.resources {
        errs.immutable("spec.claimTemplate.spec.resources", BadValue::Omitted);
    }
    if new.selector != old.selector {
        errs.immutable("spec.claimTemplate.spec.selector", BadValue::Omitted);
    }
    if new.data_source != old.data_source {
        errs.immutable("spec.claimTemplate.spec.dataSource", BadValue::Omitted);
    }
    if new.data_source_ref != old.data_source_ref {
        errs.immutable("spec.claimTemplate.spec.dataSourceRef", BadValue::Omitted);
    }
    // A field this list does not name yet (a newer k8s-openapi) still may not change.
    if new != old && errs.len() == before {
        errs.immutable("spec.claimTemplate.spec", BadValue::Omitted);
    }
}

impl Object for EphemeralClaim {
    crate::meta::object_fields!(EPHEMERAL_CLAIMS);

    /// A new claim is `Pending` until its controller has made the PVC.
    fn reset_status(&mut self) {
        self.status = Some(EphemeralClaimStatus {
            phase: Some(EphemeralClaimPhase::Pending),
            ..Default::default()
        });
    }

    fn bound_status(&mut self) {
        if let Some(st) = &mut self.status {
            for text in [&mut st.message, &mut st.reason].into_iter().flatten() {
                crate::meta::bound_text(text);
            }
            crate::meta::bound_conditions(&mut st.conditions);
        }
    }

    fn phase(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .map(EphemeralClaimPhase::as_str)
    }

    fn requester(&self) -> Option<&Requester> {
        self.spec.requester.as_ref()
    }

    fn set_requester(&mut self, requester: Requester) {
        self.spec.requester = Some(requester);
    }

    /// §2.2: releasePolicy defaults to Delete. The claim template is left as written;
    /// the PersistentVolumeClaim made from it is defaulted by kube-apiserver.
    fn apply_defaults(&mut self) {
        if self.spec.release_policy.is_none() {
            self.spec.release_policy = Some(ReleasePolicy::Delete);
        }
    }

    fn validate_create(&self) -> Vec<FieldCause> {
        let mut errs = FieldErrors::new();
        validation::validate_object_meta(&mut errs, &self.metadata);
        self.validate_spec(&mut errs);
        errs.extend(self.template_safety_causes());
        errs.into_causes()
    }

    /// As for create, but a template that does not change is not checked for
    /// safety again: an object stored before that check must still take its
    /// status and lose its finalizer (the controller never makes its claim).
    /// A template that changes is refused as immutable anyway.
    fn validate_update(&self, old: &Self) -> Vec<FieldCause> {
        let mut errs = FieldErrors::new();
        validation::validate_object_meta(&mut errs, &self.metadata);
        self.validate_spec(&mut errs);
        if self.spec.claim_template != old.spec.claim_template {
            errs.extend(self.template_safety_causes());
        }
        validate_spec_unchanged(&mut errs, &self.spec, &old.spec);
        errs.into_causes()
    }
}

#[cfg(test)]
mod tests;

/// What an EphemeralClaim clones from another namespace
/// ([`EphemeralClaim::cross_namespace_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossSource<'a> {
    /// `PersistentVolumeClaim` or `VolumeSnapshot`, as `spec.source.kind`
    /// spells it.
    pub kind: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl CrossSource<'_> {
    /// Whether the transfer `t` gives exactly this: its source's kind,
    /// namespace and name.
    pub fn is_source_of(&self, t: &NamespaceTransfer) -> bool {
        t.source_is_snapshot() == (self.kind == SOURCE_KIND_VOLUME_SNAPSHOT)
            && t.source_namespace() == self.namespace
            && t.spec.source.name == self.name
    }
}
