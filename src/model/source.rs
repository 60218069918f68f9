//! `WeightSource`: where a [`crate::model::Model`] gets its tensors while it is built — a
//! memory-mapped [`Checkpoint`], or any other owner of named f32 buffers (the trainer's
//! parameters lent to the engine, `train::lease`). Names are given without the decoder prefix
//! (`layers.0.mlp.gate.weight`) except through [`WeightSource::get_exact`].

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
}
