//! Locks that outlive a panic, panics turned into errors, work done once per key at a time,
//! the background work the daemon waits for before it exits, and the pools of threads that
//! work runs on.
//!
//! A thread that panics while holding a lock poisons it; every lock in soma-mount guards data
//! that each use leaves consistent (one insert, one swap, one read), so a poisoned lock's
//! data is taken as it is rather than failing every FUSE request after it.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, LockResult, Mutex, PoisonError};
use std::time::Duration;

/// The guard of a lock (`lock()`, `read()`, `write()`, a condition variable's `wait()`),
/// poisoned or not.
pub trait Recover<Guard> {
    fn recover(self) -> Guard;
}

impl<Guard> Recover<Guard> for LockResult<Guard> {
    fn recover(self) -> Guard {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a panic said, as text.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Runs `work`, turning a panic inside it into an error that says so: a bug in one read
/// fails that read, never the thread that serves everyone else's. Whatever `work` touched
/// is dropped or left to locks that [`Recover`].
pub fn catch_panic<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|payload| {
        format!(
            "internal error (a bug in soma-mount): {}",
            panic_message(&*payload)
        )
    })
}

/// Runs `first` on a thread of its own while this one runs `second`, and returns both
/// outcomes: two waits on the network (libtiledb calls that each cost round trips) take the
/// time of the longer. A panic in `first` goes on in the caller, as if it had run here.
pub fn at_once<A: Send, B>(first: impl FnOnce() -> A + Send, second: impl FnOnce() -> B) -> (A, B) {
    std::thread::scope(|scope| {
        let first = scope.spawn(first);
        let second = second();
        let first = first
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (first, second)
    })
}

/// `work` applied to every item, on up to `threads` threads at once (this one among them),
/// the outcomes in the items' order: waits on the network for many objects (the members of
/// a group, each opened) take the time of the longest few, not of all. A panic in `work`
/// goes on in the caller.
pub fn map_at_once<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if items.len() < 2 {
        return items.iter().map(work).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
    let take_turns = || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let outcome = work(item);
        done.lock().recover()[i] = Some(outcome);
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads.clamp(1, items.len()))
            .map(|_| scope.spawn(take_turns))
            .collect();
        take_turns();
        for helper in helpers {
            if let Err(panic) = helper.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    let done = done.into_inner().recover();
    done.into_iter()
        .map(|outcome| outcome.expect("every item was taken"))
        .collect()
}

/// Work done once per key at a time: a caller that comes while the work on its key is under
/// way waits for it and takes its outcome, success or failure, rather than doing it again
/// (two looks that open one object, two opens that generate one file). Once no one waits,
/// the key is forgotten, and the next caller does the work afresh.
pub struct SingleFlight<Key, Outcome> {
    flights: Mutex<HashMap<Key, Arc<Mutex<Option<Outcome>>>>>,
}

impl<Key: Eq + Hash, Outcome: Clone> SingleFlight<Key, Outcome> {
    /// `work`'s outcome for `key`: this call's, or that of the call under way when it came.
    pub fn run(&self, key: Key, work: impl FnOnce() -> Outcome) -> Outcome {
        let flight = {
            let mut flights = self.flights.lock().recover();
            // Only the map holds a flight that no caller is in: it is over.
            flights.retain(|_, flight| Arc::strong_count(flight) > 1);
            flights.entry(key).or_default().clone()
        };
        // A caller whose work panicked leaves no outcome: the next does the work itself.
        let mut outcome = flight.lock().recover();
        if let Some(shared) = outcome.as_ref() {
            return shared.clone();
        }
        let fresh = work();
        *outcome = Some(fresh.clone());
        fresh
    }
}

impl<Key, Outcome> std::fmt::Debug for SingleFlight<Key, Outcome> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flights = self.flights.lock().recover().len();
        f.debug_struct("SingleFlight")
            .field("flights", &flights)
            .finish()
    }
}

impl<Key, Outcome> Default for SingleFlight<Key, Outcome> {
    fn default() -> Self {
        SingleFlight {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

/// Work running on threads of its own, outside any FUSE request: members opened ahead of
/// looks into them, files generated while they are read. The daemon stops it and waits for
/// it before it exits ([`Background::stop`], [`Background::wait`]): no thread may still be inside
/// libtiledb when its static state is torn down.
#[derive(Default)]
pub struct Background {
    /// How many tasks run, and whether new ones are refused.
    state: Mutex<(usize, bool)>,
    ended: Condvar,
}

/// One running piece of background work: it ends when this is dropped.
pub struct Task(Arc<Background>);

impl Background {
    /// Counts a new task in, unless background work has stopped.
    pub fn begin(self: &Arc<Self>) -> Option<Task> {
        let mut state = self.state.lock().recover();
        if state.1 {
            return None;
        }
        state.0 += 1;
        Some(Task(self.clone()))
    }

    /// Whether the daemon is ending: running tasks should skip what they have not started.
    pub fn stopped(&self) -> bool {
        self.state.lock().recover().1
    }

    /// Refuses new tasks from now on.
    pub fn stop(&self) {
        self.state.lock().recover().1 = true;
    }

    /// Waits up to `limit` for running tasks to end: false if some still run.
    pub fn wait(&self, limit: Duration) -> bool {
        let state = self.state.lock().recover();
        let (state, _) = self
            .ended
            .wait_timeout_while(state, limit, |s| s.0 > 0)
            .recover();
        state.0 == 0
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().recover();
        state.0 -= 1;
        if state.0 == 0 {
            self.0.ended.notify_all();
        }
    }
}

/// A job for a [`Pool`].
type Job = Box<dyn FnOnce() + Send>;

/// Threads that run the jobs handed to them: started when a job finds none idle, up to a
/// bound (more jobs wait in order), ended after a while without work. Every job is
/// background work ([`Background`]): none starts once the daemon is ending, and the daemon
/// waits for those under way. A job that panics ends alone; its thread goes on.
pub struct Pool {
    name: &'static str,
    most: usize,
    background: Arc<Background>,
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    queue: VecDeque<(Job, Task)>,
    threads: usize,
    idle: usize,
}

/// How long a pool's thread waits for work before it ends.
const POOL_IDLE: Duration = Duration::from_secs(10);

impl Pool {
    pub fn new(name: &'static str, most: usize, background: Arc<Background>) -> Arc<Pool> {
        Arc::new(Pool {
            name,
            most: most.max(1),
            background,
            state: Mutex::default(),
            work: Condvar::new(),
        })
    }

    /// Runs `job` on one of the pool's threads: false, and `job` dropped unrun, once the
    /// daemon is ending.
    pub fn run(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) -> bool {
        let Some(task) = self.background.begin() else {
            return false;
        };
        let mut state = self.state.lock().recover();
        state.queue.push_back((Box::new(job), task));
        // Idle threads take queued jobs as they wake: a thread is started only for jobs
        // that no idle thread will take.
        if state.queue.len() <= state.idle {
            drop(state);
            self.work.notify_one();
            return true;
        }
        if state.threads < self.most {
            state.threads += 1;
            drop(state);
            let pool = self.clone();
            let started = std::thread::Builder::new()
                .name(self.name.into())
                .spawn(move || pool.serve());
            if started.is_err() {
                // The jobs wait for a thread that is running, or for the next one started.
                self.state.lock().recover().threads -= 1;
            }
        }
        true
    }

    /// How many jobs wait for a thread.
    pub fn queued(&self) -> usize {
        self.state.lock().recover().queue.len()
    }

    /// A thread's life: jobs until none comes for [`POOL_IDLE`].
    fn serve(&self) {
        let mut state = self.state.lock().recover();
        loop {
            if let Some((job, task)) = state.queue.pop_front() {
                drop(state);
                if let Err(panic) = catch_panic(job) {
                    log::error!("{}: {panic}", self.name);
                }
                drop(task);
                state = self.state.lock().recover();
                continue;
            }
            state.idle += 1;
            let (next, waited) = self.work.wait_timeout(state, POOL_IDLE).recover();
            state = next;
            state.idle -= 1;
            if waited.timed_out() && state.queue.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn map_at_once_keeps_the_order_and_runs_items_together() {
        use std::sync::atomic::AtomicUsize;
        let items: Vec<u64> = (0..40).collect();
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let doubled = map_at_once(&items, 4, |&i| {
            most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
            now.fetch_sub(1, Ordering::SeqCst);
            2 * i
        });
        assert_eq!(doubled, items.iter().map(|i| 2 * i).collect::<Vec<_>>());
        let most = most.load(Ordering::SeqCst);
        assert!((2..=4).contains(&most), "{most} items at once");
    }

    #[test]
    fn callers_that_come_during_a_flight_share_its_outcome() {
        let flights = Arc::new(SingleFlight::<&str, Result<u32, String>>::default());
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (flights, runs) = (flights.clone(), runs.clone());
                std::thread::spawn(move || {
                    flights.run("key", || {
                        std::thread::sleep(Duration::from_millis(200));
                        Err(format!("run {}", runs.fetch_add(1, Ordering::SeqCst)))
                    })
                })
            })
            .collect();
        let outcomes: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the work ran once");
        assert!(
            outcomes.iter().all(|o| o == &Err("run 0".to_owned())),
            "{outcomes:?}"
        );
        assert_eq!(
            flights.run("key", || Ok(7)),
            Ok(7),
            "a later call works afresh"
        );
        assert_eq!(flights.run("other", || Ok(8)), Ok(8));
        assert_eq!(
            flights.flights.lock().unwrap().len(),
            1,
            "finished flights are forgotten"
        );
    }

    #[test]
    fn stopping_waits_for_running_tasks_and_refuses_new_ones() {
        let background = Arc::new(Background::default());
        let task = background.begin().expect("running");
        let worker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(task);
        });
        let started = Instant::now();
        background.stop();
        assert!(background.wait(Duration::from_secs(10)));
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(background.stopped());
        assert!(background.begin().is_none());
        worker.join().unwrap();
    }

    #[test]
    fn stopping_gives_up_after_the_limit() {
        let background = Arc::new(Background::default());
        let task = background.begin().expect("running");
        background.stop();
        assert!(!background.wait(Duration::from_millis(50)));
        drop(task);
        assert!(background.wait(Duration::from_millis(50)));
    }

    #[test]
    fn a_pool_runs_jobs_on_at_most_its_threads_and_past_a_panic() {
        let background = Arc::new(Background::default());
        let pool = Pool::new("test-pool", 2, background.clone());
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(pool.run(|| panic!("a bug in one job")));
        for i in 0..6 {
            let (running, most, tx) = (running.clone(), most.clone(), tx.clone());
            assert!(pool.run(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                running.fetch_sub(1, Ordering::SeqCst);
                tx.send(i).unwrap();
            }));
        }
        let mut done: Vec<i32> = (0..6)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        done.sort();
        assert_eq!(done, (0..6).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 2);
        background.stop();
        assert!(background.wait(Duration::from_secs(10)));
        assert!(!pool.run(|| ()), "no job starts once the daemon is ending");
    }
}
