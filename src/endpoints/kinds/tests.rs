//! The table of kinds: what the server serves, and a third kind, defined
//! here and registered with one line in a test build, served like the two
//! real ones: CRUD, watch, Table, discovery, OpenAPI and apply.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::*;
use crate::api::meta::Requester;
use crate::endpoints::request::RequestInfo;
use crate::endpoints::{serve_api, Api};
use crate::registry::{Chain, Context};
use crate::storage::memory::MemoryStorage;
use widget::WidgetStrategy;

/// The type module and the strategy of a kind only tests serve: a Widget
/// has a size and a set of colours.
mod widget {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use crate::api::errors::FieldCause;
    use crate::api::meta::{Object, Requester};
    use crate::api::validation::{validate_object_meta, FieldErrors};
    use crate::api::ResourceInfo;
    use crate::registry::strategy::{age_cell, text_cell, Strategy};
    use crate::registry::table::TableColumn;

    pub(super) const WIDGETS: ResourceInfo = ResourceInfo {
        plural: "widgets",
        singular: "widget",
        kind: "Widget",
        short_names: &["wg"],
        namespaced: true,
        has_status: true,
    };

    /// A thing of some size and colours.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Widget {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub(super) api_version: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub(super) kind: String,
        #[serde(default)]
        pub(super) metadata: ObjectMeta,
        #[serde(default)]
        pub(super) spec: WidgetSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(super) status: Option<WidgetStatus>,
    }

    /// What a widget is.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct WidgetSpec {
        /// How big; 1 by default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(super) size: Option<i64>,
        /// Its colours, each once: appliers merge theirs.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend("x-kubernetes-list-type" = "set"))]
        pub(super) colours: Vec<String>,
        /// Who made it. Set by the server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(super) requester: Option<Requester>,
    }

    /// How a widget stands.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct WidgetStatus {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub(super) phase: Option<String>,
    }

    impl Widget {
        fn causes(&self) -> Vec<FieldCause> {
            let mut errs = FieldErrors::new();
            validate_object_meta(&mut errs, &self.metadata);
            if let Some(size) = self.spec.size.filter(|s| *s < 1) {
                errs.invalid("spec.size", size, "must be at least 1");
            }
            errs.into_causes()
        }
    }

    impl Object for Widget {
        crate::api::object_fields!(WIDGETS);

        fn reset_status(&mut self) {
            self.status = Some(WidgetStatus {
                phase: Some("Pending".to_owned()),
            });
        }

        fn bound_status(&mut self) {}

        fn phase(&self) -> Option<&str> {
            self.status.as_ref()?.phase.as_deref()
        }

        fn requester(&self) -> Option<&Requester> {
            self.spec.requester.as_ref()
        }

        fn set_requester(&mut self, requester: Requester) {
            self.spec.requester = Some(requester);
        }

        fn apply_defaults(&mut self) {
            self.spec.size.get_or_insert(1);
        }

        fn validate_create(&self) -> Vec<FieldCause> {
            self.causes()
        }

        fn validate_update(&self, _old: &Self) -> Vec<FieldCause> {
            self.causes()
        }
    }

    /// `widgets.storage.transfer.k8s.io`.
    #[derive(Debug, Clone, Copy, Default)]
    pub(super) struct WidgetStrategy;

    impl Strategy for WidgetStrategy {
        type Object = Widget;

        fn table_columns(&self) -> Vec<TableColumn> {
            vec![
                TableColumn::name(),
                TableColumn::new("Size", "integer", "How big the widget is."),
                TableColumn::new("Phase", "string", "How the widget stands."),
                TableColumn::age(),
            ]
        }

        fn table_cells(&self, obj: &Widget) -> Vec<Value> {
            vec![
                text_cell(obj.metadata.name.clone().unwrap_or_default()),
                Value::from(obj.spec.size.unwrap_or_default()),
                text_cell(obj.phase().unwrap_or_default()),
                age_cell(obj),
            ]
        }
    }
}

#[test]
fn the_served_kinds_are_the_two_of_the_api_each_named_once() {
    let kinds = Kinds::served();
    let plurals: Vec<&str> = kinds.iter().map(|k| k.resource().plural).collect();
    assert_eq!(plurals, ["namespacetransfers", "ephemeralclaims"]);
    let mut names = HashSet::new();
    for r in kinds.iter().map(Kind::resource) {
        assert_eq!(r.singular, r.kind.to_lowercase());
        for name in [r.plural, r.singular]
            .into_iter()
            .chain(r.short_names.iter().copied())
        {
            assert!(names.insert(name), "{name} is used twice");
        }
        assert_eq!(kinds.resource(r.plural), Some(r));
    }
    assert_eq!(kinds.resource("persistentvolumeclaims"), None);
    assert_eq!(kinds.resource("widgets"), None);
}

/// The served kinds and the test's own, over memory storage, with no
/// admission plugins.
async fn api_with_widgets() -> Api {
    let kinds = Kinds::served().with(Kind::of::<WidgetStrategy>());
    let api = Api::new(
        kinds,
        &StoreConfig {
            storage: Arc::new(MemoryStorage::default()),
            etcd_prefix: "/registry".to_owned(),
            shutdown: Arc::new(Notify::new()),
            admission: Chain::default(),
            max_objects_per_namespace: 0,
        },
    );
    for _ in 0..400 {
        if api.is_ready() {
            return api;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the watch caches never synced");
}

/// One request through the router, as alice.
async fn call(
    api: &Api,
    method: Method,
    target: &str,
    headers: &[(header::HeaderName, &str)],
    body: Value,
) -> http::Response<crate::endpoints::Body> {
    let uri: http::Uri = target.parse().unwrap();
    let info = RequestInfo::new(&method, &uri, api.kinds());
    let mut req = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(serde_json::to_vec(&body).unwrap())
    };
    let req = req.body(Full::new(body)).unwrap();
    let ctx = Context {
        user: Requester {
            username: "alice".to_owned(),
            ..Requester::default()
        },
        ..Context::default()
    };
    serve_api(api, &info, req, ctx).await
}

async fn json_of(resp: http::Response<crate::endpoints::Body>) -> (StatusCode, Value) {
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

const WIDGETS: &str = "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/shop/widgets";

/// A create of a Widget with `fields` besides its apiVersion and kind.
async fn create(api: &Api, fields: Value) -> (StatusCode, Value) {
    let mut body = json!({"apiVersion": "storage.transfer.k8s.io/v1alpha1", "kind": "Widget"});
    for (key, value) in fields.as_object().unwrap() {
        body[key] = value.clone();
    }
    json_of(
        call(
            api,
            Method::POST,
            WIDGETS,
            &[(header::CONTENT_TYPE, "application/json")],
            body,
        )
        .await,
    )
    .await
}

#[tokio::test]
async fn a_third_kind_registered_with_one_line_is_created_read_listed_updated_and_deleted() {
    let api = api_with_widgets().await;
    let (code, created) = create(
        &api,
        json!({"metadata": {"name": "w"}, "spec": {"colours": ["red"]}}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["spec"]["size"], 1, "its own defaulting ran");
    assert_eq!(created["spec"]["requester"]["username"], "alice");
    assert_eq!(created["status"]["phase"], "Pending");

    let (code, bad) = create(
        &api,
        json!({"metadata": {"name": "tiny"}, "spec": {"size": 0}}),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert_eq!(bad["details"]["kind"], "Widget");

    let (code, got) =
        json_of(call(&api, Method::GET, &format!("{WIDGETS}/w"), &[], Value::Null).await).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"]);

    let (code, list) = json_of(call(&api, Method::GET, WIDGETS, &[], Value::Null).await).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    let mut changed = got.clone();
    changed["spec"]["size"] = json!(3);
    let (code, updated) = json_of(
        call(
            &api,
            Method::PUT,
            &format!("{WIDGETS}/w"),
            &[(header::CONTENT_TYPE, "application/json")],
            changed,
        )
        .await,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{updated}");
    assert_eq!(updated["spec"]["size"], 3);
    assert_eq!(updated["metadata"]["generation"], 2);

    let (code, _) = json_of(
        call(
            &api,
            Method::DELETE,
            &format!("{WIDGETS}/w"),
            &[],
            Value::Null,
        )
        .await,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let (code, gone) =
        json_of(call(&api, Method::GET, &format!("{WIDGETS}/w"), &[], Value::Null).await).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(
        gone["message"],
        "widgets.storage.transfer.k8s.io \"w\" not found"
    );
}

#[tokio::test]
async fn a_third_kind_is_watched_and_printed_as_a_table_with_its_own_columns() {
    let api = api_with_widgets().await;
    let (code, _) = create(
        &api,
        json!({"metadata": {"name": "w"}, "spec": {"size": 7}}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);

    let (code, table) = json_of(
        call(
            &api,
            Method::GET,
            WIDGETS,
            &[(
                header::ACCEPT,
                "application/json;as=Table;v=v1;g=meta.k8s.io",
            )],
            Value::Null,
        )
        .await,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Name", "Size", "Phase", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "w");
    assert_eq!(table["rows"][0]["cells"][1], 7);

    let resp = call(
        &api,
        Method::GET,
        &format!("{WIDGETS}?watch=true&resourceVersion=0"),
        &[],
        Value::Null,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the watch sends the widget within 10 s")
        .unwrap()
        .unwrap();
    let line = frame.into_data().unwrap();
    let event: Value = serde_json::from_slice(line.trim_ascii()).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["kind"], "Widget");
    assert_eq!(event["object"]["metadata"]["name"], "w");
}

#[tokio::test]
async fn a_third_kind_is_applied_and_its_set_merges_by_its_own_schema_markers() {
    let api = api_with_widgets().await;
    let apply = |manager: &'static str, colours: Value| {
        let api = &api;
        async move {
            json_of(
                call(
                    api,
                    Method::PATCH,
                    &format!("{WIDGETS}/w?fieldManager={manager}"),
                    &[(header::CONTENT_TYPE, "application/apply-patch+yaml")],
                    json!({"apiVersion": "storage.transfer.k8s.io/v1alpha1", "kind": "Widget",
                           "metadata": {"name": "w"}, "spec": {"colours": colours}}),
                )
                .await,
            )
            .await
        }
    };
    let (code, first) = apply("alice-tool", json!(["red"])).await;
    assert_eq!(code, StatusCode::CREATED, "{first}");
    let (code, second) = apply("bob-tool", json!(["blue"])).await;
    assert_eq!(code, StatusCode::OK, "{second}");
    assert_eq!(
        second["spec"]["colours"],
        json!(["red", "blue"]),
        "a set list keeps both managers' values"
    );
    let managers: Vec<&str> = second["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["alice-tool", "bob-tool"]);
}

#[tokio::test]
async fn a_third_kind_is_in_discovery_and_both_openapi_documents() {
    let api = api_with_widgets().await;
    let (_, list) = json_of(
        call(
            &api,
            Method::GET,
            "/apis/storage.transfer.k8s.io/v1alpha1",
            &[],
            Value::Null,
        )
        .await,
    )
    .await;
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "namespacetransfers",
            "namespacetransfers/status",
            "ephemeralclaims",
            "ephemeralclaims/status",
            "widgets",
            "widgets/status"
        ]
    );

    let (_, aggregated) = json_of(
        call(
            &api,
            Method::GET,
            "/apis",
            &[(
                header::ACCEPT,
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            )],
            Value::Null,
        )
        .await,
    )
    .await;
    let widgets = &aggregated["items"][0]["versions"][0]["resources"][2];
    assert_eq!(widgets["resource"], "widgets");
    assert_eq!(widgets["shortNames"], json!(["wg"]));
    assert_eq!(widgets["responseKind"]["kind"], "Widget");

    let widget = "io.k8s.transfer.storage.v1alpha1.Widget";
    let (_, v2) = json_of(call(&api, Method::GET, "/openapi/v2", &[], Value::Null).await).await;
    assert_eq!(
        v2["definitions"][widget]["x-kubernetes-group-version-kind"],
        json!([{"group": "storage.transfer.k8s.io", "kind": "Widget", "version": "v1alpha1"}])
    );
    assert_eq!(
        v2["definitions"]["io.k8s.transfer.storage.v1alpha1.WidgetSpec"]["properties"]["colours"]
            ["x-kubernetes-list-type"],
        "set"
    );
    assert!(v2["paths"]
        .get("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{namespace}/widgets/{name}")
        .is_some());
    let (_, v3) = json_of(
        call(
            &api,
            Method::GET,
            "/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1",
            &[],
            Value::Null,
        )
        .await,
    )
    .await;
    assert!(v3["components"]["schemas"].get(widget).is_some());
    assert!(v3["paths"]
        .get("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{namespace}/widgets/{name}/status")
        .is_some());
}

#[tokio::test]
async fn the_served_kinds_have_stores_the_controllers_take_back_by_strategy() {
    let api = api_with_widgets().await;
    assert!(api
        .store::<crate::registry::namespace_transfer::NamespaceTransferStrategy>()
        .is_some());
    assert!(api
        .store::<crate::registry::ephemeral_claim::EphemeralClaimStrategy>()
        .is_some());
    assert!(api.store::<WidgetStrategy>().is_some());
}
