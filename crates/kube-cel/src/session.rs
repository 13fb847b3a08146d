//! Evaluation against one [`Activation`]: binding its JSON inputs (converted
//! once, on first use) and its lazily evaluated, memoized `variables`.

use std::sync::OnceLock;

use cel::common::traits::Indexer;
use cel::common::types::{CelString, Kind, Type};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, ExecutionError, Value};

use crate::convert::{json_to_val, to_static};
use crate::cost::{self, BudgetGuard};
use crate::libs::authz::AuthzVal;
use crate::{env, errors, Activation, EvalError, Limits, Output, Program};

static VARIABLES_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.variables");

/// Evaluations against one [`Activation`] that share its converted inputs
/// and its `variables`: each variable is evaluated at most once per
/// session, by the first expression that uses it, which is charged its
/// cost. [`crate::evaluate`] is a one-expression session.
pub struct Session<'a> {
    activation: &'a Activation<'a>,
    inputs: [OnceLock<Box<dyn Val>>; 5],
    variables: Vec<OnceLock<Result<Box<dyn Val>, ExecutionError>>>,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("activation", self.activation)
            .finish_non_exhaustive()
    }
}

/// The names of the JSON inputs, in the order of `Session::inputs`.
const INPUTS: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
];

impl<'a> Session<'a> {
    /// A session over `activation`.
    pub fn new(activation: &'a Activation<'a>) -> Session<'a> {
        Session {
            activation,
            inputs: Default::default(),
            variables: activation
                .variables
                .iter()
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    /// Evaluates `program` within `limits`; see [`crate::evaluate`].
    pub fn evaluate(&self, program: &Program, limits: &Limits) -> Result<Output, EvalError> {
        let guard = BudgetGuard::install(limits.max_cost);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.run(program, self.activation.variables.len(), |v| {
                Ok(Output {
                    value: crate::convert::to_json(v)?,
                    type_name: v.get_type().name().to_owned(),
                    element_type_name: element_type_name(v),
                })
            })
        }));
        let (_, exceeded) = guard.status();
        if exceeded {
            return Err(EvalError {
                message: cost::COST_EXCEEDED.to_owned(),
            });
        }
        match outcome {
            Ok(result) => result.map_err(|e| EvalError {
                message: errors::message(&e),
            }),
            Err(_) => Err(EvalError {
                message: "internal error: the CEL interpreter panicked".to_owned(),
            }),
        }
    }

    /// Evaluates `program` seeing the first `visible` variables, and hands
    /// the value to `f`.
    fn run<T>(
        &self,
        program: &Program,
        visible: usize,
        f: impl FnOnce(&dyn Val) -> Result<T, ExecutionError>,
    ) -> Result<T, ExecutionError> {
        let env = env::shared().map_err(errors::error)?;
        let scope = Scope {
            session: self,
            visible,
        };
        let mut ctx = Context::with_env(env.clone());
        ctx.set_variable_resolver(&scope);
        let value = Value::resolve_val(program.ast(), &ctx)?;
        f(value.as_ref())
    }

    fn input(&self, i: usize) -> &dyn Val {
        self.inputs[i]
            .get_or_init(|| {
                let a = self.activation;
                let json = [
                    &a.object,
                    &a.old_object,
                    &a.request,
                    &a.params,
                    &a.namespace_object,
                ][i];
                json_to_val(json)
            })
            .as_ref()
    }

    /// Variable `i`, evaluated on first use. An evaluation stopped by its
    /// budget is not memoized: the next expression evaluates it afresh.
    fn variable(&self, i: usize) -> Result<&dyn Val, ExecutionError> {
        let cell = &self.variables[i];
        if cell.get().is_none() {
            let (_, program) = &self.activation.variables[i];
            let result = self.run(program, i, to_static);
            let (_, exceeded) = cost::status();
            if exceeded {
                return Err(cost::exceeded_error());
            }
            let _ = cell.set(result);
        }
        match cell.get() {
            Some(Ok(v)) => Ok(v.as_ref()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(errors::error("variable evaluation failed")),
        }
    }
}

/// The type name shared by all the elements of a non-empty list.
fn element_type_name(v: &dyn Val) -> Option<String> {
    let list = v.downcast_ref::<cel::common::types::CelList>()?;
    let mut names = list.inner().iter().map(|i| i.get_type().name());
    let first = names.next()?;
    names.all(|n| n == first).then(|| first.to_owned())
}

/// What an expression sees: the inputs, the variables declared before it
/// (`visible`), and the authorizer.
struct Scope<'s> {
    session: &'s Session<'s>,
    visible: usize,
}

impl VariableResolver for Scope<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if let Some(i) = INPUTS.iter().position(|n| *n == variable) {
            return Some(CowVal::Borrowed(self.session.input(i)));
        }
        let activation = self.session.activation;
        match variable {
            "variables" => Some(CowVal::owned(Variables {
                session: self.session,
                visible: self.visible,
            })),
            "authorizer" => activation
                .authorizer
                .map(|a| CowVal::owned(AuthzVal::root(a))),
            "authorizer.requestResource" => {
                let a = activation.authorizer?;
                let r = activation.request_resource.as_ref()?;
                Some(CowVal::owned(AuthzVal::request_resource(a, r)))
            }
            _ => None,
        }
    }
}

/// The `variables` value: selecting a field evaluates that variable.
#[derive(Clone, Copy)]
struct Variables<'s> {
    session: &'s Session<'s>,
    visible: usize,
}

impl std::fmt::Debug for Variables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variables")
            .field("visible", &self.visible)
            .finish()
    }
}

impl Val for Variables<'_> {
    fn get_type(&self) -> &Type {
        &VARIABLES_TYPE
    }

    fn cel_type() -> &'static Type {
        &VARIABLES_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
}

impl Indexer for Variables<'_> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let name = idx
            .downcast_ref::<CelString>()
            .map(|s| s.inner())
            .unwrap_or_default();
        let declared = &self.session.activation.variables[..self.visible];
        match declared.iter().position(|(n, _)| n == name) {
            Some(i) => self.session.variable(i).map(CowVal::Borrowed),
            None => Err(ExecutionError::no_such_key(name)),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let this: &Variables<'_> = &self;
        this.get(idx).map(CowVal::into_owned)
    }
}
