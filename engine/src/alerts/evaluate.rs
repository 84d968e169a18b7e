//! The alert state machine, pure: (previous state, value, thresholds, for, now) → next state
//! and the transition to record, if any.
//!
//! Policy:
//! - A value at or above the warning (critical) threshold is a warning (critical) breach.
//! - ok/resolved → pending on a breach; pending → firing once the breach has lasted `for`
//!   (at once when `for` is zero); pending → ok as soon as the value drops below the warning
//!   threshold: like Prometheus, `for` means "continuously".
//! - firing → resolved only when the value falls to the recovery threshold or below; between
//!   recovery and warning it stays firing. That gap is the hysteresis that stops flapping.
//! - While firing, warning → critical is an escalation (recorded and delivered); critical
//!   never steps back to warning before resolving, so a value hovering around the critical
//!   threshold does not page twice per minute.

use chrono::{DateTime, Utc};

pub use types::{AlertState, Severity};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub warn: f64,
    pub crit: f64,
    pub recover: f64,
}

impl Thresholds {
    fn breach(&self, value: f64) -> Option<Severity> {
        if value >= self.crit {
            Some(Severity::Critical)
        } else if value >= self.warn {
            Some(Severity::Warning)
        } else {
            None
        }
    }
    /// The threshold a transition is reported against.
    pub fn for_severity(&self, s: Option<Severity>) -> f64 {
        match s {
            Some(Severity::Critical) => self.crit,
            Some(Severity::Warning) => self.warn,
            None => self.recover,
        }
    }
}

/// What `alert_state` holds for a rule between evaluations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub state: AlertState,
    pub severity: Option<Severity>,
    /// When the current state began.
    pub since: DateTime<Utc>,
    /// When the breach began, while pending.
    pub pending_since: Option<DateTime<Utc>>,
}

impl Snapshot {
    pub fn initial(now: DateTime<Utc>) -> Self {
        Self { state: AlertState::Ok, severity: None, since: now, pending_since: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub from: AlertState,
    pub to: AlertState,
    pub severity: Option<Severity>,
    pub threshold: f64,
}

impl Transition {
    /// Firing (or escalating) and resolving reach people; pending and back to ok do not.
    pub fn notifies(&self) -> bool {
        matches!(self.to, AlertState::Firing | AlertState::Resolved)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub next: Snapshot,
    pub transition: Option<Transition>,
}

pub fn step(prev: Snapshot, value: f64, t: Thresholds, hold: chrono::Duration, now: DateTime<Utc>) -> Outcome {
    let breach = t.breach(value);
    let go = |to: AlertState, severity: Option<Severity>, pending_since: Option<DateTime<Utc>>| Outcome {
        next: Snapshot { state: to, severity, since: now, pending_since },
        transition: Some(Transition { from: prev.state, to, severity, threshold: t.for_severity(severity) }),
    };
    let stay = |severity: Option<Severity>| Outcome { next: Snapshot { severity, ..prev }, transition: None };
    match (prev.state, breach) {
        (AlertState::Ok | AlertState::Resolved, None) => stay(prev.severity),
        (AlertState::Ok | AlertState::Resolved, Some(s)) if hold <= chrono::Duration::zero() => {
            go(AlertState::Firing, Some(s), None)
        }
        (AlertState::Ok | AlertState::Resolved, Some(s)) => go(AlertState::Pending, Some(s), Some(now)),
        (AlertState::Pending, None) => go(AlertState::Ok, None, None),
        (AlertState::Pending, Some(s)) => {
            let started = prev.pending_since.unwrap_or(prev.since);
            if now - started >= hold { go(AlertState::Firing, Some(s), None) } else { stay(Some(s)) }
        }
        (AlertState::Firing, _) if value <= t.recover => go(AlertState::Resolved, None, None),
        (AlertState::Firing, Some(Severity::Critical)) if prev.severity != Some(Severity::Critical) => {
            go(AlertState::Firing, Some(Severity::Critical), None)
        }
        (AlertState::Firing, _) => stay(prev.severity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds { warn: 10.0, crit: 50.0, recover: 5.0 };

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    /// Feeds (second, value) pairs and returns the (from, to) of each transition.
    fn run(hold_secs: i64, values: &[(i64, f64)]) -> (Snapshot, Vec<(AlertState, AlertState, Option<Severity>)>) {
        let mut s = Snapshot::initial(at(0));
        let mut seen = Vec::new();
        for &(sec, v) in values {
            let o = step(s, v, T, chrono::Duration::seconds(hold_secs), at(sec));
            if let Some(tr) = o.transition {
                seen.push((tr.from, tr.to, tr.severity));
            }
            s = o.next;
        }
        (s, seen)
    }

    #[test]
    fn with_no_for_duration_a_breach_fires_on_the_first_evaluation() {
        let (s, seen) = run(0, &[(0, 3.0), (15, 12.0)]);
        assert_eq!(s.state, AlertState::Firing);
        assert_eq!(seen, vec![(AlertState::Ok, AlertState::Firing, Some(Severity::Warning))]);
    }

    #[test]
    fn a_breach_waits_in_pending_until_it_has_lasted_the_for_duration() {
        let (s, seen) = run(60, &[(0, 12.0), (30, 12.0), (59, 13.0)]);
        assert_eq!(s.state, AlertState::Pending);
        assert_eq!(seen.len(), 1);
        let (s, seen) = run(60, &[(0, 12.0), (30, 12.0), (60, 13.0)]);
        assert_eq!(s.state, AlertState::Firing);
        assert_eq!(seen.last().unwrap().1, AlertState::Firing);
    }

    #[test]
    fn a_dip_below_warning_while_pending_restarts_the_for_clock() {
        let (s, seen) = run(60, &[(0, 12.0), (30, 8.0), (40, 12.0), (90, 12.0), (100, 12.0)]);
        assert_eq!(s.state, AlertState::Firing, "fired at 100 = 40 + 60, not at 60");
        let to: Vec<_> = seen.iter().map(|t| t.1).collect();
        assert_eq!(to, [AlertState::Pending, AlertState::Ok, AlertState::Pending, AlertState::Firing]);
    }

    #[test]
    fn a_firing_alert_stays_firing_between_recovery_and_warning() {
        let (s, seen) = run(0, &[(0, 20.0), (15, 9.0), (30, 6.0), (45, 9.9)]);
        assert_eq!(s.state, AlertState::Firing);
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn a_firing_alert_resolves_at_the_recovery_threshold() {
        let (s, seen) = run(0, &[(0, 20.0), (15, 5.0)]);
        assert_eq!(s.state, AlertState::Resolved);
        assert_eq!(seen[1], (AlertState::Firing, AlertState::Resolved, None));
        assert_eq!(s.severity, None);
    }

    #[test]
    fn a_value_flapping_around_the_warning_threshold_fires_once() {
        let mut values = Vec::new();
        for i in 0..40 {
            values.push((i * 15, if i % 2 == 0 { 11.0 } else { 9.0 }));
        }
        let (s, seen) = run(0, &values);
        assert_eq!(s.state, AlertState::Firing);
        assert_eq!(seen.len(), 1, "{seen:?}");
    }

    #[test]
    fn warning_escalates_to_critical_once_and_never_steps_back_before_resolving() {
        let (s, seen) = run(0, &[(0, 20.0), (15, 60.0), (30, 20.0), (45, 60.0), (60, 1.0)]);
        assert_eq!(s.state, AlertState::Resolved);
        assert_eq!(
            seen,
            vec![
                (AlertState::Ok, AlertState::Firing, Some(Severity::Warning)),
                (AlertState::Firing, AlertState::Firing, Some(Severity::Critical)),
                (AlertState::Firing, AlertState::Resolved, None),
            ]
        );
    }

    #[test]
    fn a_resolved_alert_fires_again_on_a_new_breach_and_reports_the_crossed_threshold() {
        let mut s = Snapshot::initial(at(0));
        for (sec, v) in [(0, 20.0), (15, 0.0)] {
            s = step(s, v, T, chrono::Duration::zero(), at(sec)).next;
        }
        let o = step(s, 70.0, T, chrono::Duration::zero(), at(30));
        let tr = o.transition.unwrap();
        assert_eq!((tr.from, tr.to, tr.severity), (AlertState::Resolved, AlertState::Firing, Some(Severity::Critical)));
        assert_eq!(tr.threshold, 50.0);
        assert!(tr.notifies());
    }

    #[test]
    fn pending_and_back_to_ok_notify_nobody() {
        let o = step(Snapshot::initial(at(0)), 12.0, T, chrono::Duration::seconds(60), at(1));
        assert!(!o.transition.unwrap().notifies());
    }
}
