//! Threads for partition and plugin jobs, kept for the next job when one ends.
//!
//! A job runs on a thread of its own, sized for the plugin's wasm stack (a runtime's
//! workers are smaller than a plugin may be allowed, and a plugin call blocks). A live
//! run writes many small rounds, each a job per dirty partition: with a thread made
//! and ended per job, the thread's start and exit (its stack and allocator cache
//! unmapped, the allocator's pages faulted in again by the next) were a large part of
//! a small job's time. Here a thread that finishes a job waits up to
//! [`IDLE_TIMEOUT`] for another of the same name and stack size, and only then ends; a
//! job starts on such a waiting thread if there is one, else on a new thread. Nothing
//! of a job outlives it on its thread: each job is a closure that owns what it uses
//! and drops it when it returns, as it did when its thread ended with it.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long a thread waits for a next job before it ends.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A waiting thread: its number, and where to hand it a job.
struct Waiting {
    id: u64,
    tx: mpsc::Sender<Job>,
}

#[derive(Default)]
struct Pool {
    next_id: u64,
    /// Waiting threads by (name, stack size), the most recent last.
    waiting: HashMap<(&'static str, usize), Vec<Waiting>>,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

fn with_pool<T>(f: impl FnOnce(&mut Pool) -> T) -> T {
    let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    f(pool.get_or_insert_with(Pool::default))
}

/// Runs `job` on a thread named `name` with a stack of `stack` bytes: one waiting for
/// work if there is one, else a new one. An error only if a new thread was needed and
/// could not be made.
pub fn spawn(
    name: &'static str,
    stack: usize,
    job: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    let mut job: Job = Box::new(job);
    loop {
        let Some(waiting) = with_pool(|p| p.waiting.get_mut(&(name, stack))?.pop()) else {
            break;
        };
        // A thread taken from the list never leaves without receiving (see `work`);
        // a failed send means it ended in a panic of its last job: try another.
        match waiting.tx.send(job) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => job = back,
        }
    }
    let (tx, rx) = mpsc::channel();
    let id = with_pool(|p| {
        p.next_id += 1;
        p.next_id
    });
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack)
        .spawn(move || work(name, stack, id, tx, rx, job))?;
    Ok(())
}

/// A thread's life: its first job, then each job handed to it while it waits, until
/// it has waited [`IDLE_TIMEOUT`] for nothing.
fn work(
    name: &'static str,
    stack: usize,
    id: u64,
    tx: mpsc::Sender<Job>,
    rx: mpsc::Receiver<Job>,
    first: Job,
) {
    first();
    loop {
        with_pool(|p| {
            p.waiting
                .entry((name, stack))
                .or_default()
                .push(Waiting { id, tx: tx.clone() });
        });
        let job = match rx.recv_timeout(IDLE_TIMEOUT) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                // Leave the list; if a `spawn` took this thread from it meanwhile, its
                // job is on the way: run it.
                let listed = with_pool(|p| {
                    let list = p.waiting.entry((name, stack)).or_default();
                    let at = list.iter().position(|w| w.id == id);
                    at.map(|at| list.remove(at)).is_some()
                });
                if listed {
                    return;
                }
                match rx.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            }
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Waits (at most 10 s) until a thread of `name` waits for a job.
    fn until_one_waits(name: &'static str) {
        for _ in 0..1000 {
            if with_pool(|p| {
                p.waiting
                    .get(&(name, 256 << 10))
                    .is_some_and(|l| !l.is_empty())
            }) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no thread of {name} came back to wait");
    }

    fn thread_id_of_a_job(name: &'static str) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        spawn(name, 256 << 10, move || {
            let _ = tx.send(std::thread::current().id());
        })
        .expect("spawn");
        rx.recv().expect("the job ran")
    }

    #[test]
    fn a_thread_that_finished_a_job_runs_the_next() {
        let first = thread_id_of_a_job("weir-test-reuse");
        until_one_waits("weir-test-reuse");
        let second = thread_id_of_a_job("weir-test-reuse");
        assert_eq!(first, second);
    }

    #[test]
    fn jobs_at_once_each_get_a_thread_and_all_run() {
        let ran = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(std::sync::Barrier::new(9));
        for _ in 0..8 {
            let (ran, gate) = (Arc::clone(&ran), Arc::clone(&gate));
            spawn("weir-test-many", 256 << 10, move || {
                // All 8 wait here together: each needs a thread of its own.
                gate.wait();
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .expect("spawn");
        }
        gate.wait();
        for _ in 0..100 {
            if ran.load(Ordering::SeqCst) == 8 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("only {} of 8 jobs ran", ran.load(Ordering::SeqCst));
    }

    #[test]
    fn a_job_that_panics_does_not_stop_the_next() {
        spawn("weir-test-panic", 256 << 10, || panic!("a job's panic")).expect("spawn");
        std::thread::sleep(Duration::from_millis(50));
        let (tx, rx) = mpsc::channel();
        spawn("weir-test-panic", 256 << 10, move || {
            let _ = tx.send(());
        })
        .expect("spawn");
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the job after a panic ran");
    }
}
