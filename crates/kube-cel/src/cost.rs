//! Runtime cost accounting: the budget of the evaluation running on this
//! thread, and what charges it.
//!
//! The `cel` crate has no hook to count evaluation steps or to interrupt an
//! evaluation, so [`crate::rewrite`] instruments each program instead: it
//! wraps function calls and comprehension ranges in internal functions
//! (declared in [`crate::env`]) that charge this budget. The budget lives in
//! a thread-local because the interpreter calls overloads through plain `fn`
//! pointers, and an evaluation runs on one thread from start to end.
//!
//! Once the budget is exceeded every further charge fails, so that the error
//! cannot be swallowed by `||`/`&&` short-circuiting for long, and
//! [`crate::evaluate`] reports the evaluation as cancelled whatever it
//! returned.

use std::cell::Cell;

use cel::common::value::Val;
use cel::ExecutionError;

/// The message kube gives for an evaluation over its cost limit.
pub(crate) const COST_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

#[derive(Clone, Copy, Debug)]
struct Budget {
    used: u64,
    limit: u64,
    exceeded: bool,
}

thread_local! {
    static BUDGET: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// Installs a budget for the evaluation about to run on this thread; the
/// previous one (if evaluations nest) comes back when the guard drops.
#[derive(Debug)]
pub(crate) struct BudgetGuard {
    previous: Option<Budget>,
}

impl BudgetGuard {
    pub(crate) fn install(limit: u64) -> BudgetGuard {
        let previous = BUDGET.with(|b| {
            b.replace(Some(Budget {
                used: 0,
                limit,
                exceeded: false,
            }))
        });
        BudgetGuard { previous }
    }

    /// The cost spent so far, and whether it went over the limit.
    pub(crate) fn status(&self) -> (u64, bool) {
        status()
    }
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        BUDGET.with(|b| b.set(self.previous));
    }
}

/// The error of an exceeded budget.
pub(crate) fn exceeded_error() -> ExecutionError {
    ExecutionError::function_error("cost", COST_EXCEEDED)
}

/// Charges `amount` to the running evaluation's budget. Without a budget
/// (outside [`crate::evaluate`]) nothing is charged.
pub(crate) fn charge(amount: u64) -> Result<(), ExecutionError> {
    BUDGET.with(|b| {
        let Some(mut budget) = b.get() else {
            return Ok(());
        };
        budget.used = budget.used.saturating_add(amount);
        if budget.used > budget.limit {
            budget.exceeded = true;
        }
        b.set(Some(budget));
        if budget.exceeded {
            Err(exceeded_error())
        } else {
            Ok(())
        }
    })
}

/// The size of a value, as kube's cost model sees it: the length of a
/// string or bytes, the number of elements of a list or entries of a map, 1
/// otherwise.
pub(crate) fn size_of(value: &dyn Val) -> u64 {
    use cel::common::types::{CelBytes, CelString};
    if let Some(s) = value.downcast_ref::<CelString>() {
        return s.inner().len() as u64;
    }
    if let Some(b) = value.downcast_ref::<CelBytes>() {
        return b.inner().len() as u64;
    }
    if let Some(sizer) = value.as_sizer() {
        return u64::try_from(*sizer.size().inner()).unwrap_or(0);
    }
    1
}

/// kube charges string and list traversals about a tenth of their size.
pub(crate) fn traversal_cost(value: &dyn Val) -> u64 {
    size_of(value).div_ceil(10)
}

/// The running evaluation's cost so far, and whether it went over its
/// limit.
pub(crate) fn status() -> (u64, bool) {
    BUDGET.with(|b| b.get().map_or((0, false), |b| (b.used, b.exceeded)))
}
