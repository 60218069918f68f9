//! CUDA graphs on the emulated device: between `begin_capture` and `end_capture` the device
//! records the work it is given — kernel launches (name, dimensions, argument values), GEMMs,
//! memsets and device-to-device copies — instead of running it, as CUDA's stream capture does;
//! `launch_graph` runs a recorded list again, in order, through the same entry points (so every
//! replayed launch is checked like a direct one). Host copies cannot be captured.

use crate::tensor::device::{DevPtr, DeviceError, Gemm, GraphId, KernelArg, LaunchDims, Result};
use std::sync::Mutex;

/// One recorded piece of device work.
#[derive(Clone, Debug)]
pub(super) enum Recorded {
    Launch(String, LaunchDims, Vec<KernelArg>),
    Gemm(Gemm),
    Memset(DevPtr, usize),
    CopyDtoD { dst: DevPtr, src: DevPtr, bytes: usize },
}

/// The capture in progress (if any) and the captured graphs.
#[derive(Default)]
pub(super) struct Recorder {
    capture: Mutex<Option<Vec<Recorded>>>,
    graphs: Mutex<Vec<Option<Vec<Recorded>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    /// Record `op` when a capture is in progress (the caller then does not run it).
    pub fn record(&self, op: impl FnOnce() -> Recorded) -> bool {
        match lock(&self.capture).as_mut() {
            Some(ops) => {
                ops.push(op());
                true
            }
            None => false,
        }
    }

    /// A host copy during a capture is an error (its host memory would be read at replay).
    pub fn refuse_host_copy(&self, what: &str) -> Result<()> {
        match lock(&self.capture).is_some() {
            true => Err(DeviceError::Unsupported(format!(
                "{what} during a graph capture"
            ))),
            false => Ok(()),
        }
    }

    pub fn begin(&self) -> Result<()> {
        let mut c = lock(&self.capture);
        if c.is_some() {
            return Err(DeviceError::Unsupported("nested graph capture".into()));
        }
        *c = Some(Vec::new());
        Ok(())
    }

    pub fn end(&self) -> Result<GraphId> {
        let ops = lock(&self.capture)
            .take()
            .ok_or_else(|| DeviceError::Unsupported("end_capture without a capture".into()))?;
        let mut g = lock(&self.graphs);
        g.push(Some(ops));
        Ok((g.len() - 1) as GraphId)
    }

    /// The recorded work of graph `id`.
    pub fn ops(&self, id: GraphId) -> Result<Vec<Recorded>> {
        lock(&self.graphs)
            .get(id as usize)
            .cloned()
            .flatten()
            .ok_or_else(|| DeviceError::Unsupported(format!("no graph {id}")))
    }

    pub fn drop_graph(&self, id: GraphId) {
        if let Some(g) = lock(&self.graphs).get_mut(id as usize) {
            *g = None;
        }
    }
}
