//! The Kubernetes URL library: `url(s)`, `isURL(s)` and the getters of
//! `kubernetes.URL`.
//!
//! Parsing follows Go's `url.ParseRequestURI`, which kube uses: an absolute
//! URI or an absolute path, no fragment, with Go's checks of the scheme,
//! port, userinfo and percent-escapes.

use std::collections::BTreeMap;

use cel::common::types::{CelList, CelMap, CelMapKey, CelString, Kind, Type, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::KubeValue;
use crate::errors::error;
use crate::util::{arg, bool_ret, static_val, str_arg, string_ret, Args, Ret};

/// `kubernetes.URL`.
pub(crate) static URL_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.URL");

/// A parsed URL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Url {
    raw: String,
    scheme: String,
    host: String,
    raw_path: String,
    raw_query: String,
}

static_val!(Url, URL_TYPE);

impl KubeValue for Url {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(Json::String(self.raw.clone()))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

impl Url {
    /// Parses `s` as Go's `url.ParseRequestURI`.
    pub(crate) fn parse(s: &str) -> Result<Url, String> {
        let fail = |msg: &str| Err(format!("parse {}: {msg}", go_quote(s)));
        if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return fail("net/url: invalid control character in URL");
        }
        if s.is_empty() {
            return fail("empty url");
        }
        let mut url = Url {
            raw: s.to_owned(),
            scheme: String::new(),
            host: String::new(),
            raw_path: String::new(),
            raw_query: String::new(),
        };
        if s == "*" {
            url.raw_path = "*".to_owned();
            return Ok(url);
        }
        let (scheme, rest) = match split_scheme(s) {
            Ok(parts) => parts,
            Err(msg) => return fail(msg),
        };
        url.scheme = scheme.to_ascii_lowercase();
        let mut rest = rest;
        if rest.ends_with('?') && rest.matches('?').count() == 1 {
            rest = &rest[..rest.len() - 1];
        } else if let Some((path, query)) = rest.split_once('?') {
            url.raw_query = query.to_owned();
            rest = path;
        }
        if !rest.starts_with('/') {
            if !url.scheme.is_empty() {
                // an opaque URL, `mailto:someone`
                return Ok(url);
            }
            return fail("invalid URI for request");
        }
        if !url.scheme.is_empty() && rest.starts_with("//") {
            let after = &rest[2..];
            let (authority, path) = match after.find('/') {
                Some(i) => after.split_at(i),
                None => (after, ""),
            };
            url.host = match parse_authority(authority) {
                Ok(host) => host,
                Err(msg) => return fail(&msg),
            };
            rest = path;
        }
        if let Err(msg) = unescape(rest, false) {
            return fail(&msg);
        }
        url.raw_path = rest.to_owned();
        Ok(url)
    }

    fn hostname(&self) -> &str {
        let (host, _) = split_host_port(&self.host);
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    fn port(&self) -> &str {
        split_host_port(&self.host).1
    }

    fn escaped_path(&self) -> String {
        let mut out = String::with_capacity(self.raw_path.len());
        for c in self.raw_path.chars() {
            if c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/%".contains(c) {
                out.push(c);
            } else {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
        out
    }

    /// `url.ParseQuery`: pairs with a bad escape or a `;` are dropped.
    fn query(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in self.raw_query.split('&') {
            if pair.is_empty() || pair.contains(';') {
                continue;
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (Ok(k), Ok(v)) = (unescape(k, true), unescape(v, true)) else {
                continue;
            };
            out.entry(k).or_default().push(v);
        }
        out
    }
}

/// Go's `%q` of a string, near enough.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// `(scheme, rest)`, as Go's `getScheme`.
fn split_scheme(s: &str) -> Result<(&str, &str), &'static str> {
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' => {
                if i == 0 {
                    return Err("missing protocol scheme");
                }
                return Ok((&s[..i], &s[i + 1..]));
            }
            _ => return Ok(("", s)),
        }
    }
    Ok(("", s))
}

/// The host (and port) of an authority, `user:pass@host:port`.
fn parse_authority(authority: &str) -> Result<String, String> {
    let host = match authority.rfind('@') {
        Some(i) => {
            let userinfo = &authority[..i];
            let valid = userinfo
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c));
            if !valid {
                return Err("net/url: invalid userinfo".to_owned());
            }
            &authority[i + 1..]
        }
        None => authority,
    };
    parse_host(host)?;
    Ok(host.to_owned())
}

/// Go's `parseHost` checks: brackets, the port, the characters.
fn parse_host(host: &str) -> Result<(), String> {
    let port = if host.starts_with('[') {
        let Some(end) = host.rfind(']') else {
            return Err("missing ']' in host".to_owned());
        };
        &host[end + 1..]
    } else if let Some(i) = host.rfind(':') {
        &host[i..]
    } else {
        ""
    };
    let valid_port =
        port.is_empty() || (port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit()));
    if !valid_port {
        return Err(format!("invalid port {} after host", go_quote(port)));
    }
    for c in host.chars() {
        if c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:[]%<>\"".contains(c) || !c.is_ascii() {
            continue;
        }
        return Err(format!(
            "invalid character {} in host name",
            go_quote(&c.to_string())
        ));
    }
    unescape(host, false).map(|_| ())
}

/// `host` and `port` of `host:port`, as Go's `splitHostPort`.
fn split_host_port(hostport: &str) -> (&str, &str) {
    let Some(colon) = hostport.rfind(':') else {
        return (hostport, "");
    };
    let port = &hostport[colon + 1..];
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return (hostport, "");
    }
    let host = &hostport[..colon];
    if host.starts_with('[') && !host.ends_with(']') {
        return (hostport, "");
    }
    (host, port)
}

/// Percent-decodes `s`; `+` is a space in a query.
fn unescape(s: &str, query: bool) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) if hex.is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) => {
                        out.push(v);
                        i += 3;
                    }
                    _ => {
                        let end = (i + 3).min(b.len());
                        return Err(format!(
                            "invalid URL escape {}",
                            go_quote(&String::from_utf8_lossy(&b[i..end]))
                        ));
                    }
                }
            }
            b'+' if query => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let u = || URL_TYPE.to_owned();
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], to_url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    env.add_member_overload("getScheme", "url_get_scheme", u(), vec![], scheme)?;
    env.add_member_overload("getHost", "url_get_host", u(), vec![], host)?;
    env.add_member_overload("getHostname", "url_get_hostname", u(), vec![], hostname)?;
    env.add_member_overload("getPort", "url_get_port", u(), vec![], port)?;
    env.add_member_overload("getEscapedPath", "url_get_escaped_path", u(), vec![], path)?;
    env.add_member_overload("getQuery", "url_get_query", u(), vec![], query)?;
    Ok(())
}

fn to_url<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let url = Url::parse(str_arg(&args, 0)?).map_err(|e| {
        error(format!(
            "URL parse error during conversion from string: {e}"
        ))
    })?;
    Ok(CowVal::owned(url))
}

fn is_url<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(Url::parse(str_arg(&args, 0)?).is_ok())
}

fn scheme<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(arg::<Url>(&args, 0)?.scheme.clone())
}

fn host<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(arg::<Url>(&args, 0)?.host.clone())
}

fn hostname<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(arg::<Url>(&args, 0)?.hostname().to_owned())
}

fn port<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(arg::<Url>(&args, 0)?.port().to_owned())
}

fn path<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(arg::<Url>(&args, 0)?.escaped_path())
}

fn query<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let entries = arg::<Url>(&args, 0)?
        .query()
        .into_iter()
        .map(|(k, vs)| {
            let list: Vec<Box<dyn Val>> = vs
                .into_iter()
                .map(|v| Box::new(CelString::from(v)) as Box<dyn Val>)
                .collect();
            (
                CelMapKey::from(k),
                Box::new(CelList::from(list)) as Box<dyn Val>,
            )
        })
        .collect::<std::collections::HashMap<_, _>>();
    Ok(CowVal::owned(CelMap::from(entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn urls_split_like_go() {
        let url = u("https://user:pw@example.com:8443/a%20b/c?x=1&x=2&y=a+b");
        assert_eq!(url.scheme, "https");
        assert_eq!(url.host, "example.com:8443");
        assert_eq!(url.hostname(), "example.com");
        assert_eq!(url.port(), "8443");
        assert_eq!(url.escaped_path(), "/a%20b/c");
        let q = url.query();
        assert_eq!(q["x"], vec!["1", "2"]);
        assert_eq!(q["y"], vec!["a b"]);
        let v6 = u("http://[::1]:80/");
        assert_eq!(v6.hostname(), "::1");
        assert_eq!(v6.port(), "80");
        assert_eq!(u("/just/a/path").host, "");
    }

    #[test]
    fn relative_and_malformed_urls_are_refused() {
        assert_eq!(
            Url::parse("example.com").map(|_| ()),
            Err("parse \"example.com\": invalid URI for request".to_owned())
        );
        assert!(Url::parse("").is_err());
        assert!(Url::parse(":foo").is_err());
        assert!(Url::parse("http://host:abc/").is_err());
        assert!(Url::parse("http://a/%zz").is_err());
        assert!(Url::parse("http://[::1/").is_err());
    }
}
