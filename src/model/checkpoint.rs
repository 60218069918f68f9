//! `Checkpoint`: the tensors of a Hugging Face safetensors checkpoint (single file or sharded via
//! `model.safetensors.index.json`), memory-mapped. Resolves the `model.language_model.*` /
//! `model.*` prefixes, checks each requested tensor's presence, shape and dtype, and hands out
//! [`Tensor`]s: f32 data is used in place from the map; weight matrices of bf16 checkpoints stay
//! bf16 (in place too, see [`Checkpoint::get_weight`]); everything else bf16/f16 is converted
//! once to f32.
//! Vision (`model.visual.*`) and MTP (`mtp.*`) tensors are skipped with one log line.

use super::error::{ModelError, Result};
use crate::tensor::{DType, Storage, Tensor};
use memmap2::Mmap;
use safetensors::{Dtype as StDtype, SafeTensors};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where one tensor lives.
struct Entry {
    file: usize,
    dtype: std::result::Result<DType, String>,
    shape: Vec<usize>,
    byte_offset: usize,
    nbytes: usize,
}

pub struct Checkpoint {
    maps: Vec<Arc<Mmap>>,
    entries: HashMap<String, Entry>,
    /// `model.language_model.` or `model.`
    prefix: &'static str,
    used: BTreeSet<String>,
    loaded: LoadedBytes,
}

/// What the tensors handed out so far cost: bytes used in place from the map (no allocation;
/// pages are read only when touched) and bytes allocated for decoded copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadedBytes {
    pub mapped: u64,
    pub owned: u64,
}

/// Whether a shard name of `weight_map` is a plain file name: the index may only name files in
/// the checkpoint's own directory (no separators, no `.`/`..`, not empty), as Hugging Face writes
/// them (`model-00001-of-00004.safetensors`).
fn is_shard_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

impl Checkpoint {
    /// Map every safetensors file of the checkpoint in `dir` and index its tensors. Untrusted
    /// input is bounded: shard names must be plain file names in `dir`, every file must be a
    /// regular file, and the safetensors crate refuses headers over 100 MB and offsets outside
    /// the file (a typed [`ModelError::Safetensors`] in every case).
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let files: Vec<PathBuf> = if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(|source| ModelError::Io {
                path: index.clone(),
                source,
            })?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Safetensors {
                path: index.clone(),
                msg: format!("index is not JSON: {e}"),
            })?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| ModelError::Safetensors {
                    path: index.clone(),
                    msg: "index has no weight_map object".into(),
                })?;
            let names: BTreeSet<&str> = map.values().filter_map(|f| f.as_str()).collect();
            if names.is_empty() {
                return Err(ModelError::Safetensors {
                    path: index,
                    msg: "weight_map lists no files".into(),
                });
            }
            if let Some(bad) = names.iter().find(|n| !is_shard_name(n)) {
                return Err(ModelError::Safetensors {
                    path: index,
                    msg: format!("weight_map names `{bad}`, not a file name inside the checkpoint"),
                });
            }
            names.into_iter().map(|n| dir.join(n)).collect()
        } else if single.exists() {
            vec![single]
        } else {
            return Err(ModelError::NoWeights(dir.to_path_buf()));
        };

        let mut maps = Vec::new();
        let mut entries = HashMap::new();
        for (fi, path) in files.iter().enumerate() {
            // Only a regular file (a symlink to one, as in the Hugging Face cache, is fine):
            // opening a FIFO or a device would block or read without end.
            let meta = std::fs::metadata(path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            if !meta.is_file() {
                return Err(ModelError::Safetensors {
                    path: path.clone(),
                    msg: "not a regular file".into(),
                });
            }
            let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            // SAFETY: the checkpoint is opened read-only; it must not be modified while mapped.
            let map = unsafe { Mmap::map(&file) }.map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            let st = SafeTensors::deserialize(&map).map_err(|e| ModelError::Safetensors {
                path: path.clone(),
                msg: e.to_string(),
            })?;
            let base = map.as_ptr() as usize;
            for (name, view) in st.iter() {
                let dtype = match view.dtype() {
                    StDtype::F32 => Ok(DType::F32),
                    StDtype::BF16 => Ok(DType::BF16),
                    StDtype::F16 => Ok(DType::F16),
                    other => Err(format!("{other:?}")),
                };
                let data = view.data();
                entries.insert(
                    name.to_string(),
                    Entry {
                        file: fi,
                        dtype,
                        shape: view.shape().to_vec(),
                        byte_offset: data.as_ptr() as usize - base,
                        nbytes: data.len(),
                    },
                );
            }
            drop(st);
            maps.push(Arc::new(map));
        }
        let prefix = if entries.keys().any(|k| k.starts_with("model.language_model.")) {
            "model.language_model."
        } else {
            "model."
        };
        Ok(Checkpoint {
            maps,
            entries,
            prefix,
            used: BTreeSet::new(),
            loaded: LoadedBytes::default(),
        })
    }

    /// Full name of a decoder tensor given without prefix (`layers.0.mlp.gate.weight`).
    pub fn full_name(&self, name: &str) -> String {
        format!("{}{}", self.prefix, name)
    }

    /// True when the decoder tensor `name` (without prefix) exists.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(&self.full_name(name))
    }

    /// True when the tensor with this exact full name exists.
    pub fn contains_exact(&self, full: &str) -> bool {
        self.entries.contains_key(full)
    }

    /// Decoder tensor `name` (without prefix), checked against `shape`.
    pub fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        self.get_exact(&full, shape)
    }

    /// Tensor with this exact full name (e.g. `lm_head.weight`), checked against `shape`, as f32.
    pub fn get_exact(&mut self, full: &str, shape: &[usize]) -> Result<Tensor> {
        self.load(full, shape, false)
    }

    /// Weight matrix `name` (without prefix) in its compute format: bf16 data stays bf16 (in
    /// place from the map when aligned), f32 stays f32, f16 is widened to f32.
    pub fn get_weight(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        self.get_weight_exact(&full, shape)
    }

    /// [`Checkpoint::get_weight`] by exact full name.
    pub fn get_weight_exact(&mut self, full: &str, shape: &[usize]) -> Result<Tensor> {
        self.load(full, shape, true)
    }

    /// Check presence, shape, dtype and byte length of `full`, then hand out its data: in place
    /// from the map where the format allows, else decoded once (`keep_bf16`: bf16 stays bf16).
    fn load(&mut self, full: &str, shape: &[usize], keep_bf16: bool) -> Result<Tensor> {
        let e = self
            .entries
            .get(full)
            .ok_or_else(|| ModelError::MissingTensor(full.to_string()))?;
        if e.shape != shape {
            return Err(ModelError::ShapeMismatch {
                name: full.to_string(),
                expected: shape.to_vec(),
                found: e.shape.clone(),
            });
        }
        let dtype = e.dtype.clone().map_err(|d| ModelError::UnsupportedDtype {
            name: full.to_string(),
            dtype: d,
        })?;
        let numel: usize = shape.iter().product();
        if e.nbytes != numel * dtype.size() {
            return Err(ModelError::Safetensors {
                path: PathBuf::from(full),
                msg: format!("byte length {} does not match shape {:?}", e.nbytes, shape),
            });
        }
        let map = &self.maps[e.file];
        let bytes = &map[e.byte_offset..e.byte_offset + e.nbytes];
        let in_place = match dtype {
            DType::F32 => true,
            DType::BF16 => keep_bf16,
            DType::F16 => false,
        };
        let mapped = if in_place {
            Storage::mapped(map.clone(), e.byte_offset, numel, dtype)
        } else {
            None
        };
        let storage = match (mapped, dtype) {
            (Some(s), _) => {
                self.loaded.mapped += e.nbytes as u64;
                s
            }
            (None, DType::BF16) if keep_bf16 => {
                self.loaded.owned += e.nbytes as u64;
                Storage::owned_bf16(DType::decode_bf16(bytes))
            }
            (None, d) => {
                self.loaded.owned += (numel * DType::F32.size()) as u64;
                Storage::owned(d.decode_to_f32(bytes))
            }
        };
        self.used.insert(full.to_string());
        Ok(Tensor::from_storage(shape.to_vec(), storage))
    }

    /// Bytes of the tensors handed out so far, in place vs decoded copies.
    pub fn loaded_bytes(&self) -> LoadedBytes {
        self.loaded
    }

    /// Names of the tensors not handed out yet, sorted (vision/MTP ones included).
    pub fn unused(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .entries
            .keys()
            .filter(|n| !self.used.contains(*n))
            .map(String::as_str)
            .collect();
        v.sort_unstable();
        v
    }

    /// Log, once, the tensors that were not used: vision/MTP ones at info level, others as a
    /// warning (e.g. quantisation scales this loader does not apply).
    pub fn report_unused(&self) {
        let mut skipped = 0usize;
        let mut other = Vec::new();
        for name in self.entries.keys().filter(|n| !self.used.contains(*n)) {
            if name.starts_with("mtp.") || name.starts_with("model.visual.") || name.contains(".visual.") {
                skipped += 1;
            } else {
                other.push(name.as_str());
            }
        }
        if skipped > 0 {
            tracing::info!("skipped {skipped} vision/MTP tensors");
        }
        if !other.is_empty() {
            other.sort();
            tracing::warn!("{} unused tensors in checkpoint, e.g. {}", other.len(), other[0]);
        }
    }
}
