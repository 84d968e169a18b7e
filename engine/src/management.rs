//! The RabbitMQ management HTTP API: the only place the broker reports its version, queue
//! depths without consuming, and topology. Optional: features that need it say so.

/// Splits `http://user:pass@host:15672` into the base URL and the credentials
/// (guest/guest when the URL carries none).
pub fn split_credentials(url: &str) -> (String, String, String) {
    let trimmed = url.trim_end_matches('/');
    if let Some((scheme, rest)) = trimmed.split_once("://")
        && let Some((creds, host)) = rest.rsplit_once('@')
    {
        let (u, p) = creds.split_once(':').unwrap_or((creds, ""));
        return (format!("{scheme}://{host}"), u.to_string(), p.to_string());
    }
    (trimmed.to_string(), "guest".into(), "guest".into())
}

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
    }
}
