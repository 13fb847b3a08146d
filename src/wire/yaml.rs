//! YAML to JSON within bounds. Owns the one way the server reads YAML that a
//! client or an operator wrote: the options serde-saphyr parses it with
//! (apply bodies in the apply handler, bodies in the audit log, the audit
//! policy file), the bounds those options set, and what each refusal is.
//! It knows nothing of HTTP: callers word the answer.
//!
//! The bounds are serde-saphyr's own budget, checked event by event as the
//! parser goes, so nothing is built past them, and each counts again what
//! an alias (`*name`) repeats, since an alias repeats its anchor's whole
//! value and a few kilobytes of them would otherwise become billions of
//! values (a "billion laughs"):
//!
//! - depth: at most [`MAX_YAML_NESTING`] flow collections (`[`, `{`) inside
//!   each other, and [`MAX_YAML_DEPTH`] levels in all;
//! - size: at most [`MAX_YAML_NODES`] scalars, sequences and mappings;
//! - text: the scalars' text may add up to at most twice the body's bytes,
//!   so one long string repeated by aliases is refused too;
//! - one document, and keys that are scalars (`1` and `true` become the
//!   keys `"1"` and `"true"`; `~` or a sequence as a key is refused).
//!
//! An alias that takes a document past the size or the text bound is
//! [`YamlError::Expands`] ("excessive aliasing", as kube's YAML reader
//! words it); the body itself past them, [`YamlError::TooManyElements`].
//!
//! YAML is read as serde_yaml read it before: YAML 1.2's core schema, so
//! `yes`, `on` and `y` are strings, not booleans; `017` and `1_000` are
//! strings, `0o17` and `0x1f` numbers; `.inf` and `.nan` are `null`; `<<`
//! is an ordinary key, not a merge. Where serde_yaml refused or did
//! otherwise, serde-saphyr's way is kept: an unknown tag (`!foo x`) is
//! ignored, `!!binary` is decoded, an integer too large for 64 bits is a
//! float, as kube reads all three.

use serde_json::Value;
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::granit_parser::ErrorKind;
use serde_saphyr::{
    Budget, DuplicateKeyPolicy, ExternalMessageSource, MergeKeyPolicy, NonFiniteFloatPolicy,
    Options, UserMessageFormatter,
};

/// At most this many flow collections (`[`, `{`) inside each other.
pub const MAX_YAML_NESTING: usize = 64;

/// At most this many collections, block or flow, inside each other: the
/// flow bound's room again for the blocks around it.
pub const MAX_YAML_DEPTH: usize = 2 * MAX_YAML_NESTING;

/// At most this many scalars, sequences and mappings in one document,
/// counting again those an alias repeats: far more than any configuration
/// of our kinds holds (9,000 labels are 18,000).
pub const MAX_YAML_NODES: usize = 100_000;

/// What a mapping that names a key twice means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DuplicateKeys {
    /// It is refused ([`YamlError::DuplicateKey`]).
    Refuse,
    /// The last value wins, as kube reads it.
    LastWins,
}

/// Why a YAML document was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// It nests deeper than one of the depth bounds, given here.
    #[error("the configuration nests deeper than {0} levels")]
    TooDeep(usize),
    /// It holds more than [`MAX_YAML_NODES`] values as it is written.
    #[error("the configuration holds more than {MAX_YAML_NODES} elements")]
    TooManyElements,
    /// Its aliases expand it beyond the size or the text bound.
    #[error("yaml: document contains excessive aliasing")]
    Expands,
    /// A mapping names a key twice, and [`DuplicateKeys::Refuse`] was asked.
    #[error("{0}")]
    DuplicateKey(String),
    /// It is not YAML a JSON value can be read from.
    #[error("{0}")]
    Invalid(String),
}

/// The options every YAML document of `len` bytes is parsed with.
pub fn options(len: usize, duplicates: DuplicateKeys) -> Options {
    let mut budget = Budget::default();
    budget.max_depth = MAX_YAML_DEPTH;
    budget.flow_nesting_limit = MAX_YAML_NESTING;
    budget.max_nodes = MAX_YAML_NODES;
    // Every alias and anchor is a node, so these never bind first; the
    // alias-to-anchor ratio guesses at a bomb that the node bound stops.
    budget.max_aliases = MAX_YAML_NODES;
    budget.max_anchors = MAX_YAML_NODES;
    budget.enforce_alias_anchor_ratio = false;
    budget.max_total_scalar_bytes = len.saturating_mul(2);
    // What anchors keep for their aliases: each event is copied into every
    // anchored collection still open around it, so nested anchors would
    // multiply a small body (128 of them around 8,000 scalars: a million
    // copies, over 100 MB). Held to the node bound and twice the body, as
    // everything else.
    budget.max_recorded_anchor_events = MAX_YAML_NODES;
    budget.max_recorded_anchor_bytes = len.saturating_mul(2);
    let mut options = Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = match duplicates {
        DuplicateKeys::Refuse => DuplicateKeyPolicy::Error,
        DuplicateKeys::LastWins => DuplicateKeyPolicy::LastWins,
    };
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options.merge_keys = MergeKeyPolicy::AsOrdinary;
    options.non_finite_float_policy = NonFiniteFloatPolicy::PassThrough;
    // Comments are read and dropped: none is kept, and a run of them is
    // never buffered.
    options.emit_comments = false;
    // A refusal is one line, not the client's text quoted back.
    options.with_snippet = false;
    options
}

/// `bytes` (one YAML document) as JSON, within the bounds.
pub fn to_json(bytes: &[u8], duplicates: DuplicateKeys) -> Result<Value, YamlError> {
    serde_saphyr::from_slice_with_options(bytes, options(bytes.len(), duplicates))
        .map_err(|e| explain(&e))
}

/// Which of our refusals serde-saphyr's error is.
pub fn explain(err: &serde_saphyr::Error) -> YamlError {
    use serde_saphyr::Error as E;
    let (mut cause, mut in_alias) = (err, false);
    loop {
        match cause {
            E::WithSnippet { error, .. } => cause = error,
            E::AliasError { error, .. } => {
                cause = error;
                in_alias = true;
            }
            _ => break,
        }
    }
    match cause {
        E::Budget {
            breach: BudgetBreach::Depth { .. },
            ..
        } => YamlError::TooDeep(MAX_YAML_DEPTH),
        E::Budget { .. } if in_alias => YamlError::Expands,
        E::Budget {
            breach:
                BudgetBreach::Nodes { .. }
                | BudgetBreach::Events { .. }
                | BudgetBreach::Aliases { .. }
                | BudgetBreach::Anchors { .. },
            ..
        } => YamlError::TooManyElements,
        E::Budget { .. }
        | E::AliasReplayCounterOverflow { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. } => YamlError::Expands,
        E::ExternalMessage { source, .. }
            if matches!(&**source, ExternalMessageSource::Parser(scan)
                if *scan.kind() == ErrorKind::RecursionLimitExceeded) =>
        {
            YamlError::TooDeep(MAX_YAML_NESTING)
        }
        E::DuplicateMappingKey { key, location } => YamlError::DuplicateKey(format!(
            "duplicate entry with key {:?} at line {} column {}",
            key.as_deref().unwrap_or_default(),
            location.line(),
            location.column()
        )),
        _ => YamlError::Invalid(err.render_with_formatter(&UserMessageFormatter)),
    }
}

#[cfg(test)]
mod tests;
