//! The rights a tenant must hold for what an object asks the server to do
//! later with its own, broader rights (DESIGN §2.1.2, §2.2): each kind's
//! strategy says which ([`super::Strategy::create_rights`]), the store hands
//! them to admission with the create, and the `TenantRights` plugin asks the
//! authorizer. The controllers ask again, fresh, before they act.

use crate::api::namespace_transfer::SNAPSHOT_GROUP;

/// One right an object needs its requester to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
    pub namespace: String,
    /// Empty for any name.
    pub name: String,
    /// Why the object needs it, for the refusal message.
    pub because: &'static str,
}

impl Right {
    fn on(
        group: &str,
        resource: &str,
        verb: &'static str,
        namespace: &str,
        name: &str,
        because: &'static str,
    ) -> Self {
        Self {
            verb,
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            because,
        }
    }

    pub(crate) fn pvcs(
        verb: &'static str,
        namespace: &str,
        name: &str,
        because: &'static str,
    ) -> Self {
        Self::on("", "persistentvolumeclaims", verb, namespace, name, because)
    }

    pub(crate) fn snapshots(
        verb: &'static str,
        namespace: &str,
        name: &str,
        because: &'static str,
    ) -> Self {
        Self::on(
            SNAPSHOT_GROUP,
            "volumesnapshots",
            verb,
            namespace,
            name,
            because,
        )
    }

    /// `delete persistentvolumeclaims "db" in namespace "prod"`.
    pub fn describe(&self) -> String {
        let resource = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let target = if self.name.is_empty() {
            resource
        } else {
            format!("{resource} \"{}\"", self.name)
        };
        format!("{} {target} in namespace \"{}\"", self.verb, self.namespace)
    }
}

#[cfg(test)]
mod tests;
