//! Who the caller is, where to send them after sign-in, and the session cookie. The sign-in,
//! sign-out and "who am I" server functions are in `api`.

use serde::{Deserialize, Serialize};
use types::Role;

pub mod api;
mod next;
pub use api::*;
pub use next::safe_next;

/// What `whoami` answers: the signed-in caller, or None; the type of a page's `caller` resource.
pub type CallerAnswer = Result<Option<Caller>, crate::error::AppError>;

pub const SESSION_COOKIE: &str = "revenant_session";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Caller {
    pub username: String,
    pub role: Role,
}

impl Caller {
    pub fn can_operate(&self) -> bool {
        self.role.at_least(Role::Operator)
    }
    pub fn is_admin(&self) -> bool {
        self.role.at_least(Role::Admin)
    }
}

#[cfg(feature = "ssr")]
pub fn session_token() -> Option<String> {
    let parts = leptos::prelude::use_context::<http::request::Parts>()?;
    cookie_value(parts.headers.get(http::header::COOKIE)?.to_str().ok()?, SESSION_COOKIE)
}

/// The session cookie: host-only, whole site, not readable by scripts, never sent cross-site.
#[cfg(feature = "ssr")]
pub(crate) fn session_cookie(token: String, max_age: cookie::time::Duration, secure: bool) -> cookie::Cookie<'static> {
    cookie::Cookie::build((SESSION_COOKIE, token))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .max_age(max_age)
        .secure(secure)
        .build()
}

/// The value of one cookie in a `Cookie` header (malformed pairs are skipped).
#[cfg(feature = "ssr")]
pub fn cookie_value(header: &str, name: &str) -> Option<String> {
    cookie::Cookie::split_parse(header).filter_map(Result::ok).find(|c| c.name() == name).map(|c| c.value().to_string())
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_is_found_among_others() {
        assert_eq!(cookie_value("a=1; revenant_session=abc; b=2", "revenant_session").as_deref(), Some("abc"));
        assert_eq!(cookie_value("a=1", "revenant_session"), None);
    }

    #[test]
    fn the_session_cookie_is_strict_and_script_proof() {
        let c = session_cookie("t0k".into(), cookie::time::Duration::seconds(3600), true).to_string();
        for part in ["revenant_session=t0k", "HttpOnly", "SameSite=Strict", "Secure", "Path=/", "Max-Age=3600"] {
            assert!(c.contains(part), "{c} lacks {part}");
        }
        let gone = session_cookie(String::new(), cookie::time::Duration::ZERO, false).to_string();
        assert!(gone.contains("Max-Age=0") && !gone.contains("Secure"), "{gone}");
    }
}
