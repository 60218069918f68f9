//! The device seam of the CUDA backend: the few things the host code asks of a GPU — raw
//! allocations, copies, kernel launches by name, cuBLAS-style GEMMs, synchronisation — behind
//! one trait with two implementations: the real device (cudarc, feature `cuda`) and the
//! emulated device, which runs the very `kernels/*.cu` sources on CPU threads. Everything above
//! this trait (launch wrappers, buffers, pools, the forward) is written once and runs unchanged
//! on both, so the code the GPU runs is the code CI runs.
//!
//! Pointers are raw device addresses (`u64`, as CUDA's `CUdeviceptr`); on the emulator they are
//! host addresses of separate allocations (so AddressSanitizer sees every buffer's bounds).
//! Kernel arguments are passed by value in the order of the kernel's parameter list, as the
//! driver's `cuLaunchKernel` takes them.

use std::fmt;

/// A device address (`CUdeviceptr`). 0 is the null pointer kernels test for optional inputs.
pub type DevPtr = u64;

/// One kernel argument, by value, in the kernel's parameter order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    Ptr(DevPtr),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
}

/// A captured CUDA graph of a device (see [`Device::begin_capture`]).
pub type GraphId = u64;

/// Grid, block and dynamic shared memory of one launch (CUDA's `<<<grid, block, shared>>>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

/// Element type of a GEMM operand (cuBLAS `cudaDataType`: `CUDA_R_16BF` or `CUDA_R_32F`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmType {
    Bf16,
    F32,
}

/// One `cublasGemmEx` call with fp32 compute, in cuBLAS's column-major convention:
/// `C[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C`, where `op(X)` is `X` or `Xᵀ`
/// (`trans_*`), and `ld*` are the leading dimensions of the stored (untransposed) matrices.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub a: DevPtr,
    pub a_type: GemmType,
    pub lda: usize,
    pub b: DevPtr,
    pub b_type: GemmType,
    pub ldb: usize,
    pub beta: f32,
    pub c: DevPtr,
    pub c_type: GemmType,
    pub ldc: usize,
}

/// Storage type of activations and weights on the device: each kernel file is compiled once per
/// type (`act_t` in `kernels/prelude.cuh`), entry points suffixed `_bf16` / `_f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActType {
    Bf16,
    F32,
}

impl ActType {
    pub const ALL: [ActType; 2] = [ActType::Bf16, ActType::F32];
    /// The entry-point suffix (`bf16`, `f32`).
    pub fn suffix(self) -> &'static str {
        match self {
            ActType::Bf16 => "bf16",
            ActType::F32 => "f32",
        }
    }
    /// The GEMM operand type of this storage type.
    pub fn gemm_type(self) -> GemmType {
        match self {
            ActType::Bf16 => GemmType::Bf16,
            ActType::F32 => GemmType::F32,
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ActType::Bf16 => 2,
            ActType::F32 => 4,
        }
    }
}

impl std::str::FromStr for ActType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "bf16" => Ok(ActType::Bf16),
            "f32" | "fp32" => Ok(ActType::F32),
            _ => Err(format!("unknown dtype {s:?} (f32 or bf16)")),
        }
    }
}

/// Device memory of this process's allocations, in bytes ([`Device::memory_usage`]): on the GPU
/// the stream-ordered pool that `alloc_zeroed` draws from, on the emulator its allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryUsage {
    /// In live allocations now.
    pub in_use: u64,
    /// The most in live allocations at once since the last [`Device::reset_memory_peak`].
    pub peak: u64,
    /// Held by the allocator for reuse besides (the pool keeps freed memory; the emulator frees
    /// it at once, so there it equals `in_use`).
    pub reserved: u64,
}

/// A device failure. Never a verdict about the model: a bad launch, a missing driver, a shape
/// a kernel does not support.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeviceError {
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("device: {0}")]
    Driver(String),
    #[error("kernel {kernel}: {msg}")]
    Launch { kernel: String, msg: String },
    #[error("kernel {0} was not compiled into any module")]
    MissingKernel(String),
    #[error("out of device memory allocating {0} bytes")]
    OutOfMemory(usize),
    #[error("bad arguments to {op}: {msg}")]
    Shape { op: &'static str, msg: String },
    #[error("unsupported on this device: {0}")]
    Unsupported(String),
    /// The paged KV cache has no free block left for a sequence (not a device failure).
    #[error("{0}")]
    CacheFull(String),
}

pub type Result<T> = std::result::Result<T, DeviceError>;

/// What the CUDA host code needs from a device. Calls are enqueued in order on the device's one
/// (non-default) stream; `synchronize` and the device-to-host copy wait for everything before.
pub trait Device: Send + Sync {
    /// Human-readable name (`"NVIDIA H200 (sm_90)"`, `"emulator (sm_90 limits)"`).
    fn name(&self) -> String;
    /// A new zero-filled allocation of `bytes` (at least 1) bytes.
    fn alloc_zeroed(&self, bytes: usize) -> Result<DevPtr>;
    /// Free an allocation made by `alloc_zeroed` (after the work using it completed).
    fn free(&self, ptr: DevPtr);
    fn copy_htod(&self, dst: DevPtr, src: &[u8]) -> Result<()>;
    fn copy_dtoh(&self, src: DevPtr, dst: &mut [u8]) -> Result<()>;
    fn copy_dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()>;
    fn memset_zero(&self, dst: DevPtr, bytes: usize) -> Result<()>;
    /// Launch `kernel` (an `extern "C" __global__` of `kernels/*.cu`). Launch limits of the
    /// device (threads per block, shared memory per block, grid size) are checked.
    fn launch(&self, kernel: &str, dims: LaunchDims, args: &[KernelArg]) -> Result<()>;
    /// `cublasGemmEx` semantics, fp32 accumulation.
    fn gemm(&self, g: &Gemm) -> Result<()>;
    fn synchronize(&self) -> Result<()>;
    /// (free, total) device memory in bytes, where the device can tell.
    fn memory_info(&self) -> Option<(usize, usize)> {
        None
    }
    /// What the device's allocator holds for this process ([`MemoryUsage`]), where it can tell.
    fn memory_usage(&self) -> Option<MemoryUsage> {
        None
    }
    /// Start a new [`MemoryUsage::peak`] from the bytes in use now.
    fn reset_memory_peak(&self) {}
    /// Start capturing (CUDA stream capture): launches, GEMMs, memsets and device copies
    /// enqueued from now on are recorded into a graph instead of being run. A device without
    /// graphs says `Unsupported` (the caller runs the work directly).
    fn begin_capture(&self) -> Result<()> {
        Err(DeviceError::Unsupported("CUDA graphs".into()))
    }
    /// End the capture: the recorded work as a graph to replay.
    fn end_capture(&self) -> Result<GraphId> {
        Err(DeviceError::Unsupported("CUDA graphs".into()))
    }
    /// Enqueue a captured graph: its work runs again with the pointers and scalars captured.
    fn launch_graph(&self, _id: GraphId) -> Result<()> {
        Err(DeviceError::Unsupported("CUDA graphs".into()))
    }
    /// Free a captured graph.
    fn drop_graph(&self, _id: GraphId) {}
}

impl fmt::Display for LaunchDims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<<<({},{},{}), ({},{},{}), {}>>>",
            self.grid.0,
            self.grid.1,
            self.grid.2,
            self.block.0,
            self.block.1,
            self.block.2,
            self.shared_bytes
        )
    }
}
