//! LoRA in the device trainer — the device form of `train::lora` (same `LoraConfig`, same target
//! matching and seeded init through `lora::init_adapters`, so a device run and a CPU run start
//! identical): per adapted projection the adapters `A [r, in]`, `B [out, r]` (serving copies in
//! the storage type, fp32 masters and AdamW moments in a `DeviceAdamW` over the adapters only),
//! their fp32 gradients, and the frozen base `W₀` (storage type) — all on the device. The
//! backward routes every projection through [`linear_backward`]: the input gradient flows
//! through the merged served weight, an adapted projection adds its adapter gradients from `X`
//! and `dY` (`device_lora::accumulate_adapter_grads`), and no projection forms a dense weight
//! gradient. After each step the served weight of every target is rewritten in place as
//! `W₀ + s·B·A` (`device_lora::merge_adapter`), so the engine samples the updated policy with
//! no adapter path on the forward. Targets: attention, GDN, router, shared-expert and
//! routed-expert projections (per expert its gate, up or down block of the fused tensors, its
//! gradients from the rows routed to it: [`DeviceLora::routed_backward`]); the embedding and the
//! LM head are refused. The frozen bases of routed experts (most of a MoE model's weights) are
//! kept in host memory and written back before each merge, the others on the device.

use super::grads::{parts, NamedGrad};
use super::update::{serving, Served};
use crate::model::backend::cuda::CudaWeights;
use crate::model::backend::schema::Param;
use crate::model::backend::Stack;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward as bw;
use crate::tensor::cuda::ops::fill_f32;
use crate::tensor::cuda::gemm::View;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::DeviceError;
use crate::train::device_lora::{accumulate_adapter_grads, merge_adapter, AdapterBufs, AdapterShape};
use crate::train::device_optim::{DeviceAdamW, Serving};
use crate::train::error::{Result, TrainError};
use crate::train::lora::{init_adapters, LoraConfig};
use crate::train::optim::{AdamWConfig, Schedule, StepStats};
use std::collections::HashMap;

/// Where an adapted weight's frozen base `W₀` is kept: a device copy, or (routed experts, whose
/// bases would not fit beside the served weights on one GPU) a host copy uploaded into the
/// served weight before each merge.
enum Base<A: Act> {
    Device(DeviceBuffer<A>),
    Host(Vec<A>),
}

/// One adapted weight on the device: the `[out, in]` block at element `at` of a served weight.
struct Adapter<A: Act> {
    /// The served weight's name in the loading order (without prefix, as `grads::buffers`).
    name: String,
    /// Its index in the loading order.
    index: usize,
    /// First element of the adapted block (a routed expert's gate, up or down; 0 otherwise).
    at: usize,
    sh: AdapterShape,
    a: DeviceBuffer<A>,
    b: DeviceBuffer<A>,
    ga: DeviceBuffer<f32>,
    gb: DeviceBuffer<f32>,
    base: Base<A>,
}

impl<A: Act> Adapter<A> {
    /// Reset the adapted block of the served weight `w` to `W₀`.
    fn restore(&self, gpu: &Gpu, w: &mut DeviceBuffer<A>) -> Result<()> {
        match &self.base {
            Base::Device(b) => gpu.copy_into(b, 0, w, self.at, b.len())?,
            Base::Host(b) => gpu.write_at(w, self.at, b)?,
        }
        Ok(())
    }

    /// Add this call's adapter gradients over `m` rows (`x [m, in]`, `dy [m, out]`).
    fn accumulate(&mut self, gpu: &Gpu, x: View<'_, A>, dy: View<'_, A>, m: usize, scratch: &mut DeviceBuffer<A>) -> Result<()> {
        if scratch.len() < m * self.sh.rank {
            *scratch = gpu.zeros(m * self.sh.rank)?;
        }
        let bufs = AdapterBufs { a: &self.a, b: &self.b, ga: &mut self.ga, gb: &mut self.gb };
        accumulate_adapter_grads(gpu, self.sh, x, dy, m, bufs, scratch)
    }
}

/// One MoE layer's routed rows in the grouped order of its forward (experts ascending, each
/// expert's pairs ascending), for the routed experts' adapter gradients: per expert its first
/// grouped row and row count, the block's input rows gathered into that order `[pairs, h]`, and
/// the gradients of the fused gate|up rows `[pairs, 2I]` and of the expert outputs `[pairs, h]`
/// with the SwiGLU outputs `[pairs, I]` (the down projection's input).
pub(super) struct RoutedRows<'a, A: Act> {
    pub spans: &'a [(usize, usize)],
    pub x: &'a DeviceBuffer<A>,
    pub dgu: &'a DeviceBuffer<A>,
    pub act: &'a DeviceBuffer<A>,
    pub dye: &'a DeviceBuffer<A>,
    pub hidden: usize,
    pub inter: usize,
}

/// The adapters of a device LoRA run.
pub struct DeviceLora<A: Act> {
    pub cfg: LoraConfig,
    adapters: Vec<Adapter<A>>,
    /// `<full name>.lora_A` and `.lora_B` with their shapes, in the CPU `Lora::adapters` order.
    names: Vec<(String, Vec<usize>)>,
    /// `[m, r]` scratch of the adapter gradients (grown to the longest sequence).
    scratch: DeviceBuffer<A>,
    /// Per served weight name, its adapters (one per adapted block: a fused expert tensor has
    /// one per expert and projection) — the backward's lookups, not a scan of every adapter.
    by_name: HashMap<String, Vec<usize>>,
}

/// The gradient buffers a LoRA run keeps: the vector-sized parameters' (norms, gate vectors,
/// the conv), written by their backward kernels and never used; every matrix gets none.
pub(super) fn keeps_gradient(name: &str, shape: &[usize]) -> bool {
    shape.len() == 1 || name.ends_with("conv1d.weight")
}

impl<A: Act> DeviceLora<A> {
    /// The adapters of `cfg` over the weights `served` (loading order, `params` their names and
    /// shapes without prefix; `prefix` the checkpoint's decoder prefix the targets are matched
    /// against, as the CPU trainer's names).
    pub(super) fn new(
        gpu: &Gpu,
        cfg: LoraConfig,
        c: &ModelConfig,
        params: &[Param],
        served: &[Served<'_, A>],
        prefix: &str,
    ) -> Result<Self> {
        let cpu: Vec<(usize, Param, std::ops::Range<usize>)> = params
            .iter()
            .enumerate()
            .flat_map(|(i, p)| parts(c, p, prefix).into_iter().map(move |(q, r)| (i, q, r)))
            .collect();
        let (store, targets) = init_adapters(&cfg, cpu.iter().map(|(_, q, _)| (q.name.as_str(), q.shape.as_slice())))?;
        let scale = cfg.alpha / cfg.rank as f32;
        let mut adapters = Vec::with_capacity(targets.len());
        for (j, &t) in targets.iter().enumerate() {
            let (index, q, range) = &cpu[t];
            let name = &params[*index].name;
            let routed = name.contains("experts.") && !name.contains("shared_expert.");
            let base = match &served[*index] {
                Served::Act(w) if routed => Base::Host(gpu.download_range(*w, range.clone())?),
                Served::Act(w) if name != "embed_tokens.weight" && name != "lm_head.weight" => Base::Device(gpu.duplicate(*w)?),
                _ => {
                    return Err(TrainError::BadInput(format!(
                        "LoRA target {}: only projections get device adapters (not the embedding or the LM head)",
                        q.name
                    )))
                }
            };
            let (a, b) = (&store.params[2 * j], &store.params[2 * j + 1]);
            adapters.push(Adapter {
                name: name.clone(),
                index: *index,
                at: range.start,
                sh: AdapterShape { inp: q.shape[1], out: q.shape[0], rank: cfg.rank, scale },
                a: gpu.upload(&A::from_f32(&a.data))?,
                b: gpu.upload(&A::from_f32(&b.data))?,
                ga: gpu.zeros(a.data.len())?,
                gb: gpu.zeros(b.data.len())?,
                base,
            });
        }
        let names = store.params.into_iter().map(|p| (p.name, p.shape)).collect();
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (n, ad) in adapters.iter().enumerate() {
            by_name.entry(ad.name.clone()).or_default().push(n);
        }
        Ok(DeviceLora { cfg, adapters, names, scratch: gpu.zeros(0)?, by_name })
    }

    /// Number of adapted weights.
    pub fn len(&self) -> usize {
        self.adapters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }

    /// A device AdamW over the adapters (`A`, `B` of each target in turn), masters read from
    /// their serving copies.
    pub(super) fn optimizer(&self, gpu: &Gpu, cfg: AdamWConfig) -> Result<DeviceAdamW> {
        let masters = self.values(gpu)?;
        let refs: Vec<&[f32]> = masters.iter().map(|m| m.data.as_slice()).collect();
        DeviceAdamW::new(gpu, cfg, &refs)
    }

    /// Reset the adapter gradients to zero.
    pub(super) fn zero_grads(&mut self, gpu: &Gpu) -> Result<()> {
        for ad in &mut self.adapters {
            fill_f32(gpu, &mut ad.ga, 0.0)?;
            fill_f32(gpu, &mut ad.gb, 0.0)?;
        }
        Ok(())
    }

    /// One AdamW step of the adapters over their gradients, then every target's served weight
    /// in `stack` rewritten as `W₀ + s·B·A`.
    pub(super) fn step(
        &mut self,
        gpu: &Gpu,
        opt: &mut DeviceAdamW,
        schedule: &Schedule,
        stack: &mut Stack<CudaWeights<A>>,
        tied: bool,
    ) -> Result<StepStats> {
        let (mut grads, mut serve) = (vec![], vec![]);
        for Adapter { a, b, ga, gb, .. } in &mut self.adapters {
            grads.extend([&*ga, &*gb]);
            serve.extend([Some(Serving::Act(a)), Some(Serving::Act(b))]);
        }
        let stats = opt.step_serving(gpu, &grads, &mut serve, schedule)?;
        drop((grads, serve));
        let mut weights = serving(stack, tied);
        for ad in &self.adapters {
            match weights.get_mut(ad.index) {
                Some(Serving::Act(w)) => {
                    ad.restore(gpu, w)?;
                    merge_adapter(gpu, ad.sh, &ad.a, &ad.b, w, ad.at)?
                }
                _ => return Err(TrainError::BadInput(format!("LoRA target {}: no served weight to merge into", ad.name))),
            }
        }
        Ok(stats)
    }

    /// Whether an adapter sits on (a block of) the served weight `name`.
    pub(super) fn adapts(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The routed experts' adapter gradients of one MoE layer (`gate_up`, `down`: its fused
    /// expert weights' names): each adapted expert block over the rows routed to that expert.
    pub(super) fn routed_backward(&mut self, gpu: &Gpu, gate_up: &str, down: &str, rows: &RoutedRows<'_, A>) -> Result<()> {
        let (h, i) = (rows.hidden, rows.inter);
        let DeviceLora { adapters, scratch, by_name, .. } = self;
        let targets: Vec<(usize, bool)> = [(gate_up, true), (down, false)]
            .into_iter()
            .flat_map(|(name, is_gate_up)| by_name.get(name).into_iter().flatten().map(move |&n| (n, is_gate_up)))
            .collect();
        for (n, is_gate_up) in targets {
            let ad = &mut adapters[n];
            // The expert, and where its input and output-gradient rows start (and their stride).
            let (e, x, dy) = if is_gate_up {
                let (e, half) = (ad.at / (2 * i * h), ad.at % (2 * i * h) / (i * h));
                let first = rows.spans.get(e).map_or(0, |s| s.0);
                (e, View { buf: rows.x, at: first * h, ld: h }, View { buf: rows.dgu, at: first * 2 * i + half * i, ld: 2 * i })
            } else {
                let e = ad.at / (h * i);
                let first = rows.spans.get(e).map_or(0, |s| s.0);
                (e, View { buf: rows.act, at: first * i, ld: i }, View { buf: rows.dye, at: first * h, ld: h })
            };
            let Some(&(_, m)) = rows.spans.get(e) else {
                return Err(TrainError::BadInput(format!("LoRA target {}: expert {e} beyond the layer's experts", ad.name)));
            };
            if m > 0 {
                ad.accumulate(gpu, x, dy, m, scratch)?;
            }
        }
        Ok(())
    }

    /// The adapter gradients, downloaded under the CPU `Lora::adapters` names and order.
    pub fn gradients(&self, gpu: &Gpu) -> Result<Vec<NamedGrad>> {
        self.download(|ad| [&ad.ga, &ad.gb].map(|g| gpu.download(g)))
    }

    /// The adapters' values (their serving copies as fp32), under the CPU names and order.
    pub fn values(&self, gpu: &Gpu) -> Result<Vec<NamedGrad>> {
        self.download(|ad| [&ad.a, &ad.b].map(|x| gpu.download(x).map(|v| A::to_f32(&v))))
    }

    /// Two host tensors per adapter (`pair`: `A`'s then `B`'s) under the CPU names.
    fn download(&self, pair: impl Fn(&Adapter<A>) -> [std::result::Result<Vec<f32>, DeviceError>; 2]) -> Result<Vec<NamedGrad>> {
        let mut out = Vec::with_capacity(self.names.len());
        for (ad, names) in self.adapters.iter().zip(self.names.chunks_exact(2)) {
            for (data, (name, shape)) in pair(ad).into_iter().zip(names) {
                out.push(NamedGrad { name: name.clone(), shape: shape.clone(), data: data? });
            }
        }
        Ok(out)
    }
}

/// The backward of projection `name` (`y[m, n] = x[m, k]·wᵀ`): without LoRA, `linear_backward`
/// (input gradient and the dense `dw`); with LoRA, the input gradient through the merged weight
/// only, plus the adapter gradients when `name` is a target — no dense gradient.
#[allow(clippy::too_many_arguments)]
pub(super) fn linear_backward<A: Act>(
    gpu: &Gpu,
    lora: Option<&mut DeviceLora<A>>,
    name: &str,
    dy: &DeviceBuffer<A>,
    x: &DeviceBuffer<A>,
    (m, k, n): (usize, usize, usize),
    w: &DeviceBuffer<A>,
    dx: &mut DeviceBuffer<A>,
    accumulate_dx: bool,
    dw: &mut DeviceBuffer<f32>,
) -> Result<()> {
    let Some(lora) = lora else {
        return Ok(bw::linear_backward(gpu, dy, x, m, k, w, n, dx, accumulate_dx, dw)?);
    };
    bw::linear_backward_dx(gpu, dy, m, k, w, n, dx, accumulate_dx)?;
    let DeviceLora { adapters, scratch, by_name, .. } = lora;
    match by_name.get(name).and_then(|ads| ads.first()) {
        Some(&ad) => adapters[ad].accumulate(gpu, View::dense(x, k), View::dense(dy, n), m, scratch),
        None => Ok(()),
    }
}
