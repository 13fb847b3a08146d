//! The Kubernetes regex library: `s.find(re)`, `s.findAll(re)` and
//! `s.findAll(re, n)`, with RE2 syntax (the `regex` crate's is close) and
//! matching in linear time. Compiled patterns are cached per thread.

use std::cell::RefCell;
use std::collections::HashMap;

use cel::common::types::{CelList, CelString, INT_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use crate::errors::error;
use crate::util::{int_arg, str_arg, string_ret, Args, Ret};

/// Patterns kept compiled per thread.
const CACHE_SIZE: usize = 64;
/// The largest compiled program a pattern may make.
const SIZE_LIMIT: usize = 1 << 20;

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all,
    )?;
    Ok(())
}

/// Runs `f` with `pattern` compiled.
pub(crate) fn with_regex<T>(
    pattern: &str,
    f: impl FnOnce(&regex::Regex) -> T,
) -> Result<T, ExecutionError> {
    thread_local! {
        static CACHE: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
    }
    let cached = CACHE.with(|c| c.borrow().get(pattern).cloned());
    let re = match cached {
        Some(re) => re,
        None => {
            let re = regex::RegexBuilder::new(pattern)
                .size_limit(SIZE_LIMIT)
                .build()
                .map_err(|e| error(format!("Illegal regex: {e}")))?;
            CACHE.with(|c| {
                let mut c = c.borrow_mut();
                if c.len() >= CACHE_SIZE {
                    c.clear();
                }
                c.insert(pattern.to_owned(), re.clone());
            });
            re
        }
    };
    Ok(f(&re))
}

fn find<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0)?;
    let found = with_regex(str_arg(&args, 1)?, |re| {
        re.find(s)
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default()
    })?;
    string_ret(found)
}

fn find_all<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 0)?;
    let n = if args.len() > 2 {
        int_arg(&args, 2)?
    } else {
        -1
    };
    let limit = usize::try_from(n).unwrap_or(usize::MAX);
    let found = with_regex(str_arg(&args, 1)?, |re| {
        re.find_iter(s)
            .take(limit)
            .map(|m| Box::new(CelString::from(m.as_str().to_owned())) as Box<dyn Val>)
            .collect::<Vec<_>>()
    })?;
    Ok(CowVal::owned(CelList::from(found)))
}
