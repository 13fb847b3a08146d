//! The Kubernetes IP and CIDR libraries: `ip(s)`, `isIP(s)`,
//! `ip.isCanonical(s)`, the methods of `net.IP`, `cidr(s)`, `isCIDR(s)`, the
//! methods of `net.CIDR`, and `string()` of both.
//!
//! Parsing follows Go's `netip.ParseAddr`/`ParsePrefix` as kube uses them:
//! dotted-quad IPv4 without leading zeros, IPv6 without zones, and no
//! IPv4-mapped IPv6 addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cel::common::types::{Kind, Type, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::KubeValue;
use crate::errors::error;
use crate::util::{arg, bool_ret, int_ret, static_val, str_arg, string_ret, Args, Ret};

pub(crate) static IP_TYPE: Type = Type::simple_type(Kind::Opaque, "net.IP");
pub(crate) static CIDR_TYPE: Type = Type::simple_type(Kind::Opaque, "net.CIDR");

/// An IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ip(IpAddr);

static_val!(Ip, IP_TYPE);

impl KubeValue for Ip {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(Json::String(self.0.to_string()))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(*self)
    }
}

/// A network: an address (not necessarily masked) and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

static_val!(Cidr, CIDR_TYPE);

impl KubeValue for Cidr {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(Json::String(self.to_string()))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(*self)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

fn is_4in6(a: &Ipv6Addr) -> bool {
    a.to_ipv4_mapped().is_some()
}

/// Parses an address as kube's `parseIPAddr`.
fn parse_ip(s: &str) -> Result<IpAddr, String> {
    if s.contains('%') {
        return Err(format!("IP address {s:?} with zone value is not allowed"));
    }
    let addr: IpAddr = s.parse().map_err(|_| {
        format!(
            "IP Address {s:?} parse error during conversion from string: ParseAddr({s:?}): unable to parse IP"
        )
    })?;
    if let IpAddr::V6(v6) = addr {
        if is_4in6(&v6) {
            return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
        }
    }
    Ok(addr)
}

impl Cidr {
    fn parse(s: &str) -> Result<Cidr, String> {
        let fail = |why: &str| Err(format!("netip.ParsePrefix({s:?}): {why}"));
        let Some((addr, bits)) = s.rsplit_once('/') else {
            return fail("no '/'");
        };
        if addr.contains('%') {
            return fail("IPv6 zones cannot be present in a prefix");
        }
        let Ok(ip) = addr.parse::<IpAddr>() else {
            return fail(&format!("ParseAddr({addr:?}): unable to parse IP"));
        };
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let valid_digits = !bits.is_empty()
            && bits.bytes().all(|b| b.is_ascii_digit())
            && (bits == "0" || !bits.starts_with('0'));
        let bits = match bits.parse::<u8>() {
            Ok(b) if valid_digits && b <= max => b,
            _ => return fail(&format!("bad bits after slash: {bits:?}")),
        };
        if let IpAddr::V6(v6) = ip {
            if is_4in6(&v6) {
                return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
            }
        }
        Ok(Cidr { addr: ip, bits })
    }

    fn masked(&self) -> Cidr {
        Cidr {
            addr: mask(self.addr, self.bits),
            bits: self.bits,
        }
    }

    fn contains_ip(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.bits) == mask(self.addr, self.bits)
    }

    /// `Overlaps(other) && bits <= other.bits`: `other` lies within.
    fn contains_cidr(&self, other: &Cidr) -> bool {
        self.bits <= other.bits && self.contains_ip(other.addr)
    }
}

fn mask(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() || is_link_local6(&v6))
        }
    }
}

fn is_link_local6(v6: &Ipv6Addr) -> bool {
    v6.segments()[0] & 0xffc0 == 0xfe80
}

fn is_link_local_multicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 224 && o[1] == 0 && o[2] == 0
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            o[0] == 0xff && o[1] & 0x0f == 0x02
        }
    }
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let ip = || IP_TYPE.to_owned();
    let cidr = || CIDR_TYPE.to_owned();
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], to_ip)?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], is_ip)?;
    env.add_overload(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        is_canonical,
    )?;
    env.add_overload("string", "ip_to_string", vec![ip()], to_string)?;
    env.add_member_overload("family", "ip_family", ip(), vec![], family)?;
    env.add_member_overload(
        "isUnspecified",
        "ip_is_unspecified",
        ip(),
        vec![],
        unspecified,
    )?;
    env.add_member_overload("isLoopback", "ip_is_loopback", ip(), vec![], loopback)?;
    env.add_member_overload(
        "isLinkLocalMulticast",
        "ip_is_link_local_multicast",
        ip(),
        vec![],
        link_local_multicast,
    )?;
    env.add_member_overload(
        "isLinkLocalUnicast",
        "ip_is_link_local_unicast",
        ip(),
        vec![],
        link_local_unicast,
    )?;
    env.add_member_overload(
        "isGlobalUnicast",
        "ip_is_global_unicast",
        ip(),
        vec![],
        global_unicast,
    )?;

    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], to_cidr)?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], is_cidr)?;
    env.add_overload("string", "cidr_to_string", vec![cidr()], to_string)?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_string",
        cidr(),
        vec![STRING_TYPE],
        contains_ip,
    )?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_ip",
        cidr(),
        vec![ip()],
        contains_ip,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr_string",
        cidr(),
        vec![STRING_TYPE],
        contains_cidr,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr",
        cidr(),
        vec![cidr()],
        contains_cidr,
    )?;
    env.add_member_overload("ip", "cidr_ip", cidr(), vec![], cidr_ip)?;
    env.add_member_overload(
        "prefixLength",
        "cidr_prefix_length",
        cidr(),
        vec![],
        prefix_length,
    )?;
    env.add_member_overload("masked", "cidr_masked", cidr(), vec![], masked)?;
    Ok(())
}

fn ip_arg(args: &[CowVal<'_, '_>], i: usize) -> Result<IpAddr, ExecutionError> {
    if let Ok(ip) = arg::<Ip>(args, i) {
        return Ok(ip.0);
    }
    parse_ip(str_arg(args, i)?).map_err(error)
}

fn cidr_arg(args: &[CowVal<'_, '_>], i: usize) -> Result<Cidr, ExecutionError> {
    if let Ok(c) = arg::<Cidr>(args, i) {
        return Ok(*c);
    }
    Cidr::parse(str_arg(args, i)?).map_err(|e| {
        error(format!(
            "network address parse error during conversion from string: network address parse error during conversion from string: {e}"
        ))
    })
}

fn to_ip<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(Ip(ip_arg(&args, 0)?)))
}

fn is_ip<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(parse_ip(str_arg(&args, 0)?).is_ok())
}

fn is_canonical<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0)?;
    let ip = parse_ip(s).map_err(error)?;
    bool_ret(ip.to_string() == s)
}

fn to_string<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    if let Ok(ip) = arg::<Ip>(&args, 0) {
        return string_ret(ip.0.to_string());
    }
    string_ret(arg::<Cidr>(&args, 0)?.to_string())
}

fn family<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    int_ret(if ip_arg(&args, 0)?.is_ipv4() { 4 } else { 6 })
}

fn unspecified<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(ip_arg(&args, 0)?.is_unspecified())
}

fn loopback<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(ip_arg(&args, 0)?.is_loopback())
}

fn link_local_multicast<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(is_link_local_multicast(ip_arg(&args, 0)?))
}

fn link_local_unicast<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(match ip_arg(&args, 0)? {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => is_link_local6(&v6),
    })
}

fn global_unicast<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(is_global_unicast(ip_arg(&args, 0)?))
}

fn to_cidr<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(cidr_arg(&args, 0)?))
}

fn is_cidr<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(Cidr::parse(str_arg(&args, 0)?).is_ok())
}

fn contains_ip<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let c = cidr_arg(&args, 0)?;
    bool_ret(c.contains_ip(ip_arg(&args, 1)?))
}

fn contains_cidr<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let c = cidr_arg(&args, 0)?;
    bool_ret(c.contains_cidr(&cidr_arg(&args, 1)?))
}

fn cidr_ip<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(Ip(cidr_arg(&args, 0)?.addr)))
}

fn prefix_length<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    int_ret(i64::from(cidr_arg(&args, 0)?.bits))
}

fn masked<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(cidr_arg(&args, 0)?.masked()))
}
