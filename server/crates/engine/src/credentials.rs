//! A pool of API keys for one provider: fill-first or round-robin; a key that fails with
//! 401/402/429 cools down and the next one is used.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How keys are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStrategy {
    /// Always the first key that is not cooling down.
    FillFirst,
    /// Each call the next key, skipping keys that cool down.
    RoundRobin,
}

impl KeyStrategy {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "fill-first" | "fill_first" => Some(Self::FillFirst),
            "round-robin" | "round_robin" => Some(Self::RoundRobin),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct PoolState {
    next: usize,
    cooling_until: Vec<Option<Instant>>,
}

/// The keys of one provider.
#[derive(Debug)]
pub struct CredentialPool {
    keys: Vec<String>,
    strategy: KeyStrategy,
    cooldown: Duration,
    state: Mutex<PoolState>,
}

/// A key handed out for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub index: usize,
    pub key: String,
}

impl CredentialPool {
    pub fn new(keys: Vec<String>, strategy: KeyStrategy, cooldown: Duration) -> Self {
        let count = keys.len();
        Self {
            keys,
            strategy,
            cooldown,
            state: Mutex::new(PoolState {
                next: 0,
                cooling_until: vec![None; count],
            }),
        }
    }

    /// How many keys the pool has.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// A key that is not cooling down, or `None` if all are.
    pub fn lease(&self) -> Option<Lease> {
        let mut state = talaria_util::lock(&self.state);
        let now = Instant::now();
        let count = self.keys.len();
        let start = match self.strategy {
            KeyStrategy::FillFirst => 0,
            KeyStrategy::RoundRobin => state.next,
        };
        for offset in 0..count {
            let index = (start + offset) % count;
            let usable = state.cooling_until[index].is_none_or(|until| until <= now);
            if usable {
                state.cooling_until[index] = None;
                state.next = (index + 1) % count;
                return Some(Lease {
                    index,
                    key: self.keys[index].clone(),
                });
            }
        }
        None
    }

    /// Puts a key aside for the cooldown period.
    pub fn cool_down(&self, lease: &Lease) {
        let mut state = talaria_util::lock(&self.state);
        if let Some(slot) = state.cooling_until.get_mut(lease.index) {
            *slot = Some(Instant::now() + self.cooldown);
        }
    }

    /// Whether some key other than `lease` is usable now.
    pub fn has_other(&self, lease: &Lease) -> bool {
        let state = talaria_util::lock(&self.state);
        let now = Instant::now();
        (0..self.keys.len())
            .any(|i| i != lease.index && state.cooling_until[i].is_none_or(|until| until <= now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(strategy: KeyStrategy) -> CredentialPool {
        CredentialPool::new(
            vec!["a".into(), "b".into(), "c".into()],
            strategy,
            Duration::from_secs(60),
        )
    }

    #[test]
    fn fill_first_sticks_to_the_first_healthy_key() {
        let pool = pool(KeyStrategy::FillFirst);
        let first = pool.lease().expect("key");
        assert_eq!(first.key, "a");
        assert_eq!(pool.lease().expect("key").key, "a");
        pool.cool_down(&first);
        assert!(pool.has_other(&first));
        assert_eq!(pool.lease().expect("key").key, "b");
    }

    #[test]
    fn round_robin_rotates_and_skips_cooling_keys() {
        let pool = pool(KeyStrategy::RoundRobin);
        let keys: Vec<String> = (0..4).map(|_| pool.lease().expect("key").key).collect();
        assert_eq!(keys, ["a", "b", "c", "a"]);
        let b = Lease {
            index: 1,
            key: "b".into(),
        };
        pool.cool_down(&b);
        let keys: Vec<String> = (0..3).map(|_| pool.lease().expect("key").key).collect();
        assert_eq!(keys, ["c", "a", "c"]);
        pool.cool_down(&Lease {
            index: 0,
            key: "a".into(),
        });
        pool.cool_down(&Lease {
            index: 2,
            key: "c".into(),
        });
        assert_eq!(pool.lease(), None);
    }
}
