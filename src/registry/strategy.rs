//! The per-resource policy the generic store consults: selectable fields,
//! Table columns, and the unique claims an object holds while it is active.

use serde_json::Value;

use crate::api::meta::Object;

use super::rights::Right;
use super::table::TableColumn;

/// The fields every resource can be selected by.
pub const COMMON_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// Something at most one active object of a resource may hold at a time, such
/// as a transfer's source claim (DESIGN §2.1.2 item 3). The store takes it
/// at create, and gives it up when the object finishes or is removed, each
/// in the same etcd transaction as that write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueClaim {
    /// The index entry, a relative key path such as `source/prod/db`.
    pub index: String,
    /// What is claimed, for the 409 message: `source claim prod/db`.
    pub what: String,
}

/// What one resource adds to the generic [`super::Store`]. Defaulting and
/// validation live on the object type itself (in `api`); a strategy adds
/// what is about presenting and selecting, and which claims are exclusive.
pub trait Strategy: Clone + Send + Sync + std::fmt::Debug + 'static {
    type Object: Object;

    /// The fields a field selector may name, beyond [`COMMON_FIELDS`].
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    /// The value of a selectable field.
    fn field_value(&self, obj: &Self::Object, field: &str) -> Option<String> {
        match field {
            "metadata.name" => obj.metadata().name.clone(),
            "metadata.namespace" => obj.metadata().namespace.clone(),
            "status.phase" => obj.phase().map(str::to_owned),
            _ => None,
        }
    }

    /// The claims `obj` takes from the moment it is created; none by default.
    /// Called on a defaulted, valid object.
    fn unique_claims(&self, _obj: &Self::Object) -> Vec<UniqueClaim> {
        Vec::new()
    }

    /// Whether `obj` still holds its claims. The write that makes this false
    /// (it finished) removes its index keys, and another object may take
    /// the claims.
    fn holds_claims(&self, _obj: &Self::Object) -> bool {
        true
    }

    /// The finalizers only the controllers add and remove: a client's write
    /// that adds or removes one is refused (422), so that no tenant can let an
    /// object go before its controller has finished with it.
    fn controller_finalizers(&self) -> &'static [&'static str] {
        &[]
    }

    /// The rights a create of `obj` needs its requester to hold, for what
    /// the object will have the server do later with its own rights; none
    /// by default. Called on a defaulted, valid object; admission's
    /// `TenantRights` asks the authorizer for each.
    fn create_rights(&self, _obj: &Self::Object) -> Vec<Right> {
        Vec::new()
    }

    /// The Table columns, Name first and Age last.
    fn table_columns(&self) -> Vec<TableColumn>;

    /// The cells of one object's row, in column order.
    fn table_cells(&self, obj: &Self::Object) -> Vec<Value>;
}

/// The Age cell: time since creation, rendered by the server as kubectl
/// shows it (`12s`, `5m3s`, `3h`, `2d4h`).
pub fn age_cell(obj: &impl Object) -> Value {
    let text = match &obj.metadata().creation_timestamp {
        None => "<unknown>".to_owned(),
        Some(t) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
                .unwrap_or_default();
            human_duration(now - t.0.as_second())
        }
    };
    Value::String(text)
}

/// A duration in seconds the way kubectl prints ages: coarser as it grows.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_rest(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return with_rest(years, "y", days % 365, "d");
    }
    format!("{years}y")
}

fn with_rest(major: i64, major_unit: &str, minor: i64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit}{minor}{minor_unit}")
    }
}

/// A string cell; `<none>`-style blanks are left to kubectl.
pub fn text_cell(s: impl Into<String>) -> Value {
    Value::String(s.into())
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn ages_print_as_kubectl_prints_them() {
        for (seconds, text) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 300, "3h5m"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (30 * 86400, "30d"),
            (800 * 86400, "2y70d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), text, "{seconds}");
        }
    }
}
