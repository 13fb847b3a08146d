//! Label and field selectors, parsed as kube-apiserver parses them.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
//! `!k`, joined by commas. Field selectors: `f=v`, `f==v`, `f!=v` on the fields
//! a strategy supports. A selector that cannot be parsed is a 400 whose message
//! says what is wrong.

use std::collections::BTreeMap;

use crate::api::errors::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text)? {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.and_then(|l| l.get(&r.key));
            match &r.op {
                Op::Equals(v) => value == Some(v),
                Op::NotEquals(v) => value != Some(v),
                Op::In(vs) => value.is_some_and(|x| vs.contains(x)),
                Op::NotIn(vs) => value.is_none_or(|x| !vs.contains(x)),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
            }
        })
    }
}

fn bad(message: String) -> ApiError {
    ApiError::BadRequest(format!("unable to parse requirement: {message}"))
}

/// Splits on commas that are not inside `( … )`.
fn split_top_level(text: &str) -> Result<Vec<&str>, ApiError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| bad(format!("unbalanced ')' in {text:?}")))?;
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad(format!("unbalanced '(' in {text:?}")));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, ApiError> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        validate_key(key)?;
        return Ok(Requirement {
            key: key.to_owned(),
            op: Op::DoesNotExist,
        });
    }
    for (token, make) in [
        ("!=", Op::NotEquals as fn(String) -> Op),
        ("==", Op::Equals as fn(String) -> Op),
        ("=", Op::Equals as fn(String) -> Op),
    ] {
        if let Some((key, value)) = part.split_once(token) {
            let (key, value) = (key.trim(), value.trim());
            validate_key(key)?;
            validate_value(value)?;
            return Ok(Requirement {
                key: key.to_owned(),
                op: make(value.to_owned()),
            });
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let (key, rest) = (words[0].trim(), words[1].trim());
        let (op_word, set) = rest.split_at(rest.find('(').unwrap_or(rest.len()));
        let set = set.trim();
        let make: fn(Vec<String>) -> Op = match op_word.trim() {
            "in" => Op::In,
            "notin" => Op::NotIn,
            other => {
                return Err(bad(format!(
                    "found '{other}', expected: in, notin, =, ==, !="
                )))
            }
        };
        let inner = set
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| bad(format!("found '{set}', expected: '(' values ')'")))?;
        validate_key(key)?;
        let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
        for v in &values {
            validate_value(v)?;
        }
        if values.iter().all(String::is_empty) {
            return Err(bad(format!(
                "for 'in', 'notin' operators, values set can't be empty ({part:?})"
            )));
        }
        return Ok(Requirement {
            key: key.to_owned(),
            op: make(values),
        });
    }
    validate_key(part)?;
    Ok(Requirement {
        key: part.to_owned(),
        op: Op::Exists,
    })
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 characters.
fn validate_key(key: &str) -> Result<(), ApiError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
    });
    if name_ok && prefix_ok {
        Ok(())
    } else {
        Err(bad(format!("invalid label key {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")))
    }
}

fn validate_value(value: &str) -> Result<(), ApiError> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err(bad(format!("invalid label value: {value:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")))
    }
}

/// A parsed field selector over a fixed set of supported fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses `text`, refusing fields not in `supported`.
    pub fn parse(text: &str, supported: &[&str]) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::BadRequest(format!(
                    "invalid field selector: {part:?}: expected field=value, field==value or field!=value"
                )));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(ApiError::BadRequest(format!(
                    "field label not supported: {field}"
                )));
            }
            requirements.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object matches, given a way to read its field values.
    pub fn matches(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|(field, equal, wanted)| {
            let actual = value_of(field).unwrap_or_default();
            (actual == *wanted) == *equal
        })
    }

    /// The value a `metadata.name=` requirement pins, if any.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|(f, equal, _)| f == field && *equal)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests;
