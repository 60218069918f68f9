//! The model's weights on one GPU ([`CudaModel`]): uploaded from a checkpoint (fused or
//! per-expert MoE layouts, converted to the storage type `A`) or generated on the device with a
//! config's exact shapes ([`CudaModel::random`], for benchmarks), through the one loading
//! skeleton [`Stack::load`]; and the shape limits of the kernels ([`check_supported`]).

use crate::model::backend::schema::{AttentionParams, GdnParams, MoeParams, Param};
use crate::model::backend::{Stack, StackLoader, WeightTypes};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
use crate::model::source::WeightSource;
use crate::model::ModelError;
use crate::tensor::cuda::gpu::{Act, DeviceBuffer, Gpu};
use crate::tensor::cuda::ops;
use crate::tensor::device::{DeviceError as CudaError, Result};
use std::marker::PhantomData;
use std::path::Path;

type F32 = DeviceBuffer<f32>;

pub struct AttnW<A: Act> {
    pub q: DeviceBuffer<A>,
    pub k: DeviceBuffer<A>,
    pub v: DeviceBuffer<A>,
    pub o: DeviceBuffer<A>,
    pub q_norm: DeviceBuffer<A>,
    pub k_norm: DeviceBuffer<A>,
}

pub struct GdnW<A: Act> {
    pub qkv: DeviceBuffer<A>,
    pub z: DeviceBuffer<A>,
    pub b: DeviceBuffer<A>,
    pub a: DeviceBuffer<A>,
    pub conv: DeviceBuffer<A>,
    pub dt_bias: F32,
    pub a_log: F32,
    pub norm: DeviceBuffer<A>,
    pub out: DeviceBuffer<A>,
}

pub struct MoeW<A: Act> {
    pub router: DeviceBuffer<A>,
    /// `[E, 2I, H]`: rows 0..I gate, I..2I up (the fused checkpoint layout).
    pub gate_up: DeviceBuffer<A>,
    /// `[E, H, I]`
    pub down: DeviceBuffer<A>,
    pub s_gate: DeviceBuffer<A>,
    pub s_up: DeviceBuffer<A>,
    pub s_down: DeviceBuffer<A>,
    pub s_gate_w: DeviceBuffer<A>,
}

/// Device buffers in the storage type `A` (bf16 bits or f32).
pub struct CudaWeights<A: Act>(PhantomData<A>);

impl<A: Act> WeightTypes for CudaWeights<A> {
    type Embed = DeviceBuffer<A>;
    type Norm = DeviceBuffer<A>;
    type Attention = AttnW<A>;
    type Gdn = GdnW<A>;
    type Moe = MoeW<A>;
    type Head = DeviceBuffer<A>;
}

/// A checkpoint error as a load error of the device.
fn load_err(e: ModelError) -> CudaError {
    CudaError::Shape {
        op: "load",
        msg: e.to_string(),
    }
}

/// Where weights come from: a checkpoint (f32 on the host, converted to bf16), a seeded
/// device-side random fill, or zeros (gradient accumulators of the training backend).
enum Source<'a> {
    Ckpt(&'a mut dyn WeightSource),
    Random { seed: u64, next: u64 },
    Zeros,
    /// Zeros for the tensors the predicate keeps (name, shape), empty buffers for the others
    /// (the LoRA trainer's gradient accumulators: no dense gradient of a frozen weight).
    ZerosWhere(&'a dyn Fn(&str, &[usize]) -> bool),
}

impl Source<'_> {
    fn param<A: Act>(&mut self, gpu: &Gpu, n: &Param) -> Result<DeviceBuffer<A>> {
        self.act(gpu, &n.name, &n.shape)
    }
    fn act<A: Act>(&mut self, gpu: &Gpu, name: &str, shape: &[usize]) -> Result<DeviceBuffer<A>> {
        match self {
            Source::Ckpt(ck) => {
                let t = ck.get_weight(name, shape).map_err(load_err)?;
                gpu.upload(&A::from_weight(t.weight()))
            }
            Source::Random { seed, next } => {
                let n: usize = shape.iter().product();
                let mut x = gpu.zeros::<A>(n)?;
                // uniform(±1/sqrt(fan_in)) keeps activations O(1); norm weights small around 0
                let fan_in = *shape.last().unwrap_or(&1) as f32;
                let s = if shape.len() == 1 {
                    0.1
                } else {
                    1.0 / fan_in.sqrt()
                };
                *next += 1;
                ops::fill_uniform(gpu, &mut x, *seed ^ next.wrapping_mul(0x9e37_79b9), -s, s)?;
                Ok(x)
            }
            Source::Zeros => gpu.zeros(shape.iter().product()),
            Source::ZerosWhere(keep) => gpu.zeros(if keep(name, shape) { shape.iter().product() } else { 0 }),
        }
    }
    fn f32s(&mut self, gpu: &Gpu, name: &str, n: usize, random_value: f32) -> Result<F32> {
        match self {
            Source::Ckpt(ck) => {
                let t = ck.get(name, &[n]).map_err(load_err)?;
                gpu.upload(t.data())
            }
            Source::Random { .. } => {
                let mut x = gpu.zeros::<f32>(n)?;
                ops::fill_f32(gpu, &mut x, random_value)?;
                Ok(x)
            }
            Source::Zeros => gpu.zeros(n),
            Source::ZerosWhere(keep) => gpu.zeros(if keep(name, &[n]) { n } else { 0 }),
        }
    }
}

/// Builds [`CudaWeights`] on `gpu` from a [`Source`].
struct DeviceLoader<'g, 'a> {
    gpu: &'g Gpu,
    src: Source<'a>,
}

impl<A: Act> StackLoader<CudaWeights<A>> for DeviceLoader<'_, '_> {
    type Error = CudaError;
    fn embed(&mut self, name: &str, shape: [usize; 2]) -> Result<DeviceBuffer<A>> {
        self.src.act(self.gpu, name, &shape)
    }
    fn norm(&mut self, name: &str, len: usize) -> Result<DeviceBuffer<A>> {
        self.src.act(self.gpu, name, &[len])
    }
    fn attention(&mut self, p: &str, c: &ModelConfig) -> Result<AttnW<A>> {
        let (gpu, src, n) = (self.gpu, &mut self.src, AttentionParams::new(p, c));
        Ok(AttnW {
            q: src.param(gpu, &n.q_proj)?,
            k: src.param(gpu, &n.k_proj)?,
            v: src.param(gpu, &n.v_proj)?,
            o: src.param(gpu, &n.o_proj)?,
            q_norm: src.param(gpu, &n.q_norm)?,
            k_norm: src.param(gpu, &n.k_norm)?,
        })
    }
    fn gdn(&mut self, p: &str, c: &ModelConfig) -> Result<GdnW<A>> {
        let (gpu, src, n) = (self.gpu, &mut self.src, GdnParams::new(p, c));
        Ok(GdnW {
            qkv: src.param(gpu, &n.in_proj_qkv)?,
            z: src.param(gpu, &n.in_proj_z)?,
            b: src.param(gpu, &n.in_proj_b)?,
            a: src.param(gpu, &n.in_proj_a)?,
            conv: src.param(gpu, &n.conv1d)?,
            dt_bias: src.f32s(gpu, &n.dt_bias.name, n.dt_bias.shape[0], 1.0)?,
            a_log: src.f32s(gpu, &n.a_log.name, n.a_log.shape[0], 0.0)?,
            norm: src.param(gpu, &n.norm)?,
            out: src.param(gpu, &n.out_proj)?,
        })
    }
    fn moe(&mut self, p: &str, c: &ModelConfig) -> Result<MoeW<A>> {
        load_moe(self.gpu, c, &mut self.src, p)
    }
    fn head(&mut self, name: &str, shape: [usize; 2]) -> Result<DeviceBuffer<A>> {
        match &mut self.src {
            Source::Ckpt(ck) => {
                let t = ck.get_weight_exact(name, &shape).map_err(load_err)?;
                self.gpu.upload(&A::from_weight(t.weight()))
            }
            s => s.act(self.gpu, name, &shape),
        }
    }
    fn tied_head(&mut self, embed: &DeviceBuffer<A>) -> Result<DeviceBuffer<A>> {
        self.gpu.duplicate(embed)
    }
}

/// The shapes the kernels support (docs/cuda.md, "Supported shapes"); anything else is refused
/// at load with the limit it breaks, never run to a wrong result.
pub fn check_supported(c: &ModelConfig) -> Result<()> {
    let mut bad = vec![];
    let mut need = |ok: bool, what: String| {
        if !ok {
            bad.push(what)
        }
    };
    let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    need(
        hd <= 256,
        format!("head_dim {hd} > 256 (attention kernels)"),
    );
    need(
        hkv > 0 && hq % hkv == 0 && hq / hkv <= 16,
        format!("{hq} query heads over {hkv} KV heads (a multiple, at most 16 per KV head)"),
    );
    need(
        c.rotary_dim % 2 == 0 && c.rotary_dim <= hd && c.rotary_dim <= 2048,
        format!("rotary dim {} (even, <= head_dim)", c.rotary_dim),
    );
    let (hk, hv, dk, dv) = (
        c.linear_num_key_heads,
        c.linear_num_value_heads,
        c.linear_key_head_dim,
        c.linear_value_head_dim,
    );
    need(
        hk > 0 && hv % hk == 0,
        format!("{hv} GDN value heads over {hk} key heads (a multiple)"),
    );
    need(
        dv >= 1 && dk >= 1 && dk <= 4096,
        format!("GDN key head dim {dk} (1..=4096: gdn_recurrent shared memory), value head dim {dv} (at least 1)"),
    );
    need(
        (2..=8).contains(&c.linear_conv_kernel_dim),
        format!("conv kernel {} (2..=8)", c.linear_conv_kernel_dim),
    );
    let (e, k) = (c.num_experts, c.num_experts_per_tok);
    need(
        e <= 1024 && k <= 32 && k >= 1 && k <= e,
        format!("{e} experts, top-{k} (at most 1024 experts, top-k 1..=32)"),
    );
    if bad.is_empty() {
        Ok(())
    } else {
        Err(CudaError::Unsupported(format!(
            "model shape not supported by the CUDA kernels: {}",
            bad.join("; ")
        )))
    }
}

/// Model weights on one GPU.
pub struct CudaModel<A: Act = u16> {
    pub cfg: ModelConfig,
    pub(super) stack: Stack<CudaWeights<A>>,
}

impl<A: Act> CudaModel<A> {
    /// Upload a Hugging Face folder's weights (fused or per-expert MoE layouts).
    pub fn load(gpu: &Gpu, dir: &Path) -> Result<CudaModel<A>> {
        let cfg = ModelConfig::from_dir(dir).map_err(load_err)?;
        let mut ck = Checkpoint::open(dir).map_err(load_err)?;
        Self::build(gpu, cfg, Source::Ckpt(&mut ck))
    }

    /// Upload weights from any source (e.g. the trainer's parameters, lent for the upload).
    pub fn from_source(
        gpu: &Gpu,
        cfg: ModelConfig,
        src: &mut dyn WeightSource,
    ) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::Ckpt(src))
    }

    /// Random bf16 weights of `cfg`'s exact shapes, generated on the GPU.
    pub fn random(gpu: &Gpu, cfg: ModelConfig, seed: u64) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::Random { seed, next: 0 })
    }

    /// Zero buffers of `cfg`'s exact weight shapes (fused experts `[E, 2I, H]` / `[E, H, I]`):
    /// the gradient accumulators of the training backend (`train::device`), with `A = f32`.
    pub fn zeros(gpu: &Gpu, cfg: ModelConfig) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::Zeros)
    }

    /// [`Self::zeros`] for the tensors `keep` (name without prefix, shape) selects; every other
    /// buffer is empty (no memory).
    pub fn zeros_where(gpu: &Gpu, cfg: ModelConfig, keep: &dyn Fn(&str, &[usize]) -> bool) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::ZerosWhere(keep))
    }

    /// The weights in the one layer-structure shape (read by the training backend).
    pub fn stack(&self) -> &Stack<CudaWeights<A>> {
        &self.stack
    }

    /// The weights, writable in place (the device optimizer's update of the serving copy).
    pub fn stack_mut(&mut self) -> &mut Stack<CudaWeights<A>> {
        &mut self.stack
    }

    fn build(gpu: &Gpu, cfg: ModelConfig, src: Source<'_>) -> Result<CudaModel<A>> {
        check_supported(&cfg)?;
        let stack = Stack::load(&cfg, &mut DeviceLoader { gpu, src })?;
        Ok(CudaModel { cfg, stack })
    }
}

fn load_moe<A: Act>(gpu: &Gpu, c: &ModelConfig, src: &mut Source<'_>, p: &str) -> Result<MoeW<A>> {
    let n = MoeParams::new(p, c);
    let (gate_up, down) = match &mut *src {
        Source::Ckpt(ck) if !ck.contains(&n.fused_gate_up.name) => {
            // per-expert tensors: concatenate [gate; up] per expert on the host
            let (mut gu, mut dn) = (vec![], vec![]);
            for x in 0..c.num_experts {
                let ex = n.expert(x);
                for (part, into_gate_up) in [(&ex.gate, true), (&ex.up, true), (&ex.down, false)] {
                    let t = ck.get_param_weight(part).map_err(load_err)?;
                    let out = if into_gate_up { &mut gu } else { &mut dn };
                    out.extend(A::from_weight(t.weight()));
                }
            }
            (gpu.upload(&gu)?, gpu.upload(&dn)?)
        }
        s => (
            s.param(gpu, &n.fused_gate_up)?,
            s.param(gpu, &n.fused_down)?,
        ),
    };
    Ok(MoeW {
        router: src.param(gpu, &n.router)?,
        gate_up,
        down,
        s_gate: src.param(gpu, &n.shared.gate)?,
        s_up: src.param(gpu, &n.shared.up)?,
        s_down: src.param(gpu, &n.shared.down)?,
        s_gate_w: src.param(gpu, &n.shared_gate)?,
    })
}
