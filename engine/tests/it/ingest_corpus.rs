//! The bad-input corpus from the broker: NUL bytes, invalid UTF-8, a 10 MiB body, HTML/JS in
//! body and headers, nested header tables and arrays, no `x-death` — each stored exactly.

use engine::dead_letter::{headers, store};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};
use testkit::fresh_db;

use super::ingest::{Topology, start_ingest, wait_for_rows};

fn nested_headers() -> FieldTable {
    let mut inner = FieldTable::default();
    inner.insert("<script>".into(), AMQPValue::LongString(LongString::from(b"<img src=x onerror=alert(1)>".to_vec())));
    inner.insert("depth".into(), AMQPValue::LongLongInt(2));
    let array = FieldArray::from(vec![
        AMQPValue::LongString(LongString::from(vec![0xff, 0x00, 0xfe])),
        AMQPValue::FieldTable(inner.clone()),
        AMQPValue::Boolean(true),
    ]);
    let mut h = FieldTable::default();
    h.insert("x-nested".into(), AMQPValue::FieldTable(inner));
    h.insert("x-array".into(), AMQPValue::FieldArray(array));
    h.insert("x-html".into(), AMQPValue::LongString(LongString::from(b"</pre><script>alert(2)</script>".to_vec())));
    h
}

#[tokio::test]
async fn every_hostile_message_in_the_corpus_is_stored_byte_for_byte() {
    let db = fresh_db().await;
    let t = Topology::new(&[]).await;
    let huge: Vec<u8> = (0..10 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let corpus: Vec<(&str, Vec<u8>, BasicProperties)> = vec![
        ("nul", b"a\0b\0c".to_vec(), BasicProperties::default().with_message_id("nul".into())),
        ("latin1", vec![0xe9, 0x74, 0xe9, 0xff, 0xfe], BasicProperties::default().with_message_id("latin1".into())),
        ("huge", huge.clone(), BasicProperties::default().with_message_id("huge".into())),
        (
            "html",
            b"<script>alert('body')</script><img src=x onerror=alert(1)>".to_vec(),
            BasicProperties::default().with_message_id("html".into()).with_headers(nested_headers()),
        ),
        ("none", b"{}".to_vec(), BasicProperties::default().with_message_id("none".into())),
    ];
    for (_, body, props) in &corpus {
        t.publish(&t.dlq, body, props.clone()).await;
    }
    let ing = start_ingest(&db.pool, vec![t.dlq.clone()]);
    wait_for_rows(&db.pool, &t.dlq, corpus.len() as i64).await;
    ing.stop().await;
    for (name, body, props) in &corpus {
        let f = store::ListFilter { message_id: Some(name.to_string()), ..Default::default() };
        let page = store::list(&db.pool, &f, None, 10).await.unwrap();
        assert_eq!(page.items.len(), 1, "{name}");
        let dl = store::get(&db.pool, page.items[0].id).await.unwrap();
        assert_eq!(&dl.body, body, "{name}: body bytes differ");
        assert_eq!(dl.reason, "none", "{name}: no x-death");
        if let Some(h) = props.headers() {
            let back = headers::table_from_json(dl.headers.as_ref().unwrap()).unwrap();
            assert_eq!(&back, h, "{name}: headers differ");
        }
    }
    assert_eq!(
        t.ch.queue_declare(
            t.dlq.as_str().into(),
            lapin::options::QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default()
        )
        .await
        .unwrap()
        .message_count(),
        0,
        "the DLQ is drained"
    );
    t.delete().await;
}
