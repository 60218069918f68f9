//! Checkpoint loading: the same weights stored sharded, under the multimodal prefix with a nested
//! config and extra vision/MTP tensors, and with fused 3-D experts all give the fixture's logits;
//! bad checkpoints (truncated file, missing tensor, wrong shape, wrong dtype, config mismatch)
//! give a clear typed error naming the problem, never a panic.

#[path = "model_common.rs"]
mod common;

use common::*;
use execcritic::model::{Model, ModelError};
use execcritic::tensor::cpu_path::{set_bf16_activations, Bf16Activations};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::path::Path;

const MAIN: &str = "tiny-qwen35";
const BF16: &str = "tiny-qwen35-bf16";

/// The fixture's tensors as (dtype, shape, bytes), by name.
type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn read_tensors(dir: &Path) -> Tensors {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.iter()
        .map(|(n, v)| (n.to_string(), (v.dtype(), v.shape().to_vec(), v.data().to_vec())))
        .collect()
}

fn write_tensors(path: &Path, t: &Tensors) {
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn config_json() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(MAIN).join("config.json")).unwrap()).unwrap()
}

/// A temp model folder with `config` and the given tensors in one file.
fn model_dir(config: &serde_json::Value, t: &Tensors) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("config.json"), config.to_string()).unwrap();
    write_tensors(&d.path().join("model.safetensors"), t);
    d
}

/// Logits match transformers' f32 compute to 1e-4 (bf16 weights: with the activations of bf16
/// products kept in f32, the contract under which that tolerance holds).
fn reference_logits_match(dir: &Path, fixture_name: &str) {
    set_bf16_activations(Bf16Activations::F32);
    let model = Model::load(dir).unwrap();
    let r = Reference::load(fixture_name);
    let out = full(&model, &r.ids["ids.a"]);
    assert_close("logits.a", out.logits.data(), r.t("logits.a"), 1e-4);
}

fn load_err(dir: &Path) -> ModelError {
    match Model::load(dir) {
        Ok(_) => panic!("bad checkpoint loaded without error"),
        Err(e) => e,
    }
}

#[test]
fn sharded_checkpoint_with_index() {
    let t = read_tensors(&fixture(MAIN));
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(MAIN).join("config.json"), d.path().join("config.json")).unwrap();
    let (mut s1, mut s2) = (Tensors::new(), Tensors::new());
    let mut map = serde_json::Map::new();
    for (i, (n, v)) in t.into_iter().enumerate() {
        let file = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(n.clone(), file.into());
        if i % 2 == 0 {
            s1.insert(n, v)
        } else {
            s2.insert(n, v)
        };
    }
    write_tensors(&d.path().join("model-00001-of-00002.safetensors"), &s1);
    write_tensors(&d.path().join("model-00002-of-00002.safetensors"), &s2);
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(d.path().join("model.safetensors.index.json"), index.to_string()).unwrap();
    reference_logits_match(d.path(), MAIN);
}

/// transformers saves experts per expert; the BF16 release stores them fused 3-D
/// (`experts.gate_up_proj [E, 2I, H]`, `experts.down_proj [E, H, I]`): both must load.
#[test]
fn fused_expert_layout() {
    for name in [MAIN, BF16] {
        let d = fused_experts(name);
        reference_logits_match(d.path(), name);
    }
}

/// The fixture `name` rewritten with fused 3-D expert tensors (`gate_up_proj`, `down_proj`).
fn fused_experts(name: &str) -> tempfile::TempDir {
    let t = read_tensors(&fixture(name));
    let (e, i, h) = (8usize, 32usize, 64usize);
    let mut out = Tensors::new();
    for (n, v) in &t {
        if !n.contains(".mlp.experts.") {
            out.insert(n.clone(), v.clone());
        }
    }
    for l in 0..4 {
        let p = format!("model.layers.{l}.mlp.experts.");
        let (mut gu, mut down) = (Vec::new(), Vec::new());
        for x in 0..e {
            gu.extend_from_slice(&t[&format!("{p}{x}.gate_proj.weight")].2);
            gu.extend_from_slice(&t[&format!("{p}{x}.up_proj.weight")].2);
            down.extend_from_slice(&t[&format!("{p}{x}.down_proj.weight")].2);
        }
        let dtype = t[&format!("{p}0.down_proj.weight")].0;
        out.insert(format!("{p}gate_up_proj"), (dtype, vec![e, 2 * i, h], gu));
        out.insert(format!("{p}down_proj"), (dtype, vec![e, h, i], down));
    }
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("config.json")).unwrap()).unwrap();
    model_dir(&config, &out)
}

/// Compute format: a bf16 checkpoint's weight matrices stay bf16, read in place from the map
/// (no second copy), while small parameters and `get` (the trainer's and CUDA loader's path)
/// give f32 with exactly the widened values; an f32 checkpoint stays f32 in place.
#[test]
fn bf16_matrices_stay_bf16_in_place() {
    use execcritic::model::checkpoint::Checkpoint;
    use execcritic::tensor::{DType, Weight};
    let mut ck = Checkpoint::open(&fixture(BF16)).unwrap();
    let name = "layers.0.mlp.shared_expert.gate_proj.weight";
    let shape = [48, 64];
    let w = ck.get_weight(name, &shape).unwrap();
    assert_eq!(w.dtype(), DType::BF16);
    assert!(w.storage().is_mapped(), "bf16 matrix copied instead of mapped");
    let wide = ck.get(name, &shape).unwrap();
    assert_eq!(wide.dtype(), DType::F32);
    let Weight::Bf16(b) = w.weight() else { panic!("not bf16") };
    assert!(b.iter().zip(wide.data()).all(|(x, y)| x.to_f32().to_bits() == y.to_bits()));
    assert_eq!(ck.get("layers.0.input_layernorm.weight", &[64]).unwrap().dtype(), DType::F32);
    assert_eq!(Model::load(&fixture(BF16)).unwrap().matrix_dtype(), DType::BF16);

    let mut ck = Checkpoint::open(&fixture(MAIN)).unwrap();
    let w = ck.get_weight(name, &shape).unwrap();
    assert!(w.dtype() == DType::F32 && w.storage().is_mapped());
    assert_eq!(Model::load(&fixture(MAIN)).unwrap().matrix_dtype(), DType::F32);
}

/// The released multimodal layout: nested `qwen3_5_moe` config, `model.language_model.*`
/// names, plus vision and MTP tensors that must be skipped.
#[test]
fn multimodal_prefix_and_nested_config() {
    let t = read_tensors(&fixture(MAIN));
    let mut out: Tensors = t
        .into_iter()
        .map(|(n, v)| (n.replacen("model.", "model.language_model.", 1), v))
        .collect();
    out.insert(
        "model.visual.blocks.0.attn.qkv.weight".into(),
        (Dtype::F32, vec![2, 2], vec![0; 16]),
    );
    out.insert("mtp.fc.weight".into(), (Dtype::F32, vec![2], vec![0; 8]));
    let nested = serde_json::json!({
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "tie_word_embeddings": false, "text_config": config_json(), "vision_config": {"depth": 1}
    });
    let d = model_dir(&nested, &out);
    reference_logits_match(d.path(), MAIN);
}

#[test]
fn truncated_file_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(MAIN).join("config.json"), d.path().join("config.json")).unwrap();
    let bytes = std::fs::read(fixture(MAIN).join("model.safetensors")).unwrap();
    std::fs::write(d.path().join("model.safetensors"), &bytes[..bytes.len() - 1000]).unwrap();
    let e = load_err(d.path());
    assert!(matches!(e, ModelError::Safetensors { .. }), "{e}");
    assert!(e.to_string().contains("model.safetensors"), "{e}");
}

#[test]
fn missing_tensor_is_named() {
    let mut t = read_tensors(&fixture(MAIN));
    t.remove("model.layers.2.linear_attn.A_log").unwrap();
    let d = model_dir(&config_json(), &t);
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::MissingTensor(n) if n == "model.layers.2.linear_attn.A_log"),
        "{e}"
    );
}

#[test]
fn wrong_shape_is_named() {
    let mut t = read_tensors(&fixture(MAIN));
    let v = t.get_mut("model.layers.3.self_attn.k_norm.weight").unwrap();
    v.1 = vec![16];
    v.2.truncate(16 * 4);
    let d = model_dir(&config_json(), &t);
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::ShapeMismatch { name, expected, found }
            if name == "model.layers.3.self_attn.k_norm.weight" && expected == &vec![32] && found == &vec![16]),
        "{e}"
    );
}

#[test]
fn wrong_dtype_is_named() {
    let mut t = read_tensors(&fixture(MAIN));
    t.get_mut("model.norm.weight").unwrap().0 = Dtype::I32;
    let d = model_dir(&config_json(), &t);
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::UnsupportedDtype { name, .. } if name == "model.norm.weight"),
        "{e}"
    );
    assert!(e.to_string().contains("I32"), "{e}");
}

#[test]
fn config_that_does_not_match_the_weights_is_an_error() {
    let t = read_tensors(&fixture(MAIN));
    let mut cfg = config_json();
    cfg["moe_intermediate_size"] = 16.into();
    let d = model_dir(&cfg, &t);
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::ShapeMismatch { name, .. } if name == "model.layers.0.mlp.experts.0.gate_proj.weight"),
        "{e}"
    );
    // More experts in the config than in the file: the first absent one is named.
    let mut cfg = config_json();
    cfg["num_experts"] = 16.into();
    let d = model_dir(&cfg, &t);
    let e = load_err(d.path());
    assert!(
        matches!(&e, ModelError::MissingTensor(n) if n == "model.layers.0.mlp.experts.8.gate_proj.weight"),
        "{e}"
    );
    // An internally inconsistent config is rejected before any weight is read.
    let mut cfg = config_json();
    cfg["num_hidden_layers"] = 5.into();
    let d = model_dir(&cfg, &t);
    assert!(matches!(load_err(d.path()), ModelError::Config { .. }));
}

#[test]
fn folder_without_weights_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(MAIN).join("config.json"), d.path().join("config.json")).unwrap();
    assert!(matches!(load_err(d.path()), ModelError::NoWeights(_)));
}
