//! Shared by the layout and memory-plan tests: the released Qwen3.5-35B-A3B config scaled down
//! (same names and structure) and a header-only checkpoint of a config written to a folder.
#![allow(dead_code)]

use execcritic::model::layout::qwen35_35b_a3b_config;
use execcritic::model::layout::{decoder_tensors, write_sparse_checkpoint, ExpertLayout, TensorSpec};
use execcritic::model::ModelConfig;
use execcritic::tensor::DType;
use serde_json::{json, Value};
use std::path::Path;

pub const PREFIX: &str = "model.language_model.";

/// Write `config` and its decoder tensors (+ `extra`) as a sparse bf16 checkpoint into `dir`.
pub fn write_layout(
    dir: &Path,
    config: &Value,
    experts: ExpertLayout,
    extra: &[TensorSpec],
) -> (ModelConfig, Vec<TensorSpec>) {
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let cfg = ModelConfig::from_dir(dir).unwrap();
    let specs = decoder_tensors(&cfg, experts, PREFIX);
    let mut all = specs.clone();
    all.extend_from_slice(extra);
    write_sparse_checkpoint(dir, &all, DType::BF16, 4 << 30).unwrap();
    (cfg, specs)
}

/// The released config with the sizes shrunk (same names, same structure: 3 GDN + 1 attention).
pub fn scaled_config() -> Value {
    let mut c = qwen35_35b_a3b_config();
    let t = c["text_config"].as_object_mut().unwrap();
    for (k, v) in [
        ("vocab_size", json!(512)),
        ("hidden_size", json!(64)),
        ("num_hidden_layers", json!(4)),
        (
            "layer_types",
            json!([
                "linear_attention",
                "linear_attention",
                "linear_attention",
                "full_attention"
            ]),
        ),
        ("num_attention_heads", json!(4)),
        ("head_dim", json!(16)),
        ("linear_num_key_heads", json!(2)),
        ("linear_num_value_heads", json!(4)),
        ("linear_key_head_dim", json!(16)),
        ("linear_value_head_dim", json!(16)),
        ("num_experts", json!(8)),
        ("num_experts_per_tok", json!(2)),
        ("moe_intermediate_size", json!(32)),
        ("shared_expert_intermediate_size", json!(32)),
    ] {
        t.insert(k.into(), v);
    }
    t["rope_parameters"]["mrope_section"] = json!([1, 1, 0]);
    c
}

/// The released config with every per-layer shape kept (hidden 2048, attention and GDN heads,
/// expert widths) but 4 layers (3 GDN + 1 attention), 8 experts and a 512-token vocabulary:
/// the real tensor shapes at ≈ 240 M parameters.
pub fn real_layers_config() -> Value {
    let mut c = qwen35_35b_a3b_config();
    let t = c["text_config"].as_object_mut().unwrap();
    for (k, v) in [
        ("vocab_size", json!(512)),
        ("num_hidden_layers", json!(4)),
        (
            "layer_types",
            json!([
                "linear_attention",
                "linear_attention",
                "linear_attention",
                "full_attention"
            ]),
        ),
        ("num_experts", json!(8)),
    ] {
        t.insert(k.into(), v);
    }
    c
}
