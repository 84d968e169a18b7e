//! The RabbitMQ management HTTP API: the only place the broker reports its version, queue
//! depths without consuming, and topology. Optional: features that need it say so.

/// Splits `http://user:pass@host:15672` into the base URL and the credentials
/// (guest/guest when the URL carries none).
pub fn split_credentials(url: &str) -> (String, String, String) {
    let Ok(mut u) = url::Url::parse(url) else {
        return (url.trim_end_matches('/').to_string(), "guest".into(), "guest".into());
    };
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    let (user, pass) = match u.username() {
        "" => ("guest".to_string(), "guest".to_string()),
        name => (decode(name), u.password().map(decode).unwrap_or_default()),
    };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    (u.as_str().trim_end_matches('/').to_string(), user, pass)
}

/// The management UI for links to `vhost`'s queues: the configured URL without its
/// credentials (a link must never carry them); None when the management API is off.
pub fn ui(settings: &crate::settings::Settings, vhost: &str) -> Option<types::routes::ManagementUi> {
    use crate::settings::ExposeSecret;
    let url = settings.management_url.as_ref()?;
    let (base, _, _) = split_credentials(url.expose_secret());
    Some(types::routes::ManagementUi { base, vhost: vhost.to_string() })
}

/// [`ui`] for the vhost the ingesters read dead-letter queues from (the AMQP URL's).
pub fn ui_for_dead_letters(settings: &crate::settings::Settings) -> Option<types::routes::ManagementUi> {
    use crate::settings::ExposeSecret;
    ui(settings, &crate::settings::vhost_of(settings.amqp_url.expose_secret()))
}

/// Percent-encodes one path segment or query value (a `/` vhost is `%2F`).
pub use types::routes::encode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_split_from_the_url() {
        assert_eq!(
            split_credentials("http://ops:s3cret@mq.local:15672/"),
            ("http://mq.local:15672".into(), "ops".into(), "s3cret".into())
        );
        assert_eq!(split_credentials("http://mq:15672"), ("http://mq:15672".into(), "guest".into(), "guest".into()));
        // Reserved characters in a password arrive percent-encoded; the API wants them plain.
        assert_eq!(
            split_credentials("https://ops:p%40ss%3Aw@mq.example/rabbit/"),
            ("https://mq.example/rabbit".into(), "ops".into(), "p@ss:w".into())
        );
    }

    #[test]
    fn the_management_ui_link_never_carries_the_credentials() {
        let settings = |management: &str| {
            let env = [
                ("DATABASE_URL", "postgres://localhost/x"),
                ("AMQP_URL", "amqp://u:p@mq:5672/team%2Fa"),
                ("REVENANT_MANAGEMENT_URL", management),
            ];
            crate::settings::load(None, false, &|k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
                .unwrap()
        };
        let ui = ui_for_dead_letters(&settings("http://ops:s3cret@mq.local:15672/")).unwrap();
        assert_eq!(ui.base, "http://mq.local:15672");
        assert_eq!(ui.vhost, "team/a");
        assert_eq!(ui.queue("orders.dlq"), "http://mq.local:15672/#/queues/team%2Fa/orders.dlq");
        assert!(ui_for_dead_letters(&settings("off")).is_none(), "no management API, no link");
    }
}
