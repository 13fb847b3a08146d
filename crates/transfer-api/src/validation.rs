//! Field validation shared by every kind: the syntax checks of
//! k8s.io/apimachinery's `util/validation` (DNS-1123 names, qualified names, label
//! values, quantities), the metadata rules both kinds obey, and [`FieldErrors`], the
//! builder that collects [`FieldCause`]s with kube's reasons and wording.
//!
//! The wording follows `field.Error.ErrorBody()` so that a client sees the same
//! message it would from kube-apiserver, e.g.
//! `Invalid value: "Db": a lowercase RFC 1123 subdomain must consist of …`.
//! This module knows nothing about any particular kind; per-kind rules live next to
//! the kind's type.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::errors::FieldCause;

/// `field.ErrorTypeRequired`.
pub const REASON_REQUIRED: &str = "FieldValueRequired";
/// `field.ErrorTypeInvalid`.
pub const REASON_INVALID: &str = "FieldValueInvalid";
/// `field.ErrorTypeNotSupported`.
pub const REASON_NOT_SUPPORTED: &str = "FieldValueNotSupported";
/// `field.ErrorTypeForbidden`.
pub const REASON_FORBIDDEN: &str = "FieldValueForbidden";
/// `field.ErrorTypeTooLong`.
pub const REASON_TOO_LONG: &str = "FieldValueTooLong";

/// The detail of an update that changes an immutable field (`apimachinery`'s
/// `FieldImmutableErrorMsg`).
pub const FIELD_IMMUTABLE: &str = "field is immutable";

/// The largest total size of an object's annotations, keys plus values
/// (`TotalAnnotationSizeLimitB`).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_BYTES: usize = 256 * 1024;

const DNS1123_LABEL_MAX_LENGTH: usize = 63;
const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
const LABEL_VALUE_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case \
     alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower \
     case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
     character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of \
     alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric \
     character";
const QUANTITY_ERR_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The offending value of an invalid field, printed the way `field.Error` prints it:
/// strings quoted, numbers bare, absent values as `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadValue<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    /// An unset optional field.
    Null,
    /// A value not worth printing (a struct or a list); the message then reads
    /// `Invalid value: <detail>`, like `field.OmitValueType`.
    Omitted,
}

impl<'a> From<&'a str> for BadValue<'a> {
    fn from(value: &'a str) -> Self {
        BadValue::Str(value)
    }
}

impl<'a> From<&'a String> for BadValue<'a> {
    fn from(value: &'a String) -> Self {
        BadValue::Str(value)
    }
}

impl From<i64> for BadValue<'_> {
    fn from(value: i64) -> Self {
        BadValue::Int(value)
    }
}

impl From<bool> for BadValue<'_> {
    fn from(value: bool) -> Self {
        BadValue::Bool(value)
    }
}

impl From<i32> for BadValue<'_> {
    fn from(value: i32) -> Self {
        BadValue::Int(i64::from(value))
    }
}

impl<'a, T> From<Option<T>> for BadValue<'a>
where
    T: Into<BadValue<'a>>,
{
    fn from(value: Option<T>) -> Self {
        value.map_or(BadValue::Null, Into::into)
    }
}

impl BadValue<'_> {
    /// `"<type>: <value>"`, or just `"<type>"` when the value is omitted.
    fn describe(self, error_type: &str) -> String {
        match self {
            BadValue::Str(s) => format!("{error_type}: {}", go_quote(s)),
            BadValue::Int(i) => format!("{error_type}: {i}"),
            BadValue::Bool(b) => format!("{error_type}: {b}"),
            BadValue::Null => format!("{error_type}: \"null\""),
            BadValue::Omitted => error_type.to_owned(),
        }
    }
}

/// Quotes a string roughly as Go's `%q` does: double quotes, with `"` and `\` and
/// control characters escaped.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn cause(reason: &str, field: &str, message: String) -> FieldCause {
    FieldCause {
        reason: reason.to_owned(),
        field: field.to_owned(),
        message,
    }
}

/// `Required value` (with `: <detail>` when a detail is given), like `field.Required`.
pub fn required(field: &str, detail: &str) -> FieldCause {
    cause(
        REASON_REQUIRED,
        field,
        with_detail("Required value".to_owned(), detail),
    )
}

/// `Invalid value: <value>: <detail>`, like `field.Invalid`.
pub fn invalid<'a>(field: &str, value: impl Into<BadValue<'a>>, detail: &str) -> FieldCause {
    let body = value.into().describe("Invalid value");
    cause(REASON_INVALID, field, with_detail(body, detail))
}

/// `Unsupported value: <value>: supported values: "A", "B"`, like `field.NotSupported`.
pub fn not_supported<'a>(
    field: &str,
    value: impl Into<BadValue<'a>>,
    supported: &[&str],
) -> FieldCause {
    let body = value.into().describe("Unsupported value");
    let detail = if supported.is_empty() {
        String::new()
    } else {
        let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        format!("supported values: {}", quoted.join(", "))
    };
    cause(REASON_NOT_SUPPORTED, field, with_detail(body, &detail))
}

/// `Forbidden: <detail>`, like `field.Forbidden`.
pub fn forbidden(field: &str, detail: &str) -> FieldCause {
    cause(
        REASON_FORBIDDEN,
        field,
        with_detail("Forbidden".to_owned(), detail),
    )
}

/// `Too long: may not be more than <max> bytes`, like `field.TooLong`.
pub fn too_long(field: &str, max_bytes: usize) -> FieldCause {
    let unit = if max_bytes == 1 { "byte" } else { "bytes" };
    cause(
        REASON_TOO_LONG,
        field,
        format!("Too long: may not be more than {max_bytes} {unit}"),
    )
}

/// Collects the causes of an `Invalid` error, one per bad field, in the order found.
///
/// Each method pushes the cause of the free function of the same name, which mirror
/// the constructors of k8s.io/apimachinery's `field` package.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    causes: Vec<FieldCause>,
}

impl FieldErrors {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, cause: FieldCause) {
        self.causes.push(cause);
    }

    /// See [`required`].
    pub fn required(&mut self, field: &str, detail: &str) {
        self.push(required(field, detail));
    }

    /// See [`invalid`].
    pub fn invalid<'a>(&mut self, field: &str, value: impl Into<BadValue<'a>>, detail: &str) {
        self.push(invalid(field, value, detail));
    }

    /// See [`not_supported`].
    pub fn not_supported<'a>(
        &mut self,
        field: &str,
        value: impl Into<BadValue<'a>>,
        supported: &[&str],
    ) {
        self.push(not_supported(field, value, supported));
    }

    /// See [`forbidden`].
    pub fn forbidden(&mut self, field: &str, detail: &str) {
        self.push(forbidden(field, detail));
    }

    /// See [`too_long`].
    pub fn too_long(&mut self, field: &str, max_bytes: usize) {
        self.push(too_long(field, max_bytes));
    }

    /// `Invalid value: <value>: field is immutable`, for an update that changed `field`.
    pub fn immutable<'a>(&mut self, field: &str, new_value: impl Into<BadValue<'a>>) {
        self.invalid(field, new_value, FIELD_IMMUTABLE);
    }

    /// One `Invalid value` cause per message, as the `validation.Is*` checks report.
    pub fn invalid_each<'a>(
        &mut self,
        field: &str,
        value: impl Into<BadValue<'a>>,
        messages: Vec<String>,
    ) {
        let value = value.into();
        for message in messages {
            self.invalid(field, value, &message);
        }
    }

    pub fn extend(&mut self, causes: impl IntoIterator<Item = FieldCause>) {
        self.causes.extend(causes);
    }

    pub fn is_empty(&self) -> bool {
        self.causes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.causes.len()
    }

    pub fn causes(&self) -> &[FieldCause] {
        &self.causes
    }

    pub fn into_causes(self) -> Vec<FieldCause> {
        self.causes
    }
}

fn with_detail(mut body: String, detail: &str) -> String {
    if !detail.is_empty() {
        body.push_str(": ");
        body.push_str(detail);
    }
    body
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let mut out = message.to_owned();
    if examples.is_empty() {
        out.push_str(&format!(" (regex used for validation is '{format}')"));
        return out;
    }
    out.push_str(" (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{format}')"));
    out
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without a length limit.
fn matches_dns1123_label_pattern(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, without a length limit.
fn matches_qualified_name_pattern(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Checks a DNS-1123 label (a namespace name): at most 63 characters of
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`. Returns the problems, empty when valid
/// (`validation.IsDNS1123Label`).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label_pattern(value) {
        errs.push(regex_error(
            DNS1123_LABEL_ERR_MSG,
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// Checks a DNS-1123 subdomain (an object name): at most 253 characters of
/// dot-separated labels. Returns the problems, empty when valid
/// (`validation.IsDNS1123Subdomain`).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !value.split('.').all(matches_dns1123_label_pattern) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Checks a `generateName` prefix: a DNS-1123 subdomain once a trailing `-` is
/// allowed for (`NameIsDNSSubdomain(name, prefix=true)`).
pub fn is_dns1123_subdomain_prefix(prefix: &str) -> Vec<String> {
    match prefix.strip_suffix('-') {
        Some(stem) if !stem.is_empty() => is_dns1123_subdomain(&format!("{stem}a")),
        _ => is_dns1123_subdomain(prefix),
    }
}

/// Checks a qualified name, `[prefix/]name`, as used for label and annotation keys
/// and finalizers (`validation.IsQualifiedName`).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_pattern(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Checks a label value: empty, or at most 63 characters of
/// `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?` (`validation.IsValidLabelValue`).
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_pattern(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// The sign of a parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantitySign {
    Negative,
    Zero,
    Positive,
}

/// Parses the number part of a quantity in `resource.Quantity`'s grammar
/// (`<sign>?<digits>[.<digits>]<suffix>`, suffix one of `Ki Mi Gi Ti Pi Ei m k M G T
/// P E`, or `e`/`E` with a signed integer exponent) and returns its sign; `None` when
/// it is not a quantity.
pub fn quantity_sign(value: &str) -> Option<QuantitySign> {
    let (negative, rest) = match value.as_bytes().first() {
        Some(b'-') => (true, &value[1..]),
        Some(b'+') => (false, &value[1..]),
        _ => (false, value),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_only(whole) || !digits_only(fraction) {
        return None;
    }
    let suffix_ok = match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => {
            true
        }
        s => match s.strip_prefix(['e', 'E']) {
            Some(exponent) => {
                let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
                !exponent.is_empty() && digits_only(exponent)
            }
            None => false,
        },
    };
    if !suffix_ok {
        return None;
    }
    let nonzero = whole.bytes().chain(fraction.bytes()).any(|b| b != b'0');
    Some(match (nonzero, negative) {
        (false, _) => QuantitySign::Zero,
        (true, true) => QuantitySign::Negative,
        (true, false) => QuantitySign::Positive,
    })
}

/// Requires `quantity` to be a well-formed, strictly positive quantity.
pub fn validate_positive_quantity(errs: &mut FieldErrors, field: &str, quantity: &Quantity) {
    match quantity_sign(&quantity.0) {
        None => errs.invalid(field, &quantity.0, QUANTITY_ERR_MSG),
        Some(QuantitySign::Positive) => {}
        Some(_) => errs.invalid(field, &quantity.0, "must be greater than zero"),
    }
}

/// Requires `value`, when set, to be a DNS-1123 subdomain (an object name).
pub fn validate_dns1123_subdomain(errs: &mut FieldErrors, field: &str, value: &str) {
    errs.invalid_each(field, value, is_dns1123_subdomain(value));
}

/// Requires `value` to be a DNS-1123 label (a namespace name).
pub fn validate_dns1123_label(errs: &mut FieldErrors, field: &str, value: &str) {
    errs.invalid_each(field, value, is_dns1123_label(value));
}

/// Validates label keys (qualified names) and values, reporting on `field` itself as
/// kube does (`metav1validation.ValidateLabels`).
pub fn validate_labels(errs: &mut FieldErrors, field: &str, labels: &BTreeMap<String, String>) {
    for (key, value) in labels {
        errs.invalid_each(field, key, is_qualified_name(key));
        errs.invalid_each(field, value, is_valid_label_value(value));
    }
}

/// Validates annotation keys (qualified names, compared in lower case) and the total
/// size of all annotations (`ValidateAnnotations`).
pub fn validate_annotations(
    errs: &mut FieldErrors,
    field: &str,
    annotations: &BTreeMap<String, String>,
) {
    let mut total = 0usize;
    for (key, value) in annotations {
        errs.invalid_each(field, key, is_qualified_name(&key.to_lowercase()));
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES {
        errs.too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT_BYTES);
    }
}

/// The metadata rules every kind of this group shares (DESIGN §2): a name or
/// `generateName` (both DNS-1123 subdomains), a namespace (a DNS-1123 label), valid
/// labels and annotations, and finalizers that are qualified names.
///
/// Server-set fields (uid, resourceVersion, generation, timestamps) are not checked
/// here: the registry owns them.
pub fn validate_object_meta(errs: &mut FieldErrors, meta: &ObjectMeta) {
    let generate_name = meta.generate_name.as_deref().unwrap_or_default();
    if !generate_name.is_empty() {
        errs.invalid_each(
            "metadata.generateName",
            generate_name,
            is_dns1123_subdomain_prefix(generate_name),
        );
    }
    match meta.name.as_deref().unwrap_or_default() {
        "" if generate_name.is_empty() => {
            errs.required("metadata.name", "name or generateName is required");
        }
        "" => {}
        name => validate_dns1123_subdomain(errs, "metadata.name", name),
    }
    match meta.namespace.as_deref().unwrap_or_default() {
        "" => errs.required("metadata.namespace", ""),
        namespace => validate_dns1123_label(errs, "metadata.namespace", namespace),
    }
    if let Some(labels) = &meta.labels {
        validate_labels(errs, "metadata.labels", labels);
    }
    if let Some(annotations) = &meta.annotations {
        validate_annotations(errs, "metadata.annotations", annotations);
    }
    for finalizer in meta.finalizers.iter().flatten() {
        errs.invalid_each(
            "metadata.finalizers",
            finalizer,
            is_qualified_name(finalizer),
        );
    }
}

#[cfg(test)]
mod tests;
