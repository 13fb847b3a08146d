//! End-to-end tests: expressions evaluated against activations.

use serde_json::{json, Value as Json};

use crate::*;

fn activation(object: Json) -> Activation<'static> {
    Activation {
        object,
        old_object: Json::Null,
        request: json!({"operation": "CREATE", "userInfo": {"username": "alice"}}),
        params: Json::Null,
        namespace_object: Json::Null,
        variables: Vec::new(),
        authorizer: None,
        request_resource: None,
    }
}

fn run_in(expr: &str, a: &Activation) -> Result<Output, String> {
    let program = Program::compile(expr).map_err(|e| e.message)?;
    evaluate(&program, a, &Limits::default()).map_err(|e| e.message)
}

fn eval_on(expr: &str, object: Json) -> Result<Json, String> {
    run_in(expr, &activation(object)).map(|o| o.value)
}

fn eval(expr: &str) -> Result<Json, String> {
    eval_on(
        expr,
        json!({"metadata": {"name": "x", "labels": {"app": "web"}}, "spec": {"replicas": 3}}),
    )
}

#[track_caller]
fn assert_true(expr: &str) {
    assert_eq!(eval(expr), Ok(json!(true)), "{expr}");
}

#[test]
fn object_fields_are_selected() {
    assert_eq!(eval("object.spec.replicas"), Ok(json!(3)));
    assert_eq!(eval("object.metadata.labels.app"), Ok(json!("web")));
    assert_true("object.spec.replicas > 2 && request.operation == 'CREATE'");
}

#[test]
fn a_missing_key_is_an_error_and_has_tests_for_it() {
    assert_eq!(
        eval("object.spec.missing"),
        Err("no such key: missing".to_owned())
    );
    assert_true("!has(object.spec.missing) && has(object.spec.replicas)");
}

#[test]
fn optional_syntax_selects_absent_fields() {
    assert_eq!(eval("object.?spec.?missing.orValue(1)"), Ok(json!(1)));
    assert_eq!(eval("object.?spec.?replicas.orValue(1)"), Ok(json!(3)));
}

#[test]
fn absent_inputs_are_null() {
    assert_true("oldObject == null && params == null && namespaceObject == null");
}

#[test]
fn output_reports_the_cel_type_name() {
    let a = activation(json!({}));
    let types: Vec<_> = ["true", "1", "'s'", "[1]", "{'a': 1}", "1.5", "null"]
        .iter()
        .map(|e| run_in(e, &a).map(|o| o.type_name))
        .collect();
    assert_eq!(
        types,
        [
            "bool",
            "int",
            "string",
            "list",
            "map",
            "double",
            "null_type"
        ]
        .map(|s| Ok(s.to_owned()))
    );
}

#[test]
fn unknown_functions_and_variables_are_runtime_errors() {
    assert!(Program::compile("nosuch(1)").is_ok());
    assert!(eval("nosuch(1)").is_err());
    assert!(eval("nosuchvar").is_err());
}

#[test]
fn compile_errors_read_like_kube() {
    let err = Program::compile("1 +").map(|_| ()).unwrap_err();
    assert!(
        err.message
            .starts_with("compilation failed: ERROR: <input>:1:"),
        "{}",
        err.message
    );
}

#[test]
fn quantity_compares_across_suffixes() {
    assert_true("quantity('1Gi').isGreaterThan(quantity('1G'))");
    assert_true("quantity('1000m') == quantity('1')");
    assert_true("quantity('50M').compareTo(quantity('50Mi')) == -1");
    assert_true("quantity('1.5').isLessThan(quantity('2'))");
    assert_true("quantity('-1').sign() == -1 && quantity('0').sign() == 0");
}

#[test]
fn quantity_arithmetic_is_exact() {
    assert_true("quantity('1Ki').add(quantity('24')).asInteger() == 1048");
    assert_true("quantity('1').sub(1).isInteger() && quantity('1').sub(1).asInteger() == 0");
    assert_true("quantity('0.1').add(quantity('0.2')) == quantity('300m')");
    assert_true("quantity('1.5').asApproximateFloat() == 1.5");
    assert_true("!quantity('1.5').isInteger()");
    assert_eq!(
        eval("quantity('1.5').asInteger()"),
        Err("cannot convert value to integer".to_owned())
    );
    assert_eq!(eval("quantity('1.5Gi')"), Ok(json!("1536Mi")));
}

#[test]
fn is_quantity_rejects_what_quantity_refuses() {
    assert_true("isQuantity('1.3Gi') && !isQuantity('200K') && !isQuantity('Three')");
    assert_eq!(
        eval("quantity('200K')"),
        Err("unable to parse quantity's suffix".to_owned())
    );
}

#[test]
fn urls_expose_their_parts() {
    assert_eq!(
        eval("url('https://example.com:80/a').getScheme()"),
        Ok(json!("https"))
    );
    assert_eq!(
        eval("url('https://example.com:80/a').getHost()"),
        Ok(json!("example.com:80"))
    );
    assert_eq!(
        eval("url('https://example.com:80/a').getHostname()"),
        Ok(json!("example.com"))
    );
    assert_eq!(
        eval("url('https://example.com:80/a').getPort()"),
        Ok(json!("80"))
    );
    assert_eq!(
        eval("url('https://example.com/a%2Fb').getEscapedPath()"),
        Ok(json!("/a%2Fb"))
    );
    assert_eq!(
        eval("url('https://e.com/?k=v&k=w').getQuery()"),
        Ok(json!({"k": ["v", "w"]}))
    );
    assert_true("isURL('https://example.com') && !isURL('example.com')");
    assert_eq!(
        eval("url('example.com')"),
        Err("URL parse error during conversion from string: parse \"example.com\": invalid URI for request".to_owned())
    );
}

#[test]
fn regex_find_and_find_all() {
    assert_eq!(eval("'abc 123 def 456'.find('[0-9]+')"), Ok(json!("123")));
    assert_eq!(eval("'abc'.find('[0-9]+')"), Ok(json!("")));
    assert_eq!(
        eval("'a1b2c3'.findAll('[0-9]')"),
        Ok(json!(["1", "2", "3"]))
    );
    assert_eq!(eval("'a1b2c3'.findAll('[0-9]', 2)"), Ok(json!(["1", "2"])));
    assert_eq!(eval("'a1b2c3'.findAll('[0-9]', 0)"), Ok(json!([])));
    assert!(eval("'a'.find('(')").is_err_and(|e| e.starts_with("Illegal regex: ")));
    assert_true("'abc'.matches('^a.c$')");
}

#[test]
fn list_library_functions() {
    assert_true("[1, 2, 3].isSorted() && ![2, 1].isSorted() && ['a', 'b'].isSorted()");
    assert_true("[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0");
    assert_true("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3");
    assert_true("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2");
    assert_true("[1, 2].indexOf(5) == -1");
    assert_eq!(eval("[].min()"), Err("min called on empty list".to_owned()));
}

#[test]
fn cel_go_list_extension_functions() {
    assert_eq!(eval("[1, 2, 3, 4].slice(1, 3)"), Ok(json!([2, 3])));
    assert_eq!(eval("[[1], [2, 3]].flatten()"), Ok(json!([1, 2, 3])));
    assert_eq!(eval("[3, 1, 2].sort()"), Ok(json!([1, 2, 3])));
    assert_eq!(eval("[1, 1, 2].distinct()"), Ok(json!([1, 2])));
    assert_eq!(eval("lists.range(3)"), Ok(json!([0, 1, 2])));
    assert_eq!(
        eval("[{'n': 2}, {'n': 1}].sortBy(e, e.n)"),
        Ok(json!([{"n": 1}, {"n": 2}]))
    );
}

#[test]
fn sets_compare_lists_as_sets() {
    assert_true("sets.contains([1, 2, 3], [2, 1])");
    assert_true("!sets.contains([1], [2])");
    assert_true("sets.equivalent([1, 2, 2], [2, 1])");
    assert_true("sets.intersects([1, 2], [2, 3]) && !sets.intersects([1], [3])");
}

#[test]
fn strings_extension_functions() {
    assert_eq!(eval("'TacoCat'.lowerAscii()"), Ok(json!("tacocat")));
    assert_eq!(eval("'TacoCat'.upperAscii()"), Ok(json!("TACOCAT")));
    assert_eq!(eval("'a,b'.split(',')"), Ok(json!(["a", "b"])));
    assert_eq!(eval("['a', 'b'].join('-')"), Ok(json!("a-b")));
    assert_eq!(eval("'aaa'.replace('a', 'b', 2)"), Ok(json!("bba")));
    assert_eq!(eval("'  x '.trim()"), Ok(json!("x")));
    assert_eq!(eval("'hello'.substring(1, 3)"), Ok(json!("el")));
    assert_eq!(eval("'hello'.indexOf('l')"), Ok(json!(2)));
    assert_eq!(eval("'hello'.lastIndexOf('l')"), Ok(json!(3)));
    assert_eq!(eval("'hello'.charAt(1)"), Ok(json!("e")));
    assert_eq!(eval("'%s has %d'.format(['x', 3])"), Ok(json!("x has 3")));
    assert_eq!(eval("strings.quote('a\"b')"), Ok(json!("\"a\\\"b\"")));
}

#[test]
fn standard_macros_and_conversions() {
    assert_true(
        "[1, 2, 3].all(x, x > 0) && [1, 2].exists(x, x == 2) && [1, 2].exists_one(x, x == 2)",
    );
    assert_eq!(eval("[1, 2, 3].map(x, x * 2)"), Ok(json!([2, 4, 6])));
    assert_eq!(eval("[1, 2, 3].filter(x, x > 1)"), Ok(json!([2, 3])));
    assert_eq!(eval("[1, 2, 3].map(x, x > 1, x * 10)"), Ok(json!([20, 30])));
    assert_eq!(eval("object.metadata.labels.map(k, k)"), Ok(json!(["app"])));
    assert_eq!(eval("string(1) + 'x'"), Ok(json!("1x")));
    assert_eq!(eval("duration('1h30m')"), Ok(json!("1h30m0s")));
    assert_eq!(
        eval("timestamp('2024-01-02T03:04:05Z')"),
        Ok(json!("2024-01-02T03:04:05Z"))
    );
    assert_eq!(eval("b'abc'"), Ok(json!("YWJj")));
}

fn with_variables(vars: &[(&str, &str)]) -> Activation<'static> {
    let mut a = activation(json!({"spec": {"replicas": 3, "items": [1, 2, 3]}}));
    a.variables = vars
        .iter()
        .map(|(n, e)| {
            (
                (*n).to_owned(),
                Program::compile(e).unwrap_or_else(|e| panic!("{e}")),
            )
        })
        .collect();
    a
}

#[test]
fn variables_see_earlier_variables() {
    let a = with_variables(&[("r", "object.spec.replicas"), ("double", "variables.r * 2")]);
    assert_eq!(
        run_in("variables.double + variables.r", &a).map(|o| o.value),
        Ok(json!(9))
    );
}

#[test]
fn a_variable_cannot_see_itself_or_later_ones() {
    let a = with_variables(&[("a", "variables.b"), ("b", "1")]);
    assert_eq!(
        run_in("variables.a", &a).map(|o| o.value),
        Err("no such key: b".to_owned())
    );
    assert_eq!(
        run_in("variables.nope", &a).map(|o| o.value),
        Err("no such key: nope".to_owned())
    );
}

#[test]
fn a_variable_error_is_the_error_of_the_expression_using_it() {
    let a = with_variables(&[("bad", "object.spec.missing"), ("ok", "1")]);
    assert_eq!(
        run_in("variables.ok == 1", &a).map(|o| o.value),
        Ok(json!(true))
    );
    assert_eq!(
        run_in("variables.bad", &a).map(|o| o.value),
        Err("no such key: missing".to_owned())
    );
}

/// An authorizer that counts its calls.
#[derive(Debug, Default)]
struct CountingAuthorizer {
    calls: std::sync::Mutex<Vec<AuthzCheck>>,
}

impl Authorizer for CountingAuthorizer {
    fn check(&self, check: &AuthzCheck) -> AuthzDecision {
        let allowed = match check {
            AuthzCheck::Path { path, .. } => path == "/healthz",
            AuthzCheck::Resource { resource, verb, .. } => resource == "pods" && verb == "get",
        };
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(check.clone());
        }
        AuthzDecision {
            allowed,
            denied: !allowed,
            reason: if allowed { "ok".into() } else { "nope".into() },
            error: None,
        }
    }
}

#[test]
fn variables_are_evaluated_once_per_session() {
    let authz = CountingAuthorizer::default();
    let mut a = with_variables(&[("can", "authorizer.path('/healthz').check('get').allowed()")]);
    a.authorizer = Some(&authz);
    let session = Session::new(&a);
    let program =
        Program::compile("variables.can && variables.can").unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..3 {
        assert_eq!(
            session
                .evaluate(&program, &Limits::default())
                .map(|o| o.value),
            Ok(json!(true))
        );
    }
    assert_eq!(authz.calls.lock().map(|c| c.len()).unwrap_or_default(), 1);
}

#[test]
fn authorizer_checks_resources_and_paths() {
    let authz = CountingAuthorizer::default();
    let mut a = activation(json!({}));
    a.authorizer = Some(&authz);
    a.request_resource = Some(ResourceCheck {
        group: "apps".into(),
        resource: "deployments".into(),
        subresource: String::new(),
        namespace: "ns".into(),
        name: "d".into(),
    });
    let run = |e: &str| run_in(e, &a).map(|o| o.value);
    assert_eq!(
        run("authorizer.group('').resource('pods').namespace('ns').name('p').subresource('log').check('get').allowed()"),
        Ok(json!(true))
    );
    assert_eq!(
        run("authorizer.path('/metrics').check('get').reason()"),
        Ok(json!("nope"))
    );
    assert_eq!(
        run("authorizer.requestResource.check('update').allowed()"),
        Ok(json!(false))
    );
    assert_eq!(
        run("authorizer.serviceAccount('kube-system', 'ctrl').group('').resource('pods').check('get').errored()"),
        Ok(json!(false))
    );
    assert_eq!(
        run("authorizer.serviceAccount('kube-system', 'Bad_Name')"),
        Err("Invalid service account name".to_owned())
    );
    assert_eq!(
        run("authorizer.path('').check('get')"),
        Err("path must not be empty".to_owned())
    );
    let calls = authz.calls.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(
        calls[0],
        AuthzCheck::Resource {
            group: String::new(),
            resource: "pods".into(),
            subresource: "log".into(),
            namespace: "ns".into(),
            name: "p".into(),
            verb: "get".into(),
            field_selector: None,
            label_selector: None,
            service_account: None,
        }
    );
    assert!(matches!(
        &calls[2],
        AuthzCheck::Resource { group, resource, name, verb, .. }
            if group == "apps" && resource == "deployments" && name == "d" && verb == "update"
    ));
    assert!(matches!(
        &calls[3],
        AuthzCheck::Resource { service_account: Some((ns, n)), .. } if ns == "kube-system" && n == "ctrl"
    ));
}

#[test]
fn without_an_authorizer_the_variable_is_unbound() {
    assert!(eval("authorizer.path('/').check('get').allowed()").is_err());
}

#[test]
fn more_than_two_authorization_checks_exceed_the_cost_limit() {
    let authz = CountingAuthorizer::default();
    let mut a = activation(json!({}));
    a.authorizer = Some(&authz);
    let expr = "authorizer.path('/a').check('get').allowed() || authorizer.path('/b').check('get').allowed() || authorizer.path('/c').check('get').allowed()";
    assert_eq!(
        run_in(expr, &a).map(|o| o.value),
        Err("operation cancelled: actual cost limit exceeded".to_owned())
    );
}

#[test]
fn object_construction_builds_apply_configurations() {
    let out = run_in(
        "Object{metadata: Object.metadata{labels: {'a': 'b'}}, spec: Object.spec{replicas: object.spec.replicas + 1}}",
        &activation(json!({"spec": {"replicas": 1}})),
    );
    assert_eq!(
        out,
        Ok(Output {
            value: json!({"metadata": {"labels": {"a": "b"}}, "spec": {"replicas": 2}}),
            type_name: "Object".to_owned(),
            element_type_name: None,
        })
    );
    assert_eq!(
        eval("Object{spec: Object.spec{replicas: 2}}.spec.replicas"),
        Ok(json!(2))
    );
    assert_eq!(eval("Object{?spec: optional.none()}"), Ok(json!({})));
    assert!(eval("Secret{data: 1}").is_err());
}

#[test]
fn json_patches_are_built_with_escaped_keys() {
    assert_eq!(
        eval("[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b~c'), value: 'y'}]"),
        Ok(json!([{"op": "add", "path": "/metadata/labels/a~1b~0c", "value": "y"}]))
    );
    assert_eq!(
        eval("JSONPatch{op: 'replace', path: '/spec', value: Object.spec{replicas: 1}}"),
        Ok(json!({"op": "replace", "path": "/spec", "value": {"replicas": 1}}))
    );
    let patches = run_in(
        "[JSONPatch{op: 'remove', path: '/a'}]",
        &activation(json!({})),
    );
    assert_eq!(
        patches.map(|o| o.element_type_name),
        Ok(Some("JSONPatch".to_owned()))
    );
    assert!(eval("JSONPatch{op: 'add', nope: 1}").is_err());
    assert!(eval("JSONPatch{op: 1}").is_err());
}

#[test]
fn a_quadratic_comprehension_over_a_large_list_is_cancelled() {
    let items: Vec<i64> = (0..2000).collect();
    let a = activation(json!({"items": items}));
    let expr = "object.items.all(x, object.items.all(y, x + y >= 0))";
    assert_eq!(
        run_in(expr, &a).map(|o| o.value),
        Err("operation cancelled: actual cost limit exceeded".to_owned())
    );
    // the same over a small list is fine
    let small = activation(json!({"items": [1, 2, 3]}));
    assert_eq!(run_in(expr, &small).map(|o| o.value), Ok(json!(true)));
}

#[test]
fn the_cost_limit_cannot_be_swallowed_by_a_logical_operator() {
    let items: Vec<i64> = (0..2000).collect();
    let a = activation(json!({"items": items}));
    let expr = "true || object.items.all(x, object.items.all(y, x + y >= 0))";
    assert_eq!(run_in(expr, &a).map(|o| o.value), Ok(json!(true)));
    let expr = "object.items.all(x, object.items.all(y, x + y >= 0)) || true";
    assert_eq!(
        run_in(expr, &a).map(|o| o.value),
        Err("operation cancelled: actual cost limit exceeded".to_owned())
    );
}

#[test]
fn a_small_limit_cancels_even_a_linear_evaluation() {
    let items: Vec<i64> = (0..100).collect();
    let a = activation(json!({"items": items}));
    let program =
        Program::compile("object.items.map(x, x * 2).size()").unwrap_or_else(|e| panic!("{e}"));
    assert!(evaluate(&program, &a, &Limits { max_cost: 50 }).is_err());
    assert!(evaluate(&program, &a, &Limits { max_cost: 10_000 }).is_ok());
}

#[test]
fn ip_addresses_parse_strictly_and_answer_questions() {
    assert_true("ip('10.0.0.1').family() == 4 && ip('::1').family() == 6");
    assert_true("ip('127.0.0.1').isLoopback() && ip('::').isUnspecified()");
    assert_true("ip('fe80::1').isLinkLocalUnicast() && ip('224.0.0.1').isLinkLocalMulticast()");
    assert_true("ip('8.8.8.8').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()");
    assert_true(
        "isIP('1.2.3.4') && !isIP('01.2.3.4') && !isIP('::ffff:1.2.3.4') && !isIP('fe80::1%eth0')",
    );
    assert_true("ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')");
    assert_eq!(
        eval("string(ip('2001:DB8:0:0:0::1'))"),
        Ok(json!("2001:db8::1"))
    );
    assert_true("ip('1.2.3.4') == ip('1.2.3.4')");
}

#[test]
fn cidrs_contain_addresses_and_networks() {
    assert_true("cidr('10.0.0.0/8').containsIP('10.1.2.3') && !cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))");
    assert_true("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')");
    assert_true("cidr('10.0.0.1/8').masked() == cidr('10.0.0.0/8') && cidr('10.0.0.1/8').prefixLength() == 8");
    assert_eq!(
        eval("string(cidr('10.0.0.1/8').ip())"),
        Ok(json!("10.0.0.1"))
    );
    assert_true("isCIDR('::1/128') && !isCIDR('10.0.0.0/33') && !isCIDR('10.0.0.0') && !isCIDR('10.0.0.0/08')");
    assert_eq!(eval("cidr('192.168.0.0/16')"), Ok(json!("192.168.0.0/16")));
}

#[test]
fn semver_orders_versions_like_blang_semver() {
    assert_true("semver('1.2.3').isLessThan(semver('1.10.0'))");
    assert_true("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))");
    assert_true("semver('1.0.0-alpha.1').compareTo(semver('1.0.0-alpha.beta')) == -1");
    assert_true("semver('1.0.0+build') == semver('1.0.0')");
    assert_true("semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3");
    assert_true(
        "isSemver('1.2.3') && !isSemver('v1.2') && isSemver('v1.2', true) && !isSemver('01.2.3')",
    );
    assert_eq!(eval("semver('v01.02', true)"), Ok(json!("1.2.0")));
    assert_eq!(
        eval("semver('1.2')"),
        Err("No Major.Minor.Patch elements found".to_owned())
    );
}

#[test]
fn copying_a_large_value_in_a_loop_is_charged() {
    let items: Vec<i64> = (0..10_000).collect();
    let big = "x".repeat(1_000_000);
    let a = activation(json!({"items": items, "big": big}));
    for expr in [
        "object.items.map(x, object.big).size()",
        "object.items.map(x, [object.big]).size()",
        "object.items.map(x, {'k': object.big}).size()",
        "object.items.all(x, object.big.replace('x', object.big) != '')",
        "size(lists.range(object.items.size() * object.items.size() * 1000))",
        "object.items.distinct().size()",
    ] {
        assert_eq!(
            run_in(expr, &a).map(|o| o.value),
            Err("operation cancelled: actual cost limit exceeded".to_owned()),
            "{expr}"
        );
    }
}

#[test]
fn replace_keeps_the_strings_extension_semantics() {
    assert_eq!(eval("'abc'.replace('', '-')"), Ok(json!("-a-b-c-")));
    assert_eq!(eval("'aaa'.replace('a', 'b')"), Ok(json!("bbb")));
    assert_eq!(eval("'aaa'.replace('a', 'b', -1)"), Ok(json!("bbb")));
    assert_eq!(eval("'aaa'.replace('a', 'b', 0)"), Ok(json!("aaa")));
    assert!(eval("1.replace('a', 'b')").is_err_and(|e| e.contains("'replace'")));
}

#[test]
fn a_linear_policy_over_a_large_object_runs_within_the_limit() {
    let items: Vec<Json> = (0..10_000)
        .map(|i| json!({"name": format!("item-{i}"), "cpu": "100m"}))
        .collect();
    let a = activation(json!({"spec": {"items": items}}));
    let expr = "object.spec.items.all(i, i.name.startsWith('item-') && quantity(i.cpu).isLessThan(quantity('1')))";
    assert_eq!(run_in(expr, &a).map(|o| o.value), Ok(json!(true)));
}

#[test]
fn optional_list_helpers() {
    assert_eq!(
        eval("[1, 2].first().value() + [1, 2].last().value()"),
        Ok(json!(3))
    );
    assert_true("![].first().hasValue()");
    assert_eq!(
        eval("optional.unwrap([optional.of(1), optional.none()])"),
        Ok(json!([1]))
    );
    assert_eq!(
        eval("[optional.none(), optional.of(2)].unwrapOpt()"),
        Ok(json!([2]))
    );
    assert_eq!(
        eval("optional.of(1).optMap(x, x + 1).value()"),
        Ok(json!(2))
    );
}

#[test]
fn named_formats_validate_strings() {
    assert_true("!format.dns1123Label().validate('my-name').hasValue()");
    assert_eq!(
        eval("format.dns1123Label().validate('a.b').value()"),
        Ok(json!(["must not contain dots"]))
    );
    assert_true("format.named('uuid').value().validate('nope').hasValue()");
    assert_true("!format.named('nope').hasValue()");
    assert_true("!format.labelValue().validate(object.metadata.labels.app).hasValue()");
}

#[test]
fn programs_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>(_: &T) {}
    let program = Program::compile("object.spec.replicas > 1").unwrap_or_else(|e| panic!("{e}"));
    assert_send_sync(&program);
    assert_eq!(program.expression(), "object.spec.replicas > 1");
    let handle = std::thread::spawn({
        let program = program.clone();
        move || {
            evaluate(
                &program,
                &activation(json!({"spec": {"replicas": 2}})),
                &Limits::default(),
            )
        }
    });
    assert_eq!(
        handle.join().ok().and_then(|r| r.ok()).map(|o| o.value),
        Some(json!(true))
    );
}

#[test]
fn unsupported_functions_fail_at_evaluation() {
    assert!(Program::compile("{'a': 1}.all(k, v, v > 0)").is_ok());
    assert!(eval("{'a': 1}.all(k, v, v > 0)").is_err());
    assert!(eval("[1].transformList(i, v, v)").is_err());
    assert!(UNSUPPORTED.contains(&"transformList"));
}

#[test]
fn the_default_limit_is_kubes_per_call_limit() {
    assert_eq!(Limits::default().max_cost, 1_000_000);
}

#[test]
fn the_operations_guide_lists_every_unsupported_function() {
    let guide = include_str!("../../../docs/operations.md");
    let section = guide
        .split("### CEL support")
        .nth(1)
        .expect("docs/operations.md has a CEL support section");
    for name in crate::UNSUPPORTED {
        assert!(
            section.contains(&format!("`{name}`")),
            "docs/operations.md does not list `{name}` as unsupported"
        );
    }
}
