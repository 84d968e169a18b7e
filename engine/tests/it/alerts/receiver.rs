//! A real local webhook receiver: a tiny HTTP/1.1 server on port 0 that records each
//! request's JSON body and answers the scripted status codes in turn (200 once they run out);
//! a 3xx redirects to itself.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

pub struct Receiver {
    pub url: String,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
    task: JoinHandle<()>,
}

impl Receiver {
    pub async fn start(script: &[u16]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/T000/secret-token", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<u16>>()));
        let (b, s) = (bodies.clone(), script.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (b, s) = (b.clone(), s.clone());
                tokio::spawn(async move { serve(stream, b, s).await });
            }
        });
        Self { url, bodies, task }
    }

    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.bodies.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.bodies.lock().unwrap().len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, bodies: Arc<Mutex<Vec<serde_json::Value>>>, script: Arc<Mutex<VecDeque<u16>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("post /hooks/t000/secret-token "), "unexpected request: {head}");
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map(|v| v.trim().parse().unwrap()).unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: serde_json::Value = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap();
    bodies.lock().unwrap().push(body);
    let status = script.lock().unwrap().pop_front().unwrap_or(200);
    // A redirect points back here, so a client that follows redirects is seen calling again.
    let location = match (300..400).contains(&status) {
        true => "location: /hooks/T000/secret-token\r\n".to_string(),
        false => String::new(),
    };
    let reply = format!("HTTP/1.1 {status} X\r\n{location}content-length: 0\r\nconnection: close\r\n\r\n");
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
