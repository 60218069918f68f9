//! CUDA graphs of decode steps ([`DecodeGraphs`]): a decode step of `b` sequences whose block
//! table has `stride` blocks per row launches the same kernels with the same arguments every
//! time — its index arrays sit in persistent buffers ([`super::StepIndex`]), the scratch and
//! pools never move, attention is split over the table's capacity (`stride × block_size`)
//! rather than the longest context, and the kernels read positions, lengths and slots from
//! device memory. So the step is captured once per `(b, stride)` (lazily, on first use) and
//! replayed afterwards; a batch size keeps only its latest stride's graph (strides only grow
//! while sequences decode). Steps that record routing or replay forced routing are not
//! captured.

use crate::tensor::cuda::gpu::Gpu;
use crate::tensor::device::GraphId;
use std::collections::HashMap;

/// The captured decode steps of one [`super::CudaState`].
pub struct DecodeGraphs {
    gpu: Gpu,
    pub(super) enabled: bool,
    /// Per batch size: the stride captured and its graph.
    by_batch: HashMap<usize, (usize, GraphId)>,
}

impl DecodeGraphs {
    pub fn new(gpu: &Gpu) -> Self {
        DecodeGraphs {
            gpu: gpu.clone(),
            enabled: false,
            by_batch: HashMap::new(),
        }
    }

    /// The graph of a decode step of `b` sequences over a table of `stride` blocks per row.
    pub fn get(&self, b: usize, stride: usize) -> Option<GraphId> {
        self.by_batch
            .get(&b)
            .filter(|(s, _)| *s == stride)
            .map(|&(_, id)| id)
    }

    /// The graph kept for batch size `b`, whatever its stride.
    pub fn latest(&self, b: usize) -> Option<GraphId> {
        self.by_batch.get(&b).map(|&(_, id)| id)
    }

    /// Keep `id` for `(b, stride)`, freeing the batch size's previous graph.
    pub fn insert(&mut self, b: usize, stride: usize, id: GraphId) {
        if let Some((_, old)) = self.by_batch.insert(b, (stride, id)) {
            self.gpu.drop_graph(old);
        }
    }

    /// Graphs kept.
    pub fn len(&self) -> usize {
        self.by_batch.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_batch.is_empty()
    }

    /// Free every graph (and capture no more while `enabled` is false).
    pub fn clear(&mut self) {
        for (_, (_, id)) in self.by_batch.drain() {
            self.gpu.drop_graph(id);
        }
    }
}

impl Drop for DecodeGraphs {
    fn drop(&mut self) {
        self.clear();
    }
}
