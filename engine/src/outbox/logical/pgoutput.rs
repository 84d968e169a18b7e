//! Reading what PostgreSQL's `pgoutput` plugin (protocol version 1) sends for a publication of
//! inserts: begin, commit, relation, insert, and the logical messages the heartbeat emits.
//!
//! Policy: nothing in a message is trusted. Every length and count is checked against the bytes
//! left before anything is read or allocated; a message that cannot be read is an error naming
//! its kind, what was wrong and where, never a panic and never a guess. Kinds an insert-only
//! publication may still send (origin, type, truncate, and update / delete should the
//! publication be widened by hand) are recognised and skipped, so they cannot stall the stream;
//! an unknown kind is an error.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("pgoutput {kind} message: {what} (byte {at} of {len})")]
pub struct DecodeError {
    pub kind: char,
    pub what: String,
    pub at: usize,
    pub len: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Begin {
        final_lsn: u64,
        xid: u32,
    },
    Commit {
        commit_lsn: u64,
        end_lsn: u64,
    },
    Relation(Relation),
    Insert {
        relation: u32,
        tuple: Vec<Value<'a>>,
    },
    /// `pg_logical_emit_message` (the idle heartbeat), with the position it was written at.
    Message {
        lsn: u64,
        prefix: &'a str,
        content: &'a [u8],
    },
    /// Origin, type, truncate, update or delete: nothing a relay of inserts acts on.
    Skipped(char),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: u32,
}

/// One column of a tuple, in the publication's text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Null,
    /// A TOASTed value the change did not carry (never in an insert).
    Unchanged,
    Text(&'a [u8]),
}

/// Decodes one message.
pub fn decode(data: &[u8]) -> Result<Message<'_>, DecodeError> {
    let Some((&tag, _)) = data.split_first() else {
        return Err(DecodeError { kind: '?', what: "empty message".into(), at: 0, len: 0 });
    };
    let mut r = Reader { data, at: 1, kind: tag as char };
    let msg = match tag {
        b'B' => {
            let final_lsn = r.u64()?;
            let _commit_time = r.u64()?;
            Message::Begin { final_lsn, xid: r.u32()? }
        }
        b'C' => {
            let _flags = r.u8()?;
            let commit_lsn = r.u64()?;
            let end_lsn = r.u64()?;
            let _commit_time = r.u64()?;
            Message::Commit { commit_lsn, end_lsn }
        }
        b'R' => {
            let id = r.u32()?;
            let namespace = r.string()?;
            let name = r.string()?;
            let _replica_identity = r.u8()?;
            let n = r.u16()? as usize;
            let n = r.count(n, 10)?;
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                let _flags = r.u8()?;
                let name = r.string()?;
                let type_oid = r.u32()?;
                let _typmod = r.u32()?;
                columns.push(Column { name, type_oid });
            }
            Message::Relation(Relation { id, namespace, name, columns })
        }
        b'I' => {
            let relation = r.u32()?;
            let marker = r.u8()?;
            if marker != b'N' {
                return Err(r.error(format!("expected a new tuple ('N'), found byte {marker}")));
            }
            Message::Insert { relation, tuple: r.tuple()? }
        }
        b'M' => {
            let _transactional = r.u8()?;
            let lsn = r.u64()?;
            let prefix = r.str()?;
            let n = r.u32()? as usize;
            Message::Message { lsn, prefix, content: r.bytes(n)? }
        }
        b'O' | b'Y' | b'T' | b'U' | b'D' => Message::Skipped(tag as char),
        other => return Err(r.error(format!("unknown message kind {other}"))),
    };
    if matches!(msg, Message::Skipped(_)) || r.at == data.len() {
        Ok(msg)
    } else {
        Err(r.error(format!("{} bytes left over", data.len() - r.at)))
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    kind: char,
}

impl<'a> Reader<'a> {
    fn error(&self, what: String) -> DecodeError {
        DecodeError { kind: self.kind, what, at: self.at, len: self.data.len() }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(self.error(format!("needs {n} more bytes, {} left", self.data.len() - self.at)));
        };
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.bytes(2)?.try_into().unwrap_or_default()))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.bytes(4)?.try_into().unwrap_or_default()))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.bytes(8)?.try_into().unwrap_or_default()))
    }

    /// A NUL-terminated UTF-8 string, borrowed.
    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let rest = &self.data[self.at..];
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            return Err(self.error("a string without its terminating NUL".into()));
        };
        let s =
            std::str::from_utf8(&rest[..nul]).map_err(|e| self.error(format!("a string that is not UTF-8 ({e})")))?;
        self.at += nul + 1;
        Ok(s)
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        self.str().map(str::to_string)
    }

    /// A count of items each at least `min_size` bytes long, checked against what is left, so
    /// a forged count cannot make a huge allocation.
    fn count(&self, n: usize, min_size: usize) -> Result<usize, DecodeError> {
        let left = self.data.len() - self.at;
        if n.saturating_mul(min_size) > left {
            return Err(self.error(format!("{n} items cannot fit in the {left} bytes left")));
        }
        Ok(n)
    }

    fn tuple(&mut self) -> Result<Vec<Value<'a>>, DecodeError> {
        let n = self.u16()? as usize;
        let n = self.count(n, 1)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(match self.u8()? {
                b'n' => Value::Null,
                b'u' => Value::Unchanged,
                b't' => {
                    let len = self.u32()? as usize;
                    Value::Text(self.bytes(len)?)
                }
                other => return Err(self.error(format!("unknown column kind {other}"))),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation() -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(16_400u32.to_be_bytes());
        m.extend(b"revenant\0outbox\0");
        m.push(b'd');
        m.extend(2u16.to_be_bytes());
        for (name, oid) in [("id", 20u32), ("payload", 17)] {
            m.push(1);
            m.extend(name.as_bytes());
            m.push(0);
            m.extend(oid.to_be_bytes());
            m.extend((-1i32).to_be_bytes());
        }
        m
    }

    fn insert() -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend(16_400u32.to_be_bytes());
        m.push(b'N');
        m.extend(3u16.to_be_bytes());
        m.push(b't');
        m.extend(2u32.to_be_bytes());
        m.extend(b"42");
        m.push(b'n');
        m.push(b'u');
        m
    }

    #[test]
    fn a_relation_and_an_insert_are_read_whole() {
        let Message::Relation(r) = decode(&relation()).unwrap() else { panic!("not a relation") };
        assert_eq!((r.id, r.namespace.as_str(), r.name.as_str()), (16_400, "revenant", "outbox"));
        assert_eq!(r.columns[1], Column { name: "payload".into(), type_oid: 17 });
        let m = insert();
        assert_eq!(
            decode(&m).unwrap(),
            Message::Insert { relation: 16_400, tuple: vec![Value::Text(b"42"), Value::Null, Value::Unchanged] }
        );
    }

    #[test]
    fn every_truncation_of_a_message_is_an_error_not_a_panic() {
        for m in [relation(), insert()] {
            for cut in 0..m.len() {
                assert!(decode(&m[..cut]).is_err(), "cut at {cut} of {}", m.len());
            }
        }
    }

    #[test]
    fn a_forged_count_or_length_is_refused_before_any_allocation() {
        let mut m = insert();
        m[6..8].copy_from_slice(&u16::MAX.to_be_bytes());
        let e = decode(&m).unwrap_err();
        assert!(e.what.contains("cannot fit"), "{e}");
        let mut m = insert();
        m[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&m).unwrap_err().what.contains("more bytes"));
    }

    #[test]
    fn unknown_kinds_trailing_bytes_and_bad_strings_are_named() {
        assert!(decode(b"Z").unwrap_err().what.contains("unknown message kind"));
        let mut m = insert();
        m.push(0);
        assert!(decode(&m).unwrap_err().what.contains("left over"));
        let mut m = relation();
        m[5] = 0xff;
        assert!(decode(&m).unwrap_err().what.contains("not UTF-8"));
        assert_eq!(decode(b"T\0\0").unwrap(), Message::Skipped('T'));
    }
}
