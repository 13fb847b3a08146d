//! The Kubernetes quantity library: `quantity(s)`, `isQuantity(s)`, and the
//! methods of `kubernetes.Quantity`.
//!
//! A quantity is held exactly, as an integer count of nano-units (kube
//! rounds every quantity up to nano precision when parsing), so comparisons
//! and arithmetic are exact. Quantities beyond ±10^29 are refused with an
//! error, where kube would carry on with arbitrary precision.

use cel::common::types::{Kind, Type, DOUBLE_TYPE, INT_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::KubeValue;
use crate::errors::error;
use crate::util::{arg, bool_ret, double_ret, int_arg, int_ret, static_val, str_arg, Args, Ret};

/// `kubernetes.Quantity`.
pub(crate) static QUANTITY_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Quantity");

const NANO: i128 = 1_000_000_000;
/// The largest magnitude held, in nano-units: 10^38.
const LIMIT_DIGITS: usize = 38;

/// How a quantity prints, as in `resource.Format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `1e3`.
    DecimalExponent,
    /// `1Ki`.
    BinarySi,
    /// `1k`.
    DecimalSi,
}

/// A `resource.Quantity`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

static_val!(Quantity, QUANTITY_TYPE);

const ERR_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
const ERR_SUFFIX: &str = "unable to parse quantity's suffix";
const ERR_RANGE: &str = "quantity is out of the supported range";

impl Quantity {
    /// Parses `s` as `resource.ParseQuantity` does.
    pub(crate) fn parse(s: &str) -> Result<Quantity, &'static str> {
        if s.is_empty() {
            return Err(ERR_FORMAT);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        let mut positive = true;
        match b.first() {
            Some(b'-') => {
                positive = false;
                pos += 1;
            }
            Some(b'+') => pos += 1,
            _ => {}
        }
        while pos < b.len() && b[pos] == b'0' {
            pos += 1;
        }
        let num_start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        let num = &s[num_start..pos];
        let mut denom = "";
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            denom = &s[start..pos];
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
            pos += 1;
        }
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < b.len() {
            return Err(ERR_FORMAT);
        }
        let suffix = &s[suffix_start..];
        let (base2, exponent, format) = interpret_suffix(suffix).ok_or(ERR_SUFFIX)?;

        // All the digits, without leading zeros, and the power of ten they
        // are to be scaled by to count nano-units.
        let digits = format!("{num}{denom}");
        let digits = digits.trim_start_matches('0');
        let denom_len = i64::try_from(denom.len()).map_err(|_| ERR_NUMERIC)?;
        let mut nanos = if base2 {
            let n = parse_digits(digits)?;
            let n = n.checked_mul(1i128 << exponent).ok_or(ERR_RANGE)?;
            scale10(n, 9 - denom_len)?
        } else {
            scale_digits(digits, i64::from(exponent) + 9 - denom_len)?
        };
        let mut format = format;
        if base2 {
            let max = i128::from(i64::MAX) * NANO;
            if nanos > max {
                nanos = max;
            }
            if nanos < NANO && nanos > 0 {
                format = Format::DecimalSi;
            }
        }
        if !positive {
            nanos = -nanos;
        }
        Ok(Quantity { nanos, format })
    }

    fn from_int(i: i64) -> Quantity {
        Quantity {
            nanos: i128::from(i) * NANO,
            format: Format::DecimalExponent,
        }
    }

    fn sign(&self) -> i64 {
        self.nanos.signum() as i64
    }

    /// The value as an `i64`, if it is an integer that fits.
    fn as_i64(&self) -> Option<i64> {
        if self.nanos % NANO != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANO).ok()
    }

    fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    fn add(&self, other: &Quantity) -> Result<Quantity, ExecutionError> {
        let nanos = self
            .nanos
            .checked_add(other.nanos)
            .ok_or_else(|| error(ERR_RANGE))?;
        Ok(Quantity {
            nanos,
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        })
    }

    fn negated(&self) -> Quantity {
        Quantity {
            nanos: -self.nanos,
            format: self.format,
        }
    }

    /// The canonical string, as `Quantity.String()` prints it.
    pub(crate) fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".to_owned();
        }
        let mut format = self.format;
        if format == Format::BinarySi && (self.nanos.abs() < 1024 * NANO || self.nanos % NANO != 0)
        {
            format = Format::DecimalSi;
        }
        if format == Format::BinarySi {
            let mut n = self.nanos / NANO;
            let mut exponent = 0;
            while n % 1024 == 0 && exponent < 6 {
                n /= 1024;
                exponent += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exponent];
            return format!("{n}{suffix}");
        }
        let mut n = self.nanos;
        let mut exponent: i32 = -9;
        while n % 10 == 0 {
            n /= 10;
            exponent += 1;
        }
        while exponent % 3 != 0 {
            n *= 10;
            exponent -= 1;
        }
        match format {
            Format::DecimalExponent if exponent == 0 => n.to_string(),
            Format::DecimalExponent => format!("{n}e{exponent}"),
            _ => {
                while exponent > 18 {
                    n *= 1000;
                    exponent -= 3;
                }
                let suffix = match exponent {
                    -9 => "n",
                    -6 => "u",
                    -3 => "m",
                    3 => "k",
                    6 => "M",
                    9 => "G",
                    12 => "T",
                    15 => "P",
                    18 => "E",
                    _ => "",
                };
                format!("{n}{suffix}")
            }
        }
    }
}

impl KubeValue for Quantity {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(Json::String(self.canonical()))
    }

    fn boxed(&self) -> Box<dyn cel::common::value::Val> {
        Box::new(*self)
    }
}

/// `(base 2?, exponent, format)` of a suffix, as `suffixer.interpret`.
fn interpret_suffix(suffix: &str) -> Option<(bool, i32, Format)> {
    let dec = |e| Some((false, e, Format::DecimalSi));
    let bin = |e| Some((true, e, Format::BinarySi));
    match suffix {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            let e: i64 = s[1..].parse().ok()?;
            // kube keeps the low 32 bits
            Some((false, e as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

fn parse_digits(digits: &str) -> Result<i128, &'static str> {
    if digits.is_empty() {
        return Ok(0);
    }
    if digits.len() > LIMIT_DIGITS {
        return Err(ERR_RANGE);
    }
    digits.parse().map_err(|_| ERR_NUMERIC)
}

/// `digits × 10^power`, rounded up (away from zero) to an integer.
fn scale_digits(digits: &str, power: i64) -> Result<i128, &'static str> {
    if digits.is_empty() {
        return Ok(0);
    }
    if power >= 0 {
        let power = usize::try_from(power).map_err(|_| ERR_RANGE)?;
        if digits.len() + power > LIMIT_DIGITS {
            return Err(ERR_RANGE);
        }
        let n = parse_digits(digits)?;
        return n.checked_mul(10i128.pow(power as u32)).ok_or(ERR_RANGE);
    }
    let drop = usize::try_from(-power).map_err(|_| ERR_RANGE)?;
    if drop >= digits.len() {
        // a non-zero value below one nano-unit rounds up to one
        return Ok(1);
    }
    let (keep, dropped) = digits.split_at(digits.len() - drop);
    let n = parse_digits(keep)?;
    let round = i128::from(dropped.bytes().any(|c| c != b'0'));
    Ok(n + round)
}

/// `n × 10^power`, rounded up (away from zero) to an integer.
fn scale10(n: i128, power: i64) -> Result<i128, &'static str> {
    if power >= 0 {
        let p = u32::try_from(power).map_err(|_| ERR_RANGE)?;
        let f = 10i128.checked_pow(p).ok_or(ERR_RANGE)?;
        return n.checked_mul(f).ok_or(ERR_RANGE);
    }
    let p = u32::try_from(-power).map_err(|_| ERR_RANGE)?;
    match 10i128.checked_pow(p) {
        Some(f) => Ok(n / f + i128::from(n % f != 0)),
        None => Ok(i128::from(n != 0)),
    }
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let q = || QUANTITY_TYPE.to_owned();
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        to_quantity,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload("sign", "quantity_sign", q(), vec![], sign)?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        q(),
        vec![q()],
        greater,
    )?;
    env.add_member_overload("isLessThan", "quantity_is_less_than", q(), vec![q()], less)?;
    env.add_member_overload("compareTo", "quantity_compare_to", q(), vec![q()], compare)?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_get_float",
        q(),
        vec![],
        as_float,
    )?;
    env.add_member_overload("asInteger", "quantity_get_int", q(), vec![], as_integer)?;
    env.add_member_overload("isInteger", "quantity_is_integer", q(), vec![], is_integer)?;
    env.add_member_overload("add", "quantity_add", q(), vec![q()], add)?;
    env.add_member_overload("add", "quantity_add_int", q(), vec![INT_TYPE], add_int)?;
    env.add_member_overload("sub", "quantity_sub", q(), vec![q()], sub)?;
    env.add_member_overload("sub", "quantity_sub_int", q(), vec![INT_TYPE], sub_int)?;
    let _ = DOUBLE_TYPE;
    Ok(())
}

fn quantity_arg(args: &[CowVal<'_, '_>], i: usize) -> Result<Quantity, ExecutionError> {
    arg::<Quantity>(args, i).copied()
}

fn to_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = Quantity::parse(str_arg(&args, 0)?).map_err(error)?;
    Ok(CowVal::owned(q))
}

fn is_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(Quantity::parse(str_arg(&args, 0)?).is_ok())
}

fn sign<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    int_ret(quantity_arg(&args, 0)?.sign())
}

fn greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(quantity_arg(&args, 0)?.nanos > quantity_arg(&args, 1)?.nanos)
}

fn less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(quantity_arg(&args, 0)?.nanos < quantity_arg(&args, 1)?.nanos)
}

fn compare<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let ordering = quantity_arg(&args, 0)?
        .nanos
        .cmp(&quantity_arg(&args, 1)?.nanos);
    int_ret(ordering as i64)
}

fn as_float<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    double_ret(quantity_arg(&args, 0)?.as_f64())
}

fn as_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    match quantity_arg(&args, 0)?.as_i64() {
        Some(i) => int_ret(i),
        None => Err(error("cannot convert value to integer")),
    }
}

fn is_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(quantity_arg(&args, 0)?.as_i64().is_some())
}

fn add<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(&args, 0)?.add(&quantity_arg(&args, 1)?)?;
    Ok(CowVal::owned(q))
}

fn add_int<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(&args, 0)?.add(&Quantity::from_int(int_arg(&args, 1)?))?;
    Ok(CowVal::owned(q))
}

fn sub<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(&args, 0)?.add(&quantity_arg(&args, 1)?.negated())?;
    Ok(CowVal::owned(q))
}

fn sub_int<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(&args, 0)?.add(&Quantity::from_int(int_arg(&args, 1)?).negated())?;
    Ok(CowVal::owned(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn suffixes_scale_exactly() {
        assert_eq!(q("1Ki").nanos, 1024 * NANO);
        assert_eq!(q("1.5Gi").nanos, 1_610_612_736 * NANO);
        assert_eq!(q("1k").nanos, 1000 * NANO);
        assert_eq!(q("1E").nanos, 1_000_000_000_000_000_000 * NANO);
        assert_eq!(q("500m").nanos, NANO / 2);
        assert_eq!(q("2u").nanos, 2000);
        assert_eq!(q("3n").nanos, 3);
        assert_eq!(q("1e3").nanos, 1000 * NANO);
        assert_eq!(q("1.5e-3").nanos, 1_500_000);
        assert_eq!(q("-.5").nanos, -NANO / 2);
        assert_eq!(q("0").nanos, 0);
        // as in kube's code (its docs say otherwise): no digits is zero
        assert_eq!(q("Mi").nanos, 0);
    }

    #[test]
    fn values_below_a_nano_round_up_away_from_zero() {
        assert_eq!(q("0.1n").nanos, 1);
        assert_eq!(q("-0.1n").nanos, -1);
        assert_eq!(q("1.0000000001").nanos, NANO + 1);
    }

    #[test]
    fn binary_quantities_are_clamped_to_int64() {
        assert_eq!(q("8Ei").as_i64(), Some(i64::MAX));
    }

    #[test]
    fn malformed_quantities_are_refused_with_kube_messages() {
        assert_eq!(Quantity::parse("200K"), Err(ERR_SUFFIX));
        assert_eq!(Quantity::parse("Three"), Err(ERR_FORMAT));
        assert_eq!(Quantity::parse("-3.01e-"), Err(ERR_SUFFIX));
        assert_eq!(Quantity::parse("1.1.M"), Err(ERR_FORMAT));
        assert_eq!(Quantity::parse(""), Err(ERR_FORMAT));
        assert_eq!(Quantity::parse("1 Gi"), Err(ERR_FORMAT));
        assert_eq!(Quantity::parse("1e99999"), Err(ERR_RANGE));
    }

    #[test]
    fn canonical_strings_match_kube() {
        assert_eq!(q("1.5Gi").canonical(), "1536Mi");
        assert_eq!(q("2000").canonical(), "2k");
        assert_eq!(q("1500").canonical(), "1500");
        assert_eq!(q("0.5").canonical(), "500m");
        assert_eq!(q("1.5G").canonical(), "1500M");
        assert_eq!(q("100Ki").canonical(), "100Ki");
        assert_eq!(q("1e3").canonical(), "1e3");
        assert_eq!(q("512").canonical(), "512");
    }
}
