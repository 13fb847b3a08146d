//! `meta.k8s.io/v1` Table: what `kubectl get` prints.

use serde::Serialize;
use serde_json::Value;

/// One column of a Table.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TableColumn {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: i32,
}

impl TableColumn {
    pub const fn new(name: &'static str, type_: &'static str, description: &'static str) -> Self {
        Self {
            name,
            type_,
            format: "",
            description,
            priority: 0,
        }
    }

    /// The standard first column: the object's name.
    pub const fn name() -> Self {
        Self {
            name: "Name",
            type_: "string",
            format: "name",
            description: "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
            priority: 0,
        }
    }

    /// The standard last column: time since creation.
    pub const fn age() -> Self {
        Self::new(
            "Age",
            "date",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        )
    }
}

/// One row: the cells, and the object (or its metadata) as the client asked.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TableRow {
    pub cells: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
}

/// A whole Table response.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub metadata: Value,
    pub column_definitions: Vec<TableColumn>,
    pub rows: Vec<TableRow>,
}

impl Table {
    pub fn new(columns: Vec<TableColumn>, rows: Vec<TableRow>, metadata: Value) -> Self {
        Self {
            kind: "Table",
            api_version: "meta.k8s.io/v1",
            metadata,
            column_definitions: columns,
            rows,
        }
    }
}
