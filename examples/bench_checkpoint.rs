//! Writes the CPU benchmark model (the shape `scripts/bench_cpu_vs_transformers.py` uses: 8
//! layers, 3 GDN + 1 attention per 4, 16 experts top-4, hidden 1024, vocab 16384) as a
//! random-weight Hugging Face folder, without Python packages: `config.json` plus safetensors
//! laid out by [`execcritic::model::layout`] and filled with seeded normal(0, 0.02) values.
//! Used by `scripts/bench_cpu_ab.sh` to compare the CPU engine of two commits on one checkpoint.
//!
//! `cargo run --release --example bench_checkpoint -- DIR f32|bf16`

use execcritic::model::config::ModelConfig;
use execcritic::model::layout::{decoder_tensors, write_sparse_checkpoint, ExpertLayout};
use execcritic::tensor::DType;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

fn config() -> serde_json::Value {
    let (lin, full) = ("linear_attention", "full_attention");
    let layer_types: Vec<&str> = [lin, lin, lin, full].repeat(2);
    serde_json::json!({
        "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
        "vocab_size": 16384, "hidden_size": 1024, "num_hidden_layers": 8, "layer_types": layer_types,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
        "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 16,
        "num_experts_per_tok": 4, "moe_intermediate_size": 256, "shared_expert_intermediate_size": 256,
        "tie_word_embeddings": false, "rms_norm_eps": 1e-6, "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": true},
    })
}

/// Seeded normal(0, std) values (xorshift64* + Box–Muller).
struct Normal(u64);

impl Normal {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn next(&mut self, std: f64) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        (std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// Overwrite every tensor's (zero, sparse) data with random values, shard by shard.
fn fill(dir: &Path, dtype: DType, rng: &mut Normal) -> std::io::Result<()> {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("model.safetensors.index.json"))?)?;
    let mut files: Vec<&str> = index["weight_map"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values().filter_map(|v| v.as_str()))
        .collect();
    files.sort_unstable();
    files.dedup();
    for file in files {
        let path = dir.join(file);
        let bytes = std::fs::read(&path)?;
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8-byte header length")) as usize;
        let data_len = bytes.len() - 8 - n;
        let mut data = Vec::with_capacity(data_len);
        for _ in 0..data_len / dtype.size() {
            let x = rng.next(0.02);
            match dtype {
                DType::F32 => data.extend_from_slice(&x.to_le_bytes()),
                _ => data.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
            }
        }
        let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
        f.seek(SeekFrom::Start(8 + n as u64))?;
        f.write_all(&data)?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(dtype)) = (args.get(1), args.get(2)) else {
        return Err("usage: bench_checkpoint DIR f32|bf16".into());
    };
    let dtype = match dtype.as_str() {
        "f32" => DType::F32,
        "bf16" => DType::BF16,
        other => return Err(format!("unknown dtype {other} (f32 or bf16)").into()),
    };
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir)?;
    let text = config().to_string();
    std::fs::write(dir.join("config.json"), &text)?;
    let cfg = ModelConfig::from_json_str(&text, &dir.join("config.json"))?;
    let tensors = decoder_tensors(&cfg, ExpertLayout::Fused, "model.");
    write_sparse_checkpoint(dir, &tensors, dtype, 1 << 30)?;
    fill(dir, dtype, &mut Normal(0x9E37_79B9_7F4A_7C15))?;
    println!("wrote {} ({} tensors)", dir.display(), tensors.len());
    Ok(())
}
