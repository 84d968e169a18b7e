//! Broker URL helpers, a leaf: the settings read them without depending on the connection code.

use std::str::FromStr;

use lapin::uri::AMQPUri;

/// The URLs of a broker setting: one, or several nodes joined with commas (`amqp_urls`).
pub fn urls(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|u| !u.is_empty()).collect()
}

/// The first URL of a list (for what all nodes share, such as the vhost).
pub fn first_url(list: &str) -> &str {
    urls(list).first().copied().unwrap_or(list)
}

/// `host:port` of a URL, for logs and errors (never the credentials).
pub fn node_of(url: &str) -> String {
    match AMQPUri::from_str(url) {
        Ok(u) => format!("{}:{}", u.authority.host, u.authority.port),
        Err(_) => "an unparsable URL".into(),
    }
}
