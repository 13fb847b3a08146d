//! The AdmissionReview a webhook receives, and the checks on the one it
//! sends back (kube's `request/admissionreview.go`). Pure: no I/O.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api::meta::Requester;
use crate::registry::admission::Attributes;

/// The AdmissionReview version a webhook is called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    V1,
    V1beta1,
}

impl Version {
    /// The first of `admissionReviewVersions` this server speaks.
    pub(super) fn pick(versions: &[String]) -> Option<Version> {
        versions.iter().find_map(|v| match v.as_str() {
            "v1" => Some(Version::V1),
            "v1beta1" => Some(Version::V1beta1),
            _ => None,
        })
    }

    fn api_version(self) -> &'static str {
        match self {
            Version::V1 => "admission.k8s.io/v1",
            Version::V1beta1 => "admission.k8s.io/v1beta1",
        }
    }
}

/// The `request` of an AdmissionReview. Without `uid` and the objects it is
/// what matchConditions see as `request` (kube's `CreateAdmissionRequest`).
pub(super) fn admission_request(
    uid: &str,
    attrs: &Attributes,
    user: &Requester,
    with_objects: bool,
) -> Value {
    let kind = json!({"group": attrs.group, "version": attrs.version, "kind": attrs.kind});
    let resource =
        json!({"group": attrs.group, "version": attrs.version, "resource": attrs.resource});
    let mut request = Map::new();
    request.insert("uid".to_owned(), json!(uid));
    request.insert("kind".to_owned(), kind.clone());
    request.insert("resource".to_owned(), resource.clone());
    if !attrs.subresource.is_empty() {
        request.insert("subResource".to_owned(), json!(attrs.subresource));
    }
    request.insert("requestKind".to_owned(), kind);
    request.insert("requestResource".to_owned(), resource);
    if !attrs.subresource.is_empty() {
        request.insert("requestSubResource".to_owned(), json!(attrs.subresource));
    }
    if !attrs.name.is_empty() {
        request.insert("name".to_owned(), json!(attrs.name));
    }
    if !attrs.namespace.is_empty() {
        request.insert("namespace".to_owned(), json!(attrs.namespace));
    }
    request.insert("operation".to_owned(), json!(attrs.operation.as_str()));
    request.insert("userInfo".to_owned(), user_info(user));
    if with_objects {
        request.insert(
            "object".to_owned(),
            attrs.object.clone().unwrap_or(Value::Null),
        );
        request.insert(
            "oldObject".to_owned(),
            attrs.old_object.clone().unwrap_or(Value::Null),
        );
    }
    request.insert("dryRun".to_owned(), json!(attrs.dry_run));
    request.insert("options".to_owned(), attrs.options.clone());
    Value::Object(request)
}

/// `authentication.k8s.io/v1` UserInfo, empty fields left out.
fn user_info(user: &Requester) -> Value {
    let mut info = Map::new();
    if !user.username.is_empty() {
        info.insert("username".to_owned(), json!(user.username));
    }
    if let Some(uid) = user.uid.as_deref().filter(|u| !u.is_empty()) {
        info.insert("uid".to_owned(), json!(uid));
    }
    if !user.groups.is_empty() {
        info.insert("groups".to_owned(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        info.insert("extra".to_owned(), json!(user.extra));
    }
    Value::Object(info)
}

/// The whole AdmissionReview to POST.
pub(super) fn review(version: Version, request: Value) -> Value {
    json!({
        "apiVersion": version.api_version(),
        "kind": "AdmissionReview",
        "request": request,
    })
}

/// An AdmissionReview as a webhook answers it, decoded but not checked.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Answer {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    allowed: bool,
    #[serde(default)]
    status: Option<Status>,
    /// base64 in JSON, as Go encodes `[]byte`.
    #[serde(default)]
    patch: Option<String>,
    #[serde(default)]
    patch_type: Option<String>,
    #[serde(default)]
    audit_annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

/// client-go caps the text of an unstructured error response at this.
const MAX_UNSTRUCTURED_TEXT: usize = 2048;

/// What the HTTP exchange yielded, read as client-go's REST client reads
/// it: a 2xx JSON body decodes to an [`Answer`]; anything else is the error
/// client-go would report (the messages follow "failed to call webhook: ").
pub(super) fn answer(
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Answer, String> {
    let content_type = content_type.unwrap_or("application/json");
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let is_json = media == "application/json" || media.ends_with("+json");
    let success = (200..=206).contains(&status);
    if !success {
        if is_json {
            if let Ok(status) = serde_json::from_slice::<Status>(body) {
                let message = status.message.unwrap_or_default();
                if status.status.as_deref() != Some("Success") && !message.is_empty() {
                    return Err(message);
                }
            }
        }
        let text = media.is_empty() || media.starts_with("text/");
        return Err(generic_server_response(status, body, text));
    }
    if !is_json {
        return Err(format!("serializer for {content_type} doesn't exist"));
    }
    if body.is_empty() {
        return Err(format!(
            "0-length response with status code: {status} and content type: {content_type}"
        ));
    }
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// apimachinery's `NewGenericServerResponse` message for an answer that is
/// not a Status.
fn generic_server_response(code: u16, body: &[u8], text: bool) -> String {
    let server_message = if text {
        let cut = &body[..body.len().min(MAX_UNSTRUCTURED_TEXT)];
        String::from_utf8_lossy(cut).trim().to_owned()
    } else {
        "unknown".to_owned()
    };
    match code {
        409 => "the server reported a conflict".to_owned(),
        404 => "the server could not find the requested resource".to_owned(),
        400 => "the server rejected our request for an unknown reason".to_owned(),
        401 => "the server has asked for the client to provide credentials".to_owned(),
        403 | 415 => server_message,
        406 if server_message.is_empty() || server_message == "unknown" => {
            "the server was unable to respond with a content type that the client supports"
                .to_owned()
        }
        406 => server_message,
        405 => "the server does not allow this method on the requested resource".to_owned(),
        422 => "the server rejected our request due to an error in our request".to_owned(),
        503 => "the server is currently unable to handle the request".to_owned(),
        504 => "the server was unable to return a response in the time allotted, but may still be processing the request".to_owned(),
        429 => "the server has received too many requests and has asked us to try again later".to_owned(),
        c if c >= 500 => format!(
            "an error on the server ({server_message:?}) has prevented the request from succeeding"
        ),
        c => format!("the server responded with the status code {c} but did not return more information"),
    }
}

/// What a webhook decided, after kube's checks.
#[derive(Debug, Default)]
pub(super) struct Verdict {
    pub(super) allowed: bool,
    pub(super) status: Option<Status>,
    /// The decoded patch; empty for none.
    pub(super) patch: Vec<u8>,
    /// `JSONPatch` (v1beta1 answers are pinned to it); empty without a patch.
    pub(super) patch_type: String,
    pub(super) audit_annotations: BTreeMap<String, String>,
    pub(super) warnings: Vec<String>,
}

/// kube's `VerifyAdmissionResponse`: the messages become "received invalid
/// webhook response: …".
pub(super) fn verify(
    uid: &str,
    version: Version,
    mutating: bool,
    answer: Answer,
) -> Result<Verdict, String> {
    let Some(response) = answer.response else {
        return Err("webhook response was absent".to_owned());
    };
    let patch = match response.patch.as_deref() {
        None | Some("") => Vec::new(),
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("illegal base64 data in response.patch: {e}"))?,
    };
    let mut verdict = Verdict {
        allowed: response.allowed,
        status: response.status,
        patch: Vec::new(),
        patch_type: String::new(),
        audit_annotations: response.audit_annotations.unwrap_or_default(),
        warnings: response.warnings.unwrap_or_default(),
    };
    match version {
        Version::V1 => {
            if response.uid != uid {
                return Err(format!(
                    "expected response.uid={uid:?}, got {:?}",
                    response.uid
                ));
            }
            if answer.api_version != "admission.k8s.io/v1" || answer.kind != "AdmissionReview" {
                return Err(format!(
                    "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
                    answer.api_version, answer.kind
                ));
            }
            if mutating {
                match (&response.patch_type, patch.is_empty()) {
                    (None, false) => {
                        return Err(
                            "webhook returned response.patch but not response.patchType".to_owned()
                        )
                    }
                    (Some(_), true) => {
                        return Err(
                            "webhook returned response.patchType but not response.patch".to_owned()
                        )
                    }
                    (Some(t), false) if t.is_empty() => {
                        return Err(format!(
                            "webhook returned invalid response.patchType of {t:?}"
                        ))
                    }
                    _ => {}
                }
                verdict.patch = patch;
                verdict.patch_type = response.patch_type.unwrap_or_default();
            } else {
                if !patch.is_empty() {
                    return Err("validating webhook may not return response.patch".to_owned());
                }
                if response.patch_type.is_some() {
                    return Err("validating webhook may not return response.patchType".to_owned());
                }
            }
        }
        Version::V1beta1 => {
            // v1beta1 answers were never checked for uid, kind or patchType.
            if mutating && !patch.is_empty() {
                verdict.patch = patch;
                verdict.patch_type = "JSONPatch".to_owned();
            }
        }
    }
    Ok(verdict)
}
