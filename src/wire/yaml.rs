//! YAML to JSON within a budget: what an alias (`*name`) may expand to.
//! An alias repeats its anchor's whole value, so a few megabytes of them
//! would otherwise become billions of values (a "billion laughs") before
//! anything could refuse them; kube's YAML reader refuses "excessive
//! aliasing" too. The conversion counts what it builds and gives up past
//! [`MAX_YAML_VALUES`] values or twice the body's bytes of text, which an
//! apply body without aliases never comes near.
//!
//! Before any of that, [`check_nesting`] bounds how deep a body nests and how
//! many tokens it holds, since the parser reads every event of a document
//! before the conversion sees one.
//!
//! Owns the bounded conversion and the bounds before it; the apply handler
//! and the audit log both read YAML through them.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::api::errors::ApiError;

/// What may still be built.
pub(crate) struct Budget {
    pub(crate) values: usize,
    pub(crate) bytes: usize,
    pub(crate) exceeded: bool,
}

impl Budget {
    fn spend<E: de::Error>(&mut self, values: usize, bytes: usize) -> Result<(), E> {
        if values > self.values || bytes > self.bytes {
            self.exceeded = true;
            return Err(E::custom("the YAML expands beyond its budget"));
        }
        self.values -= values;
        self.bytes -= bytes;
        Ok(())
    }
}

/// One value, and everything in it.
pub(crate) struct Bounded<'a>(pub(crate) &'a mut Budget);

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.spend(1, 0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.spend(1, 0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.spend(1, 0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.spend(1, 0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.spend(1, v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.spend(1, v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.spend(1, 0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.spend(1, 0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Bounded(&mut *self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.spend(1, 0)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key_seed(Key(&mut *self.0))? {
            let value = map.next_value_seed(Bounded(&mut *self.0))?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A mapping's key, which JSON wants a string.
struct Key<'a>(&'a mut Budget);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.0.spend(0, v.len())?;
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        self.0.spend(0, v.len())?;
        Ok(v)
    }
}

/// At most this many JSON values come out of one document: twice the
/// elements the apply handler lets through ([`check_nesting`]).
pub const MAX_YAML_VALUES: usize = 200_000;

/// Why a YAML document was not converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlError {
    /// Its aliases expand beyond the budget.
    Expands,
    /// It is not YAML a JSON value can be read from.
    Invalid(String),
}

/// `bytes` (one YAML document) as JSON, within the budget.
pub fn to_json_bounded(bytes: &[u8]) -> Result<Value, YamlError> {
    let mut budget = Budget {
        values: MAX_YAML_VALUES,
        bytes: bytes.len().saturating_mul(2),
        exceeded: false,
    };
    let parsed = DeserializeSeed::deserialize(
        Bounded(&mut budget),
        serde_yaml::Deserializer::from_slice(bytes),
    );
    match parsed {
        Ok(v) => Ok(v),
        Err(_) if budget.exceeded => Err(YamlError::Expands),
        Err(e) => Err(YamlError::Invalid(e.to_string())),
    }
}

/// How deep an apply body may nest, and how many structural tokens it may
/// hold. The YAML parser reads every event of a document before it checks
/// anything, so three million `[` would cost gigabytes; this bounds the
/// body first, loosely enough that no configuration of our kinds notices.
pub const MAX_YAML_NESTING: usize = 64;
pub const MAX_YAML_TOKENS: usize = 100_000;

/// Refuses a YAML body that nests deeper than [`MAX_YAML_NESTING`] levels or
/// holds more than [`MAX_YAML_TOKENS`] structural tokens, reading its bytes
/// once and building nothing: what is checked before a YAML parser sees it.
pub fn check_nesting(body: &[u8]) -> Result<(), ApiError> {
    let refuse = |what: String| {
        ApiError::BadRequest(format!("error decoding YAML: the configuration {what}"))
    };
    let (mut flow, mut tokens) = (0usize, 0usize);
    let (mut quote, mut escaped) = (None::<u8>, false);
    for line in body.split(|b| *b == b'\n') {
        tokens += 1;
        if quote.is_none() {
            // Block nesting: two columns of indentation, or a "- ", per level.
            let indent = line.iter().take_while(|b| **b == b' ').count();
            let dashes = line[indent..]
                .chunks(2)
                .take_while(|c| *c == b"- " || *c == b"-")
                .count();
            if indent / 2 + dashes > MAX_YAML_NESTING * 2 {
                return Err(refuse(format!(
                    "nests deeper than {} levels",
                    MAX_YAML_NESTING * 2
                )));
            }
        }
        // Whether the byte before starts a token (a quote there opens a
        // quoted scalar, a `#` a comment).
        let mut at_token_start = true;
        for &b in line {
            if let Some(q) = quote {
                if escaped {
                    escaped = false;
                } else if b == b'\\' && q == b'"' {
                    escaped = true;
                } else if b == q {
                    quote = None;
                }
                at_token_start = false;
                continue;
            }
            match b {
                b'"' | b'\'' if at_token_start => quote = Some(b),
                b'#' if at_token_start => break,
                b'[' | b'{' => {
                    flow += 1;
                    tokens += 1;
                    if flow > MAX_YAML_NESTING {
                        return Err(refuse(format!(
                            "nests deeper than {MAX_YAML_NESTING} levels"
                        )));
                    }
                }
                b']' | b'}' => {
                    flow = flow.saturating_sub(1);
                    tokens += 1;
                }
                b',' | b':' | b'-' => tokens += 1,
                _ => {}
            }
            at_token_start = matches!(b, b' ' | b'\t' | b'[' | b'{' | b',');
        }
        if tokens > MAX_YAML_TOKENS {
            return Err(refuse(format!(
                "holds more than {MAX_YAML_TOKENS} elements"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a: &a [0, 0, …]` (`n` zeros) and `b: [*a, *a, …]` (`m` aliases):
    /// `n × m` values once expanded.
    fn bomb(n: usize, m: usize) -> Vec<u8> {
        let mut doc = String::from("a: &a [");
        doc.push_str(&vec!["0"; n].join(","));
        doc.push_str("]\nb: [");
        doc.push_str(&vec!["*a"; m].join(","));
        doc.push_str("]\n");
        doc.into_bytes()
    }

    #[test]
    fn an_alias_bomb_is_refused_without_being_expanded() {
        // 40,000 × 40,000: 1.6 billion values from 280 KB.
        assert_eq!(
            to_json_bounded(&bomb(40_000, 40_000)),
            Err(YamlError::Expands)
        );
    }

    #[test]
    fn a_small_alias_is_expanded_as_yaml_means_it() {
        let v = to_json_bounded(b"base: &b {x: 1}\ncopy: *b\n").unwrap();
        assert_eq!(v, serde_json::json!({"base": {"x": 1}, "copy": {"x": 1}}));
    }

    #[test]
    fn yaml_that_is_not_json_shaped_is_invalid_not_a_panic() {
        assert!(matches!(
            to_json_bounded(b"? [a, b]\n: c\n"),
            Err(YamlError::Invalid(_))
        ));
        assert!(matches!(
            to_json_bounded(b"a: [\n"),
            Err(YamlError::Invalid(_))
        ));
    }
}
