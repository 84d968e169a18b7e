//! The rule form, shared by "New rule" and "Edit rule": every field with its own error
//! message beside it, as the server's validation reports it.
//!
//! The inputs are plain (uncontrolled) form fields read by `ActionForm` on submit, so text
//! typed before the page hydrates is kept; the submit button is enabled only once hydrated,
//! because before that a click would post the form natively and the field errors be lost.
//! (The admin controls' buttons do the same: before hydration a click would do nothing.)

use leptos::prelude::*;

use super::api::{AlertsSave, FieldErrorView, FormOptions, KindView, Outcome, RuleForm};
use crate::layout::ErrorBox;

/// The fields a rule form knows, in the order the server's `FieldError`s may name them.
const FIELDS: &[&str] = &[
    "name",
    "kind",
    "target",
    "warn_threshold",
    "crit_threshold",
    "recover_threshold",
    "for_secs",
    "window_mins",
    "webhook_url",
    "webhook_format",
];

/// What a new rule starts from.
pub fn blank() -> RuleForm {
    RuleForm {
        kind: "dlq_awaiting".into(),
        for_secs: "60".into(),
        webhook_format: "json".into(),
        enabled: true,
        ..RuleForm::default()
    }
}

/// False on the server and until the browser has hydrated the page (effects run only there).
pub fn hydrated() -> ReadSignal<bool> {
    let (get, set) = signal(false);
    Effect::new(move |_| set.set(true));
    get
}

/// The messages for one field, joined; None when the field is fine.
fn messages(errors: &[FieldErrorView], field: &str) -> Option<String> {
    let m: Vec<&str> = errors.iter().filter(|e| e.field == field).map(|e| e.message.as_str()).collect();
    (!m.is_empty()).then(|| m.join("; "))
}

#[component]
pub fn RuleEditor(
    /// None creates a rule; Some replaces that rule.
    id: Option<i64>,
    initial: RuleForm,
    options: FormOptions,
    /// Called with the saved rule's id and name.
    on_saved: Callback<(i64, String)>,
) -> impl IntoView {
    let save = ServerAction::<AlertsSave>::new();
    let ready = hydrated();
    let errors = Memo::new(move |_| match save.value().get() {
        Some(Ok(Outcome::Invalid(errs))) => errs,
        _ => Vec::new(),
    });
    let kind = RwSignal::new(initial.kind.clone());
    let form_ref = NodeRef::<leptos::html::Form>::new();
    let initial_kind = initial.kind.clone();
    Effect::new(move |_| {
        if let Some(Ok(Outcome::Saved { id: saved, name })) = save.value().get() {
            // A created rule is in the table now: back to a blank form (the inputs' defaults).
            if id.is_none()
                && let Some(f) = form_ref.get_untracked()
            {
                f.reset();
                kind.set(initial_kind.clone());
            }
            on_saved.run((saved, name));
        }
    });
    let kinds = StoredValue::new(options.kinds.clone());
    let kind_info = move || kinds.with_value(|ks| ks.iter().find(|k| k.value == kind.get()).cloned());
    let queues = StoredValue::new(options.queues.clone());
    let sources = StoredValue::new(options.sources.clone());

    let err = move |field: &'static str| {
        move || {
            errors.with(|es| messages(es, field)).map(|m| {
                view! { <p id=format!("rule-{field}-error") class="text-xs text-red-700 dark:text-red-300" data-testid=format!("error-{field}")>{m}</p> }
            })
        }
    };
    let invalid = move |field: &'static str| move || errors.with(|es| messages(es, field).is_some()).then_some("true");
    let text = move |field: &'static str,
                     label: &'static str,
                     value: String,
                     placeholder: &'static str,
                     class: &'static str| {
        view! {
            <div class="flex flex-col gap-0.5">
                <label for=format!("rule-{field}")>{label}</label>
                <input id=format!("rule-{field}") class=format!("input {class}") name=format!("input[{field}]") value=value
                    placeholder=placeholder aria-invalid=invalid(field) aria-describedby=format!("rule-{field}-error") />
                {err(field)}
            </div>
        }
    };
    let stray = move || {
        errors.with(|es| {
            es.iter().filter(|e| !FIELDS.contains(&e.field.as_str())).map(|e| e.message.clone()).collect::<Vec<_>>()
        })
    };
    // The thresholds as typed, so the form can say what they mean (uncontrolled inputs: the
    // signals only follow them).
    let warn = RwSignal::new(initial.warn_threshold.clone());
    let crit = RwSignal::new(initial.crit_threshold.clone());
    let recover = RwSignal::new(initial.recover_threshold.clone());
    let hold = RwSignal::new(initial.for_secs.clone());
    let number = move |field: &'static str, label: &'static str, value: RwSignal<String>, placeholder: &'static str| {
        view! {
            <div class="flex flex-col gap-0.5">
                <label for=format!("rule-{field}")>{label}</label>
                <input id=format!("rule-{field}") class="input" name=format!("input[{field}]") inputmode="decimal"
                    value=value.get_untracked() placeholder=placeholder aria-invalid=invalid(field)
                    aria-describedby=format!("rule-{field}-error rule-meaning")
                    on:input=move |ev| value.set(event_target_value(&ev)) />
                {err(field)}
            </div>
        }
    };
    let title = if id.is_some() { "Edit rule" } else { "New rule" };
    let button = if id.is_some() { "Save changes" } else { "Create rule" };
    let format = initial.webhook_format.clone();

    view! {
        <section class="card p-3 mb-4 text-sm" data-testid="rule-form" aria-label=title>
            <h2 class="font-semibold mb-2">{title}</h2>
            <ActionForm action=save node_ref=form_ref attr:class="flex flex-col gap-3">
                {id.map(|id| view! { <input type="hidden" name="id" value=id.to_string() /> })}
                <div class="grid sm:grid-cols-2 lg:grid-cols-4 gap-3">
                    {text("name", "Name", initial.name.clone(), "orders DLQ backlog", "")}
                    <div class="flex flex-col gap-0.5">
                        <label for="rule-kind">"Kind"</label>
                        <select id="rule-kind" class="input" name="input[kind]" aria-invalid=invalid("kind")
                            aria-describedby="rule-kind-error" on:change=move |ev| kind.set(event_target_value(&ev))>
                            {options.kinds.iter().map(|k| view! {
                                <option value=k.value.clone() selected=k.value == initial.kind>{k.value.clone()}" — "{k.label.clone()}</option>
                            }).collect_view()}
                        </select>
                        {err("kind")}
                    </div>
                    <div class="flex flex-col gap-0.5">
                        <label for="rule-target">"Target"</label>
                        <input id="rule-target" class="input" name="input[target]" value=initial.target.clone() list="rule-targets"
                            placeholder=move || target_hint(kind_info().as_ref()) aria-invalid=invalid("target")
                            aria-describedby="rule-target-error" />
                        <datalist id="rule-targets">
                            {move || {
                                let k = kind_info().map(|k| k.target).unwrap_or_default();
                                let (names, what) = match k.as_str() {
                                    "queue" => (queues.get_value(), "dead-letter queue"),
                                    "source" => (sources.get_value(), "outbox source"),
                                    _ => (Vec::new(), ""),
                                };
                                names.into_iter().map(|n| view! { <option value=n.clone() label=what></option> }).collect_view()
                            }}
                        </datalist>
                        {err("target")}
                    </div>
                    {text("webhook_url", "Webhook URL", initial.webhook_url.clone(), "https://hooks.slack.com/services/…", "")}
                    {number("warn_threshold", "Threshold", warn, "100")}
                    {number("crit_threshold", "Critical at (optional)", crit, "the threshold")}
                    {number("recover_threshold", "Recovers at (optional)", recover, "90 % of the threshold")}
                    {number("for_secs", "For (seconds)", hold, "60")}
                    {text("window_mins", "Window (minutes, rate kinds)", initial.window_mins.clone(), "60", "")}
                    <div class="flex flex-col gap-0.5">
                        <label for="rule-webhook_format">"Format"</label>
                        <select id="rule-webhook_format" class="input" name="input[webhook_format]"
                            aria-invalid=invalid("webhook_format") aria-describedby="rule-webhook_format-error">
                            <option value="json" selected=format != "slack">"json"</option>
                            <option value="slack" selected=format == "slack">"slack (text)"</option>
                        </select>
                        {err("webhook_format")}
                    </div>
                    <label class="flex items-center gap-2 self-end pb-1">
                        <input type="checkbox" name="input[enabled]" value="true" checked=initial.enabled />
                        "Enabled"
                    </label>
                </div>
                <p id="rule-meaning" class="text-xs" data-testid="rule-meaning" aria-live="polite">
                    {move || {
                        let label = kind_info().map(|k| k.label).unwrap_or_else(|| "the value".into());
                        meaning(&label, &warn.get(), &crit.get(), &recover.get(), &hold.get())
                    }}
                </p>
                <p class="muted text-xs" data-testid="kind-hint">{move || kind_hint(kind_info().as_ref())}</p>
                {move || kind_info().and_then(|k| k.note).map(|n| view! {
                    <p class="text-xs text-amber-800 dark:text-amber-300" data-testid="kind-note">{n}</p>
                })}
                {(!options.public_url_set).then(|| view! {
                    <p class="text-xs text-amber-800 dark:text-amber-300" data-testid="public-url-warning">
                        "public_url (REVENANT_PUBLIC_URL) is not set: webhook payloads carry bare paths such as /dead-letters?queue=…, "
                        "which a chat message cannot open. Set it to the console's address."
                    </p>
                })}
                <div class="flex items-center gap-2">
                    <button class="btn btn-primary" type="submit" disabled=move || !ready.get() || save.pending().get()>{button}</button>
                    {move || (!errors.with(Vec::is_empty)).then(|| view! {
                        <span class="text-red-700 dark:text-red-300" role="alert">"Not saved: fix the fields marked in red."</span>
                    })}
                </div>
                {move || {
                    let s = stray();
                    (!s.is_empty()).then(|| view! { <ul class="text-xs text-red-700 dark:text-red-300">{s.into_iter().map(|m| view! { <li>{m}</li> }).collect_view()}</ul> })
                }}
            </ActionForm>
            {move || save.value().get().and_then(|r| r.err()).map(|err| view! { <div class="mt-2"><ErrorBox err /></div> })}
        </section>
    }
}

fn target_hint(k: Option<&KindView>) -> &'static str {
    match k.map(|k| k.target.as_str()) {
        Some("queue") => "a dead-letter queue",
        Some("source") => "an outbox source",
        _ => "not used by this kind",
    }
}

/// What thresholds typed so far mean, in words, comparisons written out.
fn meaning(label: &str, warn: &str, crit: &str, recover: &str, hold: &str) -> String {
    let parse = |t: &str| t.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    let Some(w) = parse(warn) else {
        return "Give a threshold: the rule fires when the value is at or above it (≥).".into();
    };
    let held = match hold.trim().parse::<u32>() {
        Ok(0) | Err(_) => String::new(),
        Ok(s) => format!(" for {s} s"),
    };
    let level = match parse(crit) {
        Some(c) if c != w => format!(" as a warning, critical when ≥ {}", super::num(c)),
        _ => " as critical".into(),
    };
    let resolves = match parse(recover) {
        Some(r) => format!("≤ {}", super::num(r)),
        None => format!(
            "≤ {} ({} % of the threshold)",
            super::num(types::alert::default_recovery(w)),
            (types::alert::RECOVER_SHARE * 100.0).round()
        ),
    };
    format!("Fires when {label} is ≥ {}{held}{level}; resolves when it falls to {resolves}.", super::num(w))
}

fn kind_hint(k: Option<&KindView>) -> String {
    match k {
        None => String::new(),
        Some(k) => format!(
            "Measures {}; target: {}; window: {}. Fires when the value stays at or above the threshold for the given \
             seconds, resolves at or below the recovery value.",
            k.label,
            target_hint(Some(k)),
            if k.uses_window { "required" } else { "not used" },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_said_with_their_comparison_and_defaults() {
        let m = meaning("dead letters awaiting triage", "100", "", "", "60");
        assert_eq!(
            m,
            "Fires when dead letters awaiting triage is ≥ 100 for 60 s as critical; resolves when it falls to ≤ 90 \
             (90 % of the threshold)."
        );
        let m = meaning("x", "10", "100", "2", "0");
        assert_eq!(m, "Fires when x is ≥ 10 as a warning, critical when ≥ 100; resolves when it falls to ≤ 2.");
        assert!(meaning("x", "", "", "", "").starts_with("Give a threshold"));
        assert!(meaning("x", "lots", "", "", "").starts_with("Give a threshold"));
    }

    #[test]
    fn a_fields_messages_are_joined_and_other_fields_ignored() {
        let e = |f: &str, m: &str| FieldErrorView { field: f.into(), message: m.into() };
        let errs = vec![e("name", "name: required"), e("warn_threshold", "a"), e("warn_threshold", "b")];
        assert_eq!(messages(&errs, "warn_threshold").as_deref(), Some("a; b"));
        assert_eq!(messages(&errs, "target"), None);
    }
}
