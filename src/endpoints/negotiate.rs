//! Content negotiation: which representation a client accepts (`Accept`), and
//! which format a request body is in (`Content-Type`).

use crate::api::errors::ApiError;

/// What the client gets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The object(s) as JSON.
    Json,
    /// A `meta.k8s.io` Table (`v1` or `v1beta1`), rows carrying the object as
    /// [`IncludeObject`] says.
    Table {
        v1beta1: bool,
        include: IncludeObject,
    },
    /// `meta.k8s.io/v1` PartialObjectMetadata(List): metadata only, as
    /// metadata informers (garbage collector, namespace controller) ask.
    Metadata,
}

/// `?includeObject=` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => Err(ApiError::BadRequest(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// Picks the first media range in `accept` that this server can produce.
pub fn output(accept: Option<&str>, include: IncludeObject) -> Result<Output, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::Json);
    };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut as_ = None;
        let (mut g, mut v) = (None, None);
        for param in parts {
            if let Some((k, val)) = param.split_once('=') {
                let val = val.trim().trim_matches('"');
                match k.trim() {
                    "as" => as_ = Some(val.to_owned()),
                    "g" => g = Some(val.to_owned()),
                    "v" => v = Some(val.to_owned()),
                    _ => {}
                }
            }
        }
        if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        match as_.as_deref() {
            None => return Ok(Output::Json),
            Some("Table") if g.as_deref() == Some("meta.k8s.io") => match v.as_deref() {
                Some("v1") => {
                    return Ok(Output::Table {
                        v1beta1: false,
                        include,
                    })
                }
                Some("v1beta1") => {
                    return Ok(Output::Table {
                        v1beta1: true,
                        include,
                    })
                }
                _ => continue,
            },
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if g.as_deref() == Some("meta.k8s.io") && v.as_deref() == Some("v1") =>
            {
                return Ok(Output::Metadata)
            }
            Some(_) => continue,
        }
    }
    Err(ApiError::NotAcceptable(format!(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io (asked for {accept:?})"
    )))
}

/// The media type of a body, without parameters, lower-cased.
pub fn media_type(content_type: Option<&str>) -> String {
    content_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Checks that an object body (create, update) is JSON.
pub fn require_json(content_type: Option<&str>) -> Result<(), ApiError> {
    match media_type(content_type).as_str() {
        "application/json" | "" => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType(
            "accepted media types include: application/json".to_owned(),
        )),
    }
}

/// The patch formats this server applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    /// Server-side apply, `application/apply-patch+yaml`. (kube serves
    /// `+cbor` for custom resources only with a feature gate that is off.)
    Apply,
}

pub fn patch_type(content_type: Option<&str>) -> Result<PatchType, ApiError> {
    match media_type(content_type).as_str() {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/apply-patch+yaml" => Ok(PatchType::Apply),
        _ => Err(ApiError::UnsupportedMediaType(
            "accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests;
