//! The CUDA backend (real GPU or emulator) as a [`DecoderModel`], so the engine's scheduler,
//! sampler and stop handling drive it exactly as they drive the CPU model: the same seeded
//! sampling, the same text. Each sequence state leases one cache slot of a [`CudaState`] (taken
//! on its first step; when the last clone of the state is dropped the slot is queued, and the
//! next step or [`CudaDecoder::kv_blocks`] gives its KV blocks back to the paged pool and zeroes
//! its GDN states before the slot is leased again). Cloning a state (a turn-boundary snapshot, a
//! conversation kept for the next turn) shares the slot; the slot is copied on write: a state
//! about to be fed while another clone still holds its slot first moves to a fresh slot
//! ([`CudaState::copy_slot`]: the KV blocks shared by reference — only a partially filled last
//! block is copied, when it is written — and device copies of the GDN conv and recurrent
//! states), so snapshot and resume give the CPU engine's results. The KV pool is sized by a
//! token budget ([`CacheConfig`]); a step whose tokens find no free block fails with a "KV
//! cache full" error.

use super::backend::{DecoderModel, StepInput, StepOutput};
use super::error::EngineError;
use crate::model::backend::cuda::{CacheConfig, CudaModel, CudaState};
use crate::tensor::cuda::{Act, Gpu};
use std::sync::{Arc, Mutex};

type EndedSlots = Arc<Mutex<Vec<usize>>>;

/// A cache slot owned by one sequence (shared by its clones); queued for reclaiming on drop.
#[derive(Debug)]
struct SlotLease {
    slot: usize,
    ended: EndedSlots,
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        if let Ok(mut f) = self.ended.lock() {
            f.push(self.slot);
        }
    }
}

/// One sequence on the device: its slot (once it has one) and the tokens it has consumed.
#[derive(Debug, Clone, Default)]
pub struct CudaSeqState {
    lease: Option<Arc<SlotLease>>,
    len: usize,
}

/// A [`CudaModel`] with its caches, as an engine model.
pub struct CudaDecoder<A: Act = u16> {
    gpu: Gpu,
    model: CudaModel<A>,
    state: Mutex<CudaState<A>>,
    /// Slots ready to lease (their blocks released, GDN states zeroed); guarded by `state`'s lock.
    free: Mutex<Vec<usize>>,
    /// Slots whose last holder was dropped, not yet reclaimed.
    ended: EndedSlots,
}

fn poisoned<T>(_: T) -> EngineError {
    EngineError::Model("device state poisoned".into())
}

impl<A: Act> CudaDecoder<A> {
    /// Caches for `slots` sequences that may all hold `max_len` tokens at once
    /// ([`CacheConfig::dense`]), at most `max_tokens` per step.
    pub fn new(
        gpu: Gpu,
        model: CudaModel<A>,
        slots: usize,
        max_len: usize,
        max_tokens: usize,
    ) -> Result<Self, EngineError> {
        Self::with_cache(gpu, model, CacheConfig::dense(slots, max_len), max_tokens)
    }

    /// Caches shaped by `cache` (sequence slots, longest sequence, KV token budget, block
    /// size), at most `max_tokens` per step.
    pub fn with_cache(
        gpu: Gpu,
        model: CudaModel<A>,
        cache: CacheConfig,
        max_tokens: usize,
    ) -> Result<Self, EngineError> {
        let state = CudaState::with_cache(&gpu, &model.cfg, cache, max_tokens)
            .map_err(|e| EngineError::Load(e.to_string()))?;
        Ok(CudaDecoder {
            gpu,
            model,
            state: Mutex::new(state),
            free: Mutex::new((0..cache.slots).rev().collect()),
            ended: Arc::new(Mutex::new(vec![])),
        })
    }

    /// Give the slots of ended sequences back: their KV blocks to the pool, their GDN states
    /// zeroed, the slots to the free list.
    fn reclaim(&self, st: &mut CudaState<A>) -> Result<(), EngineError> {
        let ended = std::mem::take(&mut *self.ended.lock().map_err(poisoned)?);
        let mut free = self.free.lock().map_err(poisoned)?;
        for slot in ended {
            st.reset_slot(&self.gpu, slot)
                .map_err(|e| EngineError::Model(e.to_string()))?;
            free.push(slot);
        }
        Ok(())
    }

    fn lease(&self) -> Result<Arc<SlotLease>, EngineError> {
        let slot = self
            .free
            .lock()
            .map_err(poisoned)?
            .pop()
            .ok_or_else(|| EngineError::Model("every device cache slot is in use".into()))?;
        Ok(Arc::new(SlotLease {
            slot,
            ended: self.ended.clone(),
        }))
    }

    /// `(free, total)` blocks of the paged KV pool, after the blocks of ended sequences went back.
    pub fn kv_blocks(&self) -> Result<(usize, usize), EngineError> {
        let mut st = self.state.lock().map_err(poisoned)?;
        self.reclaim(&mut st)?;
        Ok(st.kv_blocks())
    }
}

impl<A: Act> DecoderModel for CudaDecoder<A> {
    type State = CudaSeqState;

    fn new_state(&self) -> CudaSeqState {
        CudaSeqState::default()
    }

    fn vocab_size(&self) -> usize {
        self.model.cfg.vocab_size
    }

    fn experts_per_token(&self) -> usize {
        self.model.cfg.num_experts_per_tok
    }

    fn step(
        &self,
        batch: &mut [StepInput<'_, CudaSeqState>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        let err = |e: crate::tensor::device::DeviceError| EngineError::Model(e.to_string());
        let mut st = self.state.lock().map_err(poisoned)?;
        self.reclaim(&mut st)?;
        let mut slots = Vec::with_capacity(batch.len());
        for s in batch.iter_mut() {
            if s.state.lease.is_none() {
                if s.state.len != 0 {
                    return Err(EngineError::Model("sequence state without a slot".into()));
                }
                s.state.lease = Some(self.lease()?);
            }
            let mut slot = s.state.lease.as_ref().map_or(0, |l| l.slot);
            if st.lens[slot] != s.state.len {
                return Err(EngineError::Model(format!(
                    "cache slot {slot} holds {} tokens but the sequence state {}",
                    st.lens[slot], s.state.len
                )));
            }
            // Copy on write: another clone (a snapshot) still needs this slot as it is.
            if s.state.lease.as_ref().is_some_and(|l| Arc::strong_count(l) > 1) {
                let fresh = self.lease()?;
                st.copy_slot(&self.gpu, slot, fresh.slot).map_err(err)?;
                slot = fresh.slot;
                s.state.lease = Some(fresh);
            }
            slots.push(slot);
        }
        let seqs: Vec<(usize, &[u32])> = slots
            .iter()
            .zip(batch.iter())
            .map(|(&slot, s)| (slot, s.tokens))
            .collect();
        st.routing = routing.then(Vec::new);
        let logits = self
            .model
            .forward_last(&self.gpu, &mut st, &seqs)
            .map_err(err)?;
        let rec = st.routing.take();
        let (v, k) = (
            self.model.cfg.vocab_size,
            self.model.cfg.num_experts_per_tok,
        );
        let mut out = Vec::with_capacity(batch.len());
        let mut tok0 = 0;
        for (b, s) in batch.iter_mut().enumerate() {
            let n = s.tokens.len();
            s.state.len += n;
            let experts = rec.as_ref().map(|layers| {
                layers
                    .iter()
                    .map(|l| {
                        l[tok0 * k..(tok0 + n) * k]
                            .iter()
                            .map(|&e| e as u32)
                            .collect()
                    })
                    .collect()
            });
            tok0 += n;
            out.push(StepOutput {
                logits: logits[b * v..(b + 1) * v].to_vec(),
                experts,
            });
        }
        Ok(out)
    }
}
