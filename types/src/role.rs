//! Who may do what: the three roles, ordered, and what a server function asks of its caller.

words! {
    /// Ordered: viewer < operator < admin; every check is "at least this role".
    #[derive(PartialOrd, Ord)]
    pub enum Role {
        /// Reads every page.
        Viewer = "viewer",
        /// Also retries, archives, replays and edits.
        Operator = "operator",
        /// Also manages users, alert rules, watched queues and purges.
        Admin = "admin",
    }
}

impl Role {
    /// Whether this role is `min` or above.
    pub fn at_least(self, min: Role) -> bool {
        self >= min
    }
}

/// What calling a server function needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No session (sign-in).
    Public,
    /// A session whose role is at least this one.
    AtLeast(Role),
}

impl Access {
    /// Whether a caller (`None`: no session) may call it.
    pub fn allows(self, caller: Option<Role>) -> bool {
        match self {
            Access::Public => true,
            Access::AtLeast(min) => caller.is_some_and(|r| r.at_least(min)),
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Public => f.write_str("public"),
            Access::AtLeast(r) => f.write_str(r.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_access_is_at_least_a_role() {
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
        let operate = Access::AtLeast(Role::Operator);
        assert!(!operate.allows(None) && !operate.allows(Some(Role::Viewer)));
        assert!(operate.allows(Some(Role::Operator)) && operate.allows(Some(Role::Admin)));
        assert!(Access::Public.allows(None));
        assert_eq!((Access::Public.to_string(), operate.to_string()), ("public".into(), "operator".into()));
    }
}
