//! Helpers for writing overloads: typed access to arguments, results, and a
//! `Val` implementation for the crate's `'static` value types.

use cel::common::types::{CelBool, CelDouble, CelInt, CelString};
use cel::common::value::{CowVal, FromVal, Val};
use cel::ExecutionError;

/// The arguments of an overload; a member overload's target first.
pub(crate) type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
/// The result of an overload.
pub(crate) type Ret<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// Argument `i`, downcast to the type its overload was declared for.
pub(crate) fn arg<'a, 'v, T>(args: &'a [CowVal<'_, 'v>], i: usize) -> Result<&'a T, ExecutionError>
where
    T: FromVal<'a, 'v>,
{
    let v = args
        .get(i)
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    v.as_ref()
        .downcast_ref::<T>()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: v.get_type().name().to_owned(),
            want: std::any::type_name::<T>().to_owned(),
        })
}

/// Argument `i` as a string.
pub(crate) fn str_arg<'a>(args: &'a [CowVal<'_, '_>], i: usize) -> Result<&'a str, ExecutionError> {
    arg::<CelString>(args, i).map(|s| s.inner())
}

/// Argument `i` as an int.
pub(crate) fn int_arg(args: &[CowVal<'_, '_>], i: usize) -> Result<i64, ExecutionError> {
    arg::<CelInt>(args, i).map(|n| *n.inner())
}

/// Argument `i`, whatever its type.
pub(crate) fn any_arg<'a, 'v>(
    args: &'a [CowVal<'_, 'v>],
    i: usize,
) -> Result<&'a (dyn Val + 'v), ExecutionError> {
    args.get(i)
        .map(|v| v.as_ref())
        .ok_or_else(ExecutionError::missing_argument_or_target)
}

/// A `bool` result.
pub(crate) fn bool_ret<'b, 'v>(b: bool) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelBool::from(b)))
}

/// An `int` result.
pub(crate) fn int_ret<'b, 'v>(i: i64) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelInt::from(i)))
}

/// A `double` result.
pub(crate) fn double_ret<'b, 'v>(d: f64) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelDouble::from(d)))
}

/// A `string` result.
pub(crate) fn string_ret<'b, 'v>(s: String) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelString::from(s)))
}

/// Implements `Val` (and `StaticVal`) for a `'static`, `Clone + PartialEq`
/// type whose CEL type is the `static` item `$ty`.
macro_rules! static_val {
    ($t:ty, $ty:path) => {
        impl cel::common::value::Val for $t {
            fn get_type(&self) -> &cel::common::types::Type {
                &$ty
            }
            fn cel_type() -> &'static cel::common::types::Type {
                &$ty
            }
            fn equals(&self, other: &dyn cel::common::value::Val) -> bool {
                other.downcast_ref::<$t>().is_some_and(|o| o == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn cel::common::value::Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }
        impl cel::common::value::StaticVal for $t {}
    };
}
pub(crate) use static_val;
