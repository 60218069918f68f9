//! Training checkpoints in Hugging Face layout: `config.json`, sharded
//! `model-0000i-of-0000N.safetensors` with `model.safetensors.index.json`, tokenizer and
//! generation files copied from the source model, plus the optimizer state for resuming
//! (`optimizer.safetensors` with `exp_avg.*`/`exp_avg_sq.*`, `trainer_state.json`: the optimizer
//! step, the AdamW settings and, for `train grpo`, the run's iteration count). Weights are
//! stored in the source model's dtype (`config.json` `dtype`/`torch_dtype`: bf16 checkpoints stay
//! bf16; the f32 master copy is what trains). The folder appears atomically: it is written under
//! a temporary name next to the target and renamed into place.

use super::error::{Result, TrainError};
use super::optim::{AdamW, AdamWConfig};
use super::params::{write_safetensors, write_safetensors_as, ParamStore};
use crate::tensor::DType;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Files copied verbatim from the source model folder when present.
const COPIED: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
];

/// Default shard size (bytes of tensor data per file).
pub const SHARD_BYTES: usize = 2 << 30;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

/// Storage dtype named by the source `config.json` (`dtype` or `torch_dtype`); f32 otherwise.
pub fn source_dtype(source: &Path) -> Result<DType> {
    let p = source.join("config.json");
    let text = std::fs::read_to_string(&p).map_err(io(&p))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TrainError::BadInput(format!("{}: {e}", p.display())))?;
    let name = v.get("dtype").or_else(|| v.get("torch_dtype")).and_then(|d| d.as_str()).unwrap_or("float32");
    Ok(match name {
        "bfloat16" => DType::BF16,
        "float16" => DType::F16,
        _ => DType::F32,
    })
}

/// Save `store` (and `opt` when given) as a Hugging Face model folder at `dir`, copying config
/// and tokenizer files from `source`. Shards hold at most `shard_bytes` of tensor data each
/// (a larger single tensor gets its own shard).
pub fn save(dir: &Path, source: &Path, store: &ParamStore, opt: Option<&AdamW>, shard_bytes: usize) -> Result<()> {
    save_at(dir, source, store, opt, shard_bytes, None)
}

/// [`save`], recording in `trainer_state.json` (with the optimizer state) the number of
/// iterations the run has completed when it differs from the optimizer step — a GRPO
/// iteration whose collection was capped, or whose samples all had zero advantage, takes no
/// step ([`read_progress`] reads it back).
pub fn save_at(
    dir: &Path,
    source: &Path,
    store: &ParamStore,
    opt: Option<&AdamW>,
    shard_bytes: usize,
    iteration: Option<u64>,
) -> Result<()> {
    let dtype = source_dtype(source)?;
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = dir.file_name().ok_or_else(|| TrainError::BadInput(format!("{} has no folder name", dir.display())))?;
    let tmp = parent.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir(&tmp).map_err(io(&tmp))?;
    for f in COPIED {
        let src = source.join(f);
        if src.exists() {
            std::fs::copy(&src, tmp.join(f)).map_err(io(&src))?;
        }
    }
    // Shards, in parameter order.
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut size = 0usize;
    for (i, p) in store.params.iter().enumerate() {
        let b = p.data.len() * dtype.size();
        if size + b > shard_bytes && !shards.last().unwrap().is_empty() {
            shards.push(Vec::new());
            size = 0;
        }
        shards.last_mut().unwrap().push(i);
        size += b;
    }
    let n = shards.len();
    let mut weight_map = serde_json::Map::new();
    for (si, members) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", si + 1, n);
        let map: BTreeMap<String, (Vec<usize>, &[f32])> = members
            .iter()
            .map(|&i| {
                let p = &store.params[i];
                (p.name.clone(), (p.shape.clone(), &p.data[..]))
            })
            .collect();
        write_safetensors_as(&tmp.join(&file), &map, dtype)?;
        for &i in members {
            weight_map.insert(store.params[i].name.clone(), file.clone().into());
        }
    }
    let total: usize = store.params.iter().map(|p| p.data.len() * dtype.size()).sum();
    let index = serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
    let ip = tmp.join("model.safetensors.index.json");
    std::fs::write(&ip, serde_json::to_string_pretty(&index).expect("json")).map_err(io(&ip))?;
    if let Some(o) = opt {
        let mut map = BTreeMap::new();
        for ((p, m), v) in store.params.iter().zip(&o.m).zip(&o.v) {
            map.insert(format!("exp_avg.{}", p.name), (p.shape.clone(), &m[..]));
            map.insert(format!("exp_avg_sq.{}", p.name), (p.shape.clone(), &v[..]));
        }
        write_safetensors(&tmp.join("optimizer.safetensors"), &map)?;
        let mut st = serde_json::json!({ "step": o.step, "adamw": o.cfg });
        if let Some(i) = iteration {
            st["iteration"] = i.into();
        }
        let sp = tmp.join("trainer_state.json");
        std::fs::write(&sp, serde_json::to_string_pretty(&st).expect("json")).map_err(io(&sp))?;
    }
    // Swap into place.
    let old: Option<PathBuf> = if dir.exists() {
        let o = parent.join(format!(".{}.old-{}", name.to_string_lossy(), std::process::id()));
        std::fs::rename(dir, &o).map_err(io(dir))?;
        Some(o)
    } else {
        None
    };
    std::fs::rename(&tmp, dir).map_err(io(dir))?;
    if let Some(o) = old {
        std::fs::remove_dir_all(&o).map_err(io(&o))?;
    }
    Ok(())
}

/// Load the optimizer state saved next to a checkpoint, matching `store`'s parameters.
pub fn load_optimizer(dir: &Path, store: &ParamStore) -> Result<AdamW> {
    read_optimizer(dir, |f| {
        let mut opt = AdamW::new(f.cfg, store);
        opt.step = f.step;
        for (i, p) in store.params.iter().enumerate() {
            opt.m[i] = f.exp_avg(&p.name, &p.shape)?;
            opt.v[i] = f.exp_avg_sq(&p.name, &p.shape)?;
        }
        Ok(opt)
    })
}

/// The optimizer state files of a checkpoint folder, open: the step and AdamW settings of
/// `trainer_state.json` and the moments of `optimizer.safetensors`, read by parameter name
/// (what [`save`] writes; any trainer's parameters, in any order).
pub struct OptimizerFile<'a> {
    pub step: u64,
    pub cfg: AdamWConfig,
    path: &'a Path,
    tensors: safetensors::SafeTensors<'a>,
}

impl OptimizerFile<'_> {
    /// The first moment of parameter `name` (full name), checked against `shape`.
    pub fn exp_avg(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.read(&format!("exp_avg.{name}"), shape)
    }

    /// The second moment of parameter `name` (full name), checked against `shape`.
    pub fn exp_avg_sq(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.read(&format!("exp_avg_sq.{name}"), shape)
    }

    fn read(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let op = self.path;
        let t = self.tensors.tensor(key).map_err(|_| TrainError::BadInput(format!("{}: missing {key}", op.display())))?;
        let len: usize = shape.iter().product();
        if t.dtype() != safetensors::Dtype::F32 || t.shape() != shape || t.data().len() != len * 4 {
            return Err(TrainError::BadInput(format!(
                "{}: {key} is {:?} {:?}, expected F32 {shape:?}",
                op.display(),
                t.dtype(),
                t.shape()
            )));
        }
        Ok(DType::F32.decode_to_f32(t.data()))
    }
}

/// How far the run saved at a checkpoint had come (its `trainer_state.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunProgress {
    /// Optimizer steps taken.
    pub step: u64,
    /// Iterations completed (`train grpo`); the optimizer step when the checkpoint records none
    /// (`train sft`, where every step is an iteration).
    pub iteration: u64,
}

/// The progress recorded at the checkpoint at `dir` (a `BadInput` naming the folder when it
/// holds no `trainer_state.json` or a malformed one).
pub fn read_progress(dir: &Path) -> Result<RunProgress> {
    let (sp, st) = read_state(dir)?;
    let step = st["step"].as_u64().ok_or_else(|| TrainError::BadInput(format!("{}: no step", sp.display())))?;
    let iteration = match st.get("iteration") {
        None => step,
        Some(i) => i.as_u64().ok_or_else(|| TrainError::BadInput(format!("{}: iteration {i} is not a count", sp.display())))?,
    };
    Ok(RunProgress { step, iteration })
}

/// The path and parsed contents of `<dir>/trainer_state.json`.
fn read_state(dir: &Path) -> Result<(PathBuf, serde_json::Value)> {
    if !dir.is_dir() {
        return Err(TrainError::BadInput(format!("{}: no such checkpoint folder", dir.display())));
    }
    let sp = dir.join("trainer_state.json");
    if !sp.is_file() {
        return Err(TrainError::BadInput(format!(
            "{}: no trainer_state.json — not a checkpoint saved with optimizer state",
            dir.display()
        )));
    }
    let text = std::fs::read_to_string(&sp).map_err(io(&sp))?;
    let st: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TrainError::BadInput(format!("{}: {e}", sp.display())))?;
    Ok((sp, st))
}

/// Open the optimizer state saved next to the checkpoint at `dir` and hand it to `f`.
pub fn read_optimizer<R>(dir: &Path, f: impl FnOnce(&OptimizerFile<'_>) -> Result<R>) -> Result<R> {
    let (sp, st) = read_state(dir)?;
    let step = st["step"].as_u64().ok_or_else(|| TrainError::BadInput(format!("{}: no step", sp.display())))?;
    let cfg: AdamWConfig = serde_json::from_value(st["adamw"].clone())
        .map_err(|e| TrainError::BadInput(format!("{}: {e}", sp.display())))?;
    let op = dir.join("optimizer.safetensors");
    let bytes = std::fs::read(&op).map_err(io(&op))?;
    let tensors = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| TrainError::BadInput(format!("{}: {e}", op.display())))?;
    f(&OptimizerFile { step, cfg, path: &op, tensors })
}
