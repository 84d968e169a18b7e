//! A moment as the person reading it lives it: local time in the page, UTC on hover.

use chrono::{DateTime, SecondsFormat, Utc};
use leptos::prelude::*;

/// `<time>` for `at`: the server cannot know the reader's zone, so it renders UTC; the first
/// render in the browser matches it (no hydration mismatch), then an effect, which only runs
/// in the browser, switches the text to local time. The UTC time stays in the tooltip.
#[component]
pub fn Time(at: DateTime<Utc>) -> impl IntoView {
    let utc = crate::format::time(at);
    let text = RwSignal::new(utc.clone());
    Effect::new(move |_| {
        if let Some(offset) = browser_offset_secs(at) {
            text.set(crate::format::local_time(at, offset));
        }
    });
    view! {
        <time datetime=at.to_rfc3339_opts(SecondsFormat::Secs, true) title=utc>{move || text.get()}</time>
    }
}

/// The browser's offset east of UTC at `at` (daylight saving included), in seconds.
#[cfg(feature = "hydrate")]
fn browser_offset_secs(at: DateTime<Utc>) -> Option<i32> {
    let date = web_sys::js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at.timestamp_millis() as f64));
    // getTimezoneOffset() is minutes *behind* UTC: -60 in Paris in winter.
    let behind = date.get_timezone_offset();
    behind.is_finite().then(|| (-behind * 60.0) as i32)
}

#[cfg(not(feature = "hydrate"))]
fn browser_offset_secs(_: DateTime<Utc>) -> Option<i32> {
    None
}
