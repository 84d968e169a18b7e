//! Light or dark: the system's preference until someone chooses, then their choice, kept in
//! this browser's localStorage. Tailwind's `dark:` variants follow a `dark` class on <html>
//! (style/tailwind.css), which [`HEAD_SCRIPT`] sets before the first paint, so a dark page
//! never flashes white. The page's markup is the same either way: the button's two labels
//! are shown and hidden by CSS, so hydration never disagrees with the server.

use leptos::prelude::*;

/// Where the choice is kept: "dark" or "light"; absent means "follow the system".
pub const STORAGE_KEY: &str = "revenant-theme";

/// Inline in the shell's <head>, carrying the response's CSP nonce: a file would cost a
/// blocking request before every first paint. localStorage may throw (storage disabled).
pub const HEAD_SCRIPT: &str = "try{var t=localStorage.getItem('revenant-theme');\
if(t==='dark'||(t!=='light'&&matchMedia('(prefers-color-scheme: dark)').matches))\
document.documentElement.classList.add('dark')}catch(e){}";

/// Switches between light and dark, and remembers the choice.
#[component]
pub fn ThemeToggle(#[prop(optional)] testid: Option<&'static str>) -> impl IntoView {
    view! {
        // Its name is what it shows ("Dark mode" in light, "Light mode" in dark): a name
        // that differs from the visible words fails WCAG 2.5.3 (label in name).
        <button
            type="button"
            class="btn whitespace-nowrap"
            title="Light or dark (kept in this browser)"
            data-testid=testid.unwrap_or("theme-toggle")
            on:click=move |_| toggle()
        >
            <span class="dark:hidden"><span aria-hidden="true">"☾ "</span>"Dark mode"</span>
            <span class="hidden dark:inline"><span aria-hidden="true">"☀ "</span>"Light mode"</span>
        </button>
    }
}

#[cfg(feature = "hydrate")]
fn toggle() {
    let Some(root) = document().document_element() else { return };
    let dark = root.class_list().toggle("dark").unwrap_or(false);
    if let Ok(Some(storage)) = window().local_storage() {
        // Private windows may refuse; the switch still holds for this page.
        let _ = storage.set_item(STORAGE_KEY, if dark { "dark" } else { "light" });
    }
}

#[cfg(not(feature = "hydrate"))]
fn toggle() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_script_reads_the_key_the_button_writes() {
        assert!(HEAD_SCRIPT.contains(&format!("getItem('{STORAGE_KEY}')")), "{HEAD_SCRIPT}");
    }
}
