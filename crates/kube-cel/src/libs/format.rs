//! The Kubernetes format library: `format.<name>()` and
//! `format.named(name)` give a `kubernetes.NamedFormat`, whose
//! `validate(s)` is `optional.none()` for a valid string, or the list of
//! what is wrong with it, in apimachinery's words.

use cel::common::types::{CelList, CelOptional, CelString, Kind, Type, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::KubeValue;
use crate::libs::url::Url;
use crate::util::{arg, static_val, str_arg, Args, Ret};

pub(crate) static FORMAT_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.NamedFormat");

/// The formats, by the name `format.<name>()` and `format.named(name)` use.
const FORMATS: &[&str] = &[
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// A named format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Format(&'static str);

static_val!(Format, FORMAT_TYPE);

impl KubeValue for Format {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(Json::String(self.0.to_owned()))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = msg.to_owned();
    if examples.is_empty() {
        return format!("{out} (regex used for validation is '{fmt}')");
    }
    out.push_str(" (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `[first]([middle]*[last])?`: each class a predicate.
fn shaped(s: &str, first: fn(u8) -> bool, middle: fn(u8) -> bool, last: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    match b {
        [] => false,
        [only] => first(*only) && last(*only),
        [f, mid @ .., l] => first(*f) && last(*l) && mid.iter().all(|c| middle(*c)),
    }
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn lower_alnum_dash(c: u8) -> bool {
    lower_alnum(c) || c == b'-'
}

fn alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

fn key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
}

fn is_dns1123_label(s: &str) -> bool {
    shaped(s, lower_alnum, lower_alnum_dash, lower_alnum)
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(is_dns1123_label)
}

fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_dns1123_label(s) {
        if is_dns1123_subdomain(s) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !is_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !shaped(s, |c| c.is_ascii_lowercase(), lower_alnum_dash, lower_alnum) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// apimachinery's `maskTrailingDash`, for the `...Prefix` formats.
fn mask_trailing_dash(s: &str) -> String {
    if s.len() > 1 && s.ends_with('-') {
        format!("{}a", &s[..s.len() - 2])
    } else {
        s.to_owned()
    }
}

fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !shaped(name, alnum, key_char, alnum) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !s.is_empty() && !shaped(s, alnum, key_char, alnum) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn is_uuid(s: &str) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let groups = [8, 4, 4, 4, 12];
    // `-?` between the groups: each dash must sit at a group boundary
    let mut pos = 0;
    let b = s.as_bytes();
    for (i, len) in groups.iter().enumerate() {
        if i > 0 && b.get(pos) == Some(&b'-') {
            pos += 1;
        }
        let Some(group) = b.get(pos..pos + len) else {
            return false;
        };
        if !group.iter().all(u8::is_ascii_hexdigit) {
            return false;
        }
        pos += len;
    }
    pos == b.len() && hex.len() == 32
}

fn is_base64(s: &str) -> bool {
    use base64::Engine as _;
    !s.is_empty()
        && s.len().is_multiple_of(4)
        && base64::engine::general_purpose::STANDARD.decode(s).is_ok()
}

fn is_date(s: &str) -> bool {
    s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

/// strfmt's `IsDateTime`: a date, `t`, and `hh:mm:ss(.frac)?(z|±hh:mm)`.
fn is_datetime(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let t = parts[1].as_bytes();
    let two = |i: usize| t.get(i..i + 2).filter(|d| d.iter().all(u8::is_ascii_digit));
    let (Some(h), Some(m), Some(sec)) = (two(0), two(3), two(6)) else {
        return false;
    };
    if t.get(2) != Some(&b':') || t.get(5) != Some(&b':') {
        return false;
    }
    let mut rest = &t[8..];
    if !rest.is_empty() && rest[0] != b'z' && rest[0] != b'+' && rest[0] != b'-' {
        // `.[0-9]+`: any one character, then digits
        let digits = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[1 + digits..];
    }
    let zone_ok = rest == b"z"
        || (rest.len() == 6
            && (rest[0] == b'+' || rest[0] == b'-')
            && rest[1..3].iter().all(u8::is_ascii_digit)
            && rest[3] == b':'
            && rest[4..6].iter().all(u8::is_ascii_digit));
    zone_ok && h <= &b"23"[..] && m <= &b"59"[..] && sec <= &b"59"[..]
}

impl Format {
    fn named(name: &str) -> Option<Format> {
        FORMATS.iter().find(|f| **f == name).map(|f| Format(f))
    }

    fn validate(&self, s: &str) -> Vec<String> {
        let invalid = |ok: bool, msg: &str| if ok { vec![] } else { vec![msg.to_owned()] };
        match self.0 {
            "dns1123Label" => dns1123_label(s),
            "dns1123Subdomain" => dns1123_subdomain(s),
            "dns1035Label" => dns1035_label(s),
            "qualifiedName" => qualified_name(s),
            "dns1123LabelPrefix" => dns1123_label(&mask_trailing_dash(s)),
            "dns1123SubdomainPrefix" => dns1123_subdomain(&mask_trailing_dash(s)),
            "dns1035LabelPrefix" => dns1035_label(&mask_trailing_dash(s)),
            "labelValue" => label_value(s),
            "uri" => Url::parse(s).err().into_iter().collect(),
            "uuid" => invalid(is_uuid(s), "does not match the UUID format"),
            "byte" => invalid(is_base64(s), "invalid base64"),
            "date" => invalid(is_date(s), "invalid date"),
            "datetime" => invalid(is_datetime(s), "invalid datetime"),
            _ => vec![],
        }
    }
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let f = || FORMAT_TYPE.to_owned();
    env.add_overload("format.named", "format-named", vec![STRING_TYPE], named)?;
    env.add_member_overload(
        "validate",
        "format-validate",
        f(),
        vec![STRING_TYPE],
        validate,
    )?;
    macro_rules! constant {
        ($($name:literal),*) => {$(
            env.add_overload(concat!("format.", $name), concat!("format.", $name), vec![], |_| {
                Ok(CowVal::owned(Format($name)))
            })?;
        )*};
    }
    constant!(
        "dns1123Label",
        "dns1123Subdomain",
        "dns1035Label",
        "qualifiedName",
        "dns1123LabelPrefix",
        "dns1123SubdomainPrefix",
        "dns1035LabelPrefix",
        "labelValue",
        "uri",
        "uuid",
        "byte",
        "date",
        "datetime"
    );
    Ok(())
}

fn named<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let f = Format::named(str_arg(&args, 0)?);
    Ok(CowVal::owned(match f {
        Some(f) => CelOptional::of(Box::new(f)),
        None => CelOptional::none(),
    }))
}

fn validate<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let errs = arg::<Format>(&args, 0)?.validate(str_arg(&args, 1)?);
    if errs.is_empty() {
        return Ok(CowVal::owned(CelOptional::none()));
    }
    let list: Vec<Box<dyn Val>> = errs
        .into_iter()
        .map(|e| Box::new(CelString::from(e)) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelOptional::of(Box::new(CelList::from(
        list,
    )))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_validate_like_apimachinery() {
        let v = |f: &str, s: &str| Format::named(f).map(|f| f.validate(s));
        assert_eq!(v("dns1123Label", "my-name"), Some(vec![]));
        assert_eq!(
            v("dns1123Label", "a.b"),
            Some(vec!["must not contain dots".to_owned()])
        );
        assert_eq!(v("dns1123LabelPrefix", "my-name-"), Some(vec![]));
        assert_eq!(v("dns1123Subdomain", "example.com"), Some(vec![]));
        assert_eq!(v("dns1035Label", "1abc").map(|e| e.len()), Some(1));
        assert_eq!(v("qualifiedName", "example.com/MyName"), Some(vec![]));
        assert_eq!(
            v("qualifiedName", "/x"),
            Some(vec!["prefix part must be non-empty".to_owned()])
        );
        assert_eq!(v("labelValue", ""), Some(vec![]));
        assert_eq!(v("labelValue", "-x").map(|e| e.len()), Some(1));
        assert_eq!(
            v("uuid", "123e4567-e89b-12d3-a456-426614174000"),
            Some(vec![])
        );
        assert_eq!(v("uuid", "123e4567e89b12d3a456426614174000"), Some(vec![]));
        assert_eq!(
            v("uuid", "nope"),
            Some(vec!["does not match the UUID format".to_owned()])
        );
        assert_eq!(v("byte", "aGk="), Some(vec![]));
        assert_eq!(v("byte", "aGk"), Some(vec!["invalid base64".to_owned()]));
        assert_eq!(v("date", "2024-02-29"), Some(vec![]));
        assert_eq!(
            v("date", "2023-02-29"),
            Some(vec!["invalid date".to_owned()])
        );
        assert_eq!(v("datetime", "2024-01-02T03:04:05.123Z"), Some(vec![]));
        assert_eq!(v("datetime", "2024-01-02T03:04:05+01:00"), Some(vec![]));
        assert_eq!(
            v("datetime", "2024-01-02T25:04:05Z"),
            Some(vec!["invalid datetime".to_owned()])
        );
        assert_eq!(v("uri", "https://example.com"), Some(vec![]));
        assert_eq!(v("nope", "x"), None);
    }
}
