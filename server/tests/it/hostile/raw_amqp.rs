//! A raw AMQP 0-9-1 publisher: writes the frames itself, so a test can send what a client
//! library refuses to build (header names that are not UTF-8, tables nested 10 000 deep,
//! unknown type tags). Confirms are on: each publish waits for the broker's `basic.ack`.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FRAME_END: u8 = 0xCE;

pub struct RawPublisher {
    sock: TcpStream,
    frame_max: usize,
    next_tag: u64,
}

/// One message: its headers as the wire bytes of a field table (`u32` length + entries), its
/// message id and body.
pub struct RawMessage {
    pub headers: Vec<u8>,
    pub message_id: String,
    pub body: Vec<u8>,
}

fn short_str(out: &mut Vec<u8>, s: &[u8]) {
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

fn long_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

fn method(class: u16, id: u16, args: &[u8]) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend(id.to_be_bytes());
    p.extend_from_slice(args);
    p
}

fn bad(what: String) -> io::Error {
    io::Error::other(what)
}

impl RawPublisher {
    pub async fn connect(vhost: &str) -> io::Result<Self> {
        let mut sock = TcpStream::connect("127.0.0.1:5672").await?;
        sock.write_all(b"AMQP\x00\x00\x09\x01").await?;
        let mut me = Self { sock, frame_max: 4096, next_tag: 1 };
        me.expect_method(0, 10, 10).await?; // connection.start
        let mut args = 0u32.to_be_bytes().to_vec(); // client properties: empty table
        short_str(&mut args, b"PLAIN");
        long_str(&mut args, b"\0guest\0guest");
        short_str(&mut args, b"en_US");
        me.send(1, 0, &method(10, 11, &args)).await?;
        let tune = me.expect_method(0, 10, 30).await?;
        let frame_max = u32::from_be_bytes([tune[6], tune[7], tune[8], tune[9]]);
        me.frame_max = if frame_max == 0 { 131_072 } else { frame_max as usize };
        let mut args = tune[4..6].to_vec(); // channel max as offered
        args.extend((me.frame_max as u32).to_be_bytes());
        args.extend(0u16.to_be_bytes()); // no heartbeats
        me.send(1, 0, &method(10, 31, &args)).await?;
        let mut args = Vec::new();
        short_str(&mut args, vhost.as_bytes());
        short_str(&mut args, b"");
        args.push(0);
        me.send(1, 0, &method(10, 40, &args)).await?;
        me.expect_method(0, 10, 41).await?;
        me.send(1, 1, &method(20, 10, &[0])).await?; // channel.open
        me.expect_method(1, 20, 11).await?;
        me.send(1, 1, &method(85, 10, &[0])).await?; // confirm.select
        me.expect_method(1, 85, 11).await?;
        Ok(me)
    }

    async fn send(&mut self, kind: u8, channel: u16, payload: &[u8]) -> io::Result<()> {
        let mut f = vec![kind];
        f.extend(channel.to_be_bytes());
        f.extend((payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f.push(FRAME_END);
        self.sock.write_all(&f).await
    }

    /// The next frame: (type, channel, payload).
    async fn frame(&mut self) -> io::Result<(u8, u16, Vec<u8>)> {
        let mut head = [0u8; 7];
        self.sock.read_exact(&mut head).await?;
        let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
        let mut payload = vec![0u8; size + 1];
        self.sock.read_exact(&mut payload).await?;
        payload.pop();
        Ok((head[0], u16::from_be_bytes([head[1], head[2]]), payload))
    }

    /// Reads frames up to the method `class.id` on `channel`; a close from the broker is an error
    /// that carries its reply text.
    async fn expect_method(&mut self, channel: u16, class: u16, id: u16) -> io::Result<Vec<u8>> {
        loop {
            let (kind, ch, p) = self.frame().await?;
            if kind != 1 || p.len() < 4 {
                continue;
            }
            let (c, m) = (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]));
            if (c, m) == (10, 50) || (c, m) == (20, 40) {
                let text_len = p.get(6).copied().unwrap_or(0) as usize;
                let text = String::from_utf8_lossy(p.get(7..7 + text_len).unwrap_or_default());
                return Err(bad(format!(
                    "the broker closed the {}: {text}",
                    if c == 10 { "connection" } else { "channel" }
                )));
            }
            if ch == channel && c == class && m == id {
                return Ok(p);
            }
        }
    }

    /// Publishes to `queue` through the default exchange, persistent, and waits for its confirm.
    pub async fn publish(&mut self, queue: &str, m: &RawMessage) -> io::Result<()> {
        let mut args = 0u16.to_be_bytes().to_vec();
        short_str(&mut args, b"");
        short_str(&mut args, queue.as_bytes());
        args.push(0);
        self.send(1, 1, &method(60, 40, &args)).await?;
        let mut header = 60u16.to_be_bytes().to_vec();
        header.extend(0u16.to_be_bytes());
        header.extend((m.body.len() as u64).to_be_bytes());
        // Flags: headers (bit 13), delivery-mode (12), message-id (7); the list in that order.
        header.extend(((1u16 << 13) | (1 << 12) | (1 << 7)).to_be_bytes());
        header.extend_from_slice(&m.headers);
        header.push(2);
        short_str(&mut header, m.message_id.as_bytes());
        self.send(2, 1, &header).await?;
        for chunk in m.body.chunks(self.frame_max - 8) {
            self.send(3, 1, chunk).await?;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        loop {
            let p = self.expect_ack_or_nack().await?;
            let acked = u64::from_be_bytes(p.1[4..12].try_into().map_err(|_| bad("short ack".into()))?);
            let multiple = p.1.get(12).is_some_and(|b| b & 1 == 1);
            if acked == tag || (multiple && acked >= tag) {
                return if p.0 { Ok(()) } else { Err(bad(format!("the broker nacked message {}", m.message_id))) };
            }
        }
    }

    async fn expect_ack_or_nack(&mut self) -> io::Result<(bool, Vec<u8>)> {
        loop {
            let (kind, _, p) = self.frame().await?;
            if kind != 1 || p.len() < 4 {
                continue;
            }
            match (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]])) {
                (60, 80) => return Ok((true, p)),
                (60, 120) => return Ok((false, p)),
                (10, 50) | (20, 40) => {
                    let text_len = p.get(6).copied().unwrap_or(0) as usize;
                    let text = String::from_utf8_lossy(p.get(7..7 + text_len).unwrap_or_default());
                    return Err(bad(format!("the broker closed: {text}")));
                }
                _ => {}
            }
        }
    }

    pub async fn close(mut self) {
        let mut args = 200u16.to_be_bytes().to_vec();
        short_str(&mut args, b"bye");
        args.extend([0, 0, 0, 0]);
        let _ = self.send(1, 0, &method(10, 50, &args)).await;
        let _ = self.expect_method(0, 10, 51).await;
    }
}
