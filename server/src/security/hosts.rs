//! The `Host` values a request may carry (DNS rebinding), worked out once from the settings:
//! a leaf, so the server state can hold them without depending on the middleware.

/// The hosts a request may name when `public_url` / `allowed_origins` are set (lower case,
/// with and without the port); empty means any.
pub fn allowed_hosts(settings: &engine::settings::Settings) -> Vec<String> {
    let origins = settings.public_url.iter().chain(settings.auth.allowed_origins.iter());
    let mut hosts = Vec::new();
    for o in origins {
        let Ok(u) = url::Url::parse(o) else { continue };
        let Some(host) = u.host_str() else { continue };
        let host = host.to_ascii_lowercase();
        if let Some(port) = u.port_or_known_default() {
            hosts.push(format!("{host}:{port}"));
        }
        if u.port().is_none() {
            hosts.push(host);
        }
    }
    hosts
}
