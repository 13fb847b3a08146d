//! Field paths, as structured-merge-diff names them: `.spec.source.name`,
//! `.status.conditions[type="Ready"]`, `.metadata.finalizers[="a"]`, and their
//! `fieldsV1` spelling (`f:name`, `k:{"type":"Ready"}`, `v:"a"`, `i:0`).

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

/// A JSON value with the total order structured-merge-diff sorts by:
/// numbers, then strings, booleans, lists, maps, and null last. Equal
/// exactly when the order says so, so that sets and maps keyed by it hold.
#[derive(Debug, Clone)]
pub struct OrdValue(pub Value);

impl PartialEq for OrdValue {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for OrdValue {}

impl PartialOrd for OrdValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdValue {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_values(&self.0, &other.0)
    }
}

/// Numbers by value, exactly: integers as integers (however large), and
/// where an integer and a float are equal as floats, the integer first.
fn compare_numbers(x: &serde_json::Number, y: &serde_json::Number) -> Ordering {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    // A float as an integer, when it is one that fits.
    let whole = |f: f64| (f.is_finite() && f.fract() == 0.0 && f.abs() < 1e38).then_some(f as i128);
    let (fx, fy) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
    match (int(x), int(y)) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(a), None) => match whole(fy) {
            Some(b) => a.cmp(&b).then(Ordering::Less),
            None => (a as f64).total_cmp(&fy).then(Ordering::Less),
        },
        (None, Some(b)) => match whole(fx) {
            Some(a) => a.cmp(&b).then(Ordering::Greater),
            None => fx.total_cmp(&(b as f64)).then(Ordering::Greater),
        },
        (None, None) => fx.total_cmp(&fy),
    }
}

fn rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// structured-merge-diff's `value.Compare`.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (x, y) in x.iter().zip(y) {
                let c = compare_values(x, y);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((xk, xv), (yk, yv)) in xs.iter().zip(&ys) {
                let c = xk.cmp(yk).then_with(|| compare_values(xv, yv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => rank(a).cmp(&rank(b)),
    }
}

/// One step of a path. The variants are in the order paths sort by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElement {
    /// A field of a struct, or a key of a map.
    Field(String),
    /// An item of a list of type `map`, by the values of its keys (sorted by name).
    Key(Vec<(String, OrdValue)>),
    /// An item of a list of type `set`, by its value.
    Value(OrdValue),
    /// An item of a list without keys, by position.
    Index(usize),
}

/// `value.ToString`, as conflict messages print values.
fn value_string(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Null => "null".to_owned(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(value_string).collect::<Vec<_>>().join(",")
        ),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", value_string(v)))
            .collect(),
        other => other.to_string(),
    }
}

/// Go's `%q` for the strings field values hold: JSON's escaping is the same
/// for everything but a few control characters, which only an attacker sends.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(keys) => {
                let parts: Vec<String> = keys
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_string(&v.0)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", value_string(&v.0)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl PathElement {
    pub fn field(name: &str) -> Self {
        PathElement::Field(name.to_owned())
    }

    /// The `fieldsV1` key: `f:name`, `k:{"type":"Ready"}`, `v:"a"`, `i:0`.
    pub fn to_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(keys) => {
                let mut out = String::from("k:{");
                for (i, (name, value)) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(name).unwrap_or_default());
                    out.push(':');
                    out.push_str(&serde_json::to_string(&value.0).unwrap_or_default());
                }
                out.push('}');
                out
            }
            PathElement::Value(v) => {
                format!("v:{}", serde_json::to_string(&v.0).unwrap_or_default())
            }
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `fieldsV1` key.
    pub fn from_key(key: &str) -> Result<Self, String> {
        let (kind, rest) = key
            .split_once(':')
            .filter(|(kind, _)| kind.len() == 1)
            .ok_or_else(|| format!("invalid path element {key:?}: missing type prefix"))?;
        match kind {
            "f" => Ok(PathElement::Field(rest.to_owned())),
            "v" => serde_json::from_str(rest)
                .map(|v| PathElement::Value(OrdValue(v)))
                .map_err(|e| format!("invalid value in path element {key:?}: {e}")),
            "k" => match serde_json::from_str(rest) {
                Ok(Value::Object(map)) => {
                    let mut keys: Vec<(String, OrdValue)> =
                        map.into_iter().map(|(k, v)| (k, OrdValue(v))).collect();
                    keys.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(PathElement::Key(keys))
                }
                _ => Err(format!("invalid keys in path element {key:?}")),
            },
            "i" => rest
                .parse()
                .map(PathElement::Index)
                .map_err(|e| format!("invalid index in path element {key:?}: {e}")),
            _ => Err(format!("unknown path element type in {key:?}")),
        }
    }
}

/// A path from the root of an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in &self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}
