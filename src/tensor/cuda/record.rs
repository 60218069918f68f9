//! A device that runs nothing and remembers every kernel launch: [`RecordingDevice`]. The host
//! code (launch wrappers, the forward, sampling, the training backward) runs over it unchanged,
//! at any shapes — a full-size Qwen3.5-35B-A3B step included, since allocations are address
//! ranges only — and the launches it makes come out as a [`LaunchTable`]: kernel, grid, block,
//! dynamic shared memory, and the workload that made them. The kernel resource audit
//! (`tensor::kernel_audit`) holds the compiled kernels against this table, so the launch
//! configurations are the code's own, never typed a second time.
//!
//! Device-to-host copies read zeros. Where the host code sizes a launch from values it downloads
//! (a routing it did not force), the recorded grid reflects those zeros; block sizes and shared
//! memory, which the audit judges, never depend on device data in this code base.

use crate::tensor::device::{DevPtr, Device, DeviceError, Gemm, KernelArg, LaunchDims, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// One distinct launch configuration of a kernel in one workload, and how often it was made.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchUse {
    pub kernel: String,
    pub dims: LaunchDims,
    pub workload: String,
    pub count: u64,
    /// The arguments of the first of these launches.
    pub args: Vec<KernelArg>,
}

impl LaunchUse {
    /// Threads per block.
    pub fn threads(&self) -> u64 {
        let b = self.dims.block;
        b.0 as u64 * b.1 as u64 * b.2 as u64
    }
}

/// Every launch configuration recorded, in first-seen order.
#[derive(Clone, Debug, Default)]
pub struct LaunchTable {
    pub uses: Vec<LaunchUse>,
}

impl LaunchTable {
    /// Append another table (e.g. another config's workloads).
    pub fn extend(&mut self, other: LaunchTable) {
        self.uses.extend(other.uses);
    }
    /// The distinct kernels launched.
    pub fn kernels(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.uses.iter().map(|u| u.kernel.as_str()).collect();
        k.sort_unstable();
        k.dedup();
        k
    }
}

type Key = (String, (u32, u32, u32), (u32, u32, u32), u32, String);

#[derive(Default)]
struct State {
    next: u64,
    live: HashMap<DevPtr, usize>,
    bytes: usize,
    peak: usize,
    workload: String,
    order: Vec<(Key, Vec<KernelArg>)>,
    counts: BTreeMap<Key, u64>,
    gemms: u64,
}

/// See the module documentation.
#[derive(Default)]
pub struct RecordingDevice {
    state: Mutex<State>,
}

impl RecordingDevice {
    pub fn new() -> RecordingDevice {
        RecordingDevice::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Label the launches recorded from now on.
    pub fn set_workload(&self, name: &str) {
        self.state().workload = name.to_string();
    }

    /// Everything recorded so far.
    pub fn table(&self) -> LaunchTable {
        let st = self.state();
        LaunchTable {
            uses: st
                .order
                .iter()
                .map(|(k, args)| LaunchUse {
                    kernel: k.0.clone(),
                    dims: LaunchDims { grid: k.1, block: k.2, shared_bytes: k.3 },
                    workload: k.4.clone(),
                    count: st.counts[k],
                    args: args.clone(),
                })
                .collect(),
        }
    }

    /// The most device memory live at once so far (bytes), and the GEMM calls made.
    pub fn peak_bytes_and_gemms(&self) -> (usize, u64) {
        let st = self.state();
        (st.peak, st.gemms)
    }
}

impl Device for RecordingDevice {
    fn name(&self) -> String {
        "launch recorder (runs nothing)".into()
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<DevPtr> {
        let mut st = self.state();
        // 256-byte aligned address ranges from 1 TiB up; nothing is allocated
        let p = (1u64 << 40) + st.next;
        st.next += (bytes.max(1) as u64).div_ceil(256) * 256;
        st.live.insert(p, bytes);
        st.bytes += bytes;
        st.peak = st.peak.max(st.bytes);
        Ok(p)
    }

    fn free(&self, ptr: DevPtr) {
        let mut st = self.state();
        if let Some(n) = st.live.remove(&ptr) {
            st.bytes -= n;
        }
    }

    fn copy_htod(&self, _dst: DevPtr, _src: &[u8]) -> Result<()> {
        Ok(())
    }

    fn copy_dtoh(&self, _src: DevPtr, dst: &mut [u8]) -> Result<()> {
        dst.fill(0);
        Ok(())
    }

    fn copy_dtod(&self, _dst: DevPtr, _src: DevPtr, _bytes: usize) -> Result<()> {
        Ok(())
    }

    fn memset_zero(&self, _dst: DevPtr, _bytes: usize) -> Result<()> {
        Ok(())
    }

    fn launch(&self, kernel: &str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        if kernel.is_empty() {
            return Err(DeviceError::MissingKernel(String::new()));
        }
        let mut st = self.state();
        let key = (kernel.to_string(), dims.grid, dims.block, dims.shared_bytes, st.workload.clone());
        let n = st.counts.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            st.order.push((key, args.to_vec()));
        }
        Ok(())
    }

    fn gemm(&self, _g: &Gemm) -> Result<()> {
        self.state().gemms += 1;
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::cuda::{ops, Gpu};
    use std::sync::Arc;

    #[test]
    fn records_the_wrappers_launches_by_workload_without_memory() {
        let rec = Arc::new(RecordingDevice::new());
        let gpu = Gpu::from_device(rec.clone());
        // 64 GiB "allocated": address ranges only
        let mut big = gpu.zeros::<f32>(16 << 30).unwrap();
        rec.set_workload("fill");
        ops::fill_f32(&gpu, &mut big, 1.0).unwrap();
        ops::fill_f32(&gpu, &mut big, 2.0).unwrap();
        let t = rec.table();
        assert_eq!(t.uses.len(), 1);
        assert_eq!((t.uses[0].kernel.as_str(), t.uses[0].workload.as_str(), t.uses[0].count), ("fill_f32_f32", "fill", 2));
        assert_eq!(t.uses[0].threads(), 256);
        assert_eq!(rec.peak_bytes_and_gemms().0, 64 << 30);
        drop(big);
        assert_eq!(gpu.download(&gpu.upload(&[7i32, 8]).unwrap()).unwrap(), vec![0, 0]);
    }
}
