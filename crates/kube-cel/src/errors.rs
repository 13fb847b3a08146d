//! Error messages: the `cel` crate's errors, worded as kube words them.

use cel::ExecutionError;

/// An evaluation error with `message` as it is.
pub(crate) fn error(message: impl Into<String>) -> ExecutionError {
    ExecutionError::FunctionError {
        function: String::new(),
        message: message.into(),
    }
}

/// The message kube would give for `e`.
pub(crate) fn message(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::UndeclaredReference(name) => {
            format!("undeclared reference to '{name}' (in container '')")
        }
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_owned(),
        ExecutionError::Overflow(..) => "integer overflow".to_owned(),
        ExecutionError::IndexOutOfBounds(i) => match cel::Value::clone(i) {
            cel::Value::Int(i) => format!("index out of bounds: {i}"),
            other => format!("index out of bounds: {other:?}"),
        },
        ExecutionError::UnexpectedType { got, want } => {
            format!("type conversion error from '{got}' to '{want}'")
        }
        ExecutionError::NoSuchOverload(o) => o.to_string(),
        ExecutionError::DuplicateKey(k) => format!("duplicate key in map literal: {k:?}"),
        other => {
            let s = other.to_string();
            let mut chars = s.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => s,
            }
        }
    }
}
