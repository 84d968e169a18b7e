//! A stress run of a dead letter's page: 2 400 loads, 16 at a time, while the other tests of
//! this binary run alongside. Run by hand (`cargo test -p server --test it -- --ignored
//! page_loads` with the others, or `--include-ignored`): it reproduces a rare stall that is not
//! fully understood (docs/ARCHITECTURE.md, "Resources are made outside Suspense"), so it is
//! kept out of CI, where one stall in 2 400 would fail a run by chance.
//!
//! It fails on a load that started streaming and never finished (no timeout can end that); a
//! load with no answer at all is counted and printed (the 120 s request timeout answers it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::export::stored;
use crate::harness::spawn_app_with;

/// Loads of the page, `PARALLEL` at a time, on the test's one-thread runtime as in CI.
const LOADS: usize = 2400;
const PARALLEL: usize = 16;
/// Far above a normal render (tens of milliseconds): only a render that never ends reaches it.
const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
#[ignore = "a stress run (about 40 s) kept out of CI; see the module's doc"]
async fn a_dead_letters_page_that_starts_streaming_always_finishes_under_parallel_loads() {
    let app = spawn_app_with(&[("REVENANT_MANAGEMENT_URL", "http://ops:s3cret@127.0.0.1:9/")]).await;
    let id = stored(&app, "orders.dlq", b"{\"n\":1}", "awaiting", 1.0).await;
    // An operator's page has the most parts: the replay panel and the edit panel.
    let operator = app.client(Some("operator")).await;
    let url = format!("{}/dead-letters/{id}", app.base);
    let (mut unfinished, mut unanswered) = (Vec::new(), 0);
    for batch in 0..LOADS / PARALLEL {
        let loads = (0..PARALLEL).map(|_| {
            let (c, u) = (operator.clone(), url.clone());
            let (body, answered) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
            let (into, head) = (body.clone(), answered.clone());
            async move {
                let done = tokio::time::timeout(WITHIN, async move {
                    let mut resp = c.get(u).send().await?;
                    head.store(true, Ordering::SeqCst);
                    while let Some(chunk) = resp.chunk().await? {
                        into.lock().unwrap().extend_from_slice(&chunk);
                    }
                    Ok::<_, reqwest::Error>(())
                })
                .await;
                let html = String::from_utf8_lossy(&body.lock().unwrap()).into_owned();
                (done, answered.load(Ordering::SeqCst), html)
            }
        });
        for (i, (done, answered, html)) in futures::future::join_all(loads).await.into_iter().enumerate() {
            match done {
                Ok(Ok(())) => assert!(html.contains("Download NDJSON"), "load {batch}.{i} is not the page: {html}"),
                Ok(Err(e)) => panic!("load {batch}.{i}: {e}"),
                Err(_) if answered => {
                    let end: String = html.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
                    unfinished.push(format!("{batch}.{i} stopped after {} bytes: …{end}", html.len()));
                }
                // No head yet: the request-timeout layer answers 408 (`web::REQUEST_TIMEOUT`);
                // counted, not failed (docs/ARCHITECTURE.md says what is known of it).
                Err(_) => unanswered += 1,
            }
        }
    }
    eprintln!("{unanswered} of {LOADS} loads had no answer within {WITHIN:?}");
    assert!(unfinished.is_empty(), "{} of {LOADS} loads never finished: {unfinished:#?}", unfinished.len());
}
