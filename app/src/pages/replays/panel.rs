//! The replay planner: choose a target and pace, preview (how many, to where, do the targets
//! exist and have consumers, replayed before?), confirm — typing the count for big plans —
//! and go to the plan's progress page. The default target is the queue each message died in
//! (only that queue receives it); through an exchange, the preview names every queue reached
//! and warns when that is more than one.

use leptos::prelude::*;

use super::api::{Order, PlanOptions, ReplayCreate, ReplayPreview, SelectionInput, TargetInput};
use crate::layout::ErrorBox;
use crate::pages::dead_letters::{self, api::DlQuery};

#[component]
pub fn ReplayPanel(
    selection: Signal<SelectionInput>,
    #[prop(into)] label: String,
    /// The queue the message died in, when the page knows it: prefills "a queue".
    #[prop(optional)]
    origin: Option<String>,
    /// Opening the panel also runs the preview (the group page's primary button).
    #[prop(optional)]
    preview_on_open: bool,
    /// Where the button leads before the page's script has loaded: a link to a page that
    /// does the same without it (`types::routes::group_replay`). Once hydrated, it opens the
    /// panel in place.
    #[prop(optional)]
    href: Option<String>,
) -> impl IntoView {
    let open = RwSignal::new(false);
    let mode = RwSignal::new("origin".to_string());
    let exchange = RwSignal::new(String::new());
    let routing_key = RwSignal::new(String::new());
    let queue = RwSignal::new(origin.unwrap_or_default());
    let rate = RwSignal::new("50".to_string());
    let start_in = RwSignal::new(String::new());
    // none, plan, routing_key or header (then `order_header` names it).
    let order = RwSignal::new("none".to_string());
    let order_header = RwSignal::new(String::new());
    let auto_pause = RwSignal::new(super::api::DEFAULT_AUTO_PAUSE_PERCENT.to_string());
    let typed = RwSignal::new(String::new());
    let preview = ServerAction::<ReplayPreview>::new();
    let create = ServerAction::<ReplayCreate>::new();
    let target = move || TargetInput {
        mode: mode.get_untracked(),
        exchange: exchange.get_untracked(),
        routing_key: routing_key.get_untracked(),
        queue: queue.get_untracked(),
    };
    // A preview tells the selection's origin queues: prefill "a queue" when it is one queue.
    Effect::new(move |_| {
        if let Some(Ok(p)) = preview.value().get()
            && p.origin_queues.len() == 1
            && queue.get_untracked().trim().is_empty()
        {
            queue.set(p.origin_queues[0].clone());
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(id)) = create.value().get() {
            let navigate = leptos_router::hooks::use_navigate();
            navigate(&types::routes::replay_plan(id), Default::default());
        }
    });
    let text = |sig: RwSignal<String>, name: &'static str, width: &'static str| {
        view! {
            <input class=format!("input {width}") aria-label=name prop:value=move || sig.get() on:input=move |ev| sig.set(event_target_value(&ev)) />
        }
    };
    let toggle = move || {
        open.update(|o| *o = !*o);
        if preview_on_open && open.get_untracked() {
            preview.dispatch(ReplayPreview { selection: selection.get_untracked(), target: target() });
        }
    };
    let class = if preview_on_open { "btn btn-primary" } else { "btn" };
    let trigger = match href {
        Some(href) => view! {
            <a class=class href=href role="button" on:click=move |ev| {
                ev.prevent_default();
                toggle();
            }>{label}</a>
        }
        .into_any(),
        None => view! { <button class=class on:click=move |_| toggle()>{label}</button> }.into_any(),
    };
    view! {
        {trigger}
        <Show when=move || open.get()>
            <div class="card p-3 my-2 w-full text-sm flex flex-col gap-2" data-testid="replay-panel">
                <div class="flex flex-wrap gap-3 items-center">
                    <span class="font-medium">"Target"</span>
                    {["origin", "original", "exchange", "queue"].into_iter().map(|m| view! {
                        <label class="flex items-center gap-1">
                            <input type="radio" name="replay-target" value=m prop:checked=move || mode.get() == m on:change=move |_| mode.set(m.to_string()) />
                            {match m {
                                "origin" => "the queue it died in (only that queue)",
                                "original" => "original exchange + routing key (every bound queue)",
                                "exchange" => "another exchange",
                                _ => "a queue",
                            }}
                        </label>
                    }).collect_view()}
                </div>
                <Show when=move || mode.get() == "exchange">
                    <div class="flex gap-2 items-center">"exchange"{text(exchange, "target exchange", "w-56")}"routing key"{text(routing_key, "target routing key", "w-56")}</div>
                </Show>
                <Show when=move || mode.get() == "queue">
                    <div class="flex gap-2 items-center">"queue"{text(queue, "target queue", "w-72")}</div>
                </Show>
                <div class="flex flex-wrap gap-3 items-center">
                    <label class="flex items-center gap-1">"rate (msg/s, empty = no limit)"{text(rate, "rate", "w-20")}</label>
                    <label class="flex items-center gap-1">"start in (minutes)"{text(start_in, "start in minutes", "w-20")}</label>
                    <label class="flex items-center gap-1">"auto-pause if this % die again"{text(auto_pause, "auto-pause percent", "w-16")}</label>
                </div>
                <div class="flex flex-wrap gap-3 items-center">
                    <label class="flex items-center gap-1 min-w-0 max-w-full">"order"
                        <select class="input min-w-0 max-w-full" aria-label="order" data-testid="replay-order" prop:value=move || order.get() on:change=move |ev| order.set(event_target_value(&ev))>
                            <option value="none">"none (fastest)"</option>
                            <option value="routing_key">"per routing key"</option>
                            <option value="header">"per header value"</option>
                            <option value="plan">"whole plan, one at a time"</option>
                        </select>
                    </label>
                    <Show when=move || order.get() == "header">
                        <label class="flex items-center gap-1">"header"{text(order_header, "order header", "w-48")}</label>
                    </Show>
                    <span class="muted text-xs" data-testid="replay-order-help">{move || match order.get().as_str() {
                        "routing_key" => "In first-failure order within each original routing key, keys in parallel; a failure holds back that key's later messages (they await triage again).",
                        "header" => "In first-failure order within each value of the header (an aggregate id), values in parallel; a failure holds back that value's later messages. Messages without the header are sent without order.",
                        "plan" => "One message at a time in first-failure order; the first failure pauses the plan.",
                        _ => "As fast as the broker confirms; no order between messages.",
                    }}</span>
                </div>
                <div>
                    <button class="btn" on:click=move |_| { preview.dispatch(ReplayPreview { selection: selection.get_untracked(), target: target() }); }>"Preview"</button>
                </div>
                {move || preview.value().get().map(|r| match r {
                    Err(err) => view! { <ErrorBox err /> }.into_any(),
                    Ok(p) => {
                        let needs = p.needs_typed_confirmation;
                        let count = p.count;
                        let fan_out: Vec<String> = p.targets.iter().filter_map(|t| {
                            let r = t.reaches.as_ref().filter(|r| r.len() > 1)?;
                            Some(format!("exchange `{}` key `{}` reaches {} queues: {}", t.exchange, t.routing_key, r.len(), r.join(", ")))
                        }).collect();
                        view! {
                            <div class="border-t border-slate-200 dark:border-slate-800 pt-2" data-testid="replay-preview">
                                {(p.kinds.len() > 1).then(|| view! {
                                    <p class="text-red-700 dark:text-red-400 font-medium" role="alert" data-testid="mixed-kinds">
                                        {format!("This set mixes {} kinds of message: {}. Replay one kind at a time: narrow the selection to one (its failure group, or a filter) first.",
                                            if p.kinds.len() as i64 >= MAX_KINDS_SHOWN { format!("{MAX_KINDS_SHOWN} or more") } else { p.kinds.len().to_string() },
                                            p.kinds.iter().map(|(t, b, n)| format!("{n} {}", kind_words(t.as_deref(), b.as_deref()))).collect::<Vec<_>>().join(", "))}
                                    </p>
                                })}
                                {(p.kinds.len() > 1).then(|| narrow_links(&selection.get_untracked(), &p.kinds)).flatten().map(|links| view! {
                                    <ul class="text-sm flex flex-wrap gap-x-4" data-testid="narrow-kinds">
                                        {links.into_iter().map(|(href, label)| view! { <li><a class="underline" href=href>{label}</a></li> }).collect_view()}
                                    </ul>
                                })}
                                <p class="text-xs muted" data-testid="preview-selection">{format!("The set: {}. It is frozen when the plan is created.", p.selection)}</p>
                                <p><b data-testid="preview-count">{p.count}</b>" messages will be replayed"
                                    {(p.already_replayed > 0).then(|| view! { <span class="text-amber-700 dark:text-amber-400">{format!(" — {} of them were replayed before", p.already_replayed)}</span> })}
                                    {(p.without_destination > 0).then(|| view! { <span class="text-red-700">{format!(" — {} name no destination for this target (no x-death, no failure headers): choose another target", p.without_destination)}</span> })}
                                </p>
                                {p.broker_error.clone().map(|e| view! { <p class="text-red-700">"Could not check the targets on the broker: "{e}</p> })}
                                {(!fan_out.is_empty()).then(|| view! {
                                    <div class="text-amber-800 dark:text-amber-300" role="alert" data-testid="fan-out-warning">
                                        <p class="font-medium">"Every queue bound to the key gets a copy, including queues whose consumers already processed it:"</p>
                                        <ul class="list-disc ml-5">{fan_out.into_iter().map(|l| view! { <li class="font-mono text-xs break-all">{l}</li> }).collect_view()}</ul>
                                        <p>"To send each message only where it failed, choose \"the queue it died in\"."</p>
                                    </div>
                                })}
                                <table class="tbl mt-1"><thead><tr><th>"Exchange"</th><th>"Routing key"</th><th>"Messages"</th><th>"Exists"</th><th>"Consumers"</th><th>"Reaches"</th></tr></thead>
                                    <tbody>{p.targets.into_iter().map(|t| view! {
                                        <tr><td class="font-mono text-xs">{if t.exchange.is_empty() { "(default)".to_string() } else { t.exchange }}</td>
                                        <td class="font-mono text-xs">{t.routing_key}</td><td class="tabular-nums">{t.count}</td>
                                        <td>{match t.exists { Some(true) => "yes", Some(false) => "NO", None => "?" }}</td>
                                        <td>{t.queue.clone().map(|q| format!("{} on {q}", t.consumers.map(|c| c.to_string()).unwrap_or_else(|| "?".into())))}</td>
                                        <td class="font-mono text-xs break-all" data-testid="target-reaches">{match (&t.queue, &t.reaches) {
                                            (Some(q), _) => format!("only {q}"),
                                            (None, Some(r)) if r.is_empty() => "no queue (unroutable)".to_string(),
                                            (None, Some(r)) => r.join(", "),
                                            (None, None) => "?".to_string(),
                                        }}</td></tr>
                                    }).collect_view()}</tbody>
                                </table>
                                {p.more_targets.then(|| view! { <p class="muted text-xs">"More targets than shown."</p> })}
                                {needs.then(|| view! {
                                    <label class="flex items-center gap-2 mt-2">{format!("Type {count} to confirm this large replay:")}{text(typed, "typed confirmation", "w-28")}</label>
                                })}
                                <button class="btn btn-primary mt-2" disabled=move || needs && typed.get().trim() != count.to_string()
                                    on:click=move |_| {
                                        create.dispatch(ReplayCreate {
                                            selection: selection.get_untracked(),
                                            target: target(),
                                            options: PlanOptions {
                                                rate_per_sec: rate.get_untracked(),
                                                start_in_mins: start_in.get_untracked(),
                                                order: match order.get_untracked().as_str() {
                                                    "plan" => Order::Plan,
                                                    "routing_key" => Order::RoutingKey,
                                                    "header" => Order::Header(order_header.get_untracked().trim().to_string()),
                                                    _ => Order::None,
                                                },
                                                auto_pause_percent: auto_pause.get_untracked(),
                                                confirm_count: if needs { typed.get_untracked() } else { count.to_string() },
                                            },
                                        });
                                    }>{format!("Replay {count} messages")}</button>
                            </div>
                        }.into_any()
                    }
                })}
                {move || create.value().get().and_then(|r| r.err()).map(|err| view! { <ErrorBox err /> })}
            </div>
        </Show>
    }
}

/// The preview lists at most this many kinds (`engine::replay::preview::MAX_KINDS`).
const MAX_KINDS_SHOWN: i64 = 6;

/// One kind of message in words: its type and body shape.
/// For a set taken with the list's filter: one link per kind, to the list narrowed to it
/// (its type and body shape added to the filter), from where its "Replay all matching" takes
/// that kind alone. None for a hand-picked set.
fn narrow_links(
    selection: &SelectionInput,
    kinds: &[(Option<String>, Option<String>, i64)],
) -> Option<Vec<(String, String)>> {
    let SelectionInput::Filter(q) = selection else { return None };
    Some(
        kinds
            .iter()
            // Only a link whose filter takes exactly this kind: a kind without a type (or shape)
            // cannot be told apart by filter from a kind with one and the same other half.
            .filter(|(t, b, _)| {
                let takes = |(t2, b2, _): &&(Option<String>, Option<String>, i64)| {
                    (t.is_none() || t2 == t) && (b.is_none() || b2 == b)
                };
                (t.is_some() || b.is_some()) && kinds.iter().filter(takes).count() == 1
            })
            .map(|(t, b, n)| {
                let narrowed = DlQuery { msg_type: t.clone(), shape: b.clone(), ..q.clone() };
                (
                    dead_letters::href(&narrowed, None),
                    format!("Only the {n} {}", kind_words(t.as_deref(), b.as_deref())),
                )
            })
            .collect(),
    )
}

fn kind_words(msg_type: Option<&str>, body_shape: Option<&str>) -> String {
    let t = msg_type.map(|t| format!("of type {t}")).unwrap_or_else(|| "without a type".into());
    match body_shape {
        Some(b) => format!("{t}, body {b}"),
        None => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_kind_a_filter_takes_alone_gets_a_link_and_a_picked_set_gets_none() {
        let kinds = vec![
            (Some("processar_pagamento".to_string()), Some("{a}".to_string()), 34),
            (Some("notificar_cliente".to_string()), Some("{b}".to_string()), 5),
            // The first one's shape without a type: a filter on the shape would take both.
            (None, Some("{a}".to_string()), 2),
        ];
        let q = DlQuery { queue: Some("p.dlq".into()), ..Default::default() };
        let links = narrow_links(&SelectionInput::Filter(q), &kinds).unwrap();
        assert_eq!(links.len(), 2, "{links:?}");
        assert!(
            links[0].0.contains("type=processar_pagamento") && links[0].0.contains("queue=p.dlq"),
            "{}",
            links[0].0
        );
        assert_eq!(links[0].1, "Only the 34 of type processar_pagamento, body {a}");
        assert!(narrow_links(&SelectionInput::Ids(vec![1]), &kinds).is_none());
    }
}
