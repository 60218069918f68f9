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
//! no adapter path on the forward. Targets: attention, GDN, router and shared-expert
//! projections; routed experts, the embedding and the LM head are refused.

use super::grads::{cpu_params, NamedGrad};
use super::update::{serving, Served};
use crate::model::backend::cuda::CudaWeights;
use crate::model::backend::schema::Param;
use crate::model::backend::Stack;
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward as bw;
use crate::tensor::cuda::ops::fill_f32;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::DeviceError;
use crate::train::device_lora::{accumulate_adapter_grads, merge_adapter, AdapterBufs, AdapterShape};
use crate::train::device_optim::{DeviceAdamW, Serving};
use crate::train::error::{Result, TrainError};
use crate::train::lora::{init_adapters, LoraConfig};
use crate::train::optim::{AdamWConfig, Schedule, StepStats};

/// One adapted weight on the device.
struct Adapter<A: Act> {
    /// The weight's name in the loading order (without prefix, as `grads::buffers`).
    name: String,
    /// Its index in the loading order.
    index: usize,
    sh: AdapterShape,
    a: DeviceBuffer<A>,
    b: DeviceBuffer<A>,
    ga: DeviceBuffer<f32>,
    gb: DeviceBuffer<f32>,
    base: DeviceBuffer<A>,
}

/// The adapters of a device LoRA run.
pub struct DeviceLora<A: Act> {
    pub cfg: LoraConfig,
    adapters: Vec<Adapter<A>>,
    /// `<full name>.lora_A` and `.lora_B` with their shapes, in the CPU `Lora::adapters` order.
    names: Vec<(String, Vec<usize>)>,
    /// `[m, r]` scratch of the adapter gradients (grown to the longest sequence).
    scratch: DeviceBuffer<A>,
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
        let cpu: Vec<(usize, Param)> =
            params.iter().enumerate().flat_map(|(i, p)| cpu_params(c, p, prefix).into_iter().map(move |q| (i, q))).collect();
        let (store, targets) = init_adapters(&cfg, cpu.iter().map(|(_, q)| (q.name.as_str(), q.shape.as_slice())))?;
        let scale = cfg.alpha / cfg.rank as f32;
        let mut adapters = Vec::with_capacity(targets.len());
        for (j, &t) in targets.iter().enumerate() {
            let (index, q) = &cpu[t];
            let name = &params[*index].name;
            if name.contains("experts.") && !name.contains("shared_expert.") {
                return Err(TrainError::BadInput(format!(
                    "LoRA target {}: routed-expert adapters are not built in the device trainer yet (targets {:?}); \
                     adapt attention, GDN, router or shared-expert projections, or train on the CPU",
                    q.name, cfg.targets
                )));
            }
            let base = match &served[*index] {
                Served::Act(w) if name != "embed_tokens.weight" && name != "lm_head.weight" => gpu.duplicate(*w)?,
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
                sh: AdapterShape { inp: q.shape[1], out: q.shape[0], rank: cfg.rank, scale },
                a: gpu.upload(&A::from_f32(&a.data))?,
                b: gpu.upload(&A::from_f32(&b.data))?,
                ga: gpu.zeros(a.data.len())?,
                gb: gpu.zeros(b.data.len())?,
                base,
            });
        }
        let names = store.params.into_iter().map(|p| (p.name, p.shape)).collect();
        Ok(DeviceLora { cfg, adapters, names, scratch: gpu.zeros(0)? })
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
                Some(Serving::Act(w)) => merge_adapter(gpu, ad.sh, &ad.base, &ad.a, &ad.b, w)?,
                _ => return Err(TrainError::BadInput(format!("LoRA target {}: no served weight to merge into", ad.name))),
            }
        }
        Ok(stats)
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
    let DeviceLora { adapters, scratch, .. } = lora;
    let Some(ad) = adapters.iter_mut().find(|a| a.name == name) else {
        return Ok(());
    };
    if scratch.len() < m * ad.sh.rank {
        *scratch = gpu.zeros(m * ad.sh.rank)?;
    }
    let bufs = AdapterBufs { a: &ad.a, b: &ad.b, ga: &mut ad.ga, gb: &mut ad.gb };
    accumulate_adapter_grads(gpu, ad.sh, x, dy, m, bufs, scratch)
}
