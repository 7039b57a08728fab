//! Fair turns at the fetch workers (git) and at the HTTP fetches: at most `total` jobs at
//! once, at most `per_namespace` for any one namespace, and a free turn goes to the
//! waiting job whose namespace has the fewest running. One namespace's hundreds of
//! hostile sources (each able to hold its turn for a whole deadline) therefore never
//! occupy more than its share, and a namespace with nothing running starts at the next
//! free turn, or at once while the other namespaces stay within their shares.
//!
//! Writer state like the rest: a job asks by message and holds a lease
//! (`leases::Turn`) whose drop gives the turn back, granted or not.

use std::collections::{HashMap, VecDeque};

use tokio::sync::oneshot;

use super::{JobId, State};

/// Which turns: a git worker's or an HTTP fetch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::fetcher) enum Pool {
    /// Git jobs, each in a worker.
    Git,
    /// HTTP file fetches.
    Http,
}

/// A job waiting for a turn in `pool` under one of `namespaces` (every namespace whose
/// parents share it).
pub(in crate::fetcher) struct TurnWanted {
    pub(in crate::fetcher) job: JobId,
    pub(in crate::fetcher) pool: Pool,
    pub(in crate::fetcher) namespaces: Vec<String>,
    pub(in crate::fetcher) granted: oneshot::Sender<()>,
}

/// The turns of one pool.
pub(in crate::fetcher) struct Turns {
    total: usize,
    per_namespace: usize,
    /// Jobs running, by namespace.
    running: HashMap<String, usize>,
    /// The namespace each running job counts against.
    granted: HashMap<JobId, String>,
    waiting: VecDeque<TurnWanted>,
}

impl Turns {
    /// `total` turns (at least 1), at most `per_namespace` (at least 1) for a namespace.
    pub(in crate::fetcher) fn new(total: usize, per_namespace: usize) -> Turns {
        let total = total.max(1);
        Turns {
            total,
            per_namespace: per_namespace.clamp(1, total),
            running: HashMap::new(),
            granted: HashMap::new(),
            waiting: VecDeque::new(),
        }
    }

    /// (running, waiting) jobs.
    pub(in crate::fetcher) fn load(&self) -> (usize, usize) {
        (self.granted.len(), self.waiting.len())
    }

    /// Hands free turns to waiters: the one whose least-loaded namespace runs fewest
    /// jobs, the earliest among equals.
    fn grant(&mut self) {
        while self.granted.len() < self.total {
            let Some((index, namespace)) = self.next_waiter() else {
                return;
            };
            let Some(waiter) = self.waiting.remove(index) else {
                return;
            };
            // A waiter that went away has sent, or will send, its `TurnDone`; nothing is
            // counted for it.
            if waiter.granted.send(()).is_ok() {
                *self.running.entry(namespace.clone()).or_default() += 1;
                self.granted.insert(waiter.job, namespace);
            }
        }
    }

    /// The waiter to run next and the namespace it runs under.
    fn next_waiter(&self) -> Option<(usize, String)> {
        let mut best: Option<(usize, usize, &String)> = None;
        for (index, waiter) in self.waiting.iter().enumerate() {
            let Some((count, namespace)) = waiter
                .namespaces
                .iter()
                .map(|ns| (self.running.get(ns).copied().unwrap_or(0), ns))
                .filter(|(count, _)| *count < self.per_namespace)
                .min()
            else {
                continue;
            };
            if best.is_none_or(|(c, ..)| count < c) {
                best = Some((count, index, namespace));
                if count == 0 {
                    break;
                }
            }
        }
        best.map(|(_, index, namespace)| (index, namespace.clone()))
    }

    /// `job`'s turn is over, or no longer wanted.
    fn done(&mut self, job: JobId) {
        self.waiting.retain(|waiter| waiter.job != job);
        if let Some(namespace) = self.granted.remove(&job)
            && let Some(count) = self.running.get_mut(&namespace)
        {
            *count -= 1;
            if *count == 0 {
                self.running.remove(&namespace);
            }
        }
    }
}

impl State {
    fn turns_mut(&mut self, pool: Pool) -> &mut Turns {
        match pool {
            Pool::Git => &mut self.git_turns,
            Pool::Http => &mut self.http_turns,
        }
    }

    /// A job asks for a turn; granted at once when its namespaces have room.
    pub(in crate::fetcher) fn want_turn(&mut self, wanted: TurnWanted) {
        let turns = self.turns_mut(wanted.pool);
        turns.waiting.push_back(wanted);
        turns.grant();
    }

    /// A job's turn is given back (or no longer wanted); the next waiter gets it.
    pub(in crate::fetcher) fn turn_done(&mut self, pool: Pool, job: JobId) {
        let turns = self.turns_mut(pool);
        turns.done(job);
        turns.grant();
    }

    /// Git jobs (running, waiting for a worker).
    pub(in crate::fetcher) fn git_load(&self) -> (usize, usize) {
        self.git_turns.load()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiting job: its id and the receiver its grant arrives on.
    fn ask(turns: &mut Turns, job: u64, namespaces: &[&str]) -> oneshot::Receiver<()> {
        let (granted, grant) = oneshot::channel();
        turns.waiting.push_back(TurnWanted {
            job: JobId(job),
            pool: Pool::Git,
            namespaces: namespaces.iter().map(|&ns| ns.to_owned()).collect(),
            granted,
        });
        turns.grant();
        grant
    }

    fn granted(grant: &mut oneshot::Receiver<()>) -> bool {
        grant.try_recv().is_ok()
    }

    fn namespace_of(turns: &Turns, job: u64) -> Option<&str> {
        turns.granted.get(&JobId(job)).map(String::as_str)
    }

    #[test]
    fn one_namespace_never_takes_more_than_its_share() {
        let mut turns = Turns::new(4, 2);
        let mut first = ask(&mut turns, 1, &["attacker"]);
        let mut second = ask(&mut turns, 2, &["attacker"]);
        assert!(granted(&mut first) && granted(&mut second));
        // A third job of the same namespace waits although two turns are free...
        let mut third = ask(&mut turns, 3, &["attacker"]);
        assert!(!granted(&mut third));
        assert_eq!(turns.load(), (2, 1));
        // ...and another namespace starts at once.
        let mut honest = ask(&mut turns, 4, &["honest"]);
        assert!(granted(&mut honest));
        assert_eq!(turns.load(), (3, 1));
        turns.done(JobId(1));
        turns.grant();
        assert!(granted(&mut third));
        assert_eq!(namespace_of(&turns, 3), Some("attacker"));
        for job in [2, 3, 4] {
            turns.done(JobId(job));
        }
        assert_eq!(turns.load(), (0, 0));
        assert!(turns.running.is_empty());
    }

    #[test]
    fn a_shared_job_runs_under_the_namespace_with_room() {
        let mut turns = Turns::new(4, 1);
        let _busy = ask(&mut turns, 1, &["a"]);
        let mut shared = ask(&mut turns, 2, &["a", "b"]);
        assert!(granted(&mut shared));
        assert_eq!(namespace_of(&turns, 2), Some("b"));
    }

    #[test]
    fn a_free_turn_goes_to_the_least_loaded_namespace_first() {
        let mut turns = Turns::new(3, 3);
        let _a1 = ask(&mut turns, 1, &["a"]);
        let _a2 = ask(&mut turns, 2, &["a"]);
        let _b1 = ask(&mut turns, 3, &["b"]);
        let mut a3 = ask(&mut turns, 4, &["a"]);
        let mut c1 = ask(&mut turns, 5, &["c"]);
        assert_eq!(turns.load(), (3, 2));
        turns.done(JobId(3));
        turns.grant();
        // "a" runs two and "c" none: c goes first although it asked last.
        assert!(granted(&mut c1));
        assert!(!granted(&mut a3));
        assert_eq!(turns.load(), (3, 1));
    }

    #[test]
    fn a_job_that_went_away_is_not_counted_and_its_turn_passes_on() {
        let mut turns = Turns::new(1, 1);
        let _running = ask(&mut turns, 1, &["a"]);
        let gone = ask(&mut turns, 2, &["b"]);
        let mut next = ask(&mut turns, 3, &["c"]);
        drop(gone);
        turns.done(JobId(1));
        turns.grant();
        assert!(granted(&mut next), "the turn skips the job that went away");
        assert_eq!(turns.load(), (1, 0));
        // Its TurnDone arrives later and changes nothing.
        turns.done(JobId(2));
        assert_eq!(turns.load(), (1, 0));
    }
}
