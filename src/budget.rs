//! The budgets of a mount: the memory its readers may hold at once (`--max-memory`) and
//! the generations that may run at once (`--max-generations`). Work that needs more than
//! is left waits for it, on a thread of its own (never a FUSE request's); it never pushes
//! the mount past the limit.
//!
//! A [`Budget`] counts units (bytes, or generations) handed out as [`Permit`]s, which give
//! them back when dropped. It also counts who waits and the most ever in use, for
//! `soma-mount status`. [`Budgets`] are made from the command line and handed to whoever
//! takes from them: the memory budget to the store, whose arrays' readers take from it
//! ([`crate::soma::ArrayObject::memory_budget`]), and both to the tree's file context,
//! where generations take their slots and `status` reads them.

use std::sync::{Arc, Condvar, Mutex};

use crate::sync::Recover;

/// The memory budget when the command line sets none.
pub const DEFAULT_MEMORY_BYTES: u64 = 512 << 20;

/// Generations at once when the command line sets none.
pub const DEFAULT_GENERATIONS: u64 = 4;

/// A number of units shared by everyone who takes from it.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    state: Mutex<BudgetState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    in_use: u64,
    peak: u64,
    waiting: usize,
}

/// What a budget looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetUse {
    pub limit: u64,
    pub in_use: u64,
    pub peak: u64,
    pub waiting: usize,
}

/// Units taken from a budget: given back when dropped.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<Budget>,
    units: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            limit: limit.max(1),
            state: Mutex::default(),
            freed: Condvar::new(),
        })
    }

    /// Takes `units`, waiting until they are free. A request for more than the whole
    /// budget takes the whole budget (it runs alone rather than never).
    pub fn take(self: &Arc<Self>, units: u64) -> Permit {
        let units = units.min(self.limit);
        let mut state = self.state.lock().recover();
        if state.in_use + units > self.limit {
            state.waiting += 1;
            while state.in_use + units > self.limit {
                state = self.freed.wait(state).recover();
            }
            state.waiting -= 1;
        }
        state.in_use += units;
        state.peak = state.peak.max(state.in_use);
        Permit {
            budget: self.clone(),
            units,
        }
    }

    /// Takes `units` if they are free now.
    pub fn try_take(self: &Arc<Self>, units: u64) -> Option<Permit> {
        let units = units.min(self.limit);
        let mut state = self.state.lock().recover();
        if state.in_use + units > self.limit {
            return None;
        }
        state.in_use += units;
        state.peak = state.peak.max(state.in_use);
        Some(Permit {
            budget: self.clone(),
            units,
        })
    }

    pub fn usage(&self) -> BudgetUse {
        let state = self.state.lock().recover();
        BudgetUse {
            limit: self.limit,
            in_use: state.in_use,
            peak: state.peak,
            waiting: state.waiting,
        }
    }
}

impl Permit {
    /// The budget it was taken from.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.budget.state.lock().recover();
        state.in_use -= self.units;
        drop(state);
        self.budget.freed.notify_all();
    }
}

/// The budgets of one mount.
#[derive(Debug, Clone)]
pub struct Budgets {
    /// The bytes readers' buffers may hold at once.
    pub memory: Arc<Budget>,
    /// The files that may be generated at once: one slot each.
    pub generations: Arc<Budget>,
}

impl Budgets {
    pub fn new(memory_bytes: u64, generations: u64) -> Budgets {
        Budgets {
            memory: Budget::new(memory_bytes),
            generations: Budget::new(generations),
        }
    }
}

impl Default for Budgets {
    /// The budgets when the command line sets none.
    fn default() -> Budgets {
        Budgets::new(DEFAULT_MEMORY_BYTES, DEFAULT_GENERATIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_taker_waits_until_enough_is_given_back() {
        let budget = Budget::new(100);
        let first = budget.take(70);
        assert!(budget.try_take(40).is_none());
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || budget.take(40))
        };
        while budget.usage().waiting == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(budget.usage().in_use, 70, "the waiter took nothing yet");
        drop(first);
        let second = waiter.join().unwrap();
        let usage = budget.usage();
        assert_eq!((usage.in_use, usage.peak, usage.waiting), (40, 70, 0));
        drop(second);
        assert_eq!(budget.usage().in_use, 0);
    }

    #[test]
    fn more_than_the_whole_budget_takes_the_whole_budget() {
        let budget = Budget::new(100);
        let all = budget.take(1000);
        assert_eq!(budget.usage().in_use, 100);
        assert!(budget.try_take(1).is_none());
        drop(all);
        assert!(budget.try_take(1).is_some());
    }

    #[test]
    fn budgets_made_apart_are_not_shared() {
        let (first, second) = (Budgets::new(100, 1), Budgets::new(100, 1));
        let _slot = first.generations.take(1);
        let _bytes = first.memory.take(100);
        assert!(second.generations.try_take(1).is_some());
        assert!(second.memory.try_take(100).is_some());
        let shared = first.clone();
        assert!(
            shared.generations.try_take(1).is_none(),
            "a clone is the same budget"
        );
    }
}
