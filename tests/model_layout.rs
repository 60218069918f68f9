//! Full-size layout without the weights: the released Qwen3.5-35B-A3B `config.json` and its
//! safetensors shards written header-only as sparse files (≈ 67 GB of bf16 data that is never
//! written nor read), in both expert layouts (fused `experts.gate_up_proj`, as the BF16 release,
//! and per expert, as the FP8 releases), plus the vision/MTP tensors a release carries.
//! * The CPU `Model` loads it: every decoder tensor is mapped (nothing but vision/MTP left
//!   unused), weight matrices stay in place as bf16 (mapped bytes = every matrix), and only the
//!   small vectors are decoded to f32 (owned bytes, checked to the byte).
//! * The trainer (`TrainModel`, f32 master copy) and the CUDA model on the emulated device would
//!   allocate 140 GB / 67 GB here, so they load the same layout with 4 layers, 8 experts and a
//!   512-token vocabulary — once with tiny widths, once with every per-layer tensor at its real
//!   shape (hidden 2048, 16/2 × 256 attention, 16/32 × 128 GDN, experts 512 wide: ≈ 240 M
//!   parameters) — in both expert layouts: the trainer's parameters are exactly the layout's
//!   tensors (fused experts split per expert), and the emulated device holds them in bf16.

use execcritic::model::checkpoint::{Checkpoint, LoadedBytes};
use execcritic::model::layout::{decoder_tensors, qwen35_35b_a3b_config, ExpertLayout, TensorSpec};
use execcritic::model::{LayerType, Model, ModelConfig};
use execcritic::tensor::DType;
use execcritic::train::TrainModel;
use std::path::Path;

#[path = "common/layout.rs"]
mod layout;
use layout::{real_layers_config, scaled_config, write_layout, PREFIX};

/// Vision and MTP tensors of the release (a sample of each kind; loaders must skip them).
fn extras() -> Vec<TensorSpec> {
    [
        ("model.visual.patch_embed.proj.weight", vec![1152, 3, 2, 16, 16]),
        ("model.visual.blocks.0.attn.qkv.weight", vec![3456, 1152]),
        ("mtp.fc.weight", vec![2048, 4096]),
        ("mtp.pre_fc_norm_embedding.weight", vec![2048]),
        ("mtp.layers.0.mlp.experts.gate_up_proj", vec![256, 1024, 2048]),
    ]
    .into_iter()
    .map(|(n, s)| TensorSpec {
        name: n.into(),
        shape: s,
    })
    .collect()
}

/// Bytes the CPU loader decodes to f32 (everything that is not a weight matrix: norms, conv
/// taps, `A_log`, `dt_bias`, the shared-expert gate vector).
fn owned_f32_bytes(specs: &[TensorSpec]) -> u64 {
    specs
        .iter()
        .filter(|t| {
            t.shape.len() == 1
                || t.name.ends_with("conv1d.weight")
                || t.name.ends_with("shared_expert_gate.weight")
        })
        .map(|t| 4 * t.numel() as u64)
        .sum()
}

#[test]
fn real_config_has_the_released_architecture() {
    let cfg =
        ModelConfig::from_json_str(&qwen35_35b_a3b_config().to_string(), Path::new("config.json")).unwrap();
    assert_eq!(
        (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers),
        (248_320, 2048, 40)
    );
    assert_eq!(
        cfg.layer_types.iter().filter(|l| **l == LayerType::Full).count(),
        10
    );
    assert!(cfg
        .layer_types
        .iter()
        .enumerate()
        .all(|(i, l)| (*l == LayerType::Full) == ((i + 1) % 4 == 0)));
    assert_eq!(
        (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            cfg.rotary_dim
        ),
        (16, 2, 256, 64)
    );
    assert_eq!((cfg.linear_num_key_heads, cfg.linear_num_value_heads), (16, 32));
    assert_eq!(
        (cfg.gdn_key_dim(), cfg.gdn_value_dim(), cfg.gdn_conv_dim()),
        (2048, 4096, 8192)
    );
    assert_eq!(
        (
            cfg.num_experts,
            cfg.num_experts_per_tok,
            cfg.moe_intermediate_size
        ),
        (256, 8, 512)
    );
    assert_eq!(cfg.shared_expert_intermediate_size, 512);
    assert!(!cfg.tie_word_embeddings);
    // Parameter count: ≈ 35 B in all, of which the routed experts ≈ 32.2 B.
    let specs = decoder_tensors(&cfg, ExpertLayout::Fused, PREFIX);
    let total: usize = specs.iter().map(TensorSpec::numel).sum();
    let experts: usize = specs
        .iter()
        .filter(|t| t.name.contains(".experts."))
        .map(TensorSpec::numel)
        .sum();
    assert_eq!(experts, 40 * 256 * 3 * 512 * 2048);
    assert!((34_000_000_000..36_000_000_000).contains(&total), "{total}");
    // Both layouts hold the same parameters.
    let per_expert = decoder_tensors(&cfg, ExpertLayout::PerExpert, PREFIX);
    assert_eq!(per_expert.iter().map(TensorSpec::numel).sum::<usize>(), total);
    assert_eq!(per_expert.len() - specs.len(), 40 * (3 * 256 - 2));
}

/// The CPU model maps every tensor of the full-size sparse checkpoint, in both layouts.
#[test]
fn cpu_model_maps_the_full_size_checkpoint() {
    for experts in [ExpertLayout::Fused, ExpertLayout::PerExpert] {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, specs) = write_layout(dir.path(), &qwen35_35b_a3b_config(), experts, &extras());
        let data: u64 = specs.iter().map(|t| 2 * t.numel() as u64).sum();
        assert!(data > 67_000_000_000, "{data}");
        // Sparse: the files take (almost) no disk space.
        let used = disk_usage(dir.path());
        assert!(
            used < 64 << 20,
            "{experts:?}: sparse layout uses {used} bytes on disk"
        );

        let mut ck = Checkpoint::open(dir.path()).unwrap();
        let model = Model::from_checkpoint(cfg.clone(), &mut ck).unwrap();
        assert_eq!(model.config().vocab_size, 248_320);
        assert_eq!(model.matrix_dtype(), DType::BF16);
        let unused = ck.unused();
        let mut expected_unused: Vec<String> = extras().into_iter().map(|t| t.name).collect();
        expected_unused.sort();
        assert_eq!(
            unused, expected_unused,
            "{experts:?}: only vision/MTP tensors stay unused"
        );
        let owned = owned_f32_bytes(&specs);
        let mapped = data - owned / 2;
        assert_eq!(ck.loaded_bytes(), LoadedBytes { mapped, owned }, "{experts:?}");
        assert!(owned < 8_000_000, "{owned}");
    }
}

/// `du`-style allocated bytes of the files in `dir`.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

/// The scaled layout and the real-layer-shapes one, each in both expert layouts.
fn layouts() -> Vec<(serde_json::Value, ExpertLayout)> {
    [scaled_config(), real_layers_config()]
        .into_iter()
        .flat_map(|c| [(c.clone(), ExpertLayout::Fused), (c, ExpertLayout::PerExpert)])
        .collect()
}

/// The trainer's loader maps every tensor of the layout (both expert layouts) into its f32
/// parameters: same count, and per-expert names/shapes exactly the layout's.
#[test]
fn trainer_maps_every_tensor_of_the_scaled_layout() {
    for (config, experts) in layouts() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, specs) = write_layout(dir.path(), &config, experts, &[]);
        let tm = TrainModel::load(dir.path()).unwrap();
        let per_expert = decoder_tensors(&cfg, ExpertLayout::PerExpert, PREFIX);
        let mut want: Vec<(String, Vec<usize>)> = per_expert
            .iter()
            .map(|t| {
                (
                    t.name.strip_prefix(PREFIX).unwrap_or(&t.name).to_string(),
                    t.shape.clone(),
                )
            })
            .collect();
        let mut got: Vec<(String, Vec<usize>)> = tm
            .store
            .params
            .iter()
            .map(|p| {
                let n = p
                    .name
                    .strip_prefix(PREFIX)
                    .or(p.name.strip_prefix("model."))
                    .unwrap_or(&p.name);
                (n.to_string(), p.shape.clone())
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{experts:?}");
        let numel: usize = specs.iter().map(TensorSpec::numel).sum();
        assert_eq!(
            tm.store.numel(),
            numel,
            "{experts:?}: f32 master bytes = 4 x layout params"
        );
    }
}

/// The CUDA model on the emulated device uploads the scaled layout in both expert layouts: the
/// device memory it allocates is every parameter in bf16 (what `train::plan` counts as the
/// weights) except `A_log` and `dt_bias`, kept in f32 (2 more bytes per element).
#[test]
fn cuda_model_on_the_emulator_maps_every_tensor_of_the_scaled_layout() {
    use execcritic::model::backend::cuda::CudaModel;
    use execcritic::tensor::cuda::Gpu;
    use execcritic::tensor::emu::EmuDevice;
    use std::sync::Arc;
    for (config, experts) in layouts() {
        let dir = tempfile::tempdir().unwrap();
        let (_, specs) = write_layout(dir.path(), &config, experts, &[]);
        let dev = Arc::new(EmuDevice::new());
        let gpu = Gpu::from_device(dev.clone());
        let before = dev.live_bytes();
        let m = CudaModel::<u16>::load(&gpu, dir.path()).unwrap();
        let bytes = (dev.live_bytes() - before) as u64;
        let params: u64 = specs.iter().map(|t| t.numel() as u64).sum();
        let f32s: u64 = specs
            .iter()
            .filter(|t| t.name.ends_with("A_log") || t.name.ends_with("dt_bias"))
            .map(|t| t.numel() as u64)
            .sum();
        assert_eq!(bytes, 2 * params + 2 * f32s, "{experts:?}");
        drop(m);
    }
}
