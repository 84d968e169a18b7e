//! Server-side role checks for server functions and pages.

use engine::auth::{ClientIp, Principal, Role};
use http::request::Parts;
use leptos::prelude::use_context;

use crate::error::AppError;

/// The caller, if signed in; put into the request by the server's auth middleware.
pub fn principal() -> Option<Principal> {
    use_context::<Parts>().and_then(|p| p.extensions.get::<Principal>().cloned())
}

pub fn client_ip() -> Option<String> {
    use_context::<Parts>().and_then(|p| p.extensions.get::<ClientIp>().and_then(|c| c.0.clone()))
}

/// The caller when their role is at least `min`; `Unauthenticated` or `Forbidden` otherwise.
pub fn require(min: Role) -> Result<Principal, AppError> {
    let p = principal().ok_or(AppError::Unauthenticated)?;
    if p.role < min {
        return Err(AppError::Forbidden(format!("this needs the {} role; you are {}", min.as_str(), p.role.as_str())));
    }
    Ok(p)
}
