//! The Kubernetes lists library: `l.isSorted()`, `l.sum()`, `l.min()`,
//! `l.max()`, `l.indexOf(x)` and `l.lastIndexOf(x)`; and the list functions
//! of cel-go's optional library the `cel` crate lacks: `l.first()`,
//! `l.last()`, `optional.unwrap(l)` and `l.unwrapOpt()`.

use std::cmp::Ordering;

use cel::common::types::{CelInt, CelList, CelOptional, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use crate::errors::error;
use crate::util::{any_arg, arg, bool_ret, int_ret, Args, Ret};

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "isSorted",
        "list_is_sorted_bool",
        LIST_TYPE,
        vec![],
        is_sorted,
    )?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    env.add_member_overload("first", "list_first", LIST_TYPE, vec![], first)?;
    env.add_member_overload("last", "list_last", LIST_TYPE, vec![], last)?;
    env.add_overload(
        "optional.unwrap",
        "optional_unwrap",
        vec![LIST_TYPE],
        unwrap,
    )?;
    env.add_member_overload("unwrapOpt", "optional_unwrapOpt", LIST_TYPE, vec![], unwrap)?;
    Ok(())
}

fn optional<'b, 'v>(item: Option<&(dyn Val + 'v)>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(match item {
        Some(v) => CelOptional::of(v.clone_as_boxed()),
        None => CelOptional::none(),
    }))
}

fn first<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    optional(items(&args)?.first().map(|b| b.as_ref()))
}

fn last<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    optional(items(&args)?.last().map(|b| b.as_ref()))
}

fn unwrap<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let mut out: Vec<Box<dyn Val + 'v>> = Vec::new();
    for item in items(&args)? {
        let opt = item.downcast_ref::<CelOptional>().ok_or_else(|| {
            ExecutionError::no_such_overload(
                "optional.unwrap",
                vec![item.get_type().name().to_owned()],
            )
        })?;
        if let Some(v) = opt.option() {
            out.push(v.clone_as_boxed());
        }
    }
    Ok(CowVal::owned(CelList::from(out)))
}

fn items<'a, 'v>(args: &'a [CowVal<'_, 'v>]) -> Result<&'a [Box<dyn Val + 'v>], ExecutionError> {
    arg::<CelList>(args, 0).map(|l| l.inner())
}

fn compare(a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            ExecutionError::no_such_overload("compare", vec![a.get_type().name().to_owned()])
        })?
        .compare(b)
}

fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let items = items(&args)?;
    for pair in items.windows(2) {
        if compare(pair[0].as_ref(), pair[1].as_ref())? == Ordering::Greater {
            return bool_ret(false);
        }
    }
    bool_ret(true)
}

fn sum<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let items = items(&args)?;
    let Some((first, rest)) = items.split_first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut acc: Box<dyn Val + 'v> = first.clone();
    for item in rest {
        let next = acc
            .as_adder()
            .ok_or_else(|| {
                ExecutionError::no_such_overload("sum", vec![acc.get_type().name().to_owned()])
            })?
            .add(item.as_ref())?
            .into_owned();
        acc = next;
    }
    Ok(CowVal::Owned(acc))
}

fn extreme<'b, 'v>(args: Args<'b, 'v>, name: &str, prefer: Ordering) -> Ret<'b, 'v> {
    let items = items(&args)?;
    let mut best: Option<&Box<dyn Val + 'v>> = None;
    for item in items {
        best = match best {
            None => Some(item),
            Some(b) if compare(b.as_ref(), item.as_ref())? == prefer => Some(item),
            keep => keep,
        };
    }
    match best {
        Some(b) => Ok(CowVal::Owned(b.clone())),
        None => Err(error(format!("{name} called on empty list"))),
    }
}

fn min<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    extreme(args, "min", Ordering::Greater)
}

fn max<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    extreme(args, "max", Ordering::Less)
}

fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let x = any_arg(&args, 1)?;
    let i = items(&args)?
        .iter()
        .position(|item| item.as_ref().equals(x));
    int_ret(i.map_or(-1, |i| i as i64))
}

fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let x = any_arg(&args, 1)?;
    let i = items(&args)?
        .iter()
        .rposition(|item| item.as_ref().equals(x));
    int_ret(i.map_or(-1, |i| i as i64))
}
