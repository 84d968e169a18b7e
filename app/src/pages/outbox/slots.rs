//! Replication slots of the outbox sources' databases: what each holds back, which nobody
//! reads (a slot nobody reads keeps write-ahead log until the disk is full), and the admin's
//! drop with a typed confirmation.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::format;

/// Above this, a slot nobody reads is called out as filling the disk.
pub const ABANDONED_BYTES: i64 = 16 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SlotView {
    /// The outbox source the slot is the commit stream of; for any other slot, the first
    /// source whose database holds it (the drop runs there).
    pub source: String,
    pub name: String,
    pub plugin: String,
    /// The backend reading it, if any.
    pub reader: Option<i32>,
    pub retained_bytes: i64,
    pub wal_status: String,
}

impl SlotView {
    /// Nobody reads it and it holds back more than [`ABANDONED_BYTES`].
    pub fn abandoned(&self) -> bool {
        self.reader.is_none() && self.retained_bytes > ABANDONED_BYTES
    }
}

#[server(prefix = "/api", endpoint = "outbox/slots")]
pub async fn outbox_slots() -> Result<Vec<SlotView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    // Each source's own slot is named after its database and itself: it is shown as that
    // source's, also when several sources share a database.
    let mut owner = std::collections::HashMap::new();
    for src in state.sources.iter() {
        let names = engine::outbox::logical::slot::Names::of_source(&src.pool, &src.name).await?;
        owner.insert(names.slot, src.name.clone());
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for src in state.sources.iter() {
        for s in engine::outbox::logical::slots::list(&src.pool).await? {
            // Several sources may live in one database: its slots are listed once.
            if !seen.insert((s.database.clone(), s.name.clone())) {
                continue;
            }
            out.push(SlotView {
                source: owner.get(&s.name).cloned().unwrap_or_else(|| src.name.clone()),
                name: s.name,
                plugin: s.plugin.unwrap_or_default(),
                reader: s.active_pid,
                retained_bytes: s.retained_bytes.unwrap_or(0),
                wal_status: s.wal_status.unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// Drops a slot an admin names twice (the slot, and its name typed again). Audited.
#[server(prefix = "/api", endpoint = "outbox/slot-drop")]
pub async fn outbox_slot_drop(source: String, slot: String, confirm: String) -> Result<String, AppError> {
    use engine::outbox::logical::slots::{DropError, drop_audited};
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    if confirm.trim() != slot {
        return Err(AppError::Invalid(format!("type the slot's name, {slot}, to drop it")));
    }
    let state = crate::state::app_state()?;
    let src = engine::sources::find(&state.sources, &source)
        .ok_or_else(|| AppError::NotFound(format!("no outbox source named {source}")))?;
    let ip = crate::guard::client_ip();
    let actor = engine::audit::Actor { principal: &principal, ip: ip.as_deref() };
    match drop_audited(&src.pool, &state.pool, &source, &slot, &actor).await {
        Ok(freed) => Ok(format!(
            "Slot {slot} dropped; PostgreSQL may now recycle {} of write-ahead log.",
            format::bytes(freed.unwrap_or(0))
        )),
        Err(e @ DropError::NotFound(_)) => Err(AppError::NotFound(e.to_string())),
        Err(e @ DropError::Active { .. }) => Err(AppError::Conflict(e.to_string())),
        Err(DropError::Db(e)) => Err(e.into()),
    }
}

#[component]
pub fn Slots(is_admin: bool) -> impl IntoView {
    let dropped = ServerAction::<OutboxSlotDrop>::new();
    let list = Resource::new(move || dropped.version().get(), |_| outbox_slots());
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                match list.await {
                    Err(e) => view! { <crate::layout::ErrorBox err=e /> }.into_any(),
                    Ok(slots) if slots.is_empty() => ().into_any(),
                    Ok(slots) => view! { <SlotTable slots is_admin dropped /> }.into_any(),
                }
            })}
        </Suspense>
        {move || match dropped.value().get() {
            Some(Ok(m)) => view! { <p class="mb-2 text-sm text-emerald-700 dark:text-emerald-400" role="status">{m}</p> }.into_any(),
            Some(Err(e)) => view! { <crate::layout::ErrorBox err=e /> }.into_any(),
            None => ().into_any(),
        }}
    }
}

#[component]
fn SlotTable(slots: Vec<SlotView>, is_admin: bool, dropped: ServerAction<OutboxSlotDrop>) -> impl IntoView {
    view! {
        <section class="card px-3 py-2 mb-4 text-sm" data-testid="replication-slots">
            <h2 class="font-medium mb-1">"Replication slots"</h2>
            <p class="muted text-xs mb-2">
                "Logical replication slots in the outbox sources' databases. PostgreSQL keeps every byte of write-ahead log a slot has not confirmed; one nobody reads fills the disk."
            </p>
            <table class="tbl">
                <thead><tr><th>"Slot"</th><th>"Source"</th><th>"Plugin"</th><th>"Read by"</th><th>"WAL held back"</th><th>"State"</th>{is_admin.then(|| view! { <th></th> })}</tr></thead>
                <tbody>
                    {slots.into_iter().map(|s| {
                        let abandoned = s.abandoned();
                        let (source, name) = (s.source.clone(), s.name.clone());
                        view! {
                            <tr data-testid="slot-row" data-slot=s.name.clone()>
                                <td class="font-mono text-xs">{s.name.clone()}</td>
                                <td>{s.source.clone()}</td>
                                <td>{s.plugin.clone()}</td>
                                <td>{match s.reader { Some(pid) => format!("backend {pid}"), None => "nobody".into() }}</td>
                                <td class="tabular-nums" class=(["text-red-700", "dark:text-red-400"], abandoned) data-testid="slot-retained">{format::bytes(s.retained_bytes)}</td>
                                <td data-testid="slot-state">
                                    {if abandoned { "nobody reads it: it is filling the disk".to_string() } else { s.wal_status.clone() }}
                                </td>
                                {is_admin.then(|| view! { <td><DropForm source name reading=s.reader.is_some() dropped /></td> })}
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn DropForm(source: String, name: String, reading: bool, dropped: ServerAction<OutboxSlotDrop>) -> impl IntoView {
    let typed = RwSignal::new(String::new());
    let target = name.clone();
    let matches = move || typed.with(|t| t.trim() == target);
    let label = format!("type {name} to drop it");
    view! {
        <form class="flex gap-1 items-center" data-testid="slot-drop"
            on:submit=move |ev| {
                ev.prevent_default();
                dropped.dispatch(OutboxSlotDrop { source: source.clone(), slot: name.clone(), confirm: typed.get_untracked() });
            }>
            <input class="input w-48 font-mono text-xs" aria-label=label.clone() placeholder=label disabled=reading
                prop:value=move || typed.get() on:input=move |ev| typed.set(event_target_value(&ev)) />
            <button class="btn" type="submit" disabled=move || reading || !matches()>"Drop slot"</button>
        </form>
    }
}

/// The Overview's line per slot nobody reads that holds back more than [`ABANDONED_BYTES`]:
/// nothing when there is none.
#[component]
pub fn AbandonedSlots(slots: Vec<SlotView>) -> impl IntoView {
    let abandoned: Vec<SlotView> = slots.into_iter().filter(SlotView::abandoned).collect();
    (!abandoned.is_empty()).then(|| {
        view! {
            <div class="card border-red-400 px-3 py-2 mt-3 text-sm" data-testid="overview-slots">
                {abandoned.into_iter().map(|s| view! {
                    <div>
                        <a class="underline" href=types::routes::outbox_source(&s.source)>
                            "Replication slot "<span class="font-mono">{s.name.clone()}</span>" ("{s.source.clone()}")"
                        </a>
                        ": nobody reads it; it holds back "
                        <b class="text-red-700 dark:text-red-400">{format::bytes(s.retained_bytes)}</b>
                        " of write-ahead log, growing until the disk is full."
                    </div>
                }).collect_view()}
            </div>
        }
    })
}
