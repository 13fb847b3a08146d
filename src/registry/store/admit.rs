//! Where a write meets the admission chain: the attributes the store builds
//! for its plugins, and the two phases as the store calls them.
//! Mutating admission sees the object before the strategy prepares it (so
//! that what the server sets, such as `spec.requester` and status, cannot
//! be changed by a mutation); validating admission sees the object as it
//! will be stored. Only client writes are admitted.

use serde_json::json;

use crate::api::errors::ApiError;
use crate::api::meta::Object;
use crate::api::schema::KindSchema;
use crate::api::{self};
use crate::registry::admission::{Attributes, Operation, Phase};
use crate::registry::{Context, Writer};

use super::{DeleteOptions, Store, Strategy};

impl<S: Strategy> Store<S> {
    /// Whether any plugin admits this write in `phase`: only client writes
    /// are admitted, and only where a plugin acts.
    fn admits(&self, ctx: &Context, operation: Operation, phase: Phase) -> bool {
        ctx.writer == Writer::Client && self.admission.handles(operation, phase)
    }

    /// The attributes of a client write, or `None` when nothing admits it
    /// in any of `phases`.
    #[allow(clippy::too_many_arguments)]
    fn admission_attributes(
        &self,
        ctx: &Context,
        phases: &[Phase],
        operation: Operation,
        namespace: &str,
        name: &str,
        object: Option<&S::Object>,
        old: Option<&S::Object>,
        status: bool,
    ) -> Result<Option<Attributes>, ApiError> {
        if !phases.iter().any(|&p| self.admits(ctx, operation, p)) {
            return Ok(None);
        }
        let to_json = |o: &S::Object| {
            serde_json::to_value(o)
                .map_err(|e| ApiError::Internal(format!("encoding for admission: {e}")))
        };
        let mut options = json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": operation.options_kind(),
        });
        if ctx.dry_run {
            options["dryRun"] = json!(["All"]);
        }
        if operation != Operation::Delete && !ctx.manager.is_empty() {
            options["fieldManager"] = json!(ctx.manager);
        }
        let info = S::Object::resource();
        Ok(Some(Attributes {
            operation,
            group: api::GROUP.to_owned(),
            version: api::VERSION.to_owned(),
            kind: info.kind.to_owned(),
            resource: info.plural.to_owned(),
            subresource: if status {
                "status".to_owned()
            } else {
                String::new()
            },
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            object: object.map(to_json).transpose()?,
            old_object: old.map(to_json).transpose()?,
            options,
            dry_run: ctx.dry_run,
            user: ctx.user.clone(),
            schema: KindSchema::of::<S::Object>(),
            rights: match (operation, object) {
                (Operation::Create, Some(obj)) if phases.contains(&Phase::Validating) => {
                    self.strategy.create_rights(obj)
                }
                _ => Vec::new(),
            },
        }))
    }

    /// Mutating admission: the object as the cluster's mutating policies
    /// and webhooks leave it. Its `managedFields` stay as the write computed
    /// them: a mutation is nobody's field ownership, as in kube.
    pub(super) async fn admit_mutating(
        &self,
        ctx: &Context,
        operation: Operation,
        namespace: &str,
        obj: S::Object,
        old: Option<&S::Object>,
        status: bool,
    ) -> Result<S::Object, ApiError> {
        let name = obj.metadata().name.clone().unwrap_or_default();
        let Some(mut attrs) = self.admission_attributes(
            ctx,
            &[Phase::Mutating],
            operation,
            namespace,
            &name,
            Some(&obj),
            old,
            status,
        )?
        else {
            return Ok(obj);
        };
        let before = attrs.object.clone();
        self.admission.admit(ctx, &mut attrs).await?;
        if attrs.object == before {
            return Ok(obj);
        }
        let Some(mutated) = attrs.object else {
            return Ok(obj);
        };
        let mut decoded: S::Object = serde_json::from_value(mutated).map_err(|e| {
            ApiError::Internal(format!(
                "admission mutated {} \"{name}\" into an object that does not decode: {e}",
                S::Object::resource().kind
            ))
        })?;
        decoded.set_type_meta();
        let m = decoded.metadata_mut();
        m.managed_fields = obj.metadata().managed_fields.clone();
        // Identity is not the mutators' to change.
        m.name = obj.metadata().name.clone();
        m.namespace = obj.metadata().namespace.clone();
        m.generate_name = obj.metadata().generate_name.clone();
        Ok(decoded)
    }

    /// Validating admission, on the object as it will be stored (none for a
    /// delete) and the stored one (none for a create).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn admit_validating(
        &self,
        ctx: &Context,
        operation: Operation,
        namespace: &str,
        name: &str,
        obj: Option<&S::Object>,
        old: Option<&S::Object>,
        status: bool,
    ) -> Result<(), ApiError> {
        let Some(attrs) = self.admission_attributes(
            ctx,
            &[Phase::Validating],
            operation,
            namespace,
            name,
            obj,
            old,
            status,
        )?
        else {
            return Ok(());
        };
        self.admission.validate(ctx, &attrs).await
    }

    /// A delete's admission: both phases, on the stored object, as kube's
    /// `AdmissionToValidateObjectDeleteFunc` (a mutator cannot change what
    /// is deleted).
    pub(super) async fn admit_delete(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        current: &S::Object,
        opts: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let Some(mut attrs) = self.admission_attributes(
            ctx,
            &[Phase::Mutating, Phase::Validating],
            Operation::Delete,
            namespace,
            name,
            None,
            Some(current),
            false,
        )?
        else {
            return Ok(());
        };
        // What of the client's DeleteOptions the store keeps.
        let mut preconditions = serde_json::Map::new();
        if let Some(uid) = &opts.precondition_uid {
            preconditions.insert("uid".to_owned(), json!(uid));
        }
        if let Some(rv) = &opts.precondition_resource_version {
            preconditions.insert("resourceVersion".to_owned(), json!(rv));
        }
        if !preconditions.is_empty() {
            attrs.options["preconditions"] = serde_json::Value::Object(preconditions);
        }
        self.admission.admit(ctx, &mut attrs).await?;
        self.admission.validate(ctx, &attrs).await
    }
}
