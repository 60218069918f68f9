//! Per-sequence device caches and the step scratch of the CUDA model ([`CudaState`]): a paged KV
//! pool per attention layer (fixed-size blocks; which blocks a sequence slot holds is kept by the
//! host's [`BlockTables`], sized by a token budget, [`CacheConfig`]) and a conv/recurrent pool per
//! GDN layer with one fixed-size state per slot; scratch for up to `max_tokens` tokens per call.

use super::paged::{BlockTables, PagedError};
use super::decode_graphs::DecodeGraphs;
use super::step_index::StepIndex;
use crate::model::config::{GdnDims, LayerType, ModelConfig};
use crate::tensor::cuda::gpu::{Act, DeviceBuffer, Gpu};
use crate::tensor::cuda::ops::{self, DecodeScratch, GdnPool, KvPool, MoeGroups};
use crate::tensor::device::{DeviceError as CudaError, Result};

type F32 = DeviceBuffer<f32>;
type I32 = DeviceBuffer<i32>;

/// The shape of a [`CudaState`]'s caches: `slots` sequence slots (a GDN state and a block table
/// each), sequences of at most `max_len` tokens, and a paged KV pool of `kv_tokens` tokens (all
/// sequences together) in blocks of `block_size` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    pub slots: usize,
    pub max_len: usize,
    pub kv_tokens: usize,
    pub block_size: usize,
}

impl CacheConfig {
    /// Tokens per KV block unless chosen otherwise.
    pub const BLOCK_SIZE: usize = 16;

    /// A pool where every slot may hold `max_len` tokens at once (the most a slot can use).
    pub fn dense(slots: usize, max_len: usize) -> Self {
        CacheConfig {
            slots,
            max_len,
            kv_tokens: slots * max_len.next_multiple_of(Self::BLOCK_SIZE),
            block_size: Self::BLOCK_SIZE,
        }
    }

    /// Blocks in the pool (at least one).
    pub fn blocks(&self) -> usize {
        self.kv_tokens.div_ceil(self.block_size.max(1)).max(1)
    }
}

impl From<PagedError> for CudaError {
    fn from(e: PagedError) -> Self {
        CudaError::CacheFull(e.to_string())
    }
}

/// Per-sequence caches for `slots` sequences (GDN states allocated up front, KV in a paged pool
/// of blocks handed out as tokens arrive) and the step scratch for up to `max_tokens` tokens per
/// forward call.
pub struct CudaState<A: Act = u16> {
    pub(super) kv: Vec<Option<KvPool<A>>>,
    /// The paged KV pool's block tables (one per slot) and free blocks, for every layer's pool.
    pub(super) blocks: BlockTables,
    pub(super) gdn: Vec<Option<GdnPool>>,
    /// Tokens already consumed per slot (host copy; the kernels get positions per call).
    pub lens: Vec<usize>,
    pub max_len: usize,
    pub(super) max_tokens: usize,
    /// Set to `Some(vec![])` to record the routing of the next steps: per layer, the `[T · k]`
    /// chosen experts of that step's packed tokens. The layers write them into a device buffer
    /// (`route`), copied to the host once per step.
    pub routing: Option<Vec<Vec<i32>>>,
    /// The routing record of the current step on the device: `[layers, T · k]`, packed.
    pub(super) route: I32,
    /// Routing replay for the next step: per layer `[T · k]` expert indices used instead of the
    /// router's top-k (weights are still the router's renormalised probabilities). Consumed.
    pub forced: Option<Vec<Vec<i32>>>,
    /// The step's index arrays in persistent device buffers (written, never allocated, per step).
    pub(super) idx: StepIndex,
    /// Captured decode steps, replayed when enabled ([`CudaState::use_graphs`]).
    pub(super) graphs: DecodeGraphs,
    pub(super) s: Scratch<A>,
}

pub(super) struct Scratch<A: Act> {
    pub(super) resid: DeviceBuffer<A>,
    pub(super) xn: DeviceBuffer<A>,
    pub(super) delta: DeviceBuffer<A>,
    pub(super) big: DeviceBuffer<A>,
    pub(super) z: DeviceBuffer<A>,
    pub(super) conv_y: DeviceBuffer<A>,
    pub(super) bb: DeviceBuffer<A>,
    pub(super) aa: DeviceBuffer<A>,
    pub(super) beta: F32,
    pub(super) g: F32,
    pub(super) qn: F32,
    pub(super) kn: F32,
    pub(super) vv: F32,
    pub(super) o: DeviceBuffer<A>,
    pub(super) on: DeviceBuffer<A>,
    pub(super) q: DeviceBuffer<A>,
    pub(super) gate: DeviceBuffer<A>,
    pub(super) k: DeviceBuffer<A>,
    pub(super) v: DeviceBuffer<A>,
    pub(super) att: DeviceBuffer<A>,
    pub(super) dec: DecodeScratch,
    pub(super) delta_scratch: F32,
    pub(super) router: F32,
    pub(super) idx: I32,
    pub(super) wts: F32,
    pub(super) groups: MoeGroups,
    pub(super) gu: DeviceBuffer<A>,
    pub(super) act: DeviceBuffer<A>,
    pub(super) y: DeviceBuffer<A>,
    pub(super) sg_a: DeviceBuffer<A>,
    pub(super) sg_b: DeviceBuffer<A>,
    pub(super) shared: DeviceBuffer<A>,
    pub(super) sgate: DeviceBuffer<A>,
    pub(super) logits: F32,
}

impl<A: Act> CudaState<A> {
    /// Caches for `slots` sequences that may all hold `max_len` tokens at once
    /// ([`CacheConfig::dense`]).
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        slots: usize,
        max_len: usize,
        max_tokens: usize,
    ) -> Result<CudaState<A>> {
        Self::with_cache(gpu, cfg, CacheConfig::dense(slots, max_len), max_tokens)
    }

    /// Caches shaped by `cache` (the paged KV pool sized by its token budget).
    pub fn with_cache(
        gpu: &Gpu,
        cfg: &ModelConfig,
        cache: CacheConfig,
        max_tokens: usize,
    ) -> Result<CudaState<A>> {
        let CacheConfig {
            slots,
            max_len,
            block_size,
            ..
        } = cache;
        let blocks = cache.blocks();
        if slots == 0 || block_size == 0 {
            return Err(CudaError::Shape {
                op: "CudaState",
                msg: format!("{slots} slots, blocks of {block_size} tokens"),
            });
        }
        let c = cfg;
        let t = max_tokens;
        let (h, hq, hkv, hd) = (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        );
        let GdnDims { hk, hv, dk, dv, conv: cd, value: vd, .. } = c.gdn_dims();
        let (e, k, i, is) = (
            c.num_experts,
            c.num_experts_per_tok,
            c.moe_intermediate_size,
            c.shared_expert_intermediate_size,
        );
        let mut kv = vec![];
        let mut gdn = vec![];
        for lt in &c.layer_types {
            match lt {
                LayerType::Full => {
                    kv.push(Some(KvPool::new(gpu, blocks, block_size, hkv, hd)?));
                    gdn.push(None);
                }
                LayerType::Linear => {
                    kv.push(None);
                    gdn.push(Some(GdnPool::new(
                        gpu,
                        slots,
                        cd,
                        c.linear_conv_kernel_dim,
                        hv,
                        dk,
                        dv,
                    )?));
                }
            }
        }
        let z = |n: usize| gpu.zeros::<A>(n);
        let f = |n: usize| gpu.zeros::<f32>(n);
        let s = Scratch {
            resid: z(t * h)?,
            xn: z(t * h)?,
            delta: z(t * h)?,
            big: z(t * (2 * hq * hd).max(cd))?,
            z: z(t * vd)?,
            conv_y: z(t * cd)?,
            bb: z(t * hv)?,
            aa: z(t * hv)?,
            beta: f(t * hv)?,
            g: f(t * hv)?,
            qn: f(t * hk * dk)?,
            kn: f(t * hk * dk)?,
            vv: f(t * hv * dv)?,
            o: z(t * vd.max(hq * hd))?,
            on: z(t * vd)?,
            q: z(t * hq * hd)?,
            gate: z(t * hq * hd)?,
            k: z(t * hkv * hd)?,
            v: z(t * hkv * hd)?,
            att: z(t * hq * hd)?,
            dec: DecodeScratch::new(gpu, t, hq, hd, 8)?,
            delta_scratch: f(ops::gdn_chunked_scratch_parallel(
                slots.min(t),
                t,
                hv,
                dk,
                dv,
            ))?,
            router: f(t * e)?,
            idx: gpu.zeros::<i32>(t * k)?,
            wts: f(t * k)?,
            groups: MoeGroups::new(gpu, t * k, e)?,
            gu: z(t * k * 2 * i)?,
            act: z(t * k * i)?,
            y: z(t * k * h)?,
            sg_a: z(t * is)?,
            sg_b: z(t * is)?,
            shared: z(t * h)?,
            sgate: z(t)?,
            logits: f(t * c.vocab_size)?,
        };
        Ok(CudaState {
            kv,
            blocks: BlockTables::new(blocks, block_size, slots),
            gdn,
            lens: vec![0; slots],
            max_len,
            max_tokens,
            routing: None,
            route: gpu.zeros::<i32>(c.num_hidden_layers * t * k)?,
            forced: None,
            // a step holds at most one row per slot, and a row at most max_len tokens' blocks
            idx: StepIndex::new(
                gpu,
                t,
                slots.min(t),
                max_len.div_ceil(block_size).min(blocks),
            )?,
            graphs: DecodeGraphs::new(gpu),
            s,
        })
    }

    /// The logits rows of the last step (`[rows, vocab]`, f32), left on the device by
    /// [`super::CudaModel::forward_last_on_device`].
    pub fn logits(&self) -> &F32 {
        &self.s.logits
    }

    /// Forget a slot's tokens: its KV blocks go back to the pool (shared ones stay with their
    /// other holders) and its GDN states are zeroed.
    pub fn reset_slot(&mut self, gpu: &Gpu, slot: usize) -> Result<()> {
        if slot >= self.lens.len() {
            return Err(CudaError::Shape {
                op: "reset_slot",
                msg: format!("slot {slot} of {}", self.lens.len()),
            });
        }
        self.lens[slot] = 0;
        self.blocks.release(slot)?;
        // zero the slot's regions of every GDN pool on the device
        for p in self.gdn.iter_mut().flatten() {
            let conv_per = p.conv.len() / p.slots;
            let rec_per = p.rec.len() / p.slots;
            gpu.zero_range(&mut p.conv, slot * conv_per..(slot + 1) * conv_per)?;
            gpu.zero_range(&mut p.rec, slot * rec_per..(slot + 1) * rec_per)?;
        }
        Ok(())
    }

    /// Make slot `to` a copy of slot `from` (turn-boundary snapshots and resume): `to` shares the
    /// KV blocks of `from`'s tokens by reference (a shared partial last block is copied when one
    /// of them appends to it) and gets device-to-device copies of its GDN conv/recurrent states.
    pub fn copy_slot(&mut self, gpu: &Gpu, from: usize, to: usize) -> Result<()> {
        let slots = self.lens.len();
        if from >= slots || to >= slots || from == to {
            return Err(CudaError::Shape {
                op: "copy_slot",
                msg: format!("slot {from} to slot {to} of {slots}"),
            });
        }
        let len = self.lens[from];
        self.blocks.share(from, to, len)?;
        for p in self.gdn.iter_mut().flatten() {
            let conv_per = p.conv.len() / p.slots;
            let rec_per = p.rec.len() / p.slots;
            gpu.copy_within(&mut p.conv, from * conv_per, to * conv_per, conv_per)?;
            gpu.copy_within(&mut p.rec, from * rec_per, to * rec_per, rec_per)?;
        }
        self.lens[to] = len;
        Ok(())
    }
}

impl<A: Act> CudaState<A> {
    /// Let `slots[i]` (holding `lens[slots[i]]` tokens) take `news[i]` more tokens: reserve their
    /// KV blocks and make the copies of shared partial blocks they write into. A full pool is a
    /// [`CudaError::CacheFull`]; slots already served keep what they reserved.
    pub(super) fn reserve_kv(&mut self, gpu: &Gpu, slots: &[usize], news: &[usize]) -> Result<()> {
        for (&slot, &n) in slots.iter().zip(news) {
            let len = self.lens[slot];
            if let Some(c) = self.blocks.reserve(slot, len, len + n)? {
                for p in self.kv.iter_mut().flatten() {
                    p.copy_block(gpu, c.from, c.to)?;
                }
            }
        }
        Ok(())
    }

    /// Capture decode steps as CUDA graphs and replay them (`on`), or run every step directly
    /// (the captured graphs are freed). A device without graphs runs directly either way.
    pub fn use_graphs(&mut self, on: bool) {
        self.graphs.enabled = on;
        if !on {
            self.graphs.clear();
        }
    }

    /// Decode-step graphs captured and kept.
    pub fn decode_graphs(&self) -> usize {
        self.graphs.len()
    }

    /// The kept graph of a decode step of `b` sequences, for a benchmark to replay alone: the
    /// step's device time without its host work. A replay re-runs the latest step from the
    /// index buffers as they are, so the slots' caches are not to be used afterwards.
    pub fn decode_graph(&self, b: usize) -> Option<crate::tensor::device::GraphId> {
        self.graphs.latest(b)
    }

    /// `(free, total)` blocks of the paged KV pool.
    pub fn kv_blocks(&self) -> (usize, usize) {
        (self.blocks.free(), self.blocks.total())
    }

    /// Tokens per KV block.
    pub fn kv_block_size(&self) -> usize {
        self.blocks.block_size()
    }

    /// The KV blocks `slot` holds, in token order (for tests and accounting).
    pub fn kv_table(&self, slot: usize) -> &[usize] {
        self.blocks.table(slot)
    }
}
