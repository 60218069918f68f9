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
//! token budget ([`CacheConfig`]); a step whose tokens find no free block (or no free slot)
//! fails with [`EngineError::CacheFull`] before anything runs, and the engine makes room by
//! preempting sequences (`engine::scheduler`).

//!
//! A pure decode step is replayed as a CUDA graph captured on first use per batch size and
//! block-table width (`model::backend::cuda::DecodeGraphs`; `use_graphs(false)` turns it off).
//!
//! A step leaves the logits on the device: the next tokens are sampled there with each request's
//! own uniform draw ([`super::device_sampling`]) and only token ids and log-probabilities come
//! back; a logits row is copied to the host only when it is asked for.

use super::backend::{DecoderModel, StepInput, StepOutput, Want};
use super::device_sampling::{kernel_row, DeviceSampler};
use super::error::EngineError;
use crate::model::backend::cuda::{CacheConfig, CudaModel, CudaState};
use crate::tensor::cuda::gpu::DeviceBuffer;
use crate::tensor::cuda::ops::SampleRow;
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
    dev: Mutex<OnDevice<A>>,
    /// Slots ready to lease (their blocks released, GDN states zeroed); guarded by `dev`'s lock.
    free: Mutex<Vec<usize>>,
    /// Slots whose last holder was dropped, not yet reclaimed.
    ended: EndedSlots,
}

fn poisoned<T>(_: T) -> EngineError {
    EngineError::Model("device state poisoned".into())
}

/// What the decoder keeps on the device between steps: the caches and step scratch, and the
/// sampling kernel's buffers.
struct OnDevice<A: Act> {
    state: CudaState<A>,
    sampler: DeviceSampler,
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
        let load = |e: crate::tensor::device::DeviceError| EngineError::Load(e.to_string());
        let mut state = CudaState::with_cache(&gpu, &model.cfg, cache, max_tokens).map_err(load)?;
        // decode steps as CUDA graphs (where the device has them)
        state.use_graphs(true);
        // a step holds at most one row per slot
        let sampler = DeviceSampler::new(&gpu, cache.slots).map_err(load)?;
        Ok(CudaDecoder {
            gpu,
            model,
            dev: Mutex::new(OnDevice { state, sampler }),
            free: Mutex::new((0..cache.slots).rev().collect()),
            ended: Arc::new(Mutex::new(vec![])),
        })
    }

    /// The model back, its caches dropped (e.g. a device trainer taking its weights back
    /// after a rollout phase: `Engine::stop` returns the decoder).
    pub fn into_model(self) -> CudaModel<A> {
        self.model
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
            .ok_or_else(|| EngineError::CacheFull("every device cache slot is in use".into()))?;
        Ok(Arc::new(SlotLease {
            slot,
            ended: self.ended.clone(),
        }))
    }

    /// Replay decode steps as CUDA graphs (the default) or run every step directly.
    pub fn use_graphs(&self, on: bool) -> Result<(), EngineError> {
        self.dev.lock().map_err(poisoned)?.state.use_graphs(on);
        Ok(())
    }

    /// Decode-step graphs captured and kept.
    pub fn decode_graphs(&self) -> Result<usize, EngineError> {
        Ok(self.dev.lock().map_err(poisoned)?.state.decode_graphs())
    }

    /// The device the decoder runs on (its op and allocation counters).
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// `(free, total)` blocks of the paged KV pool, after the blocks of ended sequences went back.
    pub fn kv_blocks(&self) -> Result<(usize, usize), EngineError> {
        let mut dev = self.dev.lock().map_err(poisoned)?;
        self.reclaim(&mut dev.state)?;
        Ok(dev.state.kv_blocks())
    }

    /// The cache slot each input is fed into: leased on a sequence's first step, moved to a
    /// fresh copy when another clone (a snapshot) still holds it.
    fn slots(
        &self,
        st: &mut CudaState<A>,
        batch: &mut [StepInput<'_, CudaSeqState>],
    ) -> Result<Vec<usize>, EngineError> {
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
                st.copy_slot(&self.gpu, slot, fresh.slot).map_err(device)?;
                slot = fresh.slot;
                s.state.lease = Some(fresh);
            }
            slots.push(slot);
        }
        Ok(slots)
    }
}

/// A device error as the engine's: a full KV pool is [`EngineError::CacheFull`] (the engine
/// preempts), anything else a model failure.
fn device(e: crate::tensor::device::DeviceError) -> EngineError {
    match e {
        crate::tensor::device::DeviceError::CacheFull(m) => EngineError::CacheFull(m),
        e => EngineError::Model(e.to_string()),
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

    /// The forward leaves the logits on the device; the next tokens are sampled there
    /// ([`DeviceSampler`]) and a logits row is copied to the host only when it is wanted
    /// ([`Want::Logits`], [`SampleSpec::logits`](super::backend::SampleSpec::logits)) or the host must draw the token. The routing
    /// record comes back in one copy per step.
    fn step(
        &self,
        batch: &mut [StepInput<'_, CudaSeqState>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        let mut dev = self.dev.lock().map_err(poisoned)?;
        let OnDevice { state: st, sampler } = &mut *dev;
        self.reclaim(st)?;
        let slots = self.slots(st, batch)?;
        let seqs: Vec<(usize, &[u32])> = slots
            .iter()
            .zip(batch.iter())
            .map(|(&slot, s)| (slot, s.tokens))
            .collect();
        st.routing = routing.then(Vec::new);
        let forwarded = self.model.forward_last_on_device(&self.gpu, st, &seqs);
        let rec = st.routing.take();
        let rows = forwarded.map_err(device)?;
        let (v, k) = (
            self.model.cfg.vocab_size,
            self.model.cfg.num_experts_per_tok,
        );
        if rows != batch.len() {
            return Err(EngineError::Model(format!(
                "{rows} logits rows for {} sequences",
                batch.len()
            )));
        }
        let kernel_rows: Vec<Option<SampleRow>> = batch
            .iter()
            .map(|s| match &s.want {
                Want::Sample(spec) => kernel_row(spec, v),
                _ => None,
            })
            .collect();
        let sampled = sampler
            .sample(&self.gpu, st.logits(), v, &kernel_rows)
            .map_err(device)?;
        let wants_row = |b: usize| match &batch[b].want {
            Want::Logits => true,
            Want::Nothing => false,
            Want::Sample(spec) => spec.logits || sampled[b].is_none(),
        };
        let host = host_rows(&self.gpu, st.logits(), v, batch.len(), wants_row).map_err(device)?;
        // The states have consumed their tokens now.
        for s in batch.iter_mut() {
            s.state.len += s.tokens.len();
        }
        let mut out = Vec::with_capacity(batch.len());
        let mut tok0 = 0;
        for ((s, logits), sampled) in batch.iter().zip(host).zip(sampled) {
            let n = s.tokens.len();
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
                logits,
                experts,
                sampled,
            });
        }
        Ok(out)
    }
}

/// The logits rows `b < rows` for which `wanted(b)`, copied to the host (one copy when every
/// row is wanted); the others empty.
fn host_rows(
    gpu: &Gpu,
    logits: &DeviceBuffer<f32>,
    v: usize,
    rows: usize,
    wanted: impl Fn(usize) -> bool,
) -> crate::tensor::device::Result<Vec<Vec<f32>>> {
    if rows > 1 && (0..rows).all(&wanted) {
        let all = gpu.download_prefix(logits, rows * v)?;
        return Ok(all.chunks(v).map(<[f32]>::to_vec).collect());
    }
    (0..rows)
        .map(|b| {
            if wanted(b) {
                gpu.download_range(logits, b * v..(b + 1) * v)
            } else {
                Ok(Vec::new())
            }
        })
        .collect()
}
