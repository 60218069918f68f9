//! The launch table of the kernel resource audit: every kernel launch the serving and training
//! code makes at a model's shapes, recorded by running that code — weight initialisation, a
//! long prefill, a mixed step, decode at batch 1 and at the widest batch, the plain paths of
//! every run-time switch (`tensor::cuda::switches`), device sampling, the
//! training forward with the SFT and GRPO losses and the backward, and (where the weights are
//! small enough to hold on the host) AdamW, LoRA with routed experts and activation
//! recomputation — over a [`RecordingDevice`], which allocates nothing and runs nothing. So a
//! full-size Qwen3.5-35B-A3B step is recorded on a CPU machine in a second, and the block sizes
//! and shared memory the audit judges are the launch wrappers' own (`tensor::cuda::ops`,
//! `backward`), never typed a second time. Both storage types are recorded.

use crate::engine::cuda_backend::CudaDecoder;
use crate::engine::device_sampling::DeviceSampler;
use crate::model::backend::cuda::{CudaModel, CudaState};
use crate::model::config::ModelConfig;
use crate::tensor::cuda::backward::{token_loss, LossRows, TokenObjective};
use crate::tensor::cuda::ops::SampleRow;
use crate::tensor::cuda::record::{LaunchTable, RecordingDevice};
use crate::tensor::cuda::{Act, Gpu, Switches};
use crate::train::device::DeviceTrainModel;
use crate::train::error::{Result, TrainError};
use crate::train::network::TapeOptions;
use std::sync::Arc;

/// The shapes one config is recorded at.
#[derive(Clone, Debug)]
pub struct Shapes {
    /// Prefixes every workload's name (`35B-A3B`, `tiny-qwen35`).
    pub label: String,
    /// Tokens of the one-sequence prefill (its context is then decoded from).
    pub prefill_tokens: usize,
    /// Sequences of the widest decode step (and rows sampled).
    pub decode_batch: usize,
    /// Tokens of the training sequence.
    pub train_tokens: usize,
    /// Also AdamW, LoRA (routed experts included) and recomputation: they copy weights through
    /// the host, so only at small shapes.
    pub optimizer: bool,
}

impl Shapes {
    /// Qwen3.5-35B-A3B as released (`model::layout::qwen35_35b_a3b_config`): a 4k-token
    /// prefill, 256-way decode, a 128-token training sequence.
    pub fn full_size() -> Result<(ModelConfig, Shapes)> {
        let v = crate::model::layout::qwen35_35b_a3b_config();
        let cfg = ModelConfig::from_json_str(&v.to_string(), std::path::Path::new("Qwen3.5-35B-A3B"))?;
        let s = Shapes { label: "35B-A3B".into(), prefill_tokens: 4096, decode_batch: 256, train_tokens: 128, optimizer: false };
        Ok((cfg, s))
    }

    /// A fixture model directory (`models/tiny-qwen35`): a 70-token prefill (two GDN chunks),
    /// 8-way decode, a 70-token training sequence, and the optimizer paths.
    pub fn fixture(dir: &std::path::Path) -> Result<(ModelConfig, Shapes)> {
        let cfg = ModelConfig::from_dir(dir)?;
        let label = dir.file_name().map_or("fixture".into(), |n| n.to_string_lossy().into_owned());
        Ok((cfg, Shapes { label, prefill_tokens: 70, decode_batch: 8, train_tokens: 70, optimizer: true }))
    }
}

/// The audit's table: the full-size config and every fixture model under `models` (each
/// directory with a `config.json`), both storage types.
pub fn standard(models: &std::path::Path) -> Result<LaunchTable> {
    let (cfg, s) = Shapes::full_size()?;
    let mut table = record(&cfg, &s)?;
    let mut dirs: Vec<_> = std::fs::read_dir(models)
        .map_err(|source| TrainError::Io { path: models.to_path_buf(), source })?
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("config.json").is_file())
        .collect();
    dirs.sort();
    for d in dirs {
        let (cfg, s) = Shapes::fixture(&d)?;
        table.extend(record(&cfg, &s)?);
    }
    Ok(table)
}

/// Token ids `0..n` spread over the vocabulary.
fn ids(n: usize, vocab: usize, salt: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + salt * 104_729) % vocab) as u32).collect()
}

/// A routing every expert shares evenly: token `t`'s slot `j` is expert `(t·k + j) mod E` (distinct
/// within a token), per layer.
fn spread_routing(c: &ModelConfig, t: usize) -> Vec<Vec<u32>> {
    let (e, k) = (c.num_experts, c.num_experts_per_tok);
    let layer: Vec<u32> = (0..t * k).map(|p| (p % e) as u32).collect();
    vec![layer; c.num_hidden_layers]
}

/// Record every workload of `s` at `cfg`'s shapes, in both storage types.
pub fn record(cfg: &ModelConfig, s: &Shapes) -> Result<LaunchTable> {
    let rec = Arc::new(RecordingDevice::new());
    // the default paths (whatever the environment says); the plain ones in their own workload
    let gpu = Gpu::from_device(rec.clone()).with_switches(Switches::default());
    record_as::<u16>(&gpu, &rec, cfg, s)?;
    record_as::<f32>(&gpu, &rec, cfg, s)?;
    Ok(rec.table())
}

fn record_as<A: Act>(gpu: &Gpu, rec: &RecordingDevice, c: &ModelConfig, s: &Shapes) -> Result<()>
where
    CudaDecoder<A>: crate::engine::DecoderModel,
{
    let dtype = A::TYPE.suffix();
    let step = |name: &str| rec.set_workload(&format!("{} {dtype} {name}", s.label));
    let (v, n, p) = (c.vocab_size, s.decode_batch, s.prefill_tokens);

    step("init");
    let model = CudaModel::<A>::random(gpu, c.clone(), 1)?;
    // slot 0 holds the long context; slots 1..=n the decode batch
    let mut st = CudaState::<A>::new(gpu, c, n + 1, p + 64, p.max(n) + 1)?;
    step(&format!("prefill {p}"));
    let long = ids(p, v, 0);
    model.forward_last_on_device(gpu, &mut st, &[(0, &long)])?;
    step("mixed prefill + decode");
    let short = ids(p.min(100), v, 1);
    let one = ids(1, v, 2);
    model.forward_last_on_device(gpu, &mut st, &[(1, &short), (0, &one)])?;
    step(&format!("decode 1 at {} tokens", p + 1));
    model.forward_last_on_device(gpu, &mut st, &[(0, &one)])?;
    step(&format!("decode {n}"));
    let batch: Vec<(usize, &[u32])> = (0..n).map(|i| (i + 1, &one[..])).collect();
    model.forward_last_on_device(gpu, &mut st, &batch)?;
    step(&format!("prefill {} + decode {n}, every switch off", short.len()));
    let plain = gpu.clone().with_switches(Switches::PLAIN);
    model.forward_last_on_device(&plain, &mut st, &[(2, &short)])?;
    model.forward_last_on_device(&plain, &mut st, &batch)?;
    step(&format!("sample {n}"));
    let mut sampler = DeviceSampler::new(gpu, n)?;
    let rows: Vec<Option<SampleRow>> = (0..n)
        .map(|i| {
            let (temperature, top_k, top_p) = [(0.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 20, 1.0), (1.0, 0, 0.9)][i % 4];
            Some(SampleRow { temperature, top_k, top_p, u: 0.5 })
        })
        .collect();
    sampler.sample(gpu, st.logits(), v, &rows)?;
    drop(st);

    let t = s.train_tokens;
    let (tids, routing) = (ids(t, v, 3), spread_routing(c, t));
    let mask: Vec<bool> = (0..t).map(|i| i >= t / 4).collect();
    let mut train = DeviceTrainModel::new(gpu, model)?;
    for (name, obj) in [
        ("SFT", TokenObjective::Sft),
        ("GRPO", TokenObjective::Grpo { clip_low: 0.2, clip_high: 0.28, kl_coef: 0.0 }),
    ] {
        step(&format!("train {name} forward + backward {t}"));
        let tape = train.forward_with(gpu, &tids, Some(&routing), TapeOptions::default())?;
        let rows = match obj {
            TokenObjective::Sft => LossRows::sft(gpu, &tids, &mask, v)?,
            _ => LossRows::grpo(gpu, &tids, &mask, &vec![-1.0; t], None, 0.5, v)?,
        };
        let (mut loss, mut logp, mut dlogits) = (gpu.zeros::<f32>(t)?, gpu.zeros::<f32>(t)?, gpu.zeros::<A>(t * v)?);
        token_loss(gpu, &tape.logits, v, &rows, obj, t as f64, &mut loss, &mut logp, &mut dlogits)?;
        train.backward(gpu, &tape, &dlogits)?;
    }
    if !s.optimizer {
        return Ok(());
    }
    let model = train.into_model();
    let batch = [crate::train::trainer::SftExample { ids: tids.clone(), mask: mask.clone() }];
    step(&format!("SFT step with AdamW, recomputation {t}"));
    let opt = crate::train::optim::AdamWConfig::default();
    let mut tr = crate::train::device::DeviceTrainer::new(gpu.clone(), model, opt)?;
    tr.tape = TapeOptions { recompute: true };
    tr.sft_step(&batch)?;
    step(&format!("LoRA SFT step (routed experts) {t}"));
    drop(tr);
    let model = CudaModel::<A>::zeros(gpu, c.clone())?;
    let targets = ["q_proj", "o_proj", "in_proj_qkv", "out_proj", "shared_expert", "experts.", "mlp.gate.weight"];
    let lora = crate::train::lora::LoraConfig { rank: 4, alpha: 8.0, targets: targets.map(String::from).to_vec(), seed: 1 };
    let mut tr = crate::train::device::DeviceTrainer::new_lora(gpu.clone(), model, opt, lora, "model.language_model.")
        .map_err(|e| TrainError::BadInput(format!("LoRA on the launch recorder: {e}")))?;
    tr.sft_step(&batch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_size_table_has_the_launches_that_decide_the_audit() {
        let (cfg, s) = Shapes::full_size().unwrap();
        let t = record(&cfg, &s).unwrap();
        let widest = |k: &str| t.uses.iter().filter(|u| u.kernel == k).map(|u| u.threads()).max();
        // the GDN decode kernel at dk = dv = 128 and the sampler
        assert!(widest("gdn_recurrent_bf16").is_some());
        assert_eq!(widest("sample_tokens_f32"), Some(1024));
        // both expert GEMMs of the bf16 build (prefill: staged tensor cores; decode: streaming)
        assert!(widest("grouped_gemm_mma_bf16").is_some() && widest("grouped_gemm_stream_bf16").is_some());
        // the backward ran at full size too
        assert!(widest("gdn_delta_bwd_f32").is_some() && widest("attn_bwd_dq_bf16").is_some());
        assert!(t.uses.iter().all(|u| u.workload.starts_with("35B-A3B ")));
    }
}
