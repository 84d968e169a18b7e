//! Static bundles are compressed for clients that accept gzip; pages and server-function
//! answers are sent as they are.

use crate::harness::spawn_app_with;

#[tokio::test]
async fn the_wasm_and_css_bundles_are_gzipped_and_pages_are_not() {
    let site = std::env::temp_dir().join(engine::testing::unique("revenant-site"));
    std::fs::create_dir_all(site.join("pkg")).unwrap();
    std::fs::write(site.join("pkg/revenant.css"), ".a{color:red}\n".repeat(2000)).unwrap();
    std::fs::write(site.join("pkg/revenant_bg.wasm"), [0u8, 97, 115, 109].repeat(4000)).unwrap();
    let root = site.to_string_lossy().to_string();
    let app = spawn_app_with(&[("REVENANT_SITE_ROOT", root.as_str())]).await;
    let client = app.client(Some("viewer")).await;
    let get = async |path: &str| {
        let resp = client.get(format!("{}{path}", app.base)).header("accept-encoding", "gzip").send().await.unwrap();
        let encoding = resp.headers().get("content-encoding").map(|v| v.to_str().unwrap().to_string());
        (resp.status().as_u16(), encoding, resp.bytes().await.unwrap().len())
    };
    let (status, enc, len) = get("/pkg/revenant.css").await;
    assert_eq!((status, enc.as_deref()), (200, Some("gzip")), "the CSS is compressed");
    assert!(len < 28_000 / 10, "and much smaller: {len} bytes");
    let (status, enc, _) = get("/pkg/revenant_bg.wasm").await;
    assert_eq!((status, enc.as_deref()), (200, Some("gzip")), "the wasm is compressed");
    let (status, enc, _) = get("/outbox").await;
    assert_eq!((status, enc), (200, None), "pages are sent as they are");
    let _ = std::fs::remove_dir_all(&site);
}
