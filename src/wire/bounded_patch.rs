//! JSON Patch (RFC 6902), applied one operation at a time within bounds, so
//! that no patch can cost the server more than a small multiple of the largest
//! object it would store. This is kube-apiserver's defence against
//! CVE-2019-1002100 (a few `copy` operations that double a document each
//! time), done per operation and on the real size of the document:
//!
//! - at most [`MAX_OPERATIONS`] operations, as kube allows;
//! - no operation may grow the document past [`Limits::max_bytes`] (its
//!   compact JSON size, kept exact as the patch goes, without serializing
//!   the document again);
//! - the values all `copy` operations clone add up to at most
//!   [`Limits::max_bytes`] (kube's accumulated copy limit), so that copying
//!   and removing again cannot keep the server busy either;
//! - what those cloned values take to hold as trees, by the model of
//!   `json_cost`, adds up to at most [`Limits::max_copied_cost`], since a
//!   few bytes of JSON may take a hundred times as many to hold;
//! - no operation may nest the document deeper than [`MAX_DEPTH`] levels,
//!   because cloning, comparing, encoding and dropping a JSON value recurse,
//!   and a patch can build depth that no JSON parser would have let in.
//!
//! Every limit is checked before the operation allocates anything. The
//! operations themselves mean what they mean in the `json-patch` crate, whose
//! types this module reads.
//!
//! Owns patch application and its arithmetic; it knows nothing of HTTP or of
//! either kind: the handler turns a [`PatchError`] into an `ApiError`.

use json_patch::jsonptr::Pointer;
use json_patch::PatchOperation;
use serde_json::Value;

use super::json_cost;

/// kube-apiserver's `maxJSONPatchOperations`.
pub const MAX_OPERATIONS: usize = 10_000;

/// How deep a patch may nest a document. Below serde_json's parse limit of
/// 128, so that whatever a patch makes can be read back, and far above what
/// either kind needs.
pub const MAX_DEPTH: usize = 100;

/// The bounds a patch is applied within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most operations one patch may hold.
    pub max_operations: usize,
    /// The largest the document may grow to, in bytes of compact JSON; also
    /// the most bytes all `copy` operations together may clone.
    pub max_bytes: usize,
    /// The deepest the document may nest.
    pub max_depth: usize,
    /// The most memory all `copy` operations together may clone, as
    /// `json_cost` estimates it.
    pub max_copied_cost: usize,
}

impl Limits {
    /// kube's operation limit and depth limit, `max_bytes`, and the memory
    /// a body of `max_bytes` may take to decode.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_operations: MAX_OPERATIONS,
            max_bytes,
            max_depth: MAX_DEPTH,
            max_copied_cost: json_cost::budget(max_bytes),
        }
    }
}

/// Why a patch was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// kube's wording, so that clients see the message they know.
    #[error("The allowed maximum operations in a JSON patch is {max}, got {got}")]
    TooManyOperations { max: usize, got: usize },
    #[error("{at} would grow the object to {size} bytes, more than the limit of {max} bytes")]
    TooLarge {
        at: Operation,
        size: usize,
        max: usize,
    },
    #[error(
        "{at} would bring the bytes this patch copies to {copied}, more than the limit of {max} bytes"
    )]
    CopiesTooMuch {
        at: Operation,
        copied: usize,
        max: usize,
    },
    #[error(
        "{at} would bring the memory this patch's copies take to about {cost} bytes, more than the limit of {max} bytes"
    )]
    CopiesCostTooMuch {
        at: Operation,
        cost: usize,
        max: usize,
    },
    #[error("{at} would nest the object more than {max} levels deep")]
    TooDeep { at: Operation, max: usize },
    /// The operation does not apply to the document (RFC 6902 errors).
    #[error("{at} failed: {reason}")]
    Failed { at: Operation, reason: Failure },
}

impl PatchError {
    /// Whether the patch was refused for what it would cost rather than for
    /// what it says: answered 413, as kube answers too many operations.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            PatchError::TooManyOperations { .. }
                | PatchError::TooLarge { .. }
                | PatchError::CopiesTooMuch { .. }
                | PatchError::CopiesCostTooMuch { .. }
        )
    }
}

/// One operation of a patch, as errors name it: `operation 3 (copy to "/a")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Counted from 0, as the `json-patch` crate counts.
    pub index: usize,
    pub op: &'static str,
    pub path: String,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "operation {} ({} at {:?})",
            self.index, self.op, self.path
        )
    }
}

/// Why an operation does not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("path is invalid")]
    InvalidPointer,
    #[error("\"from\" path is invalid")]
    InvalidFromPointer,
    #[error("value did not match")]
    TestFailed,
    #[error("cannot move the value inside itself")]
    CannotMoveInsideItself,
}

/// Applies `ops` to `doc` in order, within `limits`. On an error `doc` may
/// hold some of the operations: the caller discards it.
pub fn apply(doc: &mut Value, ops: &[PatchOperation], limits: &Limits) -> Result<(), PatchError> {
    if ops.len() > limits.max_operations {
        return Err(PatchError::TooManyOperations {
            max: limits.max_operations,
            got: ops.len(),
        });
    }
    let whole = measure(doc);
    let mut budget = Budget {
        limits,
        size: whole.bytes,
        depth: whole.depth,
        copied: 0,
        copied_cost: 0,
    };
    for (index, op) in ops.iter().enumerate() {
        budget.apply(doc, op).map_err(|refusal| {
            let at = Operation {
                index,
                op: op_name(op),
                path: op.path().as_str().to_owned(),
            };
            refusal.at(at, limits)
        })?;
    }
    Ok(())
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

/// Why one operation was refused, before [`apply`] names the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    TooLarge(usize),
    CopiesTooMuch(usize),
    CopiesCostTooMuch(usize),
    TooDeep,
    Failed(Failure),
}

impl Refusal {
    fn at(self, at: Operation, limits: &Limits) -> PatchError {
        match self {
            Refusal::TooLarge(size) => PatchError::TooLarge {
                at,
                size,
                max: limits.max_bytes,
            },
            Refusal::CopiesTooMuch(copied) => PatchError::CopiesTooMuch {
                at,
                copied,
                max: limits.max_bytes,
            },
            Refusal::CopiesCostTooMuch(cost) => PatchError::CopiesCostTooMuch {
                at,
                cost,
                max: limits.max_copied_cost,
            },
            Refusal::TooDeep => PatchError::TooDeep {
                at,
                max: limits.max_depth,
            },
            Refusal::Failed(reason) => PatchError::Failed { at, reason },
        }
    }
}

impl From<Failure> for Refusal {
    fn from(failure: Failure) -> Self {
        Refusal::Failed(failure)
    }
}

/// What the document costs so far, kept current operation by operation.
#[derive(Debug)]
struct Budget<'l> {
    limits: &'l Limits,
    /// The document's exact size in bytes of compact JSON.
    size: usize,
    /// At least the document's depth: exact at the start, raised by every
    /// insertion, never lowered by a removal (so never too low).
    depth: usize,
    /// The bytes `copy` operations have cloned so far.
    copied: usize,
    /// What the values `copy` operations have cloned so far take to hold.
    copied_cost: usize,
}

impl Budget<'_> {
    fn apply(&mut self, doc: &mut Value, op: &PatchOperation) -> Result<(), Refusal> {
        match op {
            PatchOperation::Add(op) => {
                let value = measure(&op.value);
                self.make_room(doc, &op.path, Some(value), value.depth)?;
                insert(doc, &op.path, op.value.clone())?;
            }
            PatchOperation::Remove(op) => {
                let (removed, overhead) = take(doc, &op.path)?;
                self.shrink(overhead + measure(&removed).bytes);
            }
            PatchOperation::Replace(op) => {
                let value = measure(&op.value);
                let old = doc
                    .pointer(op.path.as_str())
                    .ok_or(Failure::InvalidPointer)?;
                let size = self.size.saturating_sub(measure(old).bytes) + value.bytes;
                self.grow_to(size, op.path.count() + value.depth)?;
                if let Some(target) = doc.pointer_mut(op.path.as_str()) {
                    *target = op.value.clone();
                }
            }
            PatchOperation::Move(op) => {
                if op.path.starts_with(&op.from) && op.path.len() != op.from.len() {
                    return Err(Failure::CannotMoveInsideItself.into());
                }
                let (moved, overhead) = take(doc, &op.from).map_err(|f| match f {
                    Failure::InvalidPointer => Failure::InvalidFromPointer,
                    other => other,
                })?;
                // The value itself stays counted: it only changes place.
                self.shrink(overhead);
                let depth = self.depth_of_moved(&moved, &op.from, &op.path)?;
                self.make_room(doc, &op.path, None, depth)?;
                insert(doc, &op.path, moved)?;
            }
            PatchOperation::Copy(op) => {
                let source = doc
                    .pointer(op.from.as_str())
                    .ok_or(Failure::InvalidFromPointer)?;
                let value = measure(source);
                self.make_room(doc, &op.path, Some(value), value.depth)?;
                self.charge(value.bytes)?;
                self.charge_cost(json_cost::cost_of(source))?;
                let copy = doc
                    .pointer(op.from.as_str())
                    .cloned()
                    .ok_or(Failure::InvalidFromPointer)?;
                insert(doc, &op.path, copy)?;
            }
            PatchOperation::Test(op) => {
                let target = doc
                    .pointer(op.path.as_str())
                    .ok_or(Failure::InvalidPointer)?;
                if *target != op.value {
                    return Err(Failure::TestFailed.into());
                }
            }
        }
        Ok(())
    }

    /// Accounts for a value of `depth` about to be put at `path`, checking
    /// the limits first. `value` is the value's size when it is new to the
    /// document; `None` when it is already counted (a move).
    fn make_room(
        &mut self,
        doc: &Value,
        path: &Pointer,
        value: Option<Measure>,
        depth: usize,
    ) -> Result<(), Refusal> {
        let added = value.map_or(0, |v| v.bytes);
        let size = match (slot(doc, path)?, value) {
            (Slot::Root, Some(v)) => v.bytes,
            // A move to the root keeps only the moved value, which `take`
            // has already lifted out of `doc`: all of `doc` goes.
            (Slot::Root, None) => self.size.saturating_sub(measure(doc).bytes),
            (Slot::New { overhead }, _) => self.size + overhead + added,
            (Slot::Existing { bytes }, _) => self.size.saturating_sub(bytes) + added,
        };
        self.grow_to(size, path.count() + depth)
    }

    /// How deep a value moved from `from` to `to` reaches below `to`: an
    /// upper bound from the document's depth when that is enough to show it
    /// fits, else measured exactly (and counted as copied, so that moving a
    /// large value back and forth near the limit cannot cost unbounded time).
    fn depth_of_moved(
        &mut self,
        moved: &Value,
        from: &Pointer,
        to: &Pointer,
    ) -> Result<usize, Refusal> {
        let bound = match moved {
            Value::Array(a) if a.is_empty() => 1,
            Value::Object(o) if o.is_empty() => 1,
            Value::Array(_) | Value::Object(_) => self.depth.saturating_sub(from.count()).max(1),
            _ => 0,
        };
        if to.count() + bound <= self.limits.max_depth {
            return Ok(bound);
        }
        let exact = measure(moved);
        self.charge(exact.bytes)?;
        Ok(exact.depth)
    }

    /// Counts `bytes` more as copied.
    fn charge(&mut self, bytes: usize) -> Result<(), Refusal> {
        let copied = self.copied.saturating_add(bytes);
        if copied > self.limits.max_bytes {
            return Err(Refusal::CopiesTooMuch(copied));
        }
        self.copied = copied;
        Ok(())
    }

    /// Counts `cost` more as held by copies.
    fn charge_cost(&mut self, cost: usize) -> Result<(), Refusal> {
        let copied_cost = self.copied_cost.saturating_add(cost);
        if copied_cost > self.limits.max_copied_cost {
            return Err(Refusal::CopiesCostTooMuch(copied_cost));
        }
        self.copied_cost = copied_cost;
        Ok(())
    }

    /// Makes `size` the document's size and `depth` a depth it reaches, unless
    /// that grows it past the limits. An operation that shrinks a document
    /// already over the size limit is let through.
    fn grow_to(&mut self, size: usize, depth: usize) -> Result<(), Refusal> {
        if size > self.limits.max_bytes && size > self.size {
            return Err(Refusal::TooLarge(size));
        }
        if depth > self.limits.max_depth {
            return Err(Refusal::TooDeep);
        }
        self.size = size;
        self.depth = self.depth.max(depth);
        Ok(())
    }

    fn shrink(&mut self, bytes: usize) {
        self.size = self.size.saturating_sub(bytes);
    }
}

/// The compact JSON size of a value and its depth: how many arrays and
/// objects its deepest path passes through (0 for a scalar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Measure {
    bytes: usize,
    depth: usize,
}

/// Measures `value` as `serde_json::to_vec` would write it. Recursive, which
/// is safe: values come from a parsed body (at most 128 deep) or from a
/// document this module keeps within [`MAX_DEPTH`].
fn measure(value: &Value) -> Measure {
    match value {
        Value::Null => Measure { bytes: 4, depth: 0 },
        Value::Bool(true) => Measure { bytes: 4, depth: 0 },
        Value::Bool(false) => Measure { bytes: 5, depth: 0 },
        Value::Number(n) => Measure {
            bytes: number_len(n),
            depth: 0,
        },
        Value::String(s) => Measure {
            bytes: string_len(s),
            depth: 0,
        },
        Value::Array(items) => {
            let mut m = Measure {
                bytes: 2 + items.len().saturating_sub(1),
                depth: 0,
            };
            for item in items {
                let i = measure(item);
                m.bytes += i.bytes;
                m.depth = m.depth.max(i.depth);
            }
            m.depth += 1;
            m
        }
        Value::Object(members) => {
            let mut m = Measure {
                bytes: 2 + members.len().saturating_sub(1),
                depth: 0,
            };
            for (key, item) in members {
                let i = measure(item);
                m.bytes += string_len(key) + 1 + i.bytes;
                m.depth = m.depth.max(i.depth);
            }
            m.depth += 1;
            m
        }
    }
}

/// The length of a JSON string literal as serde_json escapes it.
fn string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// The length of a number as serde_json writes it, counted by writing it.
fn number_len(n: &serde_json::Number) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, n);
    count.0
}

/// What putting a value at a path displaces.
enum Slot {
    /// The whole document.
    Root,
    /// A new member or element: its key, colon and comma cost `overhead`.
    New { overhead: usize },
    /// An existing member of `bytes`, replaced.
    Existing { bytes: usize },
}

/// Where `insert(doc, path, _)` would put a value, or why it cannot.
fn slot(doc: &Value, path: &Pointer) -> Result<Slot, Failure> {
    let Some((parent, last)) = path.split_back() else {
        return Ok(Slot::Root);
    };
    match doc.pointer(parent.as_str()) {
        Some(Value::Object(members)) => {
            let key = last.decoded();
            Ok(match members.get(key.as_ref()) {
                Some(old) => Slot::Existing {
                    bytes: measure(old).bytes,
                },
                None => Slot::New {
                    overhead: string_len(&key) + 1 + usize::from(!members.is_empty()),
                },
            })
        }
        Some(Value::Array(items)) => {
            index_for_insert(&last.decoded(), items.len())?;
            Ok(Slot::New {
                overhead: usize::from(!items.is_empty()),
            })
        }
        _ => Err(Failure::InvalidPointer),
    }
}

/// RFC 6902 `add`: puts `value` at `path`, replacing a member of that name
/// or shifting array elements up.
fn insert(doc: &mut Value, path: &Pointer, value: Value) -> Result<(), Failure> {
    let Some((parent, last)) = path.split_back() else {
        *doc = value;
        return Ok(());
    };
    match doc.pointer_mut(parent.as_str()) {
        Some(Value::Object(members)) => {
            members.insert(last.decoded().into_owned(), value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let index = index_for_insert(&last.decoded(), items.len())?;
            items.insert(index, value);
            Ok(())
        }
        _ => Err(Failure::InvalidPointer),
    }
}

/// RFC 6902 `remove`: takes the value at `path` out, with the bytes its key,
/// colon and comma took besides the value.
fn take(doc: &mut Value, path: &Pointer) -> Result<(Value, usize), Failure> {
    let Some((parent, last)) = path.split_back() else {
        return Err(Failure::InvalidPointer);
    };
    match doc.pointer_mut(parent.as_str()) {
        Some(Value::Object(members)) => {
            let key = last.decoded();
            let value = members
                .remove(key.as_ref())
                .ok_or(Failure::InvalidPointer)?;
            let overhead = string_len(&key) + 1 + usize::from(!members.is_empty());
            Ok((value, overhead))
        }
        Some(Value::Array(items)) => {
            let index = index_of_element(&last.decoded(), items.len())?;
            let value = items.remove(index);
            Ok((value, usize::from(!items.is_empty())))
        }
        _ => Err(Failure::InvalidPointer),
    }
}

/// An array index for `add`: an existing index, or `len`/`-` to append.
fn index_for_insert(token: &str, len: usize) -> Result<usize, Failure> {
    if token == "-" {
        return Ok(len);
    }
    parse_index(token)
        .filter(|&i| i <= len)
        .ok_or(Failure::InvalidPointer)
}

/// An array index naming an existing element.
fn index_of_element(token: &str, len: usize) -> Result<usize, Failure> {
    parse_index(token)
        .filter(|&i| i < len)
        .ok_or(Failure::InvalidPointer)
}

/// A JSON Pointer array index: decimal digits, no sign, no leading zero.
fn parse_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests;
