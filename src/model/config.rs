//! `ModelConfig`: the architecture of a Qwen3.5-MoE text decoder, read from a Hugging Face
//! `config.json` (`qwen3_5_moe` with a nested `text_config`, or flat `qwen3_5_moe_text`).
//! Every architectural field comes from the file (HF defaults only where HF has them) and the
//! combination is validated, so nothing downstream is hard-coded to one model size.

use super::error::{ModelError, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Token mixer of one decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerType {
    /// Gated DeltaNet (`linear_attention`).
    Linear,
    /// Gated full attention (`full_attention`).
    Full,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub layer_types: Vec<LayerType>,
    // gated full attention
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    /// Rotary dimensions per head: `int(head_dim · partial_rotary_factor)`.
    pub rotary_dim: usize,
    pub rope_theta: f64,
    pub mrope_section: Option<Vec<usize>>,
    // Gated DeltaNet
    pub linear_num_key_heads: usize,
    pub linear_num_value_heads: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub linear_conv_kernel_dim: usize,
    // MoE
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub shared_expert_intermediate_size: usize,
    pub rms_norm_eps: f32,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

/// The dimensions of a Gated DeltaNet layer ([`ModelConfig::gdn_dims`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnDims {
    /// Key (and query) heads.
    pub hk: usize,
    /// Value heads (a multiple of `hk`).
    pub hv: usize,
    /// Key head dimension.
    pub dk: usize,
    /// Value head dimension.
    pub dv: usize,
    /// Channels of the causal conv, `[q | k | v]`: `2·hk·dk + hv·dv`.
    pub conv: usize,
    /// `hv·dv`.
    pub value: usize,
    /// Causal conv kernel size.
    pub kernel: usize,
}

impl ModelConfig {
    /// Read `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
        Self::from_json_str(&text, &path)
    }

    /// Parse a config.json text (`path` only labels errors).
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        let root: Value = serde_json::from_str(text).map_err(|e| cfg_err(path, format!("not JSON: {e}")))?;
        let mt = root.get("model_type").and_then(Value::as_str).unwrap_or("").to_string();
        let (text_cfg, top_tie) = match mt.as_str() {
            "qwen3_5_moe" => {
                let t = root
                    .get("text_config")
                    .filter(|v| v.is_object())
                    .ok_or_else(|| cfg_err(path, "model_type qwen3_5_moe needs a text_config object".into()))?;
                (t, root.get("tie_word_embeddings").and_then(Value::as_bool))
            }
            "qwen3_5_moe_text" => (&root, None),
            _ => return Err(ModelError::UnsupportedModelType(mt)),
        };
        let f = Fields {
            v: text_cfg,
            path: path.to_path_buf(),
        };
        let cfg = f.build(mt, top_tie)?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    pub fn gdn_key_dim(&self) -> usize {
        self.linear_num_key_heads * self.linear_key_head_dim
    }
    pub fn gdn_value_dim(&self) -> usize {
        self.linear_num_value_heads * self.linear_value_head_dim
    }
    /// Channels of the GDN causal conv: `[q | k | v]`.
    pub fn gdn_conv_dim(&self) -> usize {
        2 * self.gdn_key_dim() + self.gdn_value_dim()
    }

    /// The Gated DeltaNet layer's dimensions, named once for every backend.
    pub fn gdn_dims(&self) -> GdnDims {
        GdnDims {
            hk: self.linear_num_key_heads,
            hv: self.linear_num_value_heads,
            dk: self.linear_key_head_dim,
            dv: self.linear_value_head_dim,
            conv: self.gdn_conv_dim(),
            value: self.gdn_value_dim(),
            kernel: self.linear_conv_kernel_dim,
        }
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let err = |m: String| Err(cfg_err(path, m));
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("linear_num_key_heads", self.linear_num_key_heads),
            ("linear_num_value_heads", self.linear_num_value_heads),
            ("linear_key_head_dim", self.linear_key_head_dim),
            ("linear_value_head_dim", self.linear_value_head_dim),
            ("linear_conv_kernel_dim", self.linear_conv_kernel_dim),
            ("num_experts", self.num_experts),
            ("num_experts_per_tok", self.num_experts_per_tok),
            ("moe_intermediate_size", self.moe_intermediate_size),
            ("shared_expert_intermediate_size", self.shared_expert_intermediate_size),
        ];
        for (name, v) in positive {
            if v == 0 {
                return err(format!("{name} must be positive"));
            }
        }
        if self.layer_types.len() != self.num_hidden_layers {
            return err(format!(
                "layer_types has {} entries but num_hidden_layers is {}",
                self.layer_types.len(),
                self.num_hidden_layers
            ));
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.linear_num_value_heads % self.linear_num_key_heads != 0 {
            return err(format!(
                "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                self.linear_num_value_heads, self.linear_num_key_heads
            ));
        }
        if self.num_experts_per_tok > self.num_experts {
            return err(format!(
                "num_experts_per_tok {} exceeds num_experts {}",
                self.num_experts_per_tok, self.num_experts
            ));
        }
        if self.rotary_dim % 2 != 0 || self.rotary_dim > self.head_dim {
            return err(format!(
                "rotary dim {} must be even and at most head_dim {}",
                self.rotary_dim, self.head_dim
            ));
        }
        if self.rms_norm_eps.is_nan() || self.rms_norm_eps <= 0.0 || self.rope_theta.is_nan() || self.rope_theta <= 0.0
        {
            return err("rms_norm_eps and rope_theta must be positive".into());
        }
        Ok(())
    }
}

fn cfg_err(path: &Path, msg: String) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        msg,
    }
}

/// Typed field access on the text config object, with errors naming the field.
struct Fields<'a> {
    v: &'a Value,
    path: PathBuf,
}

impl Fields<'_> {
    fn err(&self, m: String) -> ModelError {
        cfg_err(&self.path, m)
    }
    fn opt_usize(&self, name: &str) -> Result<Option<usize>> {
        match self.v.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.err(format!("{name} must be a non-negative integer, got {x}"))),
        }
    }
    fn usize(&self, name: &str) -> Result<usize> {
        self.opt_usize(name)?
            .ok_or_else(|| self.err(format!("missing field {name}")))
    }
    fn opt_f64_in(&self, obj: Option<&Value>, name: &str) -> Result<Option<f64>> {
        match obj.and_then(|o| o.get(name)) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(format!("{name} must be a number, got {x}"))),
        }
    }
    fn token_ids(&self, name: &str) -> Result<Vec<u32>> {
        match self.v.get(name) {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64()
                        .map(|n| n as u32)
                        .ok_or_else(|| self.err(format!("{name} must hold integers")))
                })
                .collect(),
            Some(x) => x
                .as_u64()
                .map(|n| vec![n as u32])
                .ok_or_else(|| self.err(format!("{name} must be an integer"))),
        }
    }

    fn build(&self, model_type: String, top_tie: Option<bool>) -> Result<ModelConfig> {
        let hidden_size = self.usize("hidden_size")?;
        let num_hidden_layers = self.usize("num_hidden_layers")?;
        let num_attention_heads = self.usize("num_attention_heads")?;
        let head_dim = match self.opt_usize("head_dim")? {
            Some(d) => d,
            None if num_attention_heads > 0 => hidden_size / num_attention_heads,
            None => 0,
        };
        if let Some(act) = self.v.get("hidden_act").and_then(Value::as_str) {
            if act != "silu" {
                return Err(self.err(format!("hidden_act {act:?} is not supported (only silu)")));
            }
        }
        let layer_types = match self.v.get("layer_types") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| match x.as_str() {
                    Some("linear_attention") => Ok(LayerType::Linear),
                    Some("full_attention") => Ok(LayerType::Full),
                    _ => Err(self.err(format!("unknown layer type {x} in layer_types"))),
                })
                .collect::<Result<Vec<_>>>()?,
            None | Some(Value::Null) => {
                let interval = self.opt_usize("full_attention_interval")?.unwrap_or(4);
                if interval == 0 {
                    return Err(self.err("full_attention_interval must be positive".into()));
                }
                (0..num_hidden_layers)
                    .map(|i| {
                        if (i + 1) % interval == 0 {
                            LayerType::Full
                        } else {
                            LayerType::Linear
                        }
                    })
                    .collect()
            }
            Some(x) => return Err(self.err(format!("layer_types must be a list, got {x}"))),
        };
        let rope = self
            .v
            .get("rope_parameters")
            .or_else(|| self.v.get("rope_scaling"))
            .filter(|v| v.is_object());
        if let Some(rt) = rope
            .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
            .and_then(Value::as_str)
        {
            if rt != "default" {
                return Err(self.err(format!("rope_type {rt:?} is not supported (only default)")));
            }
        }
        let rope_theta = match self.opt_f64_in(rope, "rope_theta")? {
            Some(t) => t,
            None => self.opt_f64_in(Some(self.v), "rope_theta")?.unwrap_or(10000.0),
        };
        let partial = match self.opt_f64_in(rope, "partial_rotary_factor")? {
            Some(p) => p,
            None => self.opt_f64_in(Some(self.v), "partial_rotary_factor")?.unwrap_or(0.25),
        };
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(self.err(format!("partial_rotary_factor {partial} must be in (0, 1]")));
        }
        let mrope_section = match rope.and_then(|r| r.get("mrope_section")) {
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(|x| {
                        x.as_u64()
                            .map(|n| n as usize)
                            .ok_or_else(|| self.err("mrope_section must hold integers".into()))
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            _ => None,
        };
        let tie = top_tie
            .or_else(|| self.v.get("tie_word_embeddings").and_then(Value::as_bool))
            .unwrap_or(false);
        Ok(ModelConfig {
            model_type,
            vocab_size: self.usize("vocab_size")?,
            hidden_size,
            num_hidden_layers,
            layer_types,
            num_attention_heads,
            num_key_value_heads: self.usize("num_key_value_heads")?,
            head_dim,
            rotary_dim: (head_dim as f64 * partial) as usize,
            rope_theta,
            mrope_section,
            linear_num_key_heads: self.usize("linear_num_key_heads")?,
            linear_num_value_heads: self.usize("linear_num_value_heads")?,
            linear_key_head_dim: self.usize("linear_key_head_dim")?,
            linear_value_head_dim: self.usize("linear_value_head_dim")?,
            linear_conv_kernel_dim: self.opt_usize("linear_conv_kernel_dim")?.unwrap_or(4),
            num_experts: self.usize("num_experts")?,
            num_experts_per_tok: self.usize("num_experts_per_tok")?,
            moe_intermediate_size: self.usize("moe_intermediate_size")?,
            shared_expert_intermediate_size: self.usize("shared_expert_intermediate_size")?,
            rms_norm_eps: self.opt_f64_in(Some(self.v), "rms_norm_eps")?.unwrap_or(1e-6) as f32,
            tie_word_embeddings: tie,
            bos_token_id: self.token_ids("bos_token_id")?.first().copied(),
            eos_token_ids: self.token_ids("eos_token_id")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_cfg() -> Value {
        serde_json::json!({
            "model_type": "qwen3_5_moe_text", "vocab_size": 1024, "hidden_size": 64,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
            "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 2]}, "eos_token_id": [5, 6]
        })
    }

    fn parse(v: &Value) -> Result<ModelConfig> {
        ModelConfig::from_json_str(&v.to_string(), Path::new("config.json"))
    }

    #[test]
    fn flat_and_nested_agree() {
        let flat = parse(&text_cfg()).unwrap();
        assert_eq!(flat.rotary_dim, 8);
        assert_eq!(
            flat.layer_types,
            vec![LayerType::Linear, LayerType::Linear, LayerType::Linear, LayerType::Full]
        );
        assert_eq!(flat.eos_token_ids, vec![5, 6]);
        let nested =
            serde_json::json!({"model_type": "qwen3_5_moe", "tie_word_embeddings": true, "text_config": text_cfg()});
        let n = parse(&nested).unwrap();
        assert!(n.tie_word_embeddings && !flat.tie_word_embeddings);
        assert_eq!(n.hidden_size, flat.hidden_size);
    }

    #[test]
    fn rejects_bad_configs() {
        let mut v = text_cfg();
        v["model_type"] = "llama".into();
        assert!(matches!(parse(&v), Err(ModelError::UnsupportedModelType(_))));
        let mut v = text_cfg();
        v["layer_types"] = serde_json::json!(["linear_attention", "full_attention"]);
        assert!(parse(&v).unwrap_err().to_string().contains("layer_types has 2 entries"));
        let mut v = text_cfg();
        v["num_key_value_heads"] = 3.into();
        assert!(parse(&v).unwrap_err().to_string().contains("not a multiple"));
        let mut v = text_cfg();
        v.as_object_mut().unwrap().remove("hidden_size");
        assert!(parse(&v).unwrap_err().to_string().contains("missing field hidden_size"));
        let mut v = text_cfg();
        v["num_experts_per_tok"] = 9.into();
        assert!(parse(&v).unwrap_err().to_string().contains("exceeds"));
        let mut v = text_cfg();
        v["rope_parameters"]["rope_type"] = "yarn".into();
        assert!(parse(&v).unwrap_err().to_string().contains("yarn"));
    }
}
