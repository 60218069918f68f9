//! `WeightSource`: where a [`crate::model::Model`] gets its tensors while it is built — a
//! memory-mapped [`Checkpoint`] (weight matrices of bf16 checkpoints stay bf16), or any other
//! owner of named f32 buffers (the trainer's
//! parameters lent to the engine, `train::lease`). Names are given without the decoder prefix
//! (`layers.0.mlp.gate.weight`) except through [`WeightSource::get_exact`].

use super::backend::schema::Param;
use super::checkpoint::Checkpoint;
use super::error::Result;
use crate::tensor::Tensor;

pub trait WeightSource {
    /// Full name of a decoder tensor given without prefix.
    fn full_name(&self, name: &str) -> String;
    /// True when the decoder tensor `name` (without prefix) exists.
    fn contains(&self, name: &str) -> bool;
    /// Decoder tensor `name` (without prefix), checked against `shape`.
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        self.get_exact(&full, shape)
    }
    /// Tensor with this exact full name (e.g. `lm_head.weight`), checked against `shape`.
    fn get_exact(&mut self, full: &str, shape: &[usize]) -> Result<Tensor>;
    /// A weight matrix in the source's compute format (bf16 checkpoints keep bf16; sources of
    /// f32 buffers give f32). The model reads these only through the linear-layer kernels.
    fn get_weight(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.get(name, shape)
    }
    /// [`WeightSource::get`] of a schema tensor.
    fn get_param(&mut self, p: &Param) -> Result<Tensor> {
        self.get(&p.name, &p.shape)
    }
    /// [`WeightSource::get_weight`] of a schema tensor.
    fn get_param_weight(&mut self, p: &Param) -> Result<Tensor> {
        self.get_weight(&p.name, &p.shape)
    }
    /// [`WeightSource::get_weight`] by exact full name.
    fn get_weight_exact(&mut self, full: &str, shape: &[usize]) -> Result<Tensor> {
        self.get_exact(full, shape)
    }
}

impl WeightSource for Checkpoint {
    fn full_name(&self, name: &str) -> String {
        Checkpoint::full_name(self, name)
    }
    fn contains(&self, name: &str) -> bool {
        Checkpoint::contains(self, name)
    }
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        Checkpoint::get(self, name, shape)
    }
    fn get_exact(&mut self, full: &str, shape: &[usize]) -> Result<Tensor> {
        Checkpoint::get_exact(self, full, shape)
    }
    fn get_weight(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        Checkpoint::get_weight(self, name, shape)
    }
    fn get_weight_exact(&mut self, full: &str, shape: &[usize]) -> Result<Tensor> {
        Checkpoint::get_weight_exact(self, full, shape)
    }
}
