//! Conversions between JSON and CEL values: binding JSON inputs, copying a
//! value out of an evaluation (`'static`), and rendering a result as JSON.

use std::collections::HashMap;

use base64::Engine as _;
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap, CelMapKey, CelNull,
    CelOptional, CelString, CelTimestamp, CelType, CelUInt,
};
use cel::common::value::Val;
use cel::ExecutionError;
use serde_json::Value as Json;

use crate::errors::error;

/// A value of one of this crate's own types (quantity, URL, typed object,
/// ...): how to copy it out of an evaluation and render it as JSON.
pub(crate) trait KubeValue {
    /// The value as JSON.
    fn to_json(&self) -> Result<Json, ExecutionError>;
    /// An owned, `'static` copy.
    fn boxed(&self) -> Box<dyn Val>;
}

/// The crate's own type behind `v`, if it is one.
fn kube_value(v: &dyn Val) -> Option<&dyn KubeValue> {
    crate::libs::kube_value(v)
}

/// A JSON value as a CEL value: objects are maps, arrays lists, integral
/// numbers that fit `int` are ints, other numbers doubles.
pub(crate) fn json_to_val(json: &Json) -> Box<dyn Val> {
    match json {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        Json::String(s) => Box::new(CelString::from(s.clone())),
        Json::Array(items) => Box::new(CelList::from(
            items.iter().map(json_to_val).collect::<Vec<_>>(),
        )),
        Json::Object(map) => {
            let entries: HashMap<CelMapKey<'static>, Box<dyn Val>> = map
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.clone()), json_to_val(v)))
                .collect();
            Box::new(CelMap::from(entries))
        }
    }
}

/// A `'static` deep copy of `v`, to keep it beyond the evaluation that
/// produced it (memoized variables, typed objects).
pub(crate) fn to_static(v: &dyn Val) -> Result<Box<dyn Val>, ExecutionError> {
    if let Some(k) = kube_value(v) {
        return Ok(k.boxed());
    }
    if let Some(b) = v.downcast_ref::<CelBool>() {
        return Ok(Box::new(CelBool::from(*b.inner())));
    }
    if let Some(i) = v.downcast_ref::<CelInt>() {
        return Ok(Box::new(CelInt::from(*i.inner())));
    }
    if let Some(u) = v.downcast_ref::<CelUInt>() {
        return Ok(Box::new(CelUInt::from(*u.inner())));
    }
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        return Ok(Box::new(CelDouble::from(*d.inner())));
    }
    if let Some(s) = v.downcast_ref::<CelString>() {
        return Ok(Box::new(CelString::from(s.inner().to_owned())));
    }
    if let Some(b) = v.downcast_ref::<CelBytes>() {
        return Ok(Box::new(CelBytes::from(b.inner().to_vec())));
    }
    if v.downcast_ref::<CelNull>().is_some() {
        return Ok(Box::new(CelNull));
    }
    if let Some(d) = v.downcast_ref::<CelDuration>() {
        return Ok(Box::new(CelDuration::from(*d.inner())));
    }
    if let Some(t) = v.downcast_ref::<CelTimestamp>() {
        return Ok(Box::new(CelTimestamp::from(*t.inner())));
    }
    if let Some(t) = v.downcast_ref::<CelType>() {
        return Ok(Box::new(t.clone()));
    }
    if let Some(l) = v.downcast_ref::<CelList>() {
        let items = l
            .inner()
            .iter()
            .map(|i| to_static(i.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Box::new(CelList::from(items)));
    }
    if let Some(m) = v.downcast_ref::<CelMap>() {
        let entries = m
            .inner()
            .iter()
            .map(|(k, v)| Ok((k.clone().into_static(), to_static(v.as_ref())?)))
            .collect::<Result<HashMap<_, _>, ExecutionError>>()?;
        return Ok(Box::new(CelMap::from(entries)));
    }
    if let Some(o) = v.downcast_ref::<CelOptional>() {
        return Ok(Box::new(match o.option() {
            Some(inner) => CelOptional::of(to_static(inner)?),
            None => CelOptional::none(),
        }));
    }
    // Anything else goes through the `cel` crate's owned `Value`.
    let value = cel::Value::try_from(v)?;
    let boxed: Box<dyn Val> = value.try_into()?;
    Ok(boxed)
}

/// `v` as JSON: bytes as base64, durations and timestamps as kube prints
/// them, optionals as their value or `null`.
pub(crate) fn to_json(v: &dyn Val) -> Result<Json, ExecutionError> {
    if let Some(k) = kube_value(v) {
        return k.to_json();
    }
    if let Some(b) = v.downcast_ref::<CelBool>() {
        return Ok(Json::Bool(*b.inner()));
    }
    if let Some(i) = v.downcast_ref::<CelInt>() {
        return Ok(Json::from(*i.inner()));
    }
    if let Some(u) = v.downcast_ref::<CelUInt>() {
        return Ok(Json::from(*u.inner()));
    }
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        return serde_json::Number::from_f64(*d.inner())
            .map(Json::Number)
            .ok_or_else(|| error(format!("cannot represent {} as JSON", d.inner())));
    }
    if let Some(s) = v.downcast_ref::<CelString>() {
        return Ok(Json::String(s.inner().to_owned()));
    }
    if let Some(b) = v.downcast_ref::<CelBytes>() {
        return Ok(Json::String(
            base64::engine::general_purpose::STANDARD.encode(b.inner()),
        ));
    }
    if v.downcast_ref::<CelNull>().is_some() {
        return Ok(Json::Null);
    }
    if let Some(d) = v.downcast_ref::<CelDuration>() {
        return Ok(Json::String(format_duration(d.inner())));
    }
    if let Some(t) = v.downcast_ref::<CelTimestamp>() {
        return Ok(Json::String(format_timestamp(t.inner())));
    }
    if let Some(t) = v.downcast_ref::<CelType>() {
        return Ok(Json::String(t.name().to_owned()));
    }
    if let Some(l) = v.downcast_ref::<CelList>() {
        return l
            .inner()
            .iter()
            .map(|i| to_json(i.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array);
    }
    if let Some(m) = v.downcast_ref::<CelMap>() {
        let mut out = serde_json::Map::new();
        let mut entries: Vec<_> = m.inner().iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in entries {
            out.insert(key_string(k), to_json(v.as_ref())?);
        }
        return Ok(Json::Object(out));
    }
    if let Some(o) = v.downcast_ref::<CelOptional>() {
        return match o.option() {
            Some(inner) => to_json(inner),
            None => Ok(Json::Null),
        };
    }
    Err(error(format!(
        "cannot represent a value of type '{}' as JSON",
        v.get_type().name()
    )))
}

/// A map key as a JSON object key.
pub(crate) fn key_string(k: &CelMapKey) -> String {
    match k {
        CelMapKey::String(s) => s.inner().to_owned(),
        CelMapKey::Int(i) => i.inner().to_string(),
        CelMapKey::UInt(u) => u.inner().to_string(),
        CelMapKey::Bool(b) => b.inner().to_string(),
    }
}

/// A duration as Go's `time.Duration.String()` prints it: `1h2m3.5s`,
/// `1.5ms`, `0s`.
pub(crate) fn format_duration(d: &chrono::Duration) -> String {
    let nanos: i128 = d
        .num_nanoseconds()
        .map(i128::from)
        .unwrap_or_else(|| i128::from(d.num_seconds()) * 1_000_000_000);
    if nanos == 0 {
        return "0s".to_owned();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, scale) = if n < 1_000 {
            ("ns", 1)
        } else if n < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{sign}{}{unit}", fraction(n, scale));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = (n / 60_000_000_000) % 60;
    let seconds = fraction(n % 60_000_000_000, 1_000_000_000);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{seconds}s")
    } else {
        format!("{sign}{seconds}s")
    }
}

/// `n / scale` with its fraction, trailing zeros dropped.
fn fraction(n: u128, scale: u128) -> String {
    let whole = n / scale;
    let frac = n % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let width = scale.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A timestamp in RFC 3339, UTC, with as many fractional digits as needed.
pub(crate) fn format_timestamp(t: &chrono::DateTime<chrono::FixedOffset>) -> String {
    t.with_timezone(&chrono::Utc)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_like_go() {
        let d = |s: i64, n: i64| chrono::Duration::seconds(s) + chrono::Duration::nanoseconds(n);
        assert_eq!(format_duration(&d(0, 0)), "0s");
        assert_eq!(format_duration(&d(3723, 0)), "1h2m3s");
        assert_eq!(format_duration(&d(3600, 0)), "1h0m0s");
        assert_eq!(format_duration(&d(90, 500_000_000)), "1m30.5s");
        assert_eq!(format_duration(&d(0, 1_500_000)), "1.5ms");
        assert_eq!(format_duration(&d(-5, 0)), "-5s");
    }

    #[test]
    fn json_round_trips_through_cel_values() {
        let json = serde_json::json!({"a": [1, 2.5, "x", null, true], "b": {"c": {}}});
        let v = json_to_val(&json);
        assert_eq!(to_json(v.as_ref()), Ok(json));
    }
}
