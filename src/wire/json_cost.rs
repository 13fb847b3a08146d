//! What a JSON document costs the server to hold as a `serde_json::Value`,
//! and the bound every client body is held to before it is parsed.
//!
//! A `Value` is 32 bytes, and every array, object and string behind one is
//! a heap block of its own, so a tree may cost many times the text it was
//! read from: `[0,0,…]` about 21 times, `[{"a":0},…]` about 90 times, which
//! for a 3 MiB body is a quarter of a GiB. [`parse`] first walks the body
//! with serde, allocating nothing, and adds up what its tree would cost;
//! a body whose tree would cost more than [`budget`] allows
//! ([`COST_RATIO`] times its size, never less than [`COST_FLOOR`]) is
//! refused before the tree is built. A typed object decoded from the tree
//! costs no more than the tree itself.
//!
//! The model ([`cost_of_string`], [`cost_of_array`], [`cost_of_object`])
//! is an upper bound of what serde_json and a 64-bit `malloc` do:
//! - a heap block has 8 bytes of header, rounded up to 16, 32 at least;
//! - a string or key with text is one block of its bytes;
//! - an array is one block of 32-byte slots, grown as a `Vec` grows:
//!   doubling, from 4;
//! - an object is a B-tree whose nodes hold up to 11 members (a key's
//!   24-byte header and a value's 32-byte slot each) and, but for the first,
//!   at least 5: so a node for the first member and one for every 5 more.
//!
//! Owns the model and the bound; knows nothing of HTTP. `bounded_patch`
//! charges what a patch copies with the same model.

use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// How many times its size a body's tree may cost.
pub const COST_RATIO: usize = 4;

/// What any body's tree may cost, however small the body: enough for
/// every ordinary object, dense or not.
pub const COST_FLOOR: usize = 4 * 1024 * 1024;

/// The size of one `Value`: an array's slot, and the root's.
const VALUE_BYTES: usize = std::mem::size_of::<Value>();

/// A B-tree node of a `BTreeMap<String, Value>`: 11 keys and values, a
/// parent pointer, two counters and (inner nodes) 12 child pointers.
const NODE_BYTES: usize = 11 * (std::mem::size_of::<String>() + VALUE_BYTES) + 16 + 12 * 8;

/// How many members every node of an object's B-tree but its first holds
/// at least.
const MEMBERS_PER_NODE: usize = 5;

/// The most a body of `len` bytes may cost to hold as a tree.
pub fn budget(len: usize) -> usize {
    len.saturating_mul(COST_RATIO).max(COST_FLOOR)
}

/// A heap block of `bytes`, as the allocator takes it; none for nothing.
fn block(bytes: usize) -> usize {
    if bytes == 0 {
        return 0;
    }
    (bytes.saturating_add(8 + 15) / 16 * 16).max(32)
}

/// The heap a string (or key) of `len` bytes takes.
pub fn cost_of_string(len: usize) -> usize {
    block(len)
}

/// The heap an array of `len` elements takes for its slots (the elements'
/// own heap besides).
pub fn cost_of_array(len: usize) -> usize {
    cost_of_slots(len, VALUE_BYTES)
}

/// The heap a `Vec` of `len` elements of `slot` bytes takes, grown by
/// pushing: doubling, from 4.
fn cost_of_slots(len: usize, slot: usize) -> usize {
    if len == 0 {
        return 0;
    }
    block(len.next_power_of_two().max(4).saturating_mul(slot))
}

/// The heap an object of `members` takes for its nodes (its keys' text and
/// its values' own heap besides).
pub fn cost_of_object(members: usize) -> usize {
    if members == 0 {
        return 0;
    }
    block(NODE_BYTES).saturating_mul(1 + members / MEMBERS_PER_NODE)
}

/// The heap a parsed value takes, by the model, besides its own slot.
pub fn cost_of(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        Value::String(s) => cost_of_string(s.len()),
        Value::Array(items) => items.iter().fold(cost_of_array(items.len()), |sum, v| {
            sum.saturating_add(cost_of(v))
        }),
        Value::Object(members) => {
            members
                .iter()
                .fold(cost_of_object(members.len()), |sum, (k, v)| {
                    sum.saturating_add(cost_of_string(k.len()))
                        .saturating_add(cost_of(v))
                })
        }
    }
}

/// What a body's tree would cost, by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    /// How many values (scalars, arrays and objects) the body holds.
    pub values: usize,
    /// The bytes its tree would take, its root's slot included.
    pub bytes: usize,
}

/// Why a body was not parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or (a JSON Patch) not a list of operations:
    /// serde_json's own message, with line and column.
    #[error(transparent)]
    Invalid(#[from] serde_json::Error),
    #[error(
        "decoding the request body would take about {} bytes ({} JSON values in {body} bytes), more than the limit of {max} bytes for a body of its size",
        .cost.bytes, .cost.values
    )]
    TooCostly { cost: Cost, body: usize, max: usize },
}

/// What `body`'s tree would cost, found without building it.
pub fn estimate(body: &[u8]) -> Result<Cost, serde_json::Error> {
    let mut cost = Cost {
        values: 0,
        bytes: VALUE_BYTES,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    Walk::new(&mut cost, Shape::Tree).deserialize(&mut de)?;
    de.end()?;
    Ok(cost)
}

/// What a JSON Patch body costs decoded as its operations: each operation
/// is a record, not a map, so only its members' own heap counts (a
/// `value`'s whole tree, the text of `op`, `path` and `from`) and its slot
/// in the list of operations.
pub fn estimate_json_patch(body: &[u8]) -> Result<Cost, serde_json::Error> {
    let mut cost = Cost {
        values: 0,
        bytes: 0,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    Walk::new(&mut cost, Shape::Operations).deserialize(&mut de)?;
    de.end()?;
    Ok(cost)
}

/// Parses `body` into a tree, unless the tree would cost more than
/// [`budget`] allows for a body of its size.
pub fn parse(body: &[u8]) -> Result<Value, ParseError> {
    within_budget(estimate(body)?, body.len())?;
    Ok(serde_json::from_slice(body)?)
}

/// Parses a JSON Patch body into its operations, unless they would cost
/// more than [`budget`] allows for a body of its size.
pub fn parse_json_patch(body: &[u8]) -> Result<json_patch::Patch, ParseError> {
    within_budget(estimate_json_patch(body)?, body.len())?;
    Ok(serde_json::from_slice(body)?)
}

/// Refuses a tree, already built from a body of `body_len` bytes in
/// another notation (YAML), that costs more than [`budget`] allows, before
/// it is built again.
pub fn check_tree(tree: &Value, body_len: usize) -> Result<(), ParseError> {
    let cost = Cost {
        values: count_values(tree),
        bytes: VALUE_BYTES.saturating_add(cost_of(tree)),
    };
    within_budget(cost, body_len)
}

fn count_values(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(count_values).sum::<usize>() + 1,
        Value::Object(members) => members.values().map(count_values).sum::<usize>() + 1,
        _ => 1,
    }
}

fn within_budget(cost: Cost, body_len: usize) -> Result<(), ParseError> {
    let max = budget(body_len);
    if cost.bytes > max {
        return Err(ParseError::TooCostly {
            cost,
            body: body_len,
            max,
        });
    }
    Ok(())
}

/// What a walked value is decoded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A `Value`, and everything in it.
    Tree,
    /// A JSON Patch's list of operations; anything else a [`Shape::Tree`].
    Operations,
    /// One operation: a record whose members are each a [`Shape::Tree`].
    Operation,
}

/// Walks one value, adding what it would cost to the tally.
struct Walk<'c> {
    cost: &'c mut Cost,
    shape: Shape,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'c> Walk<'c> {
    fn new(cost: &'c mut Cost, shape: Shape) -> Self {
        Self { cost, shape }
    }

    fn add(&mut self, bytes: usize) {
        self.cost.values = self.cost.values.saturating_add(1);
        self.cost.bytes = self.cost.bytes.saturating_add(bytes);
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(mut self, _: bool) -> Result<(), E> {
        self.add(0);
        Ok(())
    }

    fn visit_i64<E>(mut self, _: i64) -> Result<(), E> {
        self.add(0);
        Ok(())
    }

    fn visit_u64<E>(mut self, _: u64) -> Result<(), E> {
        self.add(0);
        Ok(())
    }

    fn visit_f64<E>(mut self, _: f64) -> Result<(), E> {
        self.add(0);
        Ok(())
    }

    fn visit_unit<E>(mut self) -> Result<(), E> {
        self.add(0);
        Ok(())
    }

    fn visit_str<E>(mut self, s: &str) -> Result<(), E> {
        self.add(cost_of_string(s.len()));
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let (element, slot) = match self.shape {
            Shape::Operations => (
                Shape::Operation,
                std::mem::size_of::<json_patch::PatchOperation>(),
            ),
            Shape::Tree | Shape::Operation => (Shape::Tree, VALUE_BYTES),
        };
        let mut len = 0usize;
        while seq
            .next_element_seed(Walk::new(&mut *self.cost, element))?
            .is_some()
        {
            len += 1;
        }
        self.add(cost_of_slots(len, slot));
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let record = self.shape == Shape::Operation;
        let mut members = 0usize;
        while let Some(key_len) = map.next_key_seed(KeyLength)? {
            if !record {
                self.cost.bytes = self.cost.bytes.saturating_add(cost_of_string(key_len));
            }
            map.next_value_seed(Walk::new(&mut *self.cost, Shape::Tree))?;
            members += 1;
        }
        self.add(if record { 0 } else { cost_of_object(members) });
        Ok(())
    }
}

/// Reads an object's key for its length only.
struct KeyLength;

impl<'de> DeserializeSeed<'de> for KeyLength {
    type Value = usize;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<usize, D::Error> {
        de.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyLength {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, s: &str) -> Result<usize, E> {
        Ok(s.len())
    }
}

#[cfg(test)]
mod tests;
