//! The broker's topology as the Topology page and the alert evaluator judge it: a check's
//! verdict, a queue's reliability contract and role, and where a queue lives.

use serde::{Deserialize, Serialize};

words! {
    pub enum Verdict {
        Pass = "pass",
        Warn = "warn",
        Fail = "fail",
        /// The check could not be made (no management API, a value the broker did not give).
        Unknown = "unknown",
    }
}

impl Verdict {
    /// How bad it is: fail > warn > unknown > pass.
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Fail => 3,
            Verdict::Warn => 2,
            Verdict::Unknown => 1,
            Verdict::Pass => 0,
        }
    }

    /// The worst verdict among `checks`; `Pass` when none apply.
    pub fn worst(checks: &[Check]) -> Verdict {
        checks.iter().map(|c| c.verdict).max_by_key(|v| v.rank()).unwrap_or(Verdict::Pass)
    }
}

words! {
    loose
    /// A queue's reliability contract: how strictly its checks judge it.
    #[derive(PartialOrd, Ord)]
    pub enum Level {
        Disposable = "disposable",
        Standard = "standard",
        Critical = "critical",
    }
}

words! {
    /// What a queue is for, as far as the topology tells.
    pub enum QueueRole {
        Work = "work",
        /// Receives another queue's dead letters.
        DeadLetter = "dead-letter",
        /// Holds failed messages for a TTL, then dead-letters them back to a work queue.
        Retry = "retry",
    }
}

/// One reliability check of a queue, an exchange or a node, with its reason and fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub reason: String,
    /// What to change; empty when the check passes.
    pub fix: String,
}

impl Check {
    pub fn new(name: &str, verdict: Verdict, reason: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name: name.into(), verdict, reason: reason.into(), fix: fix.into() }
    }

    pub fn pass(name: &str, reason: impl Into<String>) -> Self {
        Self::new(name, Verdict::Pass, reason, "")
    }
}

/// Where a queue lives: a classic queue's node, a quorum queue's leader, members and the
/// members online now (empty when the broker does not say). Read as the management API
/// names the fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub leader: Option<String>,
    #[serde(default)]
    pub members: Vec<String>,
    #[serde(default)]
    pub online: Vec<String>,
}

impl Placement {
    /// One line for the queue's row: `quorum · leader rvn1@h · 3/3 members online`; `kind`
    /// is the queue's type (`classic` when empty).
    pub fn summary(&self, kind: &str) -> String {
        let mut parts = vec![if kind.is_empty() { "classic".to_string() } else { kind.to_string() }];
        // The management API names a quorum queue's leader as its `node` too: say it once.
        if let Some(n) = self.node.as_ref().filter(|_| self.members.is_empty()) {
            parts.push(format!("on {n}"));
        }
        if !self.members.is_empty() {
            parts.push(format!("leader {}", self.leader.as_deref().unwrap_or("none")));
            parts.push(format!("{}/{} members online", self.members_online(), self.members.len()));
        }
        parts.join(" · ")
    }

    /// Members that are online now.
    pub fn members_online(&self) -> usize {
        self.members.iter().filter(|m| self.online.contains(m)).count()
    }

    /// The members, each marked offline when it is: for the row's second line.
    pub fn members_line(&self) -> Option<String> {
        (!self.members.is_empty()).then(|| {
            let each: Vec<String> = self
                .members
                .iter()
                .map(|m| if self.online.contains(m) { m.clone() } else { format!("{m} (offline)") })
                .collect();
            format!("members {}", each.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_queue_names_its_leader_once_and_a_classic_one_its_node() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // As the management API reports it: the leader is the queue's `node` as well.
        let q = Placement {
            node: Some("rvn1@h".into()),
            leader: Some("rvn1@h".into()),
            members: names(&["rvn1@h", "rvn2@h", "rvn3@h"]),
            online: names(&["rvn1@h", "rvn3@h"]),
        };
        assert_eq!(q.summary("quorum"), "quorum · leader rvn1@h · 2/3 members online");
        assert_eq!(q.members_line().unwrap(), "members rvn1@h, rvn2@h (offline), rvn3@h");
        let c = Placement { node: Some("rvn2@h".into()), ..Placement::default() };
        assert_eq!((c.summary(""), c.members_line()), ("classic · on rvn2@h".to_string(), None));
    }

    #[test]
    fn a_queue_role_reads_as_the_page_writes_it() {
        assert_eq!(QueueRole::parse("dead-letter"), Some(QueueRole::DeadLetter));
        assert_eq!(serde_json::to_string(&QueueRole::DeadLetter).unwrap(), "\"dead-letter\"");
    }
}
