//! Create-time admission: the rights a tenant must hold for what an object
//! asks the server to do later with its own, broader rights (DESIGN §2.1.2,
//! §2.2). Each check is a SubjectAccessReview for the requester, and a
//! refusal is a 403 that names the missing permission.
//!
//! Which rights an object needs is its kind's strategy's to say
//! (`crate::registry::rights`); the store hands them over with the create.
//! This asks the [`Authorizer`] whether the requester holds them. Runs after
//! defaulting and validation, before anything is stored (also for dry-run).

use std::sync::Arc;

use crate::api::errors::ApiError;
use crate::api::meta::Requester;
use crate::authz::{Attributes, Authorizer, Decision, ResourceAttributes};
use crate::registry::admission::{Attributes as Write, Operation, Phase, Plugin};
use crate::registry::rights::Right;
use crate::registry::Context;

/// The first of `rights` that `user` lacks, asked of `authorizer` in order;
/// `fresh` bypasses any cache (the controller's re-check before it acts).
pub async fn first_missing(
    authorizer: &dyn Authorizer,
    user: &Requester,
    rights: Vec<Right>,
    fresh: bool,
) -> Result<Option<Right>, ApiError> {
    // Asked side by side (a fresh check is a round trip each), and read in
    // order, so the answer names the same right as asking one by one would.
    let decisions = futures::future::join_all(rights.iter().map(|right| async move {
        let attributes = Attributes {
            user: user.clone(),
            verb: right.verb.to_owned(),
            resource: Some(ResourceAttributes {
                group: right.group.clone(),
                version: String::new(),
                resource: right.resource.clone(),
                subresource: String::new(),
                namespace: right.namespace.clone(),
                name: right.name.clone(),
            }),
            path: String::new(),
        };
        if fresh {
            authorizer.authorize_fresh(&attributes).await
        } else {
            authorizer.authorize(&attributes).await
        }
    }))
    .await;
    for (right, decision) in rights.into_iter().zip(decisions) {
        if let Decision::Deny { .. } = decision? {
            return Ok(Some(right));
        }
    }
    Ok(None)
}

/// Checks each right with the authorizer, for the requester.
#[derive(Debug, Clone)]
pub struct RightsAdmission {
    authorizer: Arc<dyn Authorizer>,
}

impl RightsAdmission {
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }

    async fn require(
        &self,
        ctx: &Context,
        kind: &str,
        name: &str,
        rights: Vec<Right>,
    ) -> Result<(), ApiError> {
        match first_missing(self.authorizer.as_ref(), &ctx.user, rights, false).await? {
            None => Ok(()),
            Some(right) => Err(ApiError::Forbidden {
                message: format!(
                    "{kind} \"{name}\" is forbidden: User \"{}\" cannot {}, which {} requires",
                    ctx.user.username,
                    right.describe(),
                    right.because
                ),
            }),
        }
    }
}

/// Our own plugin, first in the chain: on a create, after validation, the
/// rights the object needs its requester to hold, dry runs included.
#[async_trait::async_trait]
impl Plugin for RightsAdmission {
    fn name(&self) -> &'static str {
        "TenantRights"
    }

    fn handles(&self, operation: Operation, phase: Phase) -> bool {
        operation == Operation::Create && phase == Phase::Validating
    }

    async fn validate(&self, ctx: &Context, write: &Write) -> Result<(), ApiError> {
        if write.rights.is_empty() {
            return Ok(());
        }
        self.require(ctx, &write.kind, &write.name, write.rights.clone())
            .await
    }
}
