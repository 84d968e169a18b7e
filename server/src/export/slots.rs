//! Who may start a list download now: at most [`AT_ONCE`] run in this process (each holds a
//! database connection while it streams), and at most [`PER_USER`] per user, so one user
//! cannot hold them all.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

/// List downloads running at once in this process.
pub const AT_ONCE: usize = 2;
/// List downloads one user may run at once.
pub const PER_USER: usize = 1;

#[derive(Debug, Default)]
struct Taken {
    total: usize,
    by_user: HashMap<String, usize>,
}

/// The slots of this process; clones share them.
#[derive(Debug, Clone, Default)]
pub struct Slots(Arc<Mutex<Taken>>);

/// Why no slot is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// [`AT_ONCE`] downloads are running.
    Everyone,
    /// This user runs [`PER_USER`] already.
    You,
}

/// A running download's slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Slots,
    user: String,
}

impl Slots {
    fn lock(&self) -> MutexGuard<'_, Taken> {
        // The counts stay consistent whatever panicked while holding the lock: each change is
        // a single statement.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `user` could start a download now, without taking a slot (HEAD).
    pub fn check(&self, user: &str) -> Result<(), Full> {
        let taken = self.lock();
        if taken.by_user.get(user).copied().unwrap_or(0) >= PER_USER {
            return Err(Full::You);
        }
        if taken.total >= AT_ONCE {
            return Err(Full::Everyone);
        }
        Ok(())
    }

    /// A slot for `user`, or why there is none.
    pub fn take(&self, user: &str) -> Result<Slot, Full> {
        let mut taken = self.lock();
        let mine = taken.by_user.get(user).copied().unwrap_or(0);
        if mine >= PER_USER {
            return Err(Full::You);
        }
        if taken.total >= AT_ONCE {
            return Err(Full::Everyone);
        }
        taken.total += 1;
        taken.by_user.insert(user.to_string(), mine + 1);
        Ok(Slot { slots: self.clone(), user: user.to_string() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = self.slots.lock();
        taken.total = taken.total.saturating_sub(1);
        if let Some(n) = taken.by_user.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                taken.by_user.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_gets_one_slot_and_two_users_fill_the_process_until_one_is_dropped() {
        let slots = Slots::default();
        let a = slots.take("a").unwrap();
        assert_eq!(slots.take("a").unwrap_err(), Full::You);
        assert_eq!(slots.check("a"), Err(Full::You));
        let b = slots.take("b").unwrap();
        assert_eq!(slots.take("c").unwrap_err(), Full::Everyone);
        assert_eq!(slots.check("c"), Err(Full::Everyone));
        drop(a);
        assert_eq!(slots.check("c"), Ok(()));
        assert!(slots.take("a").is_ok(), "a's slot came back");
        drop(b);
    }
}
