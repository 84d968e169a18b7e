//! Dead letters stored per minute over the last hour, as bars: is it getting worse or better?
//! Inline SVG (no script, so it passes the CSP); each bar's title gives its minute and count.

use leptos::prelude::*;

const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 44.0;

/// `per_minute`: oldest first, the current minute last.
#[component]
pub fn InflowChart(per_minute: Vec<i64>) -> impl IntoView {
    let total: i64 = per_minute.iter().sum();
    let peak = per_minute.iter().copied().max().unwrap_or(0);
    let n = per_minute.len().max(1);
    let slot = WIDTH / n as f64;
    let bars = per_minute
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .map(|(i, v)| {
            let h = (*v as f64 / peak.max(1) as f64 * (HEIGHT - 2.0)).max(1.5);
            let ago = n - 1 - i;
            let when = if ago == 0 { "this minute".to_string() } else { format!("{ago} min ago") };
            view! {
                <rect x=format!("{:.1}", i as f64 * slot) y=format!("{:.1}", HEIGHT - h)
                      width=format!("{:.1}", (slot - 1.0).max(1.0)) height=format!("{h:.1}") fill="currentColor">
                    <title>{format!("{v} dead letters, {when}")}</title>
                </rect>
            }
        })
        .collect_view();
    let label = format!("{total} dead letters in the last hour, at most {peak} a minute");
    view! {
        <figure class="mt-2" data-testid="inflow-chart" data-total=total>
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") preserveAspectRatio="none" role="img" aria-label=label.clone()
                 class="w-full h-11 text-red-500 bg-slate-50 dark:bg-slate-900 rounded">
                <line x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT stroke="currentColor" stroke-opacity="0.3" />
                {bars}
            </svg>
            <figcaption class="flex text-xs muted mt-0.5">
                <span>"60 min ago"</span>
                <span class="mx-auto" data-testid="inflow-summary">
                    {if total == 0 { "no dead letters in the last hour".to_string() } else { format!("{total} in the last hour · peak {peak}/min") }}
                </span>
                <span>"now"</span>
            </figcaption>
        </figure>
    }
}
