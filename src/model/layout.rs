//! Checkpoint layout: the name and shape of every tensor a Qwen3.5-MoE checkpoint holds for a
//! [`ModelConfig`] (decoder and head; experts fused or per expert), the released
//! Qwen3.5-35B-A3B `config.json`, and a header-only safetensors writer that lays such a
//! checkpoint out as sparse files (headers written, data never written, so a 70 GB layout costs
//! a few MB of disk). Used to check every loader against the full-size model without its weights
//! and to build random-weight fixtures of any shape.

use super::config::{LayerType, ModelConfig};
use super::error::{ModelError, Result};
use crate::tensor::DType;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::Path;

/// How routed experts are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertLayout {
    /// `experts.gate_up_proj [E, 2I, H]`, `experts.down_proj [E, H, I]` (the BF16 release,
    /// transformers ≥ 5).
    Fused,
    /// `experts.{e}.{gate,up,down}_proj.weight` (the FP8/NVFP4 releases).
    PerExpert,
}

/// One tensor of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

impl TensorSpec {
    fn new(name: String, shape: &[usize]) -> Self {
        TensorSpec {
            name,
            shape: shape.to_vec(),
        }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Every decoder tensor of `cfg` under `prefix` (`model.language_model.` for the released
/// multimodal checkpoint, `model.` for `Qwen3_5MoeForCausalLM`), plus `lm_head.weight` unless
/// the head is tied. Order: embedding, layers, final norm, head.
pub fn decoder_tensors(cfg: &ModelConfig, experts: ExpertLayout, prefix: &str) -> Vec<TensorSpec> {
    let h = cfg.hidden_size;
    let mut out = vec![TensorSpec::new(
        format!("{prefix}embed_tokens.weight"),
        &[cfg.vocab_size, h],
    )];
    for (l, lt) in cfg.layer_types.iter().enumerate() {
        let p = format!("{prefix}layers.{l}.");
        let mut t = |name: &str, shape: &[usize]| out.push(TensorSpec::new(format!("{p}{name}"), shape));
        t("input_layernorm.weight", &[h]);
        t("post_attention_layernorm.weight", &[h]);
        match lt {
            LayerType::Full => {
                let (hq, hkv, hd) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
                t("self_attn.q_proj.weight", &[2 * hq * hd, h]);
                t("self_attn.k_proj.weight", &[hkv * hd, h]);
                t("self_attn.v_proj.weight", &[hkv * hd, h]);
                t("self_attn.o_proj.weight", &[h, hq * hd]);
                t("self_attn.q_norm.weight", &[hd]);
                t("self_attn.k_norm.weight", &[hd]);
            }
            LayerType::Linear => {
                let (hv, vd) = (cfg.linear_num_value_heads, cfg.gdn_value_dim());
                t("linear_attn.in_proj_qkv.weight", &[cfg.gdn_conv_dim(), h]);
                t("linear_attn.in_proj_z.weight", &[vd, h]);
                t("linear_attn.in_proj_b.weight", &[hv, h]);
                t("linear_attn.in_proj_a.weight", &[hv, h]);
                t(
                    "linear_attn.conv1d.weight",
                    &[cfg.gdn_conv_dim(), 1, cfg.linear_conv_kernel_dim],
                );
                t("linear_attn.dt_bias", &[hv]);
                t("linear_attn.A_log", &[hv]);
                t("linear_attn.norm.weight", &[cfg.linear_value_head_dim]);
                t("linear_attn.out_proj.weight", &[h, vd]);
            }
        }
        let (e, i, is) = (
            cfg.num_experts,
            cfg.moe_intermediate_size,
            cfg.shared_expert_intermediate_size,
        );
        t("mlp.gate.weight", &[e, h]);
        match experts {
            ExpertLayout::Fused => {
                t("mlp.experts.gate_up_proj", &[e, 2 * i, h]);
                t("mlp.experts.down_proj", &[e, h, i]);
            }
            ExpertLayout::PerExpert => {
                for x in 0..e {
                    t(&format!("mlp.experts.{x}.gate_proj.weight"), &[i, h]);
                    t(&format!("mlp.experts.{x}.up_proj.weight"), &[i, h]);
                    t(&format!("mlp.experts.{x}.down_proj.weight"), &[h, i]);
                }
            }
        }
        t("mlp.shared_expert.gate_proj.weight", &[is, h]);
        t("mlp.shared_expert.up_proj.weight", &[is, h]);
        t("mlp.shared_expert.down_proj.weight", &[h, is]);
        t("mlp.shared_expert_gate.weight", &[1, h]);
    }
    out.push(TensorSpec::new(format!("{prefix}norm.weight"), &[h]));
    if !cfg.tie_word_embeddings {
        out.push(TensorSpec::new("lm_head.weight".into(), &[cfg.vocab_size, h]));
    }
    out
}

/// The released Qwen/Qwen3.5-35B-A3B `config.json` (multimodal wrapper with the text decoder in
/// `text_config`; the vision tower's config is kept for fidelity, the loaders ignore it).
pub fn qwen35_35b_a3b_config() -> Value {
    let layer_types: Vec<&str> = (0..40)
        .map(|i| {
            if (i + 1) % 4 == 0 {
                "full_attention"
            } else {
                "linear_attention"
            }
        })
        .collect();
    let text_config = json!({
            "model_type": "qwen3_5_moe_text", "dtype": "bfloat16",
            "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
            "layer_types": layer_types, "full_attention_interval": 4,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
            "attention_bias": false, "attention_dropout": 0.0, "attn_output_gate": true,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "mamba_ssm_dtype": "float32",
            "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512, "router_aux_loss_coef": 0.001,
            "output_router_logits": false, "hidden_act": "silu", "rms_norm_eps": 1e-06,
            "initializer_range": 0.02, "max_position_embeddings": 262144,
            "partial_rotary_factor": 0.25,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                "mrope_interleaved": true},
            "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": false,
            "tie_word_embeddings": false, "use_cache": true,
            "bos_token_id": 248044, "eos_token_id": 248044, "pad_token_id": null
    });
    let vision_config = json!({
            "model_type": "qwen3_5_moe", "depth": 27, "hidden_size": 1152,
            "intermediate_size": 4304, "num_heads": 16, "in_channels": 3, "patch_size": 16,
            "temporal_patch_size": 2, "spatial_merge_size": 2, "num_position_embeddings": 2304,
            "out_hidden_size": 2048, "hidden_act": "gelu_pytorch_tanh",
            "deepstack_visual_indexes": [], "initializer_range": 0.02
    });
    json!({
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "tie_word_embeddings": false,
        "image_token_id": 248056, "video_token_id": 248057,
        "vision_start_token_id": 248053, "vision_end_token_id": 248054,
        "text_config": text_config,
        "vision_config": vision_config,
    })
}

/// Write `tensors` as safetensors shards of at most `shard_bytes` of data each (a tensor larger
/// than that gets a shard of its own) plus `model.safetensors.index.json`, headers only: each
/// file is extended to its full length with `set_len`, so the data reads as zeros and takes no
/// disk space. Returns the total data bytes.
pub fn write_sparse_checkpoint(
    dir: &Path,
    tensors: &[TensorSpec],
    dtype: DType,
    shard_bytes: u64,
) -> Result<u64> {
    let mut shards: Vec<Vec<&TensorSpec>> = vec![Vec::new()];
    let mut in_shard = 0u64;
    for t in tensors {
        let n = (t.numel() * dtype.size()) as u64;
        if in_shard > 0 && in_shard + n > shard_bytes {
            shards.push(Vec::new());
            in_shard = 0;
        }
        in_shard += n;
        shards.last_mut().expect("at least one shard").push(t);
    }
    let count = shards.len();
    let mut weight_map = Map::new();
    let mut total = 0u64;
    for (k, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{count:05}.safetensors", k + 1);
        let mut header = Map::new();
        header.insert("__metadata__".into(), json!({"format": "pt"}));
        let mut offset = 0u64;
        for t in shard {
            let end = offset + (t.numel() * dtype.size()) as u64;
            header.insert(
                t.name.clone(),
                json!({"dtype": st_dtype(dtype), "shape": t.shape, "data_offsets": [offset, end]}),
            );
            weight_map.insert(t.name.clone(), Value::String(file.clone()));
            offset = end;
        }
        total += offset;
        let mut text = Value::Object(header).to_string().into_bytes();
        // Pad the header so the data starts 8-byte aligned (as the safetensors writer does).
        text.resize((8 + text.len()).div_ceil(8) * 8 - 8, b' ');
        let path = dir.join(&file);
        let io = |source| ModelError::Io {
            path: path.clone(),
            source,
        };
        let mut f = std::fs::File::create(&path).map_err(io)?;
        f.write_all(&(text.len() as u64).to_le_bytes()).map_err(io)?;
        f.write_all(&text).map_err(io)?;
        f.set_len(8 + text.len() as u64 + offset).map_err(io)?;
    }
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let path = dir.join("model.safetensors.index.json");
    std::fs::write(&path, index.to_string()).map_err(|source| ModelError::Io { path, source })?;
    Ok(total)
}

fn st_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::BF16 => "BF16",
        DType::F16 => "F16",
    }
}
