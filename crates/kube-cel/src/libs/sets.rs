//! cel-go's sets extension: `sets.contains(a, b)`, `sets.equivalent(a, b)`
//! and `sets.intersects(a, b)`, over lists compared element by element.
//! Each is charged `size(a) × size(b) / 10` before it runs.

use cel::common::types::{CelList, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use crate::cost;
use crate::util::{arg, bool_ret, Args, Ret};

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "sets.contains",
        "list_sets_contains_list",
        vec![LIST_TYPE, LIST_TYPE],
        contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "list_sets_equivalent_list",
        vec![LIST_TYPE, LIST_TYPE],
        equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "list_sets_intersects_list",
        vec![LIST_TYPE, LIST_TYPE],
        intersects,
    )?;
    Ok(())
}

type Lists<'a, 'v> = (&'a [Box<dyn Val + 'v>], &'a [Box<dyn Val + 'v>]);

fn lists<'a, 'v>(args: &'a [CowVal<'_, 'v>]) -> Result<Lists<'a, 'v>, ExecutionError> {
    let a = arg::<CelList>(args, 0)?.inner();
    let b = arg::<CelList>(args, 1)?.inner();
    cost::charge((a.len() as u64).saturating_mul(b.len() as u64).div_ceil(10))?;
    Ok((a, b))
}

fn has(list: &[Box<dyn Val + '_>], x: &dyn Val) -> bool {
    list.iter().any(|item| item.as_ref().equals(x))
}

fn contains<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = lists(&args)?;
    bool_ret(b.iter().all(|x| has(a, x.as_ref())))
}

fn equivalent<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = lists(&args)?;
    bool_ret(b.iter().all(|x| has(a, x.as_ref())) && a.iter().all(|x| has(b, x.as_ref())))
}

fn intersects<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = lists(&args)?;
    bool_ret(b.iter().any(|x| has(a, x.as_ref())))
}
