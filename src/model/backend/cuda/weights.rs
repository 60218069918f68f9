//! The model's weights on one GPU ([`CudaModel`]): uploaded from a checkpoint (fused or
//! per-expert MoE layouts, converted to the storage type `A`) or generated on the device with a
//! config's exact shapes ([`CudaModel::random`], for benchmarks), through the one loading
//! skeleton [`Stack::load`]; and the shape limits of the kernels ([`check_supported`]).

use crate::model::backend::{Stack, StackLoader, WeightTypes};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
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

/// Where weights come from: a checkpoint (f32 on the host, converted to bf16) or a seeded
/// device-side random fill.
enum Source<'a> {
    Ckpt(&'a mut Checkpoint),
    Random { seed: u64, next: u64 },
}

impl Source<'_> {
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
    fn attention(&mut self, a: &str, c: &ModelConfig) -> Result<AttnW<A>> {
        let (gpu, src, h) = (self.gpu, &mut self.src, c.hidden_size);
        let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        Ok(AttnW {
            q: src.act(gpu, &format!("{a}q_proj.weight"), &[2 * hq * hd, h])?,
            k: src.act(gpu, &format!("{a}k_proj.weight"), &[hkv * hd, h])?,
            v: src.act(gpu, &format!("{a}v_proj.weight"), &[hkv * hd, h])?,
            o: src.act(gpu, &format!("{a}o_proj.weight"), &[h, hq * hd])?,
            q_norm: src.act(gpu, &format!("{a}q_norm.weight"), &[hd])?,
            k_norm: src.act(gpu, &format!("{a}k_norm.weight"), &[hd])?,
        })
    }
    fn gdn(&mut self, g: &str, c: &ModelConfig) -> Result<GdnW<A>> {
        let (gpu, src, h) = (self.gpu, &mut self.src, c.hidden_size);
        let (cd, vd, hv, k) = (
            c.gdn_conv_dim(),
            c.gdn_value_dim(),
            c.linear_num_value_heads,
            c.linear_conv_kernel_dim,
        );
        Ok(GdnW {
            qkv: src.act(gpu, &format!("{g}in_proj_qkv.weight"), &[cd, h])?,
            z: src.act(gpu, &format!("{g}in_proj_z.weight"), &[vd, h])?,
            b: src.act(gpu, &format!("{g}in_proj_b.weight"), &[hv, h])?,
            a: src.act(gpu, &format!("{g}in_proj_a.weight"), &[hv, h])?,
            conv: src.act(gpu, &format!("{g}conv1d.weight"), &[cd, 1, k])?,
            dt_bias: src.f32s(gpu, &format!("{g}dt_bias"), hv, 1.0)?,
            a_log: src.f32s(gpu, &format!("{g}A_log"), hv, 0.0)?,
            norm: src.act(gpu, &format!("{g}norm.weight"), &[c.linear_value_head_dim])?,
            out: src.act(gpu, &format!("{g}out_proj.weight"), &[h, vd])?,
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
        dv <= 1024,
        format!("GDN value head dim {dv} > 1024 (gdn_recurrent block)"),
    );
    need(
        dk <= 4096,
        format!("GDN key head dim {dk} > 4096 (gdn_recurrent shared memory)"),
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

    /// Random bf16 weights of `cfg`'s exact shapes, generated on the GPU.
    pub fn random(gpu: &Gpu, cfg: ModelConfig, seed: u64) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::Random { seed, next: 0 })
    }

    fn build(gpu: &Gpu, cfg: ModelConfig, src: Source<'_>) -> Result<CudaModel<A>> {
        check_supported(&cfg)?;
        let stack = Stack::load(&cfg, &mut DeviceLoader { gpu, src })?;
        Ok(CudaModel { cfg, stack })
    }
}

fn load_moe<A: Act>(gpu: &Gpu, c: &ModelConfig, src: &mut Source<'_>, p: &str) -> Result<MoeW<A>> {
    let (h, e, i, is) = (
        c.hidden_size,
        c.num_experts,
        c.moe_intermediate_size,
        c.shared_expert_intermediate_size,
    );
    let fused = format!("{p}experts.gate_up_proj");
    let (gate_up, down) = match &mut *src {
        Source::Ckpt(ck) if !ck.contains(&fused) => {
            // per-expert tensors: concatenate [gate; up] per expert on the host
            let (mut gu, mut dn) = (
                Vec::with_capacity(e * 2 * i * h),
                Vec::with_capacity(e * h * i),
            );
            for x in 0..e {
                for part in ["gate_proj", "up_proj"] {
                    let t = ck
                        .get_weight(&format!("{p}experts.{x}.{part}.weight"), &[i, h])
                        .map_err(load_err)?;
                    gu.extend(A::from_weight(t.weight()));
                }
                let t = ck
                    .get_weight(&format!("{p}experts.{x}.down_proj.weight"), &[h, i])
                    .map_err(load_err)?;
                dn.extend(A::from_weight(t.weight()));
            }
            (gpu.upload(&gu)?, gpu.upload(&dn)?)
        }
        s => (
            s.act(gpu, &fused, &[e, 2 * i, h])?,
            s.act(gpu, &format!("{p}experts.down_proj"), &[e, h, i])?,
        ),
    };
    Ok(MoeW {
        router: src.act(gpu, &format!("{p}gate.weight"), &[e, h])?,
        gate_up,
        down,
        s_gate: src.act(gpu, &format!("{p}shared_expert.gate_proj.weight"), &[is, h])?,
        s_up: src.act(gpu, &format!("{p}shared_expert.up_proj.weight"), &[is, h])?,
        s_down: src.act(gpu, &format!("{p}shared_expert.down_proj.weight"), &[h, is])?,
        s_gate_w: src.act(gpu, &format!("{p}shared_expert_gate.weight"), &[1, h])?,
    })
}
