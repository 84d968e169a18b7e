//! Reading one setting: from the environment first, then the file, with a message that names
//! both the key and the variable when the value is bad.

use std::cell::RefCell;

use super::SettingsError;

thread_local! {
    /// Environment variables that replaced a value the file set, in the order read (one
    /// `build` at a time per thread; `take_overrides` empties it).
    static OVERRIDES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Records that `envname` replaced the file's value, when both were set.
pub(super) fn note_override(envname: &str, env_set: bool, file_set: bool) {
    if env_set && file_set {
        OVERRIDES.with(|o| o.borrow_mut().push(envname.to_string()));
    }
}

pub(super) fn take_overrides() -> Vec<String> {
    OVERRIDES.with(|o| std::mem::take(&mut *o.borrow_mut()))
}

/// One line: the message, and the line of the file it points at (which names the key).
pub(super) fn toml_reason(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line_no = text[..span.start.min(text.len())].matches('\n').count() + 1;
            let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
            format!("line {line_no} `{line}`: {}", e.message())
        }
        None => e.message().to_string(),
    }
}

pub(super) fn pick(env: &dyn Fn(&str) -> Option<String>, name: &str, file: Option<String>) -> Option<String> {
    let from_env = env(name);
    note_override(name, from_env.is_some(), file.is_some());
    from_env.or(file)
}

pub(super) fn int(
    key: &'static str,
    envname: &'static str,
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<i64>,
    default: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<i64, SettingsError> {
    note_override(envname, env(envname).is_some(), file.is_some());
    let value = match env(envname) {
        Some(v) => v.trim().parse::<i64>().map_err(|_| SettingsError::Invalid {
            key,
            env: envname,
            reason: format!("`{v}` is not a whole number"),
        })?,
        None => file.unwrap_or(default),
    };
    if !range.contains(&value) {
        return Err(SettingsError::Invalid {
            key,
            env: envname,
            reason: format!("{value} is outside {}..={}", range.start(), range.end()),
        });
    }
    Ok(value)
}

pub(super) fn boolean(
    key: &'static str,
    envname: &'static str,
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<bool>,
    default: bool,
) -> Result<bool, SettingsError> {
    note_override(envname, env(envname).is_some(), file.is_some());
    match env(envname) {
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(SettingsError::Invalid { key, env: envname, reason: format!("`{v}` is not true or false") }),
        },
        None => Ok(file.unwrap_or(default)),
    }
}

pub(super) fn url(
    key: &'static str,
    envname: &'static str,
    value: Option<String>,
    schemes: &[&str],
) -> Result<String, SettingsError> {
    let v = value.ok_or(SettingsError::Missing { key, env: envname })?;
    let ok = schemes.iter().any(|s| v.starts_with(&format!("{s}://")));
    if !ok {
        return Err(SettingsError::Invalid {
            key,
            env: envname,
            reason: format!("must start with {}://", schemes.join(":// or ")),
        });
    }
    Ok(v)
}

pub(super) fn list(v: Option<String>) -> Option<Vec<String>> {
    v.map(|s| s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect())
}

/// `relay.synchronous_commit`: `on` (the default) or `off`; true means on.
pub(super) fn synchronous_commit(
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<String>,
) -> Result<bool, SettingsError> {
    let (key, envname) = ("relay.synchronous_commit", "REVENANT_RELAY_SYNCHRONOUS_COMMIT");
    match pick(env, envname, file).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(true),
        Some(v) if v == "on" => Ok(true),
        Some(v) if v == "off" => Ok(false),
        Some(v) => Err(SettingsError::Invalid { key, env: envname, reason: format!("`{v}` is not on or off") }),
    }
}

/// The broker: `amqp_url` (one node) or `amqp_urls` (several nodes of one cluster; the env
/// variable is comma-separated), joined with commas for `amqp::connect`, which
/// tries them in turn. Each entry must be an AMQP URL, and all must name the same vhost
/// (the console reads one vhost). Setting both keys is an error: which one wins would be a
/// guess.
pub(super) fn amqp_urls(
    env: &dyn Fn(&str) -> Option<String>,
    single: Option<String>,
    several: Option<Vec<String>>,
) -> Result<String, SettingsError> {
    let one = pick(env, "AMQP_URL", single);
    let many = match env("AMQP_URLS") {
        Some(v) => {
            note_override("AMQP_URLS", true, several.is_some());
            list(Some(v))
        }
        None => several.map(|v| v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()),
    };
    let (key, envname, urls) = match (one, many) {
        (Some(_), Some(_)) => {
            return Err(SettingsError::Invalid {
                key: "amqp_urls",
                env: "AMQP_URLS",
                reason: "set either amqp_url (AMQP_URL) or amqp_urls (AMQP_URLS), not both".into(),
            });
        }
        (Some(u), None) => ("amqp_url", "AMQP_URL", vec![u]),
        (None, Some(v)) if !v.is_empty() => ("amqp_urls", "AMQP_URLS", v),
        (None, Some(_)) => {
            return Err(SettingsError::Invalid { key: "amqp_urls", env: "AMQP_URLS", reason: "lists no URL".into() });
        }
        (None, None) => return Err(SettingsError::Missing { key: "amqp_url", env: "AMQP_URL" }),
    };
    let mut vhost: Option<String> = None;
    for (i, u) in urls.iter().enumerate() {
        let u = url(key, envname, Some(u.clone()), &["amqp", "amqps"])?;
        let parsed = <lapin::uri::AMQPUri as std::str::FromStr>::from_str(&u).map_err(|e| SettingsError::Invalid {
            key,
            env: envname,
            reason: format!("URL {} is not an AMQP URL: {e}", i + 1),
        })?;
        match &vhost {
            None => vhost = Some(parsed.vhost),
            Some(v) if *v != parsed.vhost => {
                return Err(SettingsError::Invalid {
                    key,
                    env: envname,
                    reason: format!(
                        "URL {} names vhost `{}`, the first names `{v}`: use one vhost",
                        i + 1,
                        parsed.vhost
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok(urls.join(","))
}
