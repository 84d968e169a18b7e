//! Keyboard shortcuts, as other consoles have them: `/` search, `j`/`k` rows, `x` select,
//! Enter open, `r` replay, `?` the list of them. Pages opt in with markup, not code:
//! `data-row` (and `tabindex="-1"`) on a list's rows, `data-shortcut="search"` on the input
//! `/` focuses (else the first field of the page's filter form), and
//! `data-shortcut="replay"` around the button `r` presses. No shortcut fires while the
//! person is typing in a field, or with Ctrl, Alt or Meta held (the browser's own).

use leptos::prelude::*;

/// What the overlay lists: keys, then what they do.
pub const KEYS: &[(&str, &str)] = &[
    ("/", "Focus the page's search or filter"),
    ("j / k", "Next / previous row of the list"),
    ("x", "Select or unselect the focused row"),
    ("Enter", "Open the focused row"),
    ("r", "Open the page's replay panel"),
    ("?", "Show these shortcuts"),
    ("Esc", "Close them"),
];

/// Listens for the keys on the window (in the browser only) and shows the `?` overlay.
#[component]
pub fn Shortcuts() -> impl IntoView {
    let open = RwSignal::new(false);
    let handle = window_event_listener(leptos::ev::keydown, move |ev| on_key(&ev, open));
    on_cleanup(move || handle.remove());
    let close = NodeRef::<leptos::html::Button>::new();
    Effect::new(move |_| {
        if let Some(b) = close.get() {
            let _ = b.focus();
        }
    });
    view! {
        <Show when=move || open.get()>
            <div class="fixed inset-0 z-40 bg-slate-900/50 flex items-start justify-center pt-24 px-4" on:click=move |_| open.set(false)>
                <div
                    role="dialog"
                    aria-modal="true"
                    aria-labelledby="shortcuts-title"
                    class="card p-4 w-full max-w-sm shadow-xl"
                    data-testid="shortcuts"
                    on:click=|ev| ev.stop_propagation()
                >
                    <h2 id="shortcuts-title" class="font-semibold mb-2">"Keyboard shortcuts"</h2>
                    <table class="text-sm w-full">
                        <tbody>
                            {KEYS.iter().map(|(k, what)| view! {
                                <tr>
                                    <td class="py-0.5 pr-3 whitespace-nowrap"><kbd class="pill bg-slate-200 dark:bg-slate-800 font-mono">{*k}</kbd></td>
                                    <td class="py-0.5">{*what}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                    <p class="text-xs muted mt-2">"Not while typing in a field."</p>
                    <button node_ref=close class="btn mt-3" type="button" on:click=move |_| open.set(false)>"Close"</button>
                </div>
            </div>
        </Show>
    }
}

#[cfg(not(feature = "hydrate"))]
fn on_key(_: &leptos::web_sys::KeyboardEvent, _: RwSignal<bool>) {}

#[cfg(feature = "hydrate")]
fn on_key(ev: &web_sys::KeyboardEvent, open: RwSignal<bool>) {
    if ev.ctrl_key() || ev.meta_key() || ev.alt_key() || ev.default_prevented() {
        return;
    }
    let key = ev.key();
    if key == "Escape" {
        if open.get_untracked() {
            open.set(false);
            ev.prevent_default();
        }
        return;
    }
    if browser::typing(ev) {
        return;
    }
    let handled = match key.as_str() {
        "?" => {
            open.set(true);
            true
        }
        "/" => browser::focus_search(),
        "j" => browser::move_focus(1),
        "k" => browser::move_focus(-1),
        "x" => browser::click_in_row("input[type=checkbox]"),
        "Enter" => browser::click_in_row("a[href]"),
        "r" => browser::press(browser::first("main [data-shortcut=replay] :is(button, [role=button])")),
        _ => false,
    };
    if handled {
        ev.prevent_default();
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use leptos::prelude::document;
    use wasm_bindgen::JsCast;
    use web_sys::{Element, HtmlElement, HtmlInputElement, KeyboardEvent};

    /// Whether the key goes into a field: text inputs, text areas, selects, editable text.
    /// A focused checkbox or button is not typing.
    pub fn typing(ev: &KeyboardEvent) -> bool {
        let Some(el) = ev.target().and_then(|t| t.dyn_into::<HtmlElement>().ok()) else { return false };
        match el.tag_name().as_str() {
            "TEXTAREA" | "SELECT" => true,
            "INPUT" => el
                .dyn_ref::<HtmlInputElement>()
                .is_none_or(|i| !matches!(i.type_().as_str(), "checkbox" | "radio" | "button" | "submit" | "reset")),
            _ => el.is_content_editable(),
        }
    }

    pub fn first(selector: &str) -> Option<HtmlElement> {
        document().query_selector(selector).ok().flatten().and_then(|e| e.dyn_into().ok())
    }

    pub fn focus_search() -> bool {
        let field = first("main [data-shortcut=search]")
            .or_else(|| first("main form[method=get] input:not([type=hidden]), main form[method=get] select"));
        let Some(field) = field else { return false };
        let _ = field.focus();
        if let Some(input) = field.dyn_ref::<HtmlInputElement>() {
            input.select();
        }
        true
    }

    fn rows() -> Vec<HtmlElement> {
        let Ok(list) = document().query_selector_all("main [data-row]") else { return Vec::new() };
        (0..list.length()).filter_map(|i| list.item(i)).filter_map(|n| n.dyn_into().ok()).collect()
    }

    fn focused_row() -> Option<Element> {
        document().active_element().filter(|e| e.has_attribute("data-row"))
    }

    /// Moves the focus `by` rows (wrapping at neither end); from outside the list, `j` starts
    /// at its first row and `k` at its last.
    pub fn move_focus(by: isize) -> bool {
        let rows = rows();
        if rows.is_empty() {
            return false;
        }
        let at = focused_row().and_then(|f| {
            let f: &web_sys::Node = &f;
            rows.iter().position(|r| r.is_same_node(Some(f)))
        });
        let to = match at {
            Some(i) => i.saturating_add_signed(by).min(rows.len() - 1),
            None if by > 0 => 0,
            None => rows.len() - 1,
        };
        let _ = rows[to].focus();
        true
    }

    /// Clicks the first `selector` inside the focused row (its checkbox, its link).
    pub fn click_in_row(selector: &str) -> bool {
        let Some(row) = focused_row() else { return false };
        press(row.query_selector(selector).ok().flatten().and_then(|e| e.dyn_into().ok()))
    }

    /// A real click, so the page's own handlers and the router see it.
    pub fn press(el: Option<HtmlElement>) -> bool {
        match el {
            Some(e) => {
                e.click();
                true
            }
            None => false,
        }
    }
}
