//! One rank's local routed experts on a device: the forward of a block of SwiGLU experts as the
//! inference path runs it — fused gate|up weights `[E_loc, 2I, H]`, a grouped GEMM, SwiGLU, a
//! grouped GEMM with down `[E_loc, H, I]` — over rows already grouped by expert (expert
//! parallelism hands them over grouped). f32 storage; the activations come back to the host as
//! the [`FfnSaved`] of each expert, for the expert backward (on the CPU until device backward
//! kernels exist).

use super::ffn::FfnSaved;
use super::moe::MoeW;
use crate::tensor::cuda::ops::{self, MoeGroups};
use crate::tensor::cuda::{DeviceBuffer, Gpu};
use crate::tensor::device::{DeviceError, Result};
use crate::train::params::ParamStore;
use std::ops::Range;

/// Experts `experts` of a layer, uploaded to `gpu` from the f32 master copy.
pub struct DeviceExperts {
    gpu: Gpu,
    experts: Range<usize>,
    gate_up: DeviceBuffer<f32>,
    down: DeviceBuffer<f32>,
    hidden: usize,
    inter: usize,
}

impl DeviceExperts {
    /// Upload the gate, up and down weights of `experts` (the rank's block).
    pub fn upload(gpu: &Gpu, moe: &MoeW, ps: &ParamStore, experts: Range<usize>) -> Result<DeviceExperts> {
        let block = moe.experts.get(experts.clone()).ok_or_else(|| DeviceError::Shape {
            op: "DeviceExperts::upload",
            msg: format!("experts {experts:?} of {}", moe.experts.len()),
        })?;
        let (hidden, inter) = block.first().map_or((moe.hidden, 0), |f| (f.hidden, f.inter));
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        for f in block {
            if f.hidden != hidden || f.inter != inter {
                return Err(DeviceError::Shape { op: "DeviceExperts::upload", msg: "experts of different shapes".into() });
            }
            gate_up.extend_from_slice(ps.get(f.gate));
            gate_up.extend_from_slice(ps.get(f.up));
            down.extend_from_slice(ps.get(f.down));
        }
        Ok(DeviceExperts {
            gpu: gpu.clone(),
            experts,
            gate_up: gpu.upload(&gate_up)?,
            down: gpu.upload(&down)?,
            hidden,
            inter,
        })
    }

    /// The rows `xg [rows, H]` grouped by local expert (`offsets [E_loc + 1]`) through their
    /// experts: returns `y [rows, H]` in the same order and each local expert's saved activations
    /// (`m = 0` for an expert without rows).
    pub fn forward(&self, xg: &[f32], offsets: &[usize]) -> Result<(Vec<f32>, Vec<FfnSaved>)> {
        let (h, i, ne) = (self.hidden, self.inter, self.experts.len());
        let rows = offsets.last().copied().unwrap_or(0);
        if offsets.len() != ne + 1 || xg.len() != rows * h || offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(DeviceError::Shape {
                op: "DeviceExperts::forward",
                msg: format!("{} values, offsets {offsets:?} for {ne} experts of width {h}", xg.len()),
            });
        }
        let (y, gu, act) = if rows == 0 {
            (vec![], vec![], vec![])
        } else {
            let g = &self.gpu;
            // The rows arrive grouped: group them again on the device (each row's expert) so the
            // grouping carries the GEMM's tile list; its offsets equal `offsets`.
            let mut groups = MoeGroups::new(g, rows, ne)?;
            let expert_of_row: Vec<i32> = offsets
                .windows(2)
                .enumerate()
                .flat_map(|(e, w)| std::iter::repeat_n(e as i32, w[1] - w[0]))
                .collect();
            ops::moe_group(g, &g.upload(&expert_of_row)?, rows, ne, &mut groups)?;
            let x = g.upload(xg)?;
            let mut gu = g.zeros::<f32>(rows * 2 * i)?;
            ops::grouped_gemm(g, &x, &self.gate_up, &mut gu, &groups, false, 1, ne, 2 * i, h, rows)?;
            let mut act = g.zeros::<f32>(rows * i)?;
            ops::swiglu(g, &gu, &mut act, rows, i)?;
            let mut y = g.zeros::<f32>(rows * h)?;
            ops::grouped_gemm(g, &act, &self.down, &mut y, &groups, false, 1, ne, h, i, rows)?;
            (g.download(&y)?, g.download(&gu)?, g.download(&act)?)
        };
        let saved = offsets
            .windows(2)
            .map(|w| {
                let r = w[0]..w[1];
                let (mut gv, mut uv) = (Vec::with_capacity(r.len() * i), Vec::with_capacity(r.len() * i));
                for row in r.clone() {
                    gv.extend_from_slice(&gu[row * 2 * i..row * 2 * i + i]);
                    uv.extend_from_slice(&gu[row * 2 * i + i..(row + 1) * 2 * i]);
                }
                let x = xg[r.start * h..r.end * h].to_vec();
                FfnSaved::from_parts(x, gv, uv, act[r.start * i..r.end * i].to_vec(), r.len())
            })
            .collect();
        Ok((y, saved))
    }

    /// The global index of the first local expert.
    pub fn first(&self) -> usize {
        self.experts.start
    }
}
