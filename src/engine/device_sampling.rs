//! Sampling on the device for the CUDA backend's decode step: the engine's [`SampleSpec`]s
//! become rows of the `sample_tokens` kernel (`kernels/sample.cu`, the host sampler's semantics
//! with the request's own uniform draw), run over the step's logits where they lie; only the
//! token ids and both log-probabilities come back. The parameter and output buffers are
//! allocated once, for the most sequences a step can hold. A draw the kernel cannot make — top-k
//! beyond [`SAMPLE_MAX_KEEP`], a nucleus that needs more candidates than that — is left to the
//! host sampler (`None`), which then gets the row's logits and the same draw; so is every row
//! when the `device-sampling` switch is off (`tensor::cuda::switches`).

use super::backend::SampleSpec;
use super::sampler::Sampled;
use crate::tensor::cuda::gpu::{DeviceBuffer, Gpu};
use crate::tensor::cuda::ops::{self, SampleParams, SampleRow, SAMPLE_MAX_KEEP};
use crate::tensor::device::{DeviceError, Result};

/// Persistent device buffers of the sampling kernel for up to `capacity` rows.
pub struct DeviceSampler {
    params: SampleParams,
    token: DeviceBuffer<i32>,
    logprob: DeviceBuffer<f32>,
    sampling_logprob: DeviceBuffer<f32>,
}

/// The kernel row of a spec over a vocabulary of `vocab`, or `None` when the kernel cannot draw
/// it (top-k above [`SAMPLE_MAX_KEEP`] that still truncates).
pub fn kernel_row(spec: &SampleSpec, vocab: usize) -> Option<SampleRow> {
    let top_k = if spec.top_k >= vocab { 0 } else { spec.top_k };
    (top_k <= SAMPLE_MAX_KEEP).then_some(SampleRow {
        temperature: spec.temperature,
        top_k,
        top_p: spec.top_p,
        u: spec.u,
    })
}

/// A row that takes no token this step: the cheapest draw (greedy), whose result is ignored.
const IDLE: SampleRow = SampleRow {
    temperature: 0.0,
    top_k: 0,
    top_p: 1.0,
    u: 0.0,
};

impl DeviceSampler {
    pub fn new(gpu: &Gpu, capacity: usize) -> Result<DeviceSampler> {
        Ok(DeviceSampler {
            params: SampleParams::with_capacity(gpu, capacity)?,
            token: gpu.zeros(capacity)?,
            logprob: gpu.zeros(capacity)?,
            sampling_logprob: gpu.zeros(capacity)?,
        })
    }

    /// Sample row `b` of `logits` (`[rows.len(), vocab]`) for every `rows[b]` that is `Some`;
    /// the result is `Some` where the device drew the token, `None` where the row took no token
    /// or the host must draw it.
    pub fn sample(
        &mut self,
        gpu: &Gpu,
        logits: &DeviceBuffer<f32>,
        vocab: usize,
        rows: &[Option<SampleRow>],
    ) -> Result<Vec<Option<Sampled>>> {
        let b = rows.len();
        if b > self.params.capacity() {
            return Err(DeviceError::Shape {
                op: "sample_tokens",
                msg: format!("{b} rows for buffers of {}", self.params.capacity()),
            });
        }
        // switched off (`EXECCRITIC_CUDA_DISABLE=device-sampling`): every row is the host's
        if rows.iter().all(Option::is_none) || !gpu.switches().device_sampling {
            return Ok(vec![None; b]);
        }
        let kernel_rows: Vec<SampleRow> = rows.iter().map(|r| r.unwrap_or(IDLE)).collect();
        self.params.write(gpu, &kernel_rows)?;
        ops::sample_tokens(
            gpu,
            logits,
            b,
            vocab,
            &self.params,
            &mut self.token,
            &mut self.logprob,
            &mut self.sampling_logprob,
        )?;
        let token = gpu.download_prefix(&self.token, b)?;
        let logprob = gpu.download_prefix(&self.logprob, b)?;
        let sampling_logprob = gpu.download_prefix(&self.sampling_logprob, b)?;
        Ok((0..b)
            .map(|i| {
                let drawn = rows[i].is_some() && token[i] >= 0;
                drawn.then(|| Sampled {
                    token: token[i] as u32,
                    logprob: logprob[i],
                    sampling_logprob: sampling_logprob[i],
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(top_k: usize) -> SampleSpec {
        SampleSpec {
            temperature: 1.0,
            top_k,
            top_p: 0.9,
            u: 0.25,
            logits: false,
        }
    }

    #[test]
    fn kernel_rows_cover_what_the_kernel_can_draw() {
        let r = kernel_row(&spec(20), 1000).unwrap();
        assert_eq!((r.top_k, r.top_p, r.u), (20, 0.9, 0.25));
        // a top-k of the whole vocabulary (or more) restricts nothing
        assert_eq!(kernel_row(&spec(1000), 1000).unwrap().top_k, 0);
        assert_eq!(kernel_row(&spec(5000), 1000).unwrap().top_k, 0);
        // a top-k the kernel cannot keep is the host's
        assert!(kernel_row(&spec(SAMPLE_MAX_KEEP + 1), 100_000).is_none());
        assert!(kernel_row(&spec(SAMPLE_MAX_KEEP), 100_000).is_some());
    }
}
