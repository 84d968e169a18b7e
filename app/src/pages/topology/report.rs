//! The report itself: summary line, node alarms, the queue table with each queue's checks,
//! exchanges that can drop messages — or, when the broker cannot be read, what was not checked.
//!
//! Plain components over props (no resources), so the server can render them in tests.
//! Broker-supplied strings (queue, exchange and node names, reasons naming them) are text
//! nodes only: never attributes, never HTML.

use leptos::prelude::*;

use super::api::{Check, ExchangeView, NodeView, QueueView, TopologyView, Verdict};
use crate::pages::dead_letters::watch::{Manage, WatchButton};
use crate::widgets::{BrokerLink, Pill};
use types::routes::ManagementUi;

/// The whole report for one snapshot.
#[component]
pub fn ReportBody(r: TopologyView, manage: Option<Manage>) -> impl IntoView {
    if !r.reachable {
        return view! { <Unreachable r /> }.into_any();
    }
    let s = r.summary();
    let flagged: Vec<ExchangeView> =
        r.exchanges.iter().filter(|x| Verdict::worst(&x.checks) != Verdict::Pass).cloned().collect();
    let exchanges_ok = r.exchanges.len() - flagged.len();
    view! {
        <p class="mb-3 text-sm flex flex-wrap items-center gap-x-3 gap-y-1" data-testid="topology-summary">
            <span>"Queues by worst check:"</span>
            <span><b class=("text-red-700", s.fail > 0) class=("dark:text-red-400", s.fail > 0)>{s.fail}</b>" fail"</span>
            <span><b>{s.warn}</b>" warn"</span>
            {(s.unknown > 0).then(|| view! { <span><b>{s.unknown}</b>" unknown"</span> })}
            <span><b>{s.pass}</b>" pass"</span>
            {(s.failing_critical > 0).then(|| view! {
                <span class="text-red-700 dark:text-red-300 font-medium">{s.failing_critical}" critical failing"</span>
            })}
            <span class="muted">"|"</span>
            <span>"Node alarms: "<b class=("text-red-700", s.alarms > 0) class=("dark:text-red-400", s.alarms > 0)>{if s.alarms == 0 { "none".to_string() } else { s.alarms.to_string() }}</b></span>
        </p>
        <Nodes nodes=r.nodes />
        <Queues queues=r.queues manage broker=r.broker />
        <h2 class="text-base font-semibold mt-5 mb-2">"Exchanges that can drop messages"</h2>
        {if flagged.is_empty() {
            let text = match exchanges_ok {
                0 => "None: this vhost has no exchanges of its own.".to_string(),
                n => format!("None: all {n} checked exchanges route every message or have an alternate exchange."),
            };
            view! { <p class="muted text-sm" data-testid="exchanges-ok">{text}</p> }.into_any()
        } else {
            view! { <Exchanges list=flagged ok=exchanges_ok /> }.into_any()
        }}
    }
    .into_any()
}

/// The management API is off or did not answer: say which, and every check not made.
#[component]
fn Unreachable(r: TopologyView) -> impl IntoView {
    let headline = if r.management_off {
        "The RabbitMQ management API is off: topology checks are not made."
    } else {
        "The RabbitMQ management API cannot be read: topology checks are not made."
    };
    view! {
        <div role="alert" class="card border-amber-400 px-3 py-2 mb-3 text-sm" data-testid="topology-unreachable">
            <p class="font-medium">{headline}</p>
            <p class="mt-1 break-words">{r.unreachable.unwrap_or_default()}</p>
            <p class="mt-2 muted">"Not checked:"</p>
            <ul class="list-disc ml-5" data-testid="not-checked">
                {r.not_checked.into_iter().map(|c| view! { <li>{c}</li> }).collect_view()}
            </ul>
        </div>
    }
}

/// One non-passing check, readable: verdict, name, reason and what to change.
#[component]
fn CheckLine(c: Check) -> impl IntoView {
    let fix = (!c.fix.is_empty()).then(|| {
        view! { <span class="ml-1"><span class="muted">"Fix: "</span>{c.fix}</span> }
    });
    view! {
        <li class="flex flex-wrap items-baseline gap-x-1.5">
            <Pill text=c.verdict />
            <span class="font-mono text-xs">{c.name}</span>
            <span>{c.reason}"."</span>
            {fix}
        </li>
    }
}

/// Passing checks behind a disclosure: seen when asked, never hiding a failure.
#[component]
fn Passing(checks: Vec<Check>) -> impl IntoView {
    let n = checks.len();
    (n > 0).then(|| {
        view! {
            <details class="text-xs mt-0.5">
                <summary class="cursor-pointer muted">{format!("{n} pass")}</summary>
                <ul class="mt-1 space-y-0.5 whitespace-normal max-w-md">
                    {checks.into_iter().map(|c| view! {
                        <li><span class="font-mono">{c.name}</span>": "{c.reason}</li>
                    }).collect_view()}
                </ul>
            </details>
        }
    })
}

fn split(checks: Vec<Check>) -> (Vec<Check>, Vec<Check>) {
    let (mut bad, good): (Vec<_>, Vec<_>) = checks.into_iter().partition(|c| c.verdict != Verdict::Pass);
    bad.sort_by_key(|c| std::cmp::Reverse(c.verdict.rank()));
    (bad, good)
}

#[component]
fn Nodes(nodes: Vec<NodeView>) -> impl IntoView {
    (!nodes.is_empty()).then(|| {
        view! {
            <div class="card px-3 py-2 mb-3 text-sm" data-testid="topology-nodes">
                {nodes.into_iter().map(|n| {
                    let (bad, good) = split(n.checks);
                    let ok = bad.is_empty();
                    // In a cluster the node checks also say it runs and sees the others.
                    let clustered = good.iter().any(|c| c.name == "node-running");
                    let all_clear = if clustered { "running, no alarm, no partition" } else { "no memory or disk alarm" };
                    view! {
                        <div class="flex flex-wrap items-baseline gap-2">
                            <span class="font-mono text-xs">{n.name}</span>
                            {ok.then(|| view! { <Pill text="pass" /><span class="muted text-xs">{all_clear}</span> })}
                        </div>
                        {(!ok).then(|| view! {
                            <ul class="ml-4 space-y-0.5">{bad.into_iter().map(|c| view! { <CheckLine c /> }).collect_view()}</ul>
                        })}
                        {(!ok).then(|| view! { <div class="ml-4"><Passing checks=good /></div> })}
                    }
                }).collect_view()}
            </div>
        }
    })
}

fn num(n: Option<i64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_else(|| "–".into())
}

fn rate(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.1}/s")).unwrap_or_else(|| "–".into())
}

const COLUMNS: usize = 7;

#[component]
fn Queues(queues: Vec<QueueView>, manage: Option<Manage>, broker: Option<ManagementUi>) -> impl IntoView {
    let empty = queues.is_empty();
    view! {
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="topology-queues">
                <thead><tr>
                    <th>"Queue"</th><th>"Contract"</th><th>"Role"</th><th class="text-right">"Consumers"</th>
                    <th class="text-right">"Ready / unacked"</th><th class="text-right">"Publish / deliver"</th><th>"Checks"</th>
                </tr></thead>
                {queues.into_iter().map(|q| {
                    let link = broker.as_ref().map(|b| b.queue(&q.name));
                    view! { <QueueRows q manage link /> }
                }).collect_view()}
            </table>
            {empty.then(|| view! { <p class="p-3 muted text-sm">"No queues in this vhost."</p> })}
        </div>
    }
}

/// A queue's row, and under it a row with its failing and warning checks.
#[component]
fn QueueRows(q: QueueView, manage: Option<Manage>, link: Option<String>) -> impl IntoView {
    let ingest = match (q.watched, manage) {
        (Some(false), Some(m)) => {
            Some(view! { <div class="mt-1"><WatchButton queue=q.name.clone() start=true manage=m /></div> }.into_any())
        }
        (Some(false), None) => {
            Some(view! { <div class="text-xs text-amber-700 dark:text-amber-300">"not ingested"</div> }.into_any())
        }
        (Some(true), _) => Some(view! { <div class="text-xs muted">"ingested"</div> }.into_any()),
        (None, _) => None,
    };
    let worst = q.worst();
    let critical_failing = q.failing_critical();
    let via = match &q.contract {
        None => Some("default".to_string()),
        Some(p) if *p == q.name => None,
        Some(p) => Some(format!("via {p}")),
    };
    let (bad, good) = split(q.checks);
    let counts = if bad.is_empty() {
        None
    } else {
        let n = |v: Verdict| bad.iter().filter(|c| c.verdict == v).count();
        let parts: Vec<String> = [Verdict::Fail, Verdict::Warn, Verdict::Unknown]
            .into_iter()
            .filter(|&v| n(v) > 0)
            .map(|v| format!("{} {v}", n(v)))
            .collect();
        Some(parts.join(" · "))
    };
    let no_checks = bad.is_empty() && good.is_empty();
    view! {
        <tbody data-testid="queue" class=("bg-red-50/60", critical_failing) class=("dark:bg-red-950/30", critical_failing)>
            <tr>
                <td class="font-mono text-xs break-all max-w-xs">
                    <div class="flex items-baseline gap-2"><span data-testid="queue-name">{q.name.clone()}</span><BrokerLink href=link /></div>
                    <div class="muted" data-testid="queue-placement">{q.placement.summary(&q.kind)}</div>
                    {q.placement.members_line().map(|m| view! { <div class="muted" data-testid="queue-members">{m}</div> })}
                </td>
                <td class="whitespace-nowrap" data-testid="queue-level">
                    <Pill text=q.level />
                    {via.map(|v| view! { <div class="text-xs muted font-mono break-all">{v}</div> })}
                </td>
                <td class="text-xs whitespace-nowrap">{q.role.as_str()}{ingest}</td>
                <td class="text-right tabular-nums">{num(q.consumers)}</td>
                <td class="text-right tabular-nums whitespace-nowrap">{num(q.ready)}" / "{num(q.unacked)}</td>
                <td class="text-right tabular-nums whitespace-nowrap">{rate(q.publish_rate)}" / "{rate(q.deliver_rate)}</td>
                <td data-testid="queue-verdict">
                    <div class="whitespace-nowrap">
                        {(!no_checks).then(|| view! { <Pill text=worst /> })}
                        {counts.map(|c| view! { <span class="ml-1 text-xs">{c}</span> })}
                        {no_checks.then(|| view! { <span class="text-xs muted">"no checks apply"</span> })}
                    </div>
                    <Passing checks=good />
                </td>
            </tr>
            {(!bad.is_empty()).then(|| view! {
                <tr>
                    <td colspan=COLUMNS.to_string() class="pt-0 pb-2 pl-6">
                        <ul class="text-xs space-y-0.5" data-testid="queue-problems">
                            {bad.into_iter().map(|c| view! { <CheckLine c /> }).collect_view()}
                        </ul>
                    </td>
                </tr>
            })}
        </tbody>
    }
}

#[component]
fn Exchanges(list: Vec<ExchangeView>, ok: usize) -> impl IntoView {
    view! {
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="topology-exchanges">
                <thead><tr><th>"Exchange"</th><th>"Checks"</th></tr></thead>
                <tbody>
                    {list.into_iter().map(|x| {
                        let (bad, _) = split(x.checks);
                        view! {
                            <tr>
                                <td class="font-mono text-xs break-all max-w-xs">{x.name}</td>
                                <td><ul class="text-xs space-y-0.5">{bad.into_iter().map(|c| view! { <CheckLine c /> }).collect_view()}</ul></td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            <p class="px-2 py-1.5 muted text-xs">{format!("{ok} other exchanges pass.")}</p>
        </div>
    }
}
