//! Rewrites a parsed expression before it is evaluated:
//!
//! - cost instrumentation (see [`crate::cost`]): each function call `f(a, b)`
//!   becomes `@kc(f(@ka(a), @ka(b)))`, charging 1 plus a tenth of the size of
//!   the result and of each argument; each element of a list or map literal
//!   is charged a tenth of its size (building the literal copies it); each
//!   comprehension range `r` becomes `@krange(r)`, charging one per element;
//!   and the calls whose work or result can outgrow their inputs are charged
//!   before they run: `l.distinct()` by `size(l)²/10`, `lists.range(n)` by
//!   `n`, and `s.replace(a, b)` (run by `@kreplace`) by its result's size;
//! - struct literals, `Object{...}` and `JSONPatch{...}`, become calls of
//!   `@struct("Object", {"field": value, ...})`, since their type names
//!   (`Object.spec.template`, ...) cannot all be registered up front.
//!
//! The operators the interpreter evaluates itself (`&&`, `||`, `?:`,
//! indexing, `!`, unary `-`) are left as they are, and so are the loop steps
//! of `map`/`filter`/`all`/`exists`, whose shapes the interpreter recognizes
//! to run them in linear time.

use cel::common::ast::{
    operators, CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, MapEntryExpr,
    MapExpr,
};
use cel::common::types::CelString;

/// Charges a call's result: `@kc(result)`.
pub(crate) const CHARGE_CALL: &str = "@kc";
/// Charges an argument's size: `@ka(arg)`.
pub(crate) const CHARGE_ARG: &str = "@ka";
/// Charges a comprehension's range by its size: `@krange(range)`.
pub(crate) const CHARGE_RANGE: &str = "@krange";
/// Builds a typed object: `@struct("Object.spec", {"field": value})`.
pub(crate) const STRUCT: &str = "@struct";
/// Charges a list's size squared, ahead of a quadratic call: `@kquad(l)`.
pub(crate) const CHARGE_QUADRATIC: &str = "@kquad";
/// Charges an int's value, ahead of a call allocating that much: `@kn(n)`.
pub(crate) const CHARGE_COUNT: &str = "@kn";
/// `s.replace(a, b[, n])`, charged by its result's size before it is built.
pub(crate) const REPLACE: &str = "@kreplace";

/// Function namespaces: a call target spelling one of these is a function
/// name, not a value, and must stay as written.
const NAMESPACES: &[&str] = &[
    "optional",
    "strings",
    "lists",
    "math",
    "sets",
    "jsonpatch",
    "base64",
    "ip",
    "format",
    "cel",
];

/// Operators the interpreter evaluates itself; they are not wrapped.
const INTERPRETED: &[&str] = &[
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::CONDITIONAL,
    operators::NOT_STRICTLY_FALSE,
    operators::INDEX,
    operators::OPT_INDEX,
    operators::OPT_SELECT,
    operators::LOGICAL_NOT,
    operators::NEGATE,
];

/// Rewrites `expr`, see the module docs.
pub(crate) fn instrument(expr: IdedExpr) -> IdedExpr {
    let mut rewriter = Rewriter { next_id: 1 << 40 };
    rewriter.expr(expr)
}

struct Rewriter {
    next_id: u64,
}

impl Rewriter {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn call(&mut self, name: &str, args: Vec<IdedExpr>) -> IdedExpr {
        IdedExpr {
            id: self.id(),
            expr: Expr::Call(CallExpr {
                func_name: name.to_owned(),
                target: None,
                args,
            }),
        }
    }

    fn string(&mut self, s: &str) -> IdedExpr {
        IdedExpr {
            id: self.id(),
            expr: Expr::Literal(LiteralValue::String(CelString::from(s.to_owned()))),
        }
    }

    /// `@ka(e)`, unless `e` is a literal, which costs nothing.
    fn charged_arg(&mut self, e: IdedExpr) -> IdedExpr {
        let e = self.expr(e);
        if matches!(e.expr, Expr::Literal(_)) {
            e
        } else {
            self.call(CHARGE_ARG, vec![e])
        }
    }

    fn expr(&mut self, e: IdedExpr) -> IdedExpr {
        let id = e.id;
        let expr = match e.expr {
            Expr::Call(call) => return self.call_expr(id, call),
            Expr::Select(mut select) => {
                select.operand = Box::new(self.expr(*select.operand));
                Expr::Select(select)
            }
            Expr::List(mut list) => {
                list.elements = list
                    .elements
                    .into_iter()
                    .map(|e| self.charged_arg(e))
                    .collect();
                Expr::List(list)
            }
            Expr::Map(map) => Expr::Map(MapExpr {
                entries: self.entries(map.entries),
            }),
            Expr::Struct(s) => {
                let name = self.string(&s.type_name);
                let fields = IdedExpr {
                    id: self.id(),
                    expr: Expr::Map(MapExpr {
                        entries: self.entries(s.entries),
                    }),
                };
                return self.call(STRUCT, vec![name, fields]);
            }
            Expr::Comprehension(mut c) => {
                let range = self.expr(c.iter_range);
                c.iter_range = self.call(CHARGE_RANGE, vec![range]);
                c.accu_init = self.expr(c.accu_init);
                c.loop_cond = self.expr(c.loop_cond);
                c.loop_step = self.step(c.loop_step, &c.accu_var);
                c.result = self.expr(c.result);
                Expr::Comprehension(c)
            }
            other @ (Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified) => other,
        };
        IdedExpr { id, expr }
    }

    /// Map entries and struct fields, both as map entries with string keys.
    fn entries(&mut self, entries: Vec<IdedEntryExpr>) -> Vec<IdedEntryExpr> {
        entries
            .into_iter()
            .map(|entry| {
                let expr = match entry.expr {
                    EntryExpr::MapEntry(m) => EntryExpr::MapEntry(MapEntryExpr {
                        key: self.charged_arg(m.key),
                        value: self.charged_arg(m.value),
                        optional: m.optional,
                    }),
                    EntryExpr::StructField(f) => EntryExpr::MapEntry(MapEntryExpr {
                        key: self.string(&f.field),
                        value: self.charged_arg(f.value),
                        optional: f.optional,
                    }),
                };
                IdedEntryExpr { id: entry.id, expr }
            })
            .collect()
    }

    /// A comprehension's loop step, keeping the shapes the interpreter
    /// optimizes: `accu + [e]` and `c ? accu + [e] : accu`.
    fn step(&mut self, e: IdedExpr, accu: &str) -> IdedExpr {
        let id = e.id;
        match e.expr {
            Expr::Call(mut call)
                if call.target.is_none()
                    && call.func_name == operators::CONDITIONAL
                    && call.args.len() == 3 =>
            {
                let mut args = call.args.into_iter();
                let mut next = || args.next().unwrap_or_default();
                let (cond, then, otherwise) = (next(), next(), next());
                call.args = vec![
                    self.expr(cond),
                    self.step(then, accu),
                    self.step(otherwise, accu),
                ];
                IdedExpr {
                    id,
                    expr: Expr::Call(call),
                }
            }
            Expr::Call(mut call)
                if call.target.is_none()
                    && call.func_name == operators::ADD
                    && call.args.len() == 2
                    && matches!(&call.args[0].expr, Expr::Ident(name) if name == accu)
                    && matches!(call.args[1].expr, Expr::List(_)) =>
            {
                // the appended list's elements are charged by their size:
                // appending copies them
                call.args = call.args.into_iter().map(|a| self.expr(a)).collect();
                IdedExpr {
                    id,
                    expr: Expr::Call(call),
                }
            }
            Expr::Ident(name) => IdedExpr {
                id,
                expr: Expr::Ident(name),
            },
            other => self.expr(IdedExpr { id, expr: other }),
        }
    }

    fn call_expr(&mut self, id: u64, mut call: CallExpr) -> IdedExpr {
        if INTERPRETED.contains(&call.func_name.as_str()) {
            call.args = call.args.into_iter().map(|a| self.expr(a)).collect();
            call.target = call.target.map(|t| Box::new(self.expr(*t)));
            return IdedExpr {
                id,
                expr: Expr::Call(call),
            };
        }
        let ranged = call.func_name == "range"
            && matches!(call.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(ns), .. }) if ns == "lists");
        let quadratic = call.func_name == "distinct" && call.args.is_empty();
        call.target = call.target.map(|t| {
            if is_namespace(&t.expr) {
                t
            } else if quadratic {
                let t = self.expr(*t);
                Box::new(self.call(CHARGE_QUADRATIC, vec![t]))
            } else {
                Box::new(self.charged_arg(*t))
            }
        });
        call.args = call
            .args
            .into_iter()
            .map(|a| {
                if ranged {
                    let a = self.expr(a);
                    self.call(CHARGE_COUNT, vec![a])
                } else {
                    self.charged_arg(a)
                }
            })
            .collect();
        if call.func_name == "replace" && matches!(call.args.len(), 2 | 3) {
            if let Some(target) = call.target.take() {
                call.func_name = REPLACE.to_owned();
                call.args.insert(0, *target);
            }
        }
        let inner = IdedExpr {
            id,
            expr: Expr::Call(call),
        };
        self.call(CHARGE_CALL, vec![inner])
    }
}

/// Whether `e` spells a name rooted at a function namespace, e.g. `sets` in
/// `sets.contains(a, b)`.
fn is_namespace(e: &Expr) -> bool {
    let mut e = e;
    loop {
        match e {
            Expr::Ident(name) => return NAMESPACES.contains(&name.as_str()),
            Expr::Select(s) if !s.test => e = &s.operand.expr,
            _ => return false,
        }
    }
}
