//! `ParamStore`: the trainable parameters as owned f32 master copies, each under its Hugging Face
//! name and shape, addressed by a [`Pid`]; and `Grads`, one zero-initialised buffer per parameter.
//! Writing any named set of f32 tensors to a safetensors file lives here too.

use super::error::{Result, TrainError};
use crate::model::checkpoint::Checkpoint;
use crate::tensor::{DType, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// Index of one parameter in a [`ParamStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pid(pub usize);

/// One parameter: Hugging Face name, shape, f32 values.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

#[derive(Clone, Debug, Default)]
pub struct ParamStore {
    pub params: Vec<Param>,
}

impl ParamStore {
    /// Add a parameter copied from `t` under `name`.
    pub fn push(&mut self, name: String, t: &Tensor) -> Pid {
        self.params.push(Param { name, shape: t.shape().to_vec(), data: t.data().to_vec() });
        Pid(self.params.len() - 1)
    }

    /// Load decoder tensor `name` (without prefix) from `ck` with `shape`.
    pub fn load(&mut self, ck: &mut Checkpoint, name: &str, shape: &[usize]) -> Result<Pid> {
        let t = ck.get(name, shape)?;
        Ok(self.push(ck.full_name(name), &t))
    }

    pub fn get(&self, p: Pid) -> &[f32] {
        &self.params[p.0].data
    }

    pub fn get_mut(&mut self, p: Pid) -> &mut [f32] {
        &mut self.params[p.0].data
    }

    pub fn len(&self) -> usize {
        self.params.len()
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Total number of scalars.
    pub fn numel(&self) -> usize {
        self.params.iter().map(|p| p.data.len()).sum()
    }

    /// Zero gradients for every parameter.
    pub fn zero_grads(&self) -> Grads {
        Grads(self.params.iter().map(|p| vec![0.0; p.data.len()]).collect())
    }

    /// Save the parameters to one safetensors file (f32).
    pub fn save(&self, path: &Path) -> Result<()> {
        let map = self.params.iter().map(|p| (p.name.clone(), (p.shape.clone(), &p.data[..]))).collect();
        write_safetensors(path, &map)
    }
}

/// Gradient buffers, one per parameter, same order and sizes as the store.
#[derive(Clone, Debug)]
pub struct Grads(pub Vec<Vec<f32>>);

impl Grads {
    pub fn get(&self, p: Pid) -> &[f32] {
        &self.0[p.0]
    }

    pub fn get_mut(&mut self, p: Pid) -> &mut [f32] {
        &mut self.0[p.0]
    }

    /// Multiply every gradient by `s` (e.g. 1/accumulation steps).
    pub fn scale(&mut self, s: f32) {
        self.0.iter_mut().flatten().for_each(|g| *g *= s);
    }

    /// `self += other` (gradient accumulation across micro-batches).
    pub fn add(&mut self, other: &Grads) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }

    /// Global L2 norm over every gradient (in f64).
    pub fn global_norm(&self) -> f64 {
        self.0.iter().flatten().map(|g| (*g as f64) * (*g as f64)).sum::<f64>().sqrt()
    }

    /// Write the gradients under the store's parameter names.
    pub fn save(&self, store: &ParamStore, path: &Path) -> Result<()> {
        let map = store.params.iter().zip(&self.0).map(|(p, g)| (p.name.clone(), (p.shape.clone(), &g[..]))).collect();
        write_safetensors(path, &map)
    }
}

/// Write f32 tensors `name → (shape, data)` to a safetensors file, atomically (temp + rename).
pub fn write_safetensors(path: &Path, tensors: &BTreeMap<String, (Vec<usize>, &[f32])>) -> Result<()> {
    write_safetensors_as(path, tensors, DType::F32)
}

/// As [`write_safetensors`], storing the values as `dtype` (bf16/f16 rounded to nearest even).
pub fn write_safetensors_as(path: &Path, tensors: &BTreeMap<String, (Vec<usize>, &[f32])>, dtype: DType) -> Result<()> {
    let werr = |msg: String| TrainError::Write { path: path.to_path_buf(), msg };
    let encode = |d: &[f32]| -> Vec<u8> {
        match dtype {
            DType::F32 => d.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::BF16 => d.iter().flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes()).collect(),
            DType::F16 => d.iter().flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes()).collect(),
        }
    };
    let st_dtype = match dtype {
        DType::F32 => safetensors::Dtype::F32,
        DType::BF16 => safetensors::Dtype::BF16,
        DType::F16 => safetensors::Dtype::F16,
    };
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> =
        tensors.iter().map(|(n, (s, d))| (n.clone(), s.clone(), encode(d))).collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(st_dtype, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| werr(e.to_string()))
        })
        .collect::<Result<_>>()?;
    let data = safetensors::serialize(views, None).map_err(|e| werr(e.to_string()))?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|source| TrainError::Io { path: dir.to_path_buf(), source })?;
    std::io::Write::write_all(&mut tmp, &data).map_err(|source| TrainError::Io { path: path.to_path_buf(), source })?;
    tmp.as_file().sync_all().map_err(|source| TrainError::Io { path: path.to_path_buf(), source })?;
    tmp.persist(path).map_err(|e| TrainError::Io { path: path.to_path_buf(), source: e.error })?;
    Ok(())
}
