use super::*;

fn body(resp: Response<Body>) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let bytes = rt.block_on(async { resp.into_body().collect().await.unwrap().to_bytes() });
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn health_paths_answer_ok_and_others_are_not_ours() {
    let h = Health::new();
    for path in ["/healthz", "/livez", "/readyz", "/readyz/"] {
        let resp = h.serve(path, None).unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert_eq!(body(resp), "ok");
    }
    assert!(h.serve("/apis", None).is_none());
    assert!(h.serve("/", None).is_none());
    assert!(h.serve("/healthzz", None).is_none());
}

#[test]
fn verbose_lists_every_check() {
    let h = Health::new();
    let text = body(h.serve("/readyz", Some("verbose")).unwrap());
    assert_eq!(text, "[+]ping ok\n[+]shutdown ok\nreadyz check passed\n");
}

#[test]
fn readyz_fails_once_shutdown_begins_but_livez_stays_ok() {
    let h = Health::new();
    h.begin_shutdown();
    let resp = h.serve("/readyz", None).unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body(resp).contains("[-]shutdown failed: process is shutting down"));
    assert_eq!(h.serve("/livez", None).unwrap().status(), StatusCode::OK);
    let excluded = h.serve("/readyz", Some("exclude=shutdown")).unwrap();
    assert_eq!(excluded.status(), StatusCode::OK);
}

#[test]
fn a_single_check_is_served_under_its_name() {
    let h = Health::new();
    assert_eq!(
        h.serve("/readyz/ping", None).unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        h.serve("/readyz/nope", None).unwrap().status(),
        StatusCode::NOT_FOUND
    );
}
