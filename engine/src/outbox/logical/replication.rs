//! A logical replication connection (PostgreSQL's streaming replication protocol): the slot's
//! changes pushed as their transactions commit, and standby status updates that move the slot.
//!
//! Why not the SQL functions (`pg_logical_slot_peek_binary_changes`): each call decodes the
//! log again from the slot's restart position, which PostgreSQL 15 moves only about every
//! 15 s, so a busy relay paid ~200 ms per read. A walsender decodes each record once and
//! sends it at its commit.
//!
//! Why this file rather than a replication crate: sqlx cannot open a replication connection,
//! and an insert-only table needs three kinds of message (`w` changes, `k` keepalives, `r`
//! status updates) around the pgoutput reader Revenant already has. pg_walstream (the crate
//! the issue names) was tried: its current release needs a webpki-roots newer than the
//! registry here has, its streaming reads must not be dropped mid-call (so a status update
//! cannot be sent while waiting for changes), and it pulls aws-lc-rs. Authentication
//! (SCRAM-SHA-256, MD5) and the startup and query messages come from `postgres-protocol`,
//! the rust-postgres project's protocol crate (MIT/Apache-2.0), so no cryptography is written
//! here. Like the rest of Revenant's PostgreSQL connections (sqlx without a TLS feature), it
//! does not negotiate TLS.
//!
//! Hostile input: every length is checked before it is read, a message longer than
//! [`MAX_MESSAGE`] ends the connection with an error, and nothing here panics on what the
//! server sends.

use std::path::PathBuf;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::{
    authentication::{
        md5_hash,
        sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256},
    },
    message::frontend,
};
use sqlx::postgres::PgConnectOptions;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest message accepted from the server (a transaction's insert carries one row).
const MAX_MESSAGE: usize = 256 << 20;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Where and as whom to connect: the pool's options, with the password of the URL it was
/// opened from (sqlx does not give its own back).
#[derive(Clone)]
pub struct Params {
    host: String,
    port: u16,
    socket: Option<PathBuf>,
    user: String,
    database: Option<String>,
    password: Option<String>,
}

impl Params {
    /// `url`: the database URL the pool was opened from, read for its password only; without
    /// one, `PGPASSWORD`.
    pub fn of(opts: &PgConnectOptions, url: Option<&str>) -> Params {
        let from_url = url.and_then(|u| url::Url::parse(u).ok()).and_then(|u| {
            let query = u.query_pairs().find(|(k, _)| k == "password").map(|(_, v)| v.into_owned());
            u.password().map(|p| percent_encoding::percent_decode_str(p).decode_utf8_lossy().into_owned()).or(query)
        });
        Params {
            host: opts.get_host().to_string(),
            port: opts.get_port(),
            socket: opts.get_socket().cloned(),
            user: opts.get_username().to_string(),
            database: opts.get_database().map(str::to_string),
            password: from_url.or_else(|| std::env::var("PGPASSWORD").ok()),
        }
    }
}

/// What the stream carries.
#[derive(Debug)]
pub enum Frame {
    /// One pgoutput message, at its position in the log.
    Change { at: i64, data: Bytes },
    /// The server is alive; `reply`: it wants a status update now.
    Keepalive { reply: bool },
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub struct Replication {
    io: Box<dyn Io>,
    buf: BytesMut,
    out: BytesMut,
}

impl Replication {
    /// Connects in replication mode to the database and authenticates.
    pub async fn connect(p: &Params) -> Result<Replication, String> {
        let io: Box<dyn Io> = match &p.socket {
            Some(dir) => {
                let path = if dir.is_dir() { dir.join(format!(".s.PGSQL.{}", p.port)) } else { dir.clone() };
                Box::new(
                    tokio::net::UnixStream::connect(&path)
                        .await
                        .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?,
                )
            }
            None => {
                let tcp = tokio::net::TcpStream::connect((p.host.as_str(), p.port))
                    .await
                    .map_err(|e| format!("cannot connect to {}:{}: {e}", p.host, p.port))?;
                let _ = tcp.set_nodelay(true);
                Box::new(tcp)
            }
        };
        let mut conn = Replication { io, buf: BytesMut::with_capacity(64 << 10), out: BytesMut::new() };
        let mut params =
            vec![("user", p.user.as_str()), ("replication", "database"), ("application_name", "revenant relay")];
        if let Some(db) = &p.database {
            params.push(("database", db.as_str()));
        }
        frontend::startup_message(params, &mut conn.out).map_err(|e| e.to_string())?;
        conn.flush().await?;
        conn.authenticate(p).await?;
        // Parameter statuses and the cancel key, then ready.
        loop {
            let (tag, body) = conn.message().await?;
            match tag {
                b'Z' => return Ok(conn),
                b'E' => return Err(server_error(&body)),
                _ => {}
            }
        }
    }

    async fn authenticate(&mut self, p: &Params) -> Result<(), String> {
        let password = || {
            p.password.as_deref().ok_or_else(|| {
                "the server asks for a password and the database URL has none (nor PGPASSWORD)".to_string()
            })
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            let (tag, mut body) = self.message().await?;
            match tag {
                b'E' => return Err(server_error(&body)),
                b'R' => {}
                other => return Err(format!("unexpected message {:?} during authentication", other as char)),
            }
            if body.len() < 4 {
                return Err("a short authentication message".into());
            }
            match body.get_i32() {
                0 => return Ok(()),
                3 => {
                    frontend::password_message(password()?.as_bytes(), &mut self.out).map_err(|e| e.to_string())?;
                }
                5 => {
                    if body.len() < 4 {
                        return Err("an MD5 request without its salt".into());
                    }
                    let salt = [body[0], body[1], body[2], body[3]];
                    let hash = md5_hash(p.user.as_bytes(), password()?.as_bytes(), salt);
                    frontend::password_message(hash.as_bytes(), &mut self.out).map_err(|e| e.to_string())?;
                }
                10 => {
                    let offers = body.split(|b| *b == 0).any(|m| m == SCRAM_SHA_256.as_bytes());
                    if !offers {
                        return Err("the server offers no SASL mechanism this relay knows (SCRAM-SHA-256)".into());
                    }
                    let s = ScramSha256::new(password()?.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.out)
                        .map_err(|e| e.to_string())?;
                    scram = Some(s);
                }
                11 => {
                    let s = scram.as_mut().ok_or("a SASL continuation before SASL began")?;
                    s.update(&body).map_err(|e| format!("SCRAM: {e}"))?;
                    frontend::sasl_response(s.message(), &mut self.out).map_err(|e| e.to_string())?;
                }
                12 => {
                    let s = scram.as_mut().ok_or("a SASL final message before SASL began")?;
                    s.finish(&body).map_err(|e| format!("SCRAM: {e}"))?;
                    continue;
                }
                code => return Err(format!("authentication method {code} is not supported by the relay")),
            }
            self.flush().await?;
        }
    }

    /// Starts streaming the slot from its confirmed position: pgoutput, protocol 1, with
    /// logical messages (the idle heartbeat).
    pub async fn start(&mut self, slot: &str, publication: &str) -> Result<(), String> {
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL 0/0 (proto_version '1', publication_names '{}', messages 'true')",
            quote_ident(slot),
            quote_ident(publication).replace('\'', "''")
        );
        frontend::query(&sql, &mut self.out).map_err(|e| e.to_string())?;
        self.flush().await?;
        loop {
            let (tag, body) = self.message().await?;
            match tag {
                b'W' => return Ok(()),
                b'E' => return Err(server_error(&body)),
                b'N' | b'S' => {}
                other => return Err(format!("unexpected message {:?} after START_REPLICATION", other as char)),
            }
        }
    }

    /// The next change or keepalive. Cancel-safe: what was read stays in the buffer.
    pub async fn next(&mut self) -> Result<Frame, String> {
        loop {
            let (tag, mut body) = self.message().await?;
            match tag {
                b'd' => {}
                b'E' => return Err(server_error(&body)),
                b'c' => return Err("the server ended the stream".into()),
                _ => continue,
            }
            if body.is_empty() {
                return Err("an empty message in the stream".into());
            }
            match body.get_u8() {
                b'w' => {
                    if body.len() < 24 {
                        return Err("a short change message".into());
                    }
                    let at = body.get_i64();
                    body.advance(16);
                    return Ok(Frame::Change { at, data: body });
                }
                b'k' => {
                    if body.len() < 17 {
                        return Err("a short keepalive".into());
                    }
                    body.advance(16);
                    return Ok(Frame::Keepalive { reply: body.get_u8() != 0 });
                }
                _ => continue,
            }
        }
    }

    /// Tells the server every change before `lsn` is durably handled: the slot may move there.
    pub async fn status(&mut self, lsn: i64) -> Result<(), String> {
        let now = chrono::Utc::now().timestamp_micros() - PG_EPOCH_MICROS;
        self.out.put_u8(b'd');
        self.out.put_i32(4 + 1 + 8 * 4 + 1);
        self.out.put_u8(b'r');
        for pos in [lsn, lsn, lsn] {
            self.out.put_i64(pos);
        }
        self.out.put_i64(now);
        self.out.put_u8(0);
        self.flush().await
    }

    async fn flush(&mut self) -> Result<(), String> {
        let out = std::mem::take(&mut self.out);
        self.io.write_all(&out).await.map_err(|e| format!("writing to the server: {e}"))?;
        self.io.flush().await.map_err(|e| format!("writing to the server: {e}"))
    }

    /// One whole message: its tag and body.
    async fn message(&mut self) -> Result<(u8, Bytes), String> {
        loop {
            if self.buf.len() >= 5 {
                let len = i32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
                if len < 4 || len as usize > MAX_MESSAGE {
                    return Err(format!("a message of impossible length {len} from the server"));
                }
                let total = 1 + len as usize;
                if self.buf.len() >= total {
                    let mut msg = self.buf.split_to(total).freeze();
                    let tag = msg.get_u8();
                    msg.advance(4);
                    return Ok((tag, msg));
                }
                self.buf.reserve(total - self.buf.len());
            }
            let n = self.io.read_buf(&mut self.buf).await.map_err(|e| format!("reading from the server: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
        }
    }
}

/// An ErrorResponse's severity, code and message.
fn server_error(body: &[u8]) -> String {
    let (mut severity, mut code, mut message) = ("ERROR", "", "");
    for field in body.split(|b| *b == 0) {
        let Some((kind, text)) = field.split_first() else { continue };
        let text = std::str::from_utf8(text).unwrap_or("");
        match kind {
            b'S' => severity = text,
            b'C' => code = text,
            b'M' => message = text,
            _ => {}
        }
    }
    format!("{severity} {code}: {message}")
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn an_error_response_reads_as_one_line() {
        let body = b"SERROR\0C55006\0Mreplication slot \"s\" is active for PID 7\0\0";
        assert_eq!(server_error(body), "ERROR 55006: replication slot \"s\" is active for PID 7");
        assert_eq!(server_error(b"\0"), "ERROR : ");
    }

    #[test]
    fn a_password_comes_from_the_url() {
        let opts: PgConnectOptions = "postgres://app:s%40cret@db.example:6543/orders".parse().unwrap();
        let p = Params::of(&opts, Some("postgres://app:s%40cret@db.example:6543/orders"));
        assert_eq!(
            (p.host.as_str(), p.port, p.user.as_str(), p.database.as_deref(), p.password.as_deref()),
            ("db.example", 6543, "app", Some("orders"), Some("s@cret"))
        );
        let q = Params::of(&opts, Some("postgres://app@db.example/orders?password=q1"));
        assert_eq!(q.password.as_deref(), Some("q1"));
    }

    fn over(io: tokio::io::DuplexStream) -> Replication {
        Replication { io: Box::new(io), buf: BytesMut::new(), out: BytesMut::new() }
    }

    fn copy_data(payload: &[u8]) -> Vec<u8> {
        let mut m = vec![b'd'];
        m.extend_from_slice(&(4 + payload.len() as i32).to_be_bytes());
        m.extend_from_slice(payload);
        m
    }

    fn change(at: i64, data: &[u8]) -> Vec<u8> {
        let mut p = vec![b'w'];
        p.extend_from_slice(&at.to_be_bytes());
        p.extend_from_slice(&(at + 9).to_be_bytes());
        p.extend_from_slice(&0i64.to_be_bytes());
        p.extend_from_slice(data);
        copy_data(&p)
    }

    #[tokio::test]
    async fn changes_and_keepalives_are_read_whole_even_when_they_come_a_byte_at_a_time() {
        let (mut server, client) = tokio::io::duplex(64);
        let mut conn = over(client);
        let mut keepalive = vec![b'k'];
        keepalive.extend_from_slice(&[0; 16]);
        keepalive.push(1);
        let mut bytes = change(0x1_0000_0042, b"B-begin");
        bytes.extend(copy_data(&keepalive));
        bytes.extend(change(7, b""));
        let writer = tokio::spawn(async move {
            for b in bytes {
                server.write_all(&[b]).await.unwrap();
                tokio::task::yield_now().await;
            }
            server
        });
        let Frame::Change { at, data } = conn.next().await.unwrap() else { panic!("a change") };
        assert_eq!((at, &data[..]), (0x1_0000_0042, &b"B-begin"[..]));
        assert!(matches!(conn.next().await.unwrap(), Frame::Keepalive { reply: true }));
        // Cancelled halfway (a status tick in the pump): nothing read is lost.
        let mut next = Box::pin(conn.next());
        let early = tokio::time::timeout(std::time::Duration::from_micros(1), &mut next).await;
        let frame = match early {
            Ok(f) => f,
            Err(_) => {
                drop(next);
                conn.next().await
            }
        };
        assert!(matches!(frame.unwrap(), Frame::Change { at: 7, .. }));
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn what_the_server_cannot_mean_ends_the_stream_with_its_reason() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![b'd', 0x7f, 0xff, 0xff, 0xff], "impossible length"),
            (vec![b'd', 0, 0, 0, 2], "impossible length"),
            (copy_data(&[b'w', 0, 0, 1]), "short change"),
            (copy_data(&[b'k', 0]), "short keepalive"),
            (copy_data(&[]), "empty message"),
            (vec![b'c', 0, 0, 0, 4], "ended the stream"),
            (b"E\0\0\0\x10SFATAL\0Mno\0\0".to_vec(), "FATAL : no"),
            (vec![b'd', 0, 0], "closed the connection"),
        ];
        for (bytes, want) in cases {
            let (mut server, client) = tokio::io::duplex(1024);
            let mut conn = over(client);
            server.write_all(&bytes).await.unwrap();
            drop(server);
            let err = conn.next().await.expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[tokio::test]
    async fn a_status_update_carries_the_position_three_times() {
        let (mut server, client) = tokio::io::duplex(1024);
        let mut conn = over(client);
        conn.status(0x2_0000_0010).await.unwrap();
        let mut got = vec![0; 39];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..6], &[b'd', 0, 0, 0, 38, b'r']);
        for i in 0..3 {
            assert_eq!(&got[6 + 8 * i..14 + 8 * i], &0x2_0000_0010i64.to_be_bytes());
        }
        assert_eq!(got[38], 0, "no reply asked");
    }

    #[test]
    fn names_are_quoted() {
        assert_eq!(quote_ident("revenant_db_x"), "\"revenant_db_x\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
