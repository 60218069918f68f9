//! [`ThreadExchange`]: the expert-parallel all-to-all among ranks that are threads of one
//! process, the CPU stand-in for NCCL with the same contract — each rank holds only its own send
//! buffers and calls [`Exchange::all_to_all`] collectively. Ranks meet in shared mailboxes
//! (`[src][dst]`) guarded by a generation barrier: deposit, barrier, collect, barrier. A rank
//! that leaves the group (its handle dropped, e.g. after an error) wakes the others with
//! [`EpError::PeerGone`] instead of leaving them blocked.

use super::cuda::Elem;
use super::expert_parallel::{EpError, Exchange};
use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

type Mail = Option<Box<dyn Any + Send>>;

struct State {
    /// `boxes[src·n + dst]`: what `src` deposited for `dst` this round.
    boxes: Vec<Mail>,
    arrived: usize,
    generation: u64,
    gone: bool,
}

struct Shared {
    n: usize,
    state: Mutex<State>,
    cv: Condvar,
}

/// One rank's handle on a group of thread ranks; move each into its own thread.
pub struct ThreadExchange {
    rank: usize,
    shared: Arc<Shared>,
}

impl ThreadExchange {
    /// A group of `n` ranks (handle `r` is rank `r`).
    pub fn group(n: usize) -> Vec<ThreadExchange> {
        let shared = Arc::new(Shared {
            n,
            state: Mutex::new(State { boxes: (0..n * n).map(|_| None).collect(), arrived: 0, generation: 0, gone: false }),
            cv: Condvar::new(),
        });
        (0..n).map(|rank| ThreadExchange { rank, shared: shared.clone() }).collect()
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, EpError> {
        self.shared.state.lock().map_err(|_| EpError::PeerGone { rank: self.rank })
    }

    /// Wait until every rank reached this barrier (or one left the group).
    fn barrier<'a>(&'a self, mut st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>, EpError> {
        let gone = EpError::PeerGone { rank: self.rank };
        if st.gone {
            return Err(gone);
        }
        let generation = st.generation;
        st.arrived += 1;
        if st.arrived == self.shared.n {
            st.arrived = 0;
            st.generation += 1;
            self.shared.cv.notify_all();
            return Ok(st);
        }
        while st.generation == generation && !st.gone {
            st = self.shared.cv.wait(st).map_err(|_| gone.clone())?;
        }
        if st.generation == generation {
            Err(gone)
        } else {
            Ok(st)
        }
    }
}

impl Exchange for ThreadExchange {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.n
    }

    fn all_to_all<T: Elem>(&mut self, send: Vec<Vec<T>>) -> Result<Vec<Vec<T>>, EpError> {
        let (n, me) = (self.shared.n, self.rank);
        if send.len() != n {
            return Err(EpError::Shape { rank: me, msg: format!("{} send buffers for {n} ranks", send.len()) });
        }
        let mut st = self.lock()?;
        for (dst, buf) in send.into_iter().enumerate() {
            st.boxes[me * n + dst] = Some(Box::new(buf));
        }
        let mut st = self.barrier(st)?;
        let mut recv = Vec::with_capacity(n);
        for src in 0..n {
            let mail = st.boxes[src * n + me].take().and_then(|b| b.downcast::<Vec<T>>().ok());
            match mail {
                Some(v) => recv.push(*v),
                None => return Err(EpError::Exchange(format!("rank {me}: rank {src} sent another element type"))),
            }
        }
        // Nobody deposits the next round before every rank collected this one.
        drop(self.barrier(st)?);
        Ok(recv)
    }
}

impl Drop for ThreadExchange {
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.gone = true;
        }
        self.shared.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_exchange_buffers_of_any_length() {
        let outs: Vec<Vec<Vec<Vec<i32>>>> = std::thread::scope(|s| {
            let hs: Vec<_> = ThreadExchange::group(3)
                .into_iter()
                .map(|mut ex| {
                    s.spawn(move || {
                        let r = ex.rank() as i32;
                        // rank r sends dst d `d` copies of 10r + d; twice, to check rounds stay apart
                        (0..2)
                            .map(|round| {
                                let send = (0..3).map(|d| vec![10 * r + d as i32 + 100 * round; d]).collect();
                                ex.all_to_all(send).unwrap()
                            })
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (dst, rounds) in outs.iter().enumerate() {
            for (round, recv) in rounds.iter().enumerate() {
                for (src, v) in recv.iter().enumerate() {
                    assert_eq!(v, &vec![10 * src as i32 + dst as i32 + 100 * round as i32; dst]);
                }
            }
        }
    }

    #[test]
    fn a_rank_leaving_the_group_wakes_the_others() {
        let mut group = ThreadExchange::group(2);
        let quitter = group.pop().unwrap();
        let mut stayer = group.pop().unwrap();
        let h = std::thread::spawn(move || stayer.all_to_all(vec![vec![1.0f32], vec![2.0]]));
        drop(quitter);
        assert_eq!(h.join().unwrap(), Err(EpError::PeerGone { rank: 0 }));
        let mut solo = ThreadExchange::group(1).pop().unwrap();
        assert!(matches!(solo.all_to_all(vec![vec![1u16], vec![]]), Err(EpError::Shape { .. })));
        assert_eq!(solo.all_to_all(vec![vec![7u16]]).unwrap(), vec![vec![7u16]]);
    }
}
