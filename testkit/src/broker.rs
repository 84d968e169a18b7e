//! The local RabbitMQ for tests: its URL, unique names, and queues and exchanges that are
//! deleted when the test ends, a failing test's included.

use std::sync::Mutex;

use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};

pub fn amqp_url() -> String {
    std::env::var("TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A unique name for a queue or exchange in a test.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}.{}", uuid::Uuid::new_v4().simple())
}

/// Names of queues and exchanges a test declares, deleted on drop (also while a failing test
/// unwinds), so no test leaves its topology on the broker. Declaring is the test's: each
/// declares with the arguments it needs.
#[derive(Default)]
pub struct Doomed {
    queues: Mutex<Vec<String>>,
    exchanges: Mutex<Vec<String>>,
}

impl Doomed {
    pub fn new() -> Self {
        Self::default()
    }

    /// A unique queue name (`prefix.<uuid>`), deleted on drop.
    pub fn queue(&self, prefix: &str) -> String {
        let name = unique(prefix);
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).push(name.clone());
        name
    }

    /// A unique exchange name (`prefix.<uuid>`), deleted on drop.
    pub fn exchange(&self, prefix: &str) -> String {
        let name = unique(prefix);
        self.exchanges.lock().unwrap_or_else(|e| e.into_inner()).push(name.clone());
        name
    }
}

impl Drop for Doomed {
    /// Deletes on a connection of its own, on a thread of its own (a drop cannot await, and
    /// the test's runtime may be going away), which this one waits for.
    fn drop(&mut self) {
        let queues = std::mem::take(self.queues.get_mut().unwrap_or_else(|e| e.into_inner()));
        let exchanges = std::mem::take(self.exchanges.get_mut().unwrap_or_else(|e| e.into_inner()));
        if queues.is_empty() && exchanges.is_empty() {
            return;
        }
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let delete = async {
                    let conn = engine::amqp::connect(&amqp_url(), "revenant-test-cleanup").await.ok()?;
                    let mut ch = conn.create_channel().await.ok()?;
                    for q in &queues {
                        // A queue the test deleted itself closes the channel (404): open another.
                        if ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await.is_err() {
                            ch = conn.create_channel().await.ok()?;
                        }
                    }
                    for x in &exchanges {
                        if ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default()).await.is_err() {
                            ch = conn.create_channel().await.ok()?;
                        }
                    }
                    let _ = conn.close(200, "test done".into()).await;
                    Some(())
                };
                match tokio::time::timeout(std::time::Duration::from_secs(30), delete).await {
                    Ok(done) => done,
                    Err(_) => {
                        eprintln!("testkit: deleting {queues:?} and {exchanges:?} took over 30 s; left on the broker");
                        None
                    }
                }
            })
        });
        let _ = deleted.join();
    }
}
