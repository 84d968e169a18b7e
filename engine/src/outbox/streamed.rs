//! The commit-stream driver (`capture = "logical"`): a relayed table (Revenant's `outbox`
//! schema, or a service's own table through its mapping: [`table::StreamTable`]) read from
//! PostgreSQL's logical replication instead of polled, so a key's events reach the broker in
//! the order their transactions committed and nothing runs on the service's commit.
//!
//! Policy:
//! - one relay at a time streams the slot (PostgreSQL lets one walsender stream a slot): the
//!   holder of the slot's lock ([`super::standby`]); every claim's reads and holds of the table
//!   run on the lock's connection, so a lost lock stops the session at its next claim;
//! - the slot is streamed ([`super::logical::replication`]: the walsender pushes each transaction as
//!   it commits, in commit order) into a queue that wakes the relay; a claim takes what is
//!   queued, skips the rows the table shows settled (published, archived, failed or held: a
//!   new session re-reads from the slot's confirmed position), and hands out the rest;
//! - a key's events (the routing key, or a header: [`OrderKey`]) take one confirm channel, so
//!   they reach the broker in commit order. A key is *held* once one of its events is refused
//!   (returned, nacked, a bad row) or unconfirmed: that event and every later one of its key
//!   keep their commit's position (`outbox.stream_lsn`, or a mapped row's `relay_state`),
//!   written before the slot may pass them. Held events go out in their key's order, from its head on, as far as they are
//!   due (a head refused before goes alone, its followers after its outcome); a head that
//!   failed for good waits for an operator's retry or archive. Other keys go on.
//!   A later event of the key refused too (it was in flight with its head) is only held
//!   behind it, with no attempt counted; one the broker accepted meanwhile is not called back;
//! - the slot moves (a status update, at most every [`STATUS_EVERY`]) to the end of the last
//!   commit whose every event is settled durably (marked published, or held with its
//!   position): a crash or a takeover re-reads from there,
//!   so nothing is lost and at most the publishes in flight plus the unflushed marks are sent
//!   twice (`window + mark_batch − 1`, as polled);
//! - marks commit with synchronous commit whatever `relay.synchronous_commit` says: the slot
//!   moves past an event once its mark committed, and a mark PostgreSQL forgot would leave a
//!   failed event behind the slot unheld;
//! - an idle database still moves the slot: a heartbeat message after [`HEARTBEAT`] of quiet.

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use sqlx::{PgConnection, PgPool, postgres::PgListener};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    driver::{Driver, Written},
    logical::{
        event::Layout,
        pgoutput::{self, Message},
        replication::{Frame, Params, Replication},
        slot::{self, Names},
    },
    standby::{LockOn, STANDBY_RETRY, Standby},
    store::{AttemptOutcome, ClaimedRow, FailedAttempt, StoreError},
};
use crate::settings::OrderKey;

mod mapped_table;
mod own;
mod table;

pub(crate) use mapped_table::MappedTable;

/// The slot and the held events of a commit-stream source, native or mapped.
pub async fn card(src: &crate::sources::Source) -> Result<slot::StreamCard, sqlx::Error> {
    let names = Names::of_source(&src.pool, &src.name).await?;
    let status = slot::status(&src.pool, &names.slot).await?;
    let (held_events, failed_heads) = if src.native() {
        Own.held_counts(&src.pool).await?
    } else {
        MappedTable::new(src).held_counts(&src.pool).await?
    };
    Ok(slot::StreamCard { slot: names.slot, status, held_events, failed_heads })
}
pub(crate) use own::Own;
use table::{Refusals, StreamTable};

/// Quiet time after which the relay writes a heartbeat message, so the slot of an idle
/// database moves and PostgreSQL can recycle the log behind it.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// The slot's position goes to the server at most this often (and whenever it asks).
pub const STATUS_EVERY: Duration = Duration::from_millis(100);

/// Changes queued between the stream and the claims: a full queue stops reading the stream.
const QUEUE: usize = 4096;

pub(crate) struct Streamed<T> {
    source: String,
    pool: PgPool,
    /// The relayed table: Revenant's schema ([`Own`]) or a service's table ([`MappedTable`]).
    tab: T,
    /// The table's oid, as the stream names it; known once prepared.
    oid: std::sync::atomic::AtomicU32,
    /// The publication and slot, named after the database and the source (a slot is
    /// cluster-wide: two databases' relays must not share one). Known once prepared.
    names: std::sync::OnceLock<Names>,
    order: OrderKey,
    /// A published event's row is deleted, not marked: a row the stream carries and the table
    /// no longer has was published.
    delete: bool,
    /// Keyed by the slot's name, so made once the names are known.
    lock: std::sync::OnceLock<Standby>,
    /// The password of the URL the pool was opened from (the stream's own connection).
    url: Option<String>,
    /// The running stream, while this relay holds the slot.
    feed: Mutex<Option<Feed>>,
    /// Set by the stream for every change queued: wakes an idle relay.
    arrived: Arc<Notify>,
    state: Mutex<State>,
}

/// The stream's side: changes come in on `rx`; `flush` is the position the slot may move to.
struct Feed {
    rx: mpsc::Receiver<Result<(i64, Bytes), String>>,
    flush: Arc<AtomicI64>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Default)]
struct State {
    layout: Option<Layout>,
    /// The transaction being read: its inserts so far (the rest is still to come; its end is
    /// known at its commit).
    open_txn: Option<Txn>,
    /// Commits read and not yet settled, oldest first.
    commits: VecDeque<Commit>,
    /// Events from the stream in flight (handed out, not yet settled).
    out: HashMap<i64, Out>,
    /// Held events in flight as their key's head.
    heads: HashSet<i64>,
    /// Events refused whose failed attempt is not committed yet: their keys are held.
    refused: HashSet<i64>,
    /// A flush of marks was given up: the session ends, and the next one re-reads its events.
    broken: bool,
    quiet_since: Option<Instant>,
    /// The end of the last commit settled with every one before it: where the slot may move.
    settled_to: i64,
}

struct Commit {
    end: i64,
    /// Its events handed out and not yet settled.
    open: usize,
}

struct Out {
    end: i64,
    key: String,
}

/// One transaction read from the stream: its commit's end and its inserts, each read from
/// the stream or, when the stream's copy cannot be read, to be read from the table.
struct Txn {
    xid: u32,
    end: i64,
    events: Vec<(i64, Result<ClaimedRow, String>)>,
}

impl<T: StreamTable> Streamed<T> {
    /// `delete`: published rows are deleted (`after_publish = "delete"`); `url`: the database
    /// URL `pool` was opened from, for the stream's password.
    pub(crate) fn new(source: &str, pool: PgPool, tab: T, order: OrderKey, delete: bool, url: Option<String>) -> Self {
        Self {
            source: source.to_string(),
            pool,
            tab,
            oid: Default::default(),
            names: Default::default(),
            order,
            delete,
            lock: Default::default(),
            url,
            feed: Mutex::default(),
            arrived: Arc::default(),
            state: Mutex::default(),
        }
    }

    fn names(&self) -> &Names {
        static UNSET: std::sync::LazyLock<Names> = std::sync::LazyLock::new(|| Names::for_source(""));
        self.names.get().unwrap_or(&UNSET)
    }

    /// The slot's lock, once the names are known (see [`Self::name`]).
    fn lock(&self) -> Option<&Standby> {
        self.lock.get()
    }

    /// Learns the publication's and slot's names (they hold the database's), waiting for the
    /// database; false on shutdown.
    async fn name(&self, shutdown: &CancellationToken) -> bool {
        while self.names.get().is_none() {
            match Names::of_source(&self.pool, &self.source).await {
                Ok(names) => {
                    let lock = Standby::new(&self.source, self.pool.clone(), LockOn::Slot(names.slot.clone()));
                    let _ = self.lock.set(lock);
                    let _ = self.names.set(names);
                }
                Err(e) => {
                    tracing::warn!(source = %self.source, error = %e, "cannot read the source's database name; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return false,
                        _ = tokio::time::sleep(STANDBY_RETRY) => {}
                    }
                }
            }
        }
        true
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the source lacks for the stream, in one line; creates the publication and the
    /// slot when they are missing.
    async fn prepare(&self) -> Result<(), String> {
        let names = self.names();
        slot::preflight(&self.pool, names).await?;
        let (oid, table) = self.tab.ready(&self.pool).await?;
        self.oid.store(oid, Relaxed);
        let had_slot = slot::status(&self.pool, &self.names().slot).await.map_err(|e| e.to_string())?.is_some();
        slot::ensure(&self.pool, self.names(), &table).await.map_err(|e| format!("{e:#}"))?;
        if !had_slot && let Err(e) = self.adopt_backlog().await {
            // The next try starts over: a new slot, and the rows written before it held.
            let _ = slot::drop_slot(&self.pool, &self.names().slot).await;
            return Err(format!("cannot hold the rows written before the slot: {e}"));
        }
        self.open_feed().await
    }

    /// Starts the stream from the slot's confirmed position, for a new session: an earlier
    /// session's stream ends first (what it handed out unsettled is read again).
    async fn open_feed(&self) -> Result<(), String> {
        self.close_feed().await;
        let names = self.names();
        let params = Params::of(&self.pool.connect_options(), self.url.as_deref());
        let mut tries = 0;
        let conn = loop {
            let mut conn = Replication::connect(&params)
                .await
                .map_err(|e| format!("cannot open a replication connection: {e}"))?;
            match conn.start(&names.slot, &names.publication).await {
                Ok(()) => break conn,
                // The walsender of a stream just closed may not have let the slot go yet.
                Err(e) if e.contains(" 55006:") && tries < 30 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(format!("cannot stream slot {}: {e}", names.slot)),
            }
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let (flush, stop) = (Arc::new(AtomicI64::new(0)), CancellationToken::new());
        let task = tokio::spawn(pump(conn, tx, flush.clone(), self.arrived.clone(), stop.clone()));
        *self.feed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Feed { rx, flush, stop, task: Some(task) });
        Ok(())
    }

    /// Ends the stream, if one runs, once its last status update went out.
    async fn close_feed(&self) {
        let old = self.feed.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut feed) = old {
            feed.stop.cancel();
            if let Some(task) = feed.task.take() {
                let _ = task.await;
            }
        }
    }

    /// Rows pending when the slot was made (written by polling's time, or before this relay
    /// first ran) are not in its stream: they are held at the slot's start, so they go out
    /// in id order per key, before the key's streamed events.
    async fn adopt_backlog(&self) -> Result<(), StoreError> {
        let at = slot::status(&self.pool, &self.names().slot).await?.and_then(|s| s.confirmed).unwrap_or(0);
        // Rows committed after the slot's start are in its stream, in commit order: they must
        // not be held. The snapshot is taken first, then the stream is read: every row this
        // snapshot sees that committed after the slot's start is then in what is read.
        let mut tx = self.pool.begin().await?;
        sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *tx).await?;
        sqlx::query!(r#"SELECT 1 AS "one!""#).fetch_one(&mut *tx).await?;
        let streamed = self.inserted_ids().await?;
        let n = self.tab.adopt(&mut tx, at, &streamed).await?;
        tx.commit().await?;
        if n > 0 {
            tracing::info!(source = %self.source, rows = n, "rows written before the slot are held: sent in id order per key");
        }
        Ok(())
    }

    /// The ids of every insert in the slot's stream now (read at its creation: a short stream).
    async fn inserted_ids(&self) -> Result<Vec<i64>, StoreError> {
        let changes = slot::peek(&self.pool, self.names(), i32::MAX).await?;
        let mut layout = None;
        let mut ids = Vec::new();
        for ch in &changes {
            let bad =
                |what: String| StoreError::Invalid(format!("the commit stream at {}: {what}", slot::lsn_text(ch.lsn)));
            match pgoutput::decode(&ch.data).map_err(|e| bad(e.to_string()))? {
                Message::Relation(rel) if rel.id == self.oid.load(Relaxed) => {
                    layout = Some(self.tab.layout(&rel).map_err(bad)?);
                }
                Message::Insert { tuple, .. } => {
                    let l = layout.as_ref().ok_or_else(|| bad("an insert before its relation".into()))?;
                    ids.push(l.id(&tuple).map_err(bad)?);
                }
                _ => {}
            }
        }
        Ok(ids)
    }

    async fn claim_on(&self, conn: &mut PgConnection, batch: i64) -> Result<Vec<ClaimedRow>, StoreError> {
        if self.st().broken {
            return Err(StoreError::Invalid("marks were not written: reading again from the slot's position".into()));
        }
        // The held keys, and of each the run of due events from its head on (in flight or
        // not): those not in flight go out, in the key's order, on its channel. A head the
        // broker refused before goes alone: its key's next events wait for its outcome.
        // Taken before the query: a head leaves the set only after its mark committed, so one
        // missing from this copy is either not in flight or already marked when the query starts.
        let in_flight: HashSet<i64> = self.st().heads.clone();
        let header = self.order.header();
        let held = self.tab.held(&mut *conn, header, batch).await?;
        let mut held_keys: HashSet<String> = held.iter().map(|h| h.key.clone()).collect();
        let heads: Vec<i64> = {
            let st = self.st();
            // A key whose event was just refused waits until that refusal is written.
            let refused: HashSet<&str> = held
                .iter()
                .filter(|h| st.refused.contains(&h.id))
                .map(|h| h.key.as_str())
                .chain(st.refused.iter().filter_map(|id| st.out.get(id)).map(|o| o.key.as_str()))
                .collect();
            held.iter()
                .filter(|h| h.run && !in_flight.contains(&h.id) && !refused.contains(h.key.as_str()))
                .map(|h| h.id)
                .take(batch as usize)
                .collect()
        };
        let mut by_id: HashMap<i64, ClaimedRow> =
            self.tab.rows(&mut *conn, &heads).await?.into_iter().map(|r| (r.id, r)).collect();
        let mut rows: Vec<ClaimedRow> = heads.iter().filter_map(|id| by_id.remove(id)).collect();
        self.st().heads.extend(rows.iter().map(|r| r.id));

        let (txns, read) = self.read(batch)?;
        let ids: Vec<i64> = txns.iter().flat_map(|t| t.events.iter().map(|(id, _)| *id)).collect();
        // The walsender sends a transaction once its commit is in the log, which is a moment
        // before other sessions see it: a row missing from the table may only be unseen yet.
        // Then the read waits until every streamed transaction is seen, and is made again.
        let mut known = self.tab.known(&mut *conn, &ids).await?;
        if known.len() < ids.len() {
            let xids: Vec<i64> = txns.iter().filter(|t| !t.events.is_empty()).map(|t| t.xid as i64).collect();
            visible(&mut *conn, &xids).await?;
            known = self.tab.known(&mut *conn, &ids).await?;
        }
        let settled: HashSet<i64> = known.iter().filter(|k| k.settled).map(|k| k.id).collect();
        let in_table: HashSet<i64> = known.iter().map(|k| k.id).collect();
        // The stream's copy of a row it could not read: the table's, which is the same event.
        let unreadable: Vec<i64> = txns
            .iter()
            .flat_map(|t| t.events.iter())
            .filter(|(id, r)| r.is_err() && !settled.contains(id))
            .map(|(id, _)| *id)
            .collect();
        let mut from_table: HashMap<i64, ClaimedRow> =
            self.tab.rows(&mut *conn, &unreadable).await?.into_iter().map(|r| (r.id, r)).collect();

        let mut hold: Vec<(i64, i64)> = Vec::new();
        let seen = read > 0;
        {
            let mut st = self.st();
            held_keys.extend(st.refused.iter().filter_map(|id| st.out.get(id)).map(|o| o.key.clone()));
            for txn in txns {
                let mut open = 0;
                for (id, row) in txn.events {
                    // Deleted after publish: gone from the table means sent.
                    if settled.contains(&id) || (self.delete && !in_table.contains(&id)) {
                        continue;
                    }
                    let row = match row {
                        Ok(row) => row,
                        Err(reason) => match from_table.remove(&id) {
                            Some(row) => row,
                            None => {
                                tracing::error!(source = %self.source, id, in_table = in_table.contains(&id), %reason,
                                    "an event of the commit stream cannot be read, and the table no longer has it: skipped");
                                continue;
                            }
                        },
                    };
                    let key = self.order.of(&row.routing_key, &row.headers).into_owned();
                    if held_keys.contains(&key) {
                        hold.push((id, txn.end));
                        continue;
                    }
                    st.out.insert(id, Out { end: txn.end, key });
                    open += 1;
                    rows.push(row);
                }
                st.commits.push_back(Commit { end: txn.end, open });
            }
        }
        // Held before the slot may pass them (below, on this connection, after this commit).
        self.tab.hold(&mut *conn, &hold).await?;
        self.advance(seen).await?;
        Ok(rows)
    }

    /// The whole transactions the stream queued (a transaction still arriving is kept for the
    /// next claim), and how many changes were taken.
    fn read(&self, batch: i64) -> Result<(Vec<Txn>, usize), StoreError> {
        let max = batch.max(1) as usize * 4 + 64;
        let mut changes = Vec::new();
        {
            let mut feed = self.feed.lock().unwrap_or_else(|p| p.into_inner());
            let Some(feed) = feed.as_mut() else {
                return Err(StoreError::Invalid("the commit stream is not open".into()));
            };
            while changes.len() < max {
                match feed.rx.try_recv() {
                    Ok(Ok(change)) => changes.push(change),
                    Ok(Err(e)) => {
                        return Err(StoreError::Invalid(format!("the commit stream of source {}: {e}", self.source)));
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        return Err(StoreError::Invalid(format!("the commit stream of source {} ended", self.source)));
                    }
                }
            }
        }
        let mut st = self.st();
        let bad = |lsn: i64, what: String| {
            StoreError::Invalid(format!(
                "the commit stream of source {} at {}: {what}",
                self.source,
                slot::lsn_text(lsn)
            ))
        };
        let mut txns = Vec::new();
        for (lsn, data) in &changes {
            let lsn = *lsn;
            match pgoutput::decode(data).map_err(|e| bad(lsn, e.to_string()))? {
                Message::Begin { xid, .. } => st.open_txn = Some(Txn { xid, end: 0, events: Vec::new() }),
                Message::Relation(rel) if rel.id == self.oid.load(Relaxed) => {
                    st.layout = Some(self.tab.layout(&rel).map_err(|e| bad(lsn, e))?);
                }
                Message::Insert { relation, tuple } => {
                    let layout = st.layout.as_ref().filter(|l| l.relation == relation).ok_or_else(|| {
                        bad(lsn, format!("an insert into relation {relation}, which it did not describe"))
                    })?;
                    let id =
                        layout.id(&tuple).map_err(|e| bad(lsn, format!("an insert without a readable id: {e}")))?;
                    let row = layout.row(&tuple);
                    let txn = st.open_txn.as_mut().ok_or_else(|| bad(lsn, "an insert outside a transaction".into()))?;
                    txn.events.push((id, row));
                }
                Message::Commit { end_lsn, .. } => {
                    let txn = st.open_txn.take().ok_or_else(|| bad(lsn, "a commit without its begin".into()))?;
                    txns.push(Txn { end: end_lsn as i64, ..txn });
                }
                _ => {}
            }
        }
        Ok((txns, changes.len()))
    }

    /// Lets the slot move past every settled commit at the front (the stream sends the
    /// position at its next status update); writes a heartbeat when the database has been quiet.
    async fn advance(&self, seen: bool) -> Result<(), StoreError> {
        let (settled, beat) = {
            let mut st = self.st();
            while st.commits.front().is_some_and(|c| c.open == 0) {
                if let Some(c) = st.commits.pop_front() {
                    st.settled_to = c.end;
                }
            }
            let now = Instant::now();
            let quiet = if seen || !st.commits.is_empty() { None } else { Some(*st.quiet_since.get_or_insert(now)) };
            if quiet.is_none() {
                st.quiet_since = None;
            }
            let beat = quiet.is_some_and(|q| now.duration_since(q) >= HEARTBEAT);
            if beat {
                st.quiet_since = Some(now);
            }
            (st.settled_to, beat)
        };
        if let Some(feed) = self.feed.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            feed.flush.fetch_max(settled, Relaxed);
        }
        if beat {
            slot::heartbeat(&self.pool).await?;
        }
        Ok(())
    }

    /// These events no longer need anything from this session.
    fn settle(&self, ids: &[i64]) {
        let mut st = self.st();
        for id in ids {
            st.heads.remove(id);
            st.refused.remove(id);
            let Some(out) = st.out.remove(id) else { continue };
            if let Ok(at) = st.commits.binary_search_by_key(&out.end, |c| c.end) {
                st.commits[at].open = st.commits[at].open.saturating_sub(1);
            }
        }
    }

    /// For refused events: each one's commit position (`None` for a held head: it has one),
    /// and whether an earlier event of its key is refused in the same group (then it is only
    /// held behind that one, no attempt counted).
    fn followers(&self, ids: &[i64]) -> (Vec<Option<i64>>, Vec<bool>) {
        let st = self.st();
        let mut first: HashMap<&str, (i64, i64)> = HashMap::new();
        for id in ids {
            if let Some(o) = st.out.get(id) {
                let e = first.entry(o.key.as_str()).or_insert((o.end, *id));
                *e = (*e).min((o.end, *id));
            }
        }
        let follower = ids
            .iter()
            .map(|id| st.out.get(id).is_some_and(|o| first.get(o.key.as_str()) != Some(&(o.end, *id))))
            .collect();
        (ids.iter().map(|id| st.out.get(id).map(|o| o.end)).collect(), follower)
    }

    /// The commit position of stream events in flight (`None` for a held head: it has one).
    fn positions(&self, ids: &[i64]) -> Vec<Option<i64>> {
        let st = self.st();
        ids.iter().map(|id| st.out.get(id).map(|o| o.end)).collect()
    }
}

impl<T: StreamTable> Driver for Streamed<T> {
    async fn acquire(&self, shutdown: &CancellationToken) -> bool {
        if !self.name(shutdown).await {
            return false;
        }
        let Some(lock) = self.lock() else { return false };
        if !lock.acquire(shutdown).await {
            return false;
        }
        let mut said = None;
        loop {
            match self.prepare().await {
                Ok(()) => return true,
                Err(e) => {
                    if said.as_ref() != Some(&e) {
                        tracing::error!(source = %self.source, slot = %self.names().slot, "{e}; trying again every {}s", STANDBY_RETRY.as_secs());
                        said = Some(e);
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(STANDBY_RETRY) => {}
            }
        }
    }

    /// An ended session's events in flight may or may not have reached the broker: the next
    /// session reads again from the slot's position and sends what the table shows unsettled.
    /// (The stream restarts with the session: [`Self::acquire`] opens it anew.)
    fn reset(&self) {
        *self.st() = State::default();
    }

    async fn unlock(&self) {
        self.close_feed().await;
        if let Some(lock) = self.lock() {
            lock.release().await
        }
    }

    async fn claim(&self, _owner: Uuid, batch: i64, _lease: Duration) -> Result<Vec<ClaimedRow>, StoreError> {
        let Some(lock) = self.lock() else {
            return Err(StoreError::Invalid("this relay has not taken the slot's lock".into()));
        };
        let mut slot = lock.conn().await;
        let Some(conn) = slot.as_mut() else {
            return Err(StoreError::Invalid("this relay no longer holds the slot's lock".into()));
        };
        let res = self.claim_on(conn, batch).await;
        if res.is_err() {
            // The lock lives and dies with this connection: assume it is gone.
            *slot = None;
        }
        res
    }

    /// Events given back (unconfirmed, or not sent when a session ends) are held, so they go
    /// out again in their key's order.
    async fn release(&self, _owner: Uuid, ids: &[i64]) -> Result<u64, StoreError> {
        let hold: Vec<(i64, i64)> =
            ids.iter().zip(self.positions(ids)).filter_map(|(id, at)| at.map(|at| (*id, at))).collect();
        let n = self.tab.hold(&mut *self.pool.acquire().await?, &hold).await?;
        self.settle(ids);
        Ok(n)
    }

    fn leased(&self) -> bool {
        false
    }

    async fn mark_bad(&self, id: i64, _owner: Uuid, reason: &str) -> Result<AttemptOutcome, StoreError> {
        let at = self.positions(&[id])[0];
        let done = self.tab.mark_bad(&mut *self.pool.acquire().await?, id, reason, at).await?;
        self.settle(&[id]);
        Ok(if done { AttemptOutcome::Failed } else { AttemptOutcome::NotOwned })
    }

    async fn write_marks(
        &self,
        _owner: Uuid,
        max_attempts: i32,
        published: &[i64],
        failed: &[FailedAttempt],
    ) -> Result<Written, StoreError> {
        let mut tx = self.pool.begin().await?;
        let changed = self.tab.write_published(&mut tx, self.delete, published).await?;
        let ids: Vec<i64> = failed.iter().map(|a| a.id).collect();
        let (at, follower) = self.followers(&ids);
        let refusals = Refusals { failed, at: &at, follower: &follower, header: self.order.header(), max_attempts };
        let outcomes = self.tab.write_failed(&mut tx, refusals).await?;
        tx.commit().await?;
        self.settle(published);
        self.settle(&failed.iter().map(|a| a.id).collect::<Vec<_>>());
        Ok((changed, outcomes))
    }

    /// A flush given up leaves its events unsettled, which would hold the slot where it is:
    /// the session ends at its next claim and the next one sends them again.
    fn flushed(&self, ids: &[i64]) {
        let mut st = self.st();
        if ids.iter().any(|id| st.out.contains_key(id)) {
            st.broken = true;
        }
    }

    fn refused(&self, id: i64) {
        self.st().refused.insert(id);
    }

    fn lane_key<'r>(&self, row: &'r ClaimedRow) -> Cow<'r, [u8]> {
        match self.order.of(&row.routing_key, &row.headers) {
            Cow::Borrowed(k) => Cow::Borrowed(k.as_bytes()),
            Cow::Owned(k) => Cow::Owned(k.into_bytes()),
        }
    }

    async fn listen(&self) -> Option<PgListener> {
        super::native::listen_retries(&self.pool).await
    }

    async fn arrived(&self) {
        self.arrived.notified().await
    }
}

/// Reads the stream into the queue until `stop` (or an error, which it queues), and sends the
/// slot's position: every [`STATUS_EVERY`] when it moved, whenever the server asks, and once
/// more on a clean stop.
async fn pump(
    mut conn: Replication,
    tx: mpsc::Sender<Result<(i64, Bytes), String>>,
    flush: Arc<AtomicI64>,
    arrived: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(STATUS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0;
    let failed = loop {
        let reply = tokio::select! {
            _ = stop.cancelled() => break None,
            _ = tick.tick() => false,
            frame = conn.next() => match frame {
                Ok(Frame::Change { at, data }) => {
                    tokio::select! {
                        _ = stop.cancelled() => break None,
                        sent = tx.send(Ok((at, data))) => if sent.is_err() { break None },
                    }
                    arrived.notify_one();
                    false
                }
                Ok(Frame::Keepalive { reply }) => reply,
                Err(e) => break Some(e),
            },
        };
        let at = flush.load(Relaxed);
        if (at > sent || reply)
            && let Err(e) = conn.status(at).await
        {
            break Some(e);
        }
        sent = sent.max(at);
    };
    match failed {
        Some(e) => {
            let _ = tx.try_send(Err(e));
            arrived.notify_one();
        }
        None => {
            let at = flush.load(Relaxed);
            if at > sent {
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.status(at)).await;
            }
        }
    }
}

/// Waits until these committed transactions (32-bit ids, as the stream gives them) are visible
/// to a new snapshot: a row of one read before would look missing, and a hold of it would
/// change nothing.
async fn visible(conn: &mut PgConnection, xids: &[i64]) -> Result<(), StoreError> {
    if xids.is_empty() {
        return Ok(());
    }
    for _ in 0..5_000 {
        // The full id: the epoch of the snapshot's xmax, or the one before for an id above its
        // low half (at epoch 0 no such transaction runs).
        let pending = sqlx::query_scalar!(
            r#"WITH s AS (SELECT pg_current_snapshot() AS snap,
                                 pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax),
                    f AS (SELECT s.snap, ((s.xmax >> 32) - CASE WHEN x > (s.xmax & 4294967295) THEN 1 ELSE 0 END) << 32 | x AS full_id
                            FROM s, unnest($1::bigint[]) AS x)
               SELECT count(*) AS "n!" FROM f
                WHERE f.full_id >= 0 AND NOT pg_visible_in_snapshot(f.full_id::text::xid8, f.snap)"#,
            xids
        )
        .fetch_one(&mut *conn)
        .await?;
        if pending == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Err(StoreError::Invalid(format!("transactions {xids:?} came in the commit stream but stay invisible")))
}
