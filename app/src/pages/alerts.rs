//! Alerts: every rule with its state at a glance, and (admins) the form for a new rule.
//!
//! Rule names, targets and webhook hosts are operator-typed: they are text nodes only.

mod admin;
pub mod api;
mod form;
pub mod rule;

use leptos::prelude::*;

use crate::auth::whoami;
use crate::format;
use crate::layout::{ErrorBox, PageTitle};
use crate::widgets::{Pill, Time};
use api::{RuleRowView, alerts_list, alerts_targets};

/// A threshold or value as people write it: `12`, `0.5`, not `12.0`.
pub fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A rule's thresholds in one line, comparisons written out: `fires ≥ 10 · critical ≥ 100 ·
/// resolves ≤ 2`, or with one level `fires (critical) ≥ 100 · resolves ≤ 90`.
pub fn thresholds(r: &RuleRowView) -> String {
    threshold_words(r.warn, r.crit, r.recover)
}

pub fn threshold_words(warn: f64, crit: f64, recover: f64) -> String {
    if warn == crit {
        format!("fires (critical) ≥ {} · resolves ≤ {}", num(warn), num(recover))
    } else {
        format!("fires ≥ {} · critical ≥ {} · resolves ≤ {}", num(warn), num(crit), num(recover))
    }
}

#[component]
pub fn AlertsPage() -> impl IntoView {
    let saved = RwSignal::new(0u32);
    let rules = Resource::new(move || saved.get(), |_| alerts_list());
    let caller = Resource::new(|| (), |_| whoami());
    let options = Resource::new(|| (), |_| alerts_targets());
    // Outside the list's Suspense, so it survives the refetch a save causes.
    let notice = RwSignal::new(None::<(i64, String)>);
    view! {
        <PageTitle title="Alerts" />
        {move || notice.get().map(|(id, name)| view! {
            <p class="mb-2 text-sm text-emerald-700 dark:text-emerald-400" role="status">
                "Rule "<a class="underline" href=types::routes::alert_rule(id)>{name}</a>" saved."
            </p>
        })}
        <Suspense fallback=|| view! { <p class="muted text-sm">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match rules.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(list) => view! { <RulesTable list /> }.into_any(),
                }
            })}
        </Suspense>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                if !matches!(caller.await, Ok(Some(ref c)) if c.is_admin()) {
                    return view! { <p class="muted text-xs mt-3">"Only admins create and change alert rules."</p> }.into_any();
                }
                match options.await {
                    Err(e) => view! { <ErrorBox err=e /> }.into_any(),
                    Ok(options) => {
                        let on_saved = Callback::new(move |(id, name): (i64, String)| {
                            notice.set(Some((id, name)));
                            saved.update(|n| *n += 1);
                        });
                        view! {
                            <div class="mt-4">
                                <form::RuleEditor id=None initial=form::blank() options on_saved />
                            </div>
                        }.into_any()
                    }
                }
            })}
        </Suspense>
    }
}

#[component]
fn RulesTable(list: Vec<RuleRowView>) -> impl IntoView {
    let empty = list.is_empty();
    view! {
        <div tabindex="0" class="card overflow-x-auto">
            <table class="tbl" data-testid="rules-table">
                <thead><tr>
                    <th>"Rule"</th><th>"State"</th><th>"Severity"</th><th>"Kind"</th><th>"Target"</th>
                    <th class="text-right">"Value"</th><th>"Thresholds"</th><th>"Since"</th><th>"Silenced until"</th><th>"Webhook"</th>
                </tr></thead>
                <tbody>
                    {list.into_iter().map(|r| {
                        let th = thresholds(&r);
                        view! {
                            <tr>
                                <td class="font-medium">
                                    <a class="underline" href=types::routes::alert_rule(r.id)>{r.name.clone()}</a>
                                    {(!r.enabled).then(|| view! { <span class="ml-1"><Pill text="disabled" /></span> })}
                                </td>
                                <td><Pill text=r.state /></td>
                                <td>{r.severity.map(|s| view! { <Pill text=s /> })}</td>
                                <td class="text-xs" title=r.kind.as_str()>{r.kind.label()}</td>
                                <td class="font-mono text-xs">
                                    <a class="underline" href=r.link.clone()>{r.target.clone().unwrap_or_else(|| "any queue".into())}</a>
                                </td>
                                <td class="text-right tabular-nums font-medium">{r.value.map(num).unwrap_or_else(|| "—".into())}</td>
                                <td class="text-xs muted whitespace-nowrap">{th}</td>
                                <td class="tabular-nums whitespace-nowrap" title=format::time(r.since)>{format::age_secs(r.since_secs)}</td>
                                <td class="text-xs whitespace-nowrap">{r.silenced_until.map(|at| view! { <Time at /> })}</td>
                                <td class="font-mono text-xs">{r.webhook_host.clone().unwrap_or_else(|| "—".into())}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            {empty.then(|| view! { <p class="p-3 muted text-sm">"No alert rules yet."</p> })}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_without_needless_decimals() {
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(1.0 / 3.0), "0.333");
    }
}
