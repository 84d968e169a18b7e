//! `revenant dlq add|remove|list` on a running `serve`: the queue's messages appear with no
//! restart, `list` says a live ingester consumes it, and each change is audited.

use std::{process::Command, time::Duration};

use lapin::{BasicProperties, options::BasicPublishOptions};

use crate::chaos::{amqp, declare, kill9, spawn};
use crate::dlq_watch::work_and_dlq;

fn run(db_url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_revenant"))
        .arg("dlq")
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("AMQP_URL", testkit::amqp_url())
        .env_remove("REVENANT_CONFIG")
        .env_remove("REVENANT_MANAGEMENT_URL")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run revenant dlq")
}

fn dlq(db_url: &str, args: &[&str]) -> String {
    let out = run(db_url, args);
    assert!(out.status.success(), "revenant dlq {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn dlq_add_on_a_running_serve_ingests_the_queue_without_a_restart() {
    let db = testkit::fresh_db().await;
    let queue = testkit::unique("revenant-test.cli-dlq");
    let conn = amqp().await;
    let ch = conn.create_channel().await.unwrap();
    // A real dead-letter target: `add` starts it without `--force`.
    let work = format!("{queue}.work");
    work_and_dlq(&ch, &work, &queue).await;
    for i in 0..25 {
        ch.basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            format!("{{\"n\":{i}}}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let mut serve = spawn(
        "serve",
        &db.url,
        &[
            ("REVENANT_BIND", &bind),
            ("REVENANT_RELAY", "false"),
            ("REVENANT_ALERTS", "false"),
            ("REVENANT_MANAGEMENT_URL", "off"),
        ],
    );
    let stored = async || -> i64 {
        sqlx::query_scalar!("SELECT count(*) FROM dead_letters WHERE queue = $1", &queue)
            .fetch_one(&db.pool)
            .await
            .ok()
            .flatten()
            .unwrap_or(0)
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stored().await, 0, "not watched: not ingested");

    let added = dlq(&db.url, &["add", &queue]);
    assert!(added.contains("now ingested"), "{added}");
    testkit::until("the queue's messages stored", Duration::from_secs(30), async || stored().await == 25).await;
    testkit::until("`dlq list` says a live ingester consumes it", Duration::from_secs(20), async || {
        dlq(&db.url, &["list"]).lines().any(|l| l.starts_with(&queue) && l.contains("consumed now"))
    })
    .await;
    let removed = dlq(&db.url, &["remove", &queue]);
    assert!(removed.contains("no longer ingested"), "{removed}");
    let audited = count!(
        &db.pool,
        "SELECT count(*) FROM audit_log WHERE action IN ('dlq.watch', 'dlq.unwatch') AND actor LIKE 'cli:%'"
    );
    assert_eq!(audited, 2);
    kill9(&mut serve);
    ch.queue_delete(queue.as_str().into(), Default::default()).await.ok();
    ch.queue_delete(work.as_str().into(), Default::default()).await.ok();
}

#[tokio::test]
async fn dlq_add_refuses_a_queue_nothing_dead_letters_into_without_force_and_says_why() {
    let db = testkit::fresh_db().await;
    let (plain, dlq_q) = (testkit::unique("revenant-test.cli-plain"), testkit::unique("revenant-test.cli-dlq"));
    let conn = amqp().await;
    declare(&conn, &plain).await;
    let ch = conn.create_channel().await.unwrap();
    let work = format!("{dlq_q}.work");
    work_and_dlq(&ch, &work, &dlq_q).await;
    let watched = async || count!(&db.pool, "SELECT count(*) FROM watched_queues WHERE watching");
    // One risky queue among two: nothing is started, and the reason names it.
    let refused = run(&db.url, &["add", &dlq_q, &plain]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!("{plain}: may not be a dead-letter queue: no queue dead-letters into `{plain}`")),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert!(!err.contains(&format!("{dlq_q}:")), "a dead-letter target is not questioned: {err}");
    assert_eq!(watched().await, 0);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM audit_log WHERE action = 'dlq.watch'"), 0);

    let forced = run(&db.url, &["add", "--force", &plain]);
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));
    assert!(String::from_utf8_lossy(&forced.stderr).contains("started anyway (--force)"));
    assert!(String::from_utf8_lossy(&forced.stdout).contains(&format!("{plain}: now ingested")));
    assert_eq!(watched().await, 1);
    assert_eq!(count!(&db.pool, "SELECT count(*) FROM audit_log WHERE action = 'dlq.watch'"), 1);
    for q in [&plain, &dlq_q, &work] {
        ch.queue_delete(q.as_str().into(), Default::default()).await.ok();
    }
}
