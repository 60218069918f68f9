//! Per-sequence device caches and the step scratch of the CUDA model ([`CudaState`]): a KV pool
//! per attention layer and a conv/recurrent pool per GDN layer, each holding `slots` sequences of
//! up to `max_len` tokens, allocated up front; scratch for up to `max_tokens` tokens per call.

use crate::model::config::{LayerType, ModelConfig};
use crate::tensor::cuda::gpu::{Act, DeviceBuffer, Gpu};
use crate::tensor::cuda::ops::{DecodeScratch, GdnPool, KvPool, MoeGroups};
use crate::tensor::device::{DeviceError as CudaError, Result};

type F32 = DeviceBuffer<f32>;
type I32 = DeviceBuffer<i32>;

/// Per-sequence caches for `slots` sequences (all allocated up front) and the step scratch for
/// up to `max_tokens` tokens per forward call.
pub struct CudaState<A: Act = u16> {
    pub(super) kv: Vec<Option<KvPool<A>>>,
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
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        slots: usize,
        max_len: usize,
        max_tokens: usize,
    ) -> Result<CudaState<A>> {
        let c = cfg;
        let t = max_tokens;
        let (h, hq, hkv, hd) = (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        );
        let (hk, hv, dk, dv, cd, vd) = (
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.gdn_conv_dim(),
            c.gdn_value_dim(),
        );
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
                    kv.push(Some(KvPool::new(gpu, slots, hkv, max_len, hd)?));
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
            delta_scratch: f(slots.min(t) * hv * 64 * (dk + dv))?,
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
            gdn,
            lens: vec![0; slots],
            max_len,
            max_tokens,
            routing: None,
            route: gpu.zeros::<i32>(c.num_hidden_layers * t * k)?,
            forced: None,
            s,
        })
    }

    /// The logits rows of the last step (`[rows, vocab]`, f32), left on the device by
    /// [`super::CudaModel::forward_last_on_device`].
    pub fn logits(&self) -> &F32 {
        &self.s.logits
    }

    /// Forget a slot's tokens (its pools are overwritten from position 0 on reuse; the GDN
    /// states are zeroed here).
    pub fn reset_slot(&mut self, gpu: &Gpu, slot: usize) -> Result<()> {
        if slot >= self.lens.len() {
            return Err(CudaError::Shape {
                op: "reset_slot",
                msg: format!("slot {slot} of {}", self.lens.len()),
            });
        }
        self.lens[slot] = 0;
        // zero the slot's regions of every GDN pool on the device
        for p in self.gdn.iter_mut().flatten() {
            let conv_per = p.conv.len() / p.slots;
            let rec_per = p.rec.len() / p.slots;
            gpu.zero_range(&mut p.conv, slot * conv_per..(slot + 1) * conv_per)?;
            gpu.zero_range(&mut p.rec, slot * rec_per..(slot + 1) * rec_per)?;
        }
        Ok(())
    }

    /// Make slot `to` a copy of slot `from` (turn-boundary snapshots and resume): the KV rows of
    /// its consumed tokens and its GDN conv/recurrent states, as device-to-device copies.
    pub fn copy_slot(&mut self, gpu: &Gpu, from: usize, to: usize) -> Result<()> {
        let slots = self.lens.len();
        if from >= slots || to >= slots || from == to {
            return Err(CudaError::Shape {
                op: "copy_slot",
                msg: format!("slot {from} to slot {to} of {slots}"),
            });
        }
        let len = self.lens[from];
        for p in self.kv.iter_mut().flatten() {
            let row = p.max_len * p.hd;
            for h in 0..p.hkv {
                let (s, d) = ((from * p.hkv + h) * row, (to * p.hkv + h) * row);
                gpu.copy_within(&mut p.k, s, d, len * p.hd)?;
                gpu.copy_within(&mut p.v, s, d, len * p.hd)?;
            }
        }
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
