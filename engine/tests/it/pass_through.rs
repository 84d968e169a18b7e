//! A TCP pass-through to the local RabbitMQ that can hold back the broker's bytes (its
//! confirms) for a while: a broker that stops answering, for real, without a block notice.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// A TCP pass-through to the local RabbitMQ; while `frozen`, the broker's bytes are held.
pub async fn pass_through() -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let frozen = Arc::new(AtomicBool::new(false));
    let f = frozen.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(broker) = TcpStream::connect("127.0.0.1:5672").await else { continue };
            let (mut client_rd, mut client_wr) = client.into_split();
            let (mut broker_rd, mut broker_wr) = broker.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut client_rd, &mut broker_wr).await;
            });
            let f = f.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = broker_rd.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    while f.load(Relaxed) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    if client_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, frozen)
}

/// `testkit::amqp_url()` through a pass-through on `port`.
pub fn url_through(port: u16) -> String {
    testkit::amqp_url().replace("127.0.0.1:5672", &format!("127.0.0.1:{port}"))
}
