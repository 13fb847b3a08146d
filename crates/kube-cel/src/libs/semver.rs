//! The Kubernetes semver library: `semver(s)`, `semver(s, normalize)`,
//! `isSemver(s)`, `isSemver(s, normalize)` and the methods of
//! `kubernetes.Semver`, with the parsing and ordering of blang/semver.

use std::cmp::Ordering;

use cel::common::types::{Kind, Type, BOOL_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::KubeValue;
use crate::errors::error;
use crate::util::{arg, bool_ret, int_ret, static_val, str_arg, Args, Ret};
use cel::common::types::CelBool;

pub(crate) static SEMVER_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Semver");

/// A prerelease identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pre {
    Num(u64),
    Alpha(String),
}

/// A semantic version.
#[derive(Debug, Clone)]
pub(crate) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Pre>,
    build: Vec<String>,
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other) == Ordering::Equal
    }
}

static_val!(Semver, SEMVER_TYPE);

impl KubeValue for Semver {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(Json::String(self.to_string()))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

impl std::fmt::Display for Semver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, p) in self.pre.iter().enumerate() {
            f.write_str(if i == 0 { "-" } else { "." })?;
            match p {
                Pre::Num(n) => write!(f, "{n}")?,
                Pre::Alpha(s) => f.write_str(s)?,
            }
        }
        for (i, b) in self.build.iter().enumerate() {
            f.write_str(if i == 0 { "+" } else { "." })?;
            f.write_str(b)?;
        }
        Ok(())
    }
}

fn is_alphanum(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn number(s: &str, what: &str) -> Result<u64, String> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "Invalid character(s) found in {} number {s:?}",
            what.to_lowercase()
        ));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!(
            "{what} number must not contain leading zeroes {s:?}"
        ));
    }
    s.parse()
        .map_err(|_| format!("strconv.ParseUint: parsing {s:?}: invalid syntax"))
}

impl Semver {
    /// `semver.Parse`.
    pub(crate) fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".to_owned());
        }
        let parts: Vec<&str> = s.splitn(3, '.').collect();
        let [major, minor, rest] = parts[..] else {
            return Err("No Major.Minor.Patch elements found".to_owned());
        };
        let major = number(major, "Major")?;
        let minor = number(minor, "Minor")?;
        let mut patch = rest;
        let mut build = Vec::new();
        if let Some((p, b)) = patch.split_once('+') {
            patch = p;
            for part in b.split('.') {
                if part.is_empty() {
                    return Err("Build meta data is empty".to_owned());
                }
                if !is_alphanum(part) {
                    return Err(format!(
                        "Invalid character(s) found in build meta data {part:?}"
                    ));
                }
                build.push(part.to_owned());
            }
        }
        let mut pre = Vec::new();
        if let Some((p, pr)) = patch.split_once('-') {
            patch = p;
            for part in pr.split('.') {
                if part.is_empty() {
                    return Err("Prerelease is empty".to_owned());
                }
                if part.bytes().all(|b| b.is_ascii_digit()) {
                    if part.len() > 1 && part.starts_with('0') {
                        return Err(format!(
                            "Numeric PreRelease version must not contain leading zeroes {part:?}"
                        ));
                    }
                    let n = part.parse().map_err(|_| {
                        format!("strconv.ParseUint: parsing {part:?}: value out of range")
                    })?;
                    pre.push(Pre::Num(n));
                } else if is_alphanum(part) {
                    pre.push(Pre::Alpha(part.to_owned()));
                } else {
                    return Err(format!("Invalid character(s) found in prerelease {part:?}"));
                }
            }
        }
        let patch = number(patch, "Patch")?;
        Ok(Semver {
            major,
            minor,
            patch,
            pre,
            build,
        })
    }

    /// kube's `normalizeAndParse`: a `v` prefix, leading zeros and missing
    /// minor or patch numbers are allowed.
    fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s
            .splitn(3, '.')
            .map(|p| {
                if p.len() > 1 {
                    let t = p.trim_start_matches('0');
                    if t.is_empty() || !t.starts_with(|c: char| c.is_ascii_digit()) {
                        return format!("0{t}");
                    }
                    return t.to_owned();
                }
                p.to_owned()
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".to_owned());
            }
            while parts.len() < 3 {
                parts.push("0".to_owned());
            }
        }
        Semver::parse(&parts.join("."))
    }

    fn compare(&self, o: &Semver) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(o.major, o.minor, o.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), o.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&o.pre) {
            let c = match (a, b) {
                (Pre::Num(x), Pre::Num(y)) => x.cmp(y),
                (Pre::Num(_), Pre::Alpha(_)) => Ordering::Less,
                (Pre::Alpha(_), Pre::Num(_)) => Ordering::Greater,
                (Pre::Alpha(x), Pre::Alpha(y)) => x.cmp(y),
            };
            if c != Ordering::Equal {
                return c;
            }
        }
        self.pre.len().cmp(&o.pre.len())
    }
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let v = || SEMVER_TYPE.to_owned();
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], to_semver)?;
    env.add_overload(
        "semver",
        "string_bool_to_semver",
        vec![STRING_TYPE, BOOL_TYPE],
        to_semver,
    )?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    env.add_overload(
        "isSemver",
        "is_semver_string_bool",
        vec![STRING_TYPE, BOOL_TYPE],
        is_semver,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_is_greater_than",
        v(),
        vec![v()],
        greater,
    )?;
    env.add_member_overload("isLessThan", "semver_is_less_than", v(), vec![v()], less)?;
    env.add_member_overload("compareTo", "semver_compare_to", v(), vec![v()], compare)?;
    env.add_member_overload("major", "semver_major", v(), vec![], major)?;
    env.add_member_overload("minor", "semver_minor", v(), vec![], minor)?;
    env.add_member_overload("patch", "semver_patch", v(), vec![], patch)?;
    Ok(())
}

fn parse_args(args: &[CowVal<'_, '_>]) -> Result<Result<Semver, String>, ExecutionError> {
    let s = str_arg(args, 0)?;
    let normalize = args.len() > 1 && *arg::<CelBool>(args, 1)?.inner();
    Ok(if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    })
}

fn to_semver<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(parse_args(&args)?.map_err(error)?))
}

fn is_semver<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(parse_args(&args)?.is_ok())
}

fn pair<'a>(args: &'a [CowVal<'_, '_>]) -> Result<(&'a Semver, &'a Semver), ExecutionError> {
    Ok((arg::<Semver>(args, 0)?, arg::<Semver>(args, 1)?))
}

fn greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = pair(&args)?;
    bool_ret(a.compare(b) == Ordering::Greater)
}

fn less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = pair(&args)?;
    bool_ret(a.compare(b) == Ordering::Less)
}

fn compare<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = pair(&args)?;
    int_ret(a.compare(b) as i64)
}

fn major<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    int_ret(arg::<Semver>(&args, 0)?.major as i64)
}

fn minor<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    int_ret(arg::<Semver>(&args, 0)?.minor as i64)
}

fn patch<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    int_ret(arg::<Semver>(&args, 0)?.patch as i64)
}
