//! Memory plan: the bytes one GPU holds to train a Qwen3.5-MoE model with GRPO in one process —
//! the bf16 weights the rollouts read, the trainable parameters' fp32 master copy, AdamW states
//! and gradients, activations (per-layer recomputation), the loss's logits, the rollouts' KV
//! cache and Gated DeltaNet state, and workspace — for LoRA or full-parameter training, on one GPU
//! or on N GPUs with the routed experts sharded (expert parallel, `E/N` experts per rank) and the
//! fp32 master + AdamW states of the replicated parameters sharded across the ranks (ZeRO-1).
//!
//! Parameter-derived rows (weights, master, AdamW, gradients, caches) are exact for the layout
//! (`model::layout`) and are checked against what the CPU trainer allocates for a scaled-down
//! model (tests/train_plan.rs); activations and workspace are estimates of the GPU design.
//! `execcritic train plan --config FILE [--json]` prints it.

use super::error::{Result, TrainError};
use super::lora::is_target;
use crate::model::layout::{decoder_tensors, qwen35_35b_a3b_config, ExpertLayout, TensorSpec};
use crate::model::{LayerType, ModelConfig};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The built-in model name of [`PlanConfig::model`].
pub const QWEN35_35B_A3B: &str = "qwen3.5-35b-a3b";
const GIB: f64 = (1u64 << 30) as f64;

/// What to plan for (TOML; see docs/train.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// [`QWEN35_35B_A3B`] (the released config, built in) or a model folder with `config.json`
    /// (relative to the plan file).
    pub model: String,
    /// GPUs = expert-parallel ranks.
    #[serde(default = "one")]
    pub gpus: usize,
    /// Memory of one GPU (an H200 reports 143,771 MiB ≈ 140.4 GiB).
    #[serde(default = "h200_gib")]
    pub gpu_memory_gib: f64,
    /// Shard the fp32 master and AdamW states of replicated parameters across the ranks.
    #[serde(default = "yes")]
    pub shard_optimizer: bool,
    /// Fixed scratch (GEMM workspace, MoE dispatch buffers, CUDA context).
    #[serde(default = "workspace_gib")]
    pub workspace_gib: f64,
    pub train: TrainSpec,
    pub rollout: RolloutSpec,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    pub mode: TrainMode,
    /// LoRA rank and targets (as `[lora]` of the training configs); required for `lora`.
    #[serde(default)]
    pub lora_rank: usize,
    #[serde(default)]
    pub lora_targets: Vec<String>,
    /// Tokens of one micro-batch (`max_tokens_per_micro_batch`).
    pub micro_batch_tokens: usize,
    /// Per-layer activation recomputation (only each layer's input is kept).
    #[serde(default = "yes")]
    pub recompute: bool,
    /// Tokens whose logits exist at once in the loss (default: the whole micro-batch).
    #[serde(default)]
    pub loss_chunk_tokens: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainMode {
    Lora,
    Full,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutSpec {
    /// Concurrent sequences per GPU.
    pub slots: usize,
    /// Context length each slot may reach.
    pub context: usize,
    /// Token budget of the paged KV pool, all sequences together (default `slots × context`,
    /// the most the slots can hold at once; snapshots share blocks, so less usually serves).
    #[serde(default)]
    pub kv_tokens: Option<usize>,
    /// Bytes per element of the KV cache and the conv state (2: bf16, 4: f32 as on the CPU);
    /// the GDN recurrent state is always f32.
    #[serde(default = "two")]
    pub cache_bytes: usize,
}

fn one() -> usize {
    1
}
fn two() -> usize {
    2
}
fn yes() -> bool {
    true
}
fn h200_gib() -> f64 {
    140.0
}
fn workspace_gib() -> f64 {
    4.0
}

impl PlanConfig {
    /// Read a plan TOML.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| TrainError::Io {
            path: path.into(),
            source,
        })?;
        let mut c: PlanConfig =
            toml::from_str(&text).map_err(|e| TrainError::BadInput(format!("{}: {e}", path.display())))?;
        if c.model != QWEN35_35B_A3B {
            let base = path.parent().unwrap_or(Path::new("."));
            c.model = base.join(&c.model).to_string_lossy().into_owned();
        }
        Ok(c)
    }

    /// The model's architecture: the built-in released config or the folder's `config.json`.
    pub fn model_config(&self) -> Result<ModelConfig> {
        if self.model == QWEN35_35B_A3B {
            let text = qwen35_35b_a3b_config().to_string();
            Ok(ModelConfig::from_json_str(&text, &PathBuf::from(QWEN35_35B_A3B))?)
        } else {
            Ok(ModelConfig::from_dir(Path::new(&self.model))?)
        }
    }
}

/// One line of the plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanRow {
    pub category: &'static str,
    pub bytes: u64,
    /// `exact` (follows from the parameter layout and dtypes) or `estimate`.
    pub basis: &'static str,
    pub note: String,
}

/// Parameter counts on one rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParamCounts {
    /// Every parameter of the model.
    pub total: u64,
    /// Parameters held by this rank (its experts + every replicated parameter).
    pub local: u64,
    /// Trainable parameters held by this rank (LoRA adapters, or `local`).
    pub trainable: u64,
    /// Trainable parameters whose fp32 master and AdamW states live on this rank.
    pub optimizer: u64,
    /// LoRA: elements of this rank's adapted weights (their frozen bases are kept; 0 in full
    /// training).
    pub adapted: u64,
    /// LoRA: of those, the routed experts' (their bases are kept in host memory).
    pub adapted_routed: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryPlan {
    pub model: String,
    pub gpus: usize,
    pub mode: TrainMode,
    pub params: ParamCounts,
    pub rows: Vec<PlanRow>,
    pub total_bytes: u64,
    pub capacity_bytes: u64,
    pub fits: bool,
    /// Host memory the run keeps per rank: LoRA's routed-expert bases (bf16).
    pub host_bytes: u64,
}

/// Expert parameters are sharded across ranks; everything else is replicated.
fn is_expert(name: &str) -> bool {
    name.contains(".mlp.experts.")
}

/// Parameter counts of `cfg` per rank for `spec` on `gpus` ranks.
pub fn param_counts(
    cfg: &ModelConfig,
    spec: &TrainSpec,
    gpus: usize,
    shard_optimizer: bool,
) -> Result<ParamCounts> {
    if gpus == 0 || !cfg.num_experts.is_multiple_of(gpus) {
        return Err(TrainError::BadInput(format!(
            "gpus must be positive and divide the {} experts (got {gpus})",
            cfg.num_experts
        )));
    }
    if spec.mode == TrainMode::Lora && (spec.lora_rank == 0 || spec.lora_targets.is_empty()) {
        return Err(TrainError::BadInput(
            "mode = \"lora\" needs lora_rank > 0 and lora_targets".into(),
        ));
    }
    let n = gpus as u64;
    let tensors: Vec<TensorSpec> = decoder_tensors(cfg, ExpertLayout::PerExpert, "model.");
    let mut c = ParamCounts::default();
    let mut trainable_replicated = 0u64;
    for t in &tensors {
        let numel = t.numel() as u64;
        c.total += numel;
        let expert = is_expert(&t.name);
        // Per-expert tensors are listed one by one, so sharding by expert is sharding the list.
        let local = !expert || expert_index(&t.name).is_some_and(|e| e % gpus == 0);
        let trainable = match spec.mode {
            TrainMode::Full => numel,
            TrainMode::Lora if is_target(&t.name, &t.shape, &spec.lora_targets) => {
                (spec.lora_rank * (t.shape[0] + t.shape[1])) as u64
            }
            TrainMode::Lora => 0,
        };
        let adapted = spec.mode == TrainMode::Lora && is_target(&t.name, &t.shape, &spec.lora_targets);
        if local {
            c.adapted += if adapted { numel } else { 0 };
            c.adapted_routed += if adapted && expert { numel } else { 0 };
            // Rank 0's share; every rank holds the same amount since E % N == 0.
            c.local += numel;
            c.trainable += trainable;
            if !expert {
                trainable_replicated += trainable;
            }
        }
    }
    let replicated_share = if shard_optimizer {
        trainable_replicated.div_ceil(n)
    } else {
        trainable_replicated
    };
    c.optimizer = c.trainable - trainable_replicated + replicated_share;
    Ok(c)
}

fn expert_index(name: &str) -> Option<usize> {
    let rest = &name[name.find(".mlp.experts.")? + ".mlp.experts.".len()..];
    rest.split('.').next()?.parse().ok()
}

/// KV cache bytes per token (all attention layers) and GDN state bytes per sequence.
pub fn cache_bytes(cfg: &ModelConfig, elem: usize) -> (u64, u64) {
    let attn = cfg.layer_types.iter().filter(|l| **l == LayerType::Full).count() as u64;
    let gdn = cfg.layer_types.len() as u64 - attn;
    let kv_per_token = attn * 2 * (cfg.num_key_value_heads * cfg.head_dim * elem) as u64;
    let recurrent =
        (cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4) as u64;
    let conv = ((cfg.linear_conv_kernel_dim - 1) * cfg.gdn_conv_dim() * elem) as u64;
    (kv_per_token, gdn * (recurrent + conv))
}

/// Bytes per token that one decoder layer (its mixer and its MoE) saves for its backward, in
/// bf16 (f32 where the kernels keep f32: softmax statistics, router logits, GDN gates and
/// chunk-start states); the larger of the two mixer kinds.
fn layer_activation_bytes_per_token(c: &ModelConfig) -> u64 {
    let b = 2u64;
    let h = c.hidden_size as u64;
    let (hq, hkv, hd) = (
        c.num_attention_heads as u64,
        c.num_key_value_heads as u64,
        c.head_dim as u64,
    );
    let attention = b * (h + 2 * hq * hd + 2 * hkv * hd + 2 * hq * hd) + 4 * hq;
    let (hv, dk, dv) = (
        c.linear_num_value_heads as u64,
        c.linear_key_head_dim as u64,
        c.linear_value_head_dim as u64,
    );
    let (conv, vd) = (c.gdn_conv_dim() as u64, c.gdn_value_dim() as u64);
    let gdn = b * (h + 2 * conv + 3 * vd + 2 * hv) + 4 * 2 * hv + 4 * hv * dk * dv / 64;
    let (e, k, i, is) = (
        c.num_experts as u64,
        c.num_experts_per_tok as u64,
        c.moe_intermediate_size as u64,
        c.shared_expert_intermediate_size as u64,
    );
    let moe = b * (2 * h + k * (h + 3 * i) + 3 * is + 1) + 4 * e;
    attention.max(gdn) + moe
}

/// The plan for `cfg` (the plan file's model).
pub fn plan(p: &PlanConfig, cfg: &ModelConfig) -> Result<MemoryPlan> {
    let t = &p.train;
    let counts = param_counts(cfg, t, p.gpus, p.shard_optimizer)?;
    let n = p.gpus;
    let mut rows = Vec::new();
    let mut row = |category, bytes: u64, basis, note: String| {
        rows.push(PlanRow {
            category,
            bytes,
            basis,
            note,
        })
    };
    let experts_note = if n > 1 {
        format!(
            "{} of {} experts per rank + replicated parameters",
            cfg.num_experts / n,
            cfg.num_experts
        )
    } else {
        "every parameter".to_string()
    };
    row(
        "weights (bf16)",
        2 * counts.local,
        "exact",
        format!(
            "{} params: {experts_note}; the rollouts' and the update's one copy",
            counts.local
        ),
    );
    let what = match t.mode {
        TrainMode::Lora => format!("LoRA rank {} adapters on {:?}", t.lora_rank, t.lora_targets),
        TrainMode::Full => "all parameters".to_string(),
    };
    let shard_note = if n > 1 && p.shard_optimizer {
        ", replicated ones sharded over the ranks"
    } else {
        ""
    };
    row(
        "master (fp32)",
        4 * counts.optimizer,
        "exact",
        format!("{} params ({what}){shard_note}", counts.optimizer),
    );
    row(
        "AdamW m, v (fp32)",
        8 * counts.optimizer,
        "exact",
        format!("2 x {} params", counts.optimizer),
    );
    let grad_note = match t.mode {
        TrainMode::Lora => "adapter gradients only (no dense weight gradient)",
        TrainMode::Full => "every local trainable parameter",
    };
    row(
        "gradients (fp32)",
        4 * counts.trainable,
        "exact",
        format!("{} params: {grad_note}", counts.trainable),
    );
    if t.mode == TrainMode::Lora {
        // The device trainer (`train::device::DeviceLora`) keeps each adapted weight's frozen
        // base in the weights' dtype to merge `W₀ + s·B·A` into the served copy after a step —
        // on the device, but the routed experts' in host memory — and the adapters' serving
        // copies (the GEMM operands) in that dtype too.
        let device_adapted = counts.adapted - counts.adapted_routed;
        row(
            "LoRA bases (bf16)",
            2 * (device_adapted + counts.trainable),
            "exact",
            format!(
                "frozen W0 of the {device_adapted} adapted elements outside the routed experts + the adapters' bf16 copies"
            ),
        );
    }
    let tokens = t.micro_batch_tokens as u64;
    let layers = cfg.num_hidden_layers as u64;
    let per_layer = layer_activation_bytes_per_token(cfg);
    let (activations, act_note) = if t.recompute {
        (
            layers * tokens * 2 * cfg.hidden_size as u64 + 2 * tokens * per_layer,
            format!(
                "{tokens} tokens: each layer's input (bf16) + one layer's activations and their gradients"
            ),
        )
    } else {
        (
            layers * tokens * per_layer + tokens * per_layer,
            format!("{tokens} tokens: every layer's activations"),
        )
    };
    row("activations", activations, "estimate", act_note);
    let chunk = t
        .loss_chunk_tokens
        .unwrap_or(t.micro_batch_tokens)
        .min(t.micro_batch_tokens) as u64;
    row(
        "logits (fp32)",
        2 * 4 * chunk * cfg.vocab_size as u64,
        "exact",
        format!(
            "logits + their gradient for {chunk} tokens x {} vocab",
            cfg.vocab_size
        ),
    );
    let r = &p.rollout;
    let (kv_per_token, gdn_per_seq) = cache_bytes(cfg, r.cache_bytes);
    let (slots, ctx) = (r.slots as u64, r.context as u64);
    let bs = crate::model::backend::cuda::CacheConfig::BLOCK_SIZE as u64;
    let budget = r.kv_tokens.map_or(slots * ctx, |t| t as u64);
    let blocks = budget.div_ceil(bs);
    row(
        "KV cache",
        blocks * bs * kv_per_token,
        "exact",
        format!(
            "paged: {budget}-token budget = {blocks} blocks x {bs} tokens x {kv_per_token} B/token"
        ),
    );
    row(
        "GDN state",
        slots * gdn_per_seq,
        "exact",
        format!("{slots} slots x {gdn_per_seq} B (f32 recurrent + conv)"),
    );
    let decode_logits = 4 * slots * cfg.vocab_size as u64;
    row(
        "workspace",
        (p.workspace_gib * GIB) as u64 + decode_logits,
        "estimate",
        format!(
            "{} GiB scratch + one decode step's logits for {slots} slots",
            p.workspace_gib
        ),
    );
    let total_bytes: u64 = rows.iter().map(|r| r.bytes).sum();
    let capacity_bytes = (p.gpu_memory_gib * GIB) as u64;
    Ok(MemoryPlan {
        model: p.model.clone(),
        gpus: n,
        mode: t.mode,
        params: counts,
        rows,
        total_bytes,
        capacity_bytes,
        fits: total_bytes <= capacity_bytes,
        host_bytes: 2 * counts.adapted_routed,
    })
}

impl MemoryPlan {
    /// The plan as a text table (GiB per GPU).
    pub fn table(&self) -> String {
        let gib = |b: u64| b as f64 / GIB;
        let mut s = format!(
            "memory plan per GPU: {} on {} GPU(s), {:?} training ({} params, {} on this rank, {} trainable)\n",
            self.model, self.gpus, self.mode, self.params.total, self.params.local, self.params.trainable
        );
        s += &format!("{:<20} {:>10}  {:<9} {}\n", "category", "GiB", "basis", "what");
        for r in &self.rows {
            s += &format!(
                "{:<20} {:>10.2}  {:<9} {}\n",
                r.category,
                gib(r.bytes),
                r.basis,
                r.note
            );
        }
        s += &format!(
            "{:<20} {:>10.2}  of {:.2} GiB: {}\n",
            "total",
            gib(self.total_bytes),
            gib(self.capacity_bytes),
            if self.fits { "fits" } else { "DOES NOT FIT" }
        );
        if self.host_bytes > 0 {
            s += &format!(
                "{:<20} {:>10.2}  {:<9} frozen W0 of the {} adapted routed-expert elements (bf16), written into the served experts before each merge\n",
                "host memory",
                gib(self.host_bytes),
                "exact",
                self.params.adapted_routed
            );
        }
        s
    }
}
