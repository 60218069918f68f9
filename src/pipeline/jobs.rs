//! The batch runner of `audit` and `grade`: at most `workers` items in flight, each result
//! handed to the caller the moment it completes (so it can be written before the next one), and
//! a panicking item fails alone — its result is the panic message, the run goes on.
//!
//! The items run as tasks of a [`tokio::task::JoinSet`]: dropping the runner's future (Ctrl-C)
//! aborts them all, which drops their sandboxes.

use futures_util::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

pub use crate::panics::message as panic_message;

/// Run `f` over `items` (each with its index) with at most `workers` at once; `done(index,
/// result)` is called in completion order, `Err(message)` when the item panicked.
pub async fn run_each<T, R, F, Fut>(
    items: Vec<(usize, T)>,
    workers: usize,
    f: F,
    mut done: impl FnMut(usize, Result<R, String>),
) where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
{
    let sem = Arc::new(tokio::sync::Semaphore::new(workers.max(1)));
    let f = Arc::new(f);
    let mut set = tokio::task::JoinSet::new();
    for (i, item) in items {
        let sem = sem.clone();
        let f = f.clone();
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let out = AssertUnwindSafe(f(item)).catch_unwind().await;
            (i, out.map_err(|p| panic_message(p.as_ref())))
        });
    }
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, out)) => done(i, out),
            // Only cancellation is left (panics are caught inside the task); nothing to report.
            Err(e) => tracing::warn!("a worker ended without a result: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_fails_its_item_only() {
        let items: Vec<(usize, u32)> = (0..6).map(|i| (i, i as u32)).collect();
        let mut got = vec![None; 6];
        run_each(
            items,
            2,
            |x: u32| async move {
                if x == 3 {
                    panic!("item three broke");
                }
                x * 10
            },
            |i, r| got[i] = Some(r),
        )
        .await;
        for (i, r) in got.into_iter().enumerate() {
            match r.unwrap() {
                Ok(v) => assert_eq!(v, i as u32 * 10),
                Err(m) => {
                    assert_eq!(i, 3);
                    assert_eq!(m, "item three broke");
                }
            }
        }
    }
}
