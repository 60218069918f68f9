//! The real device (feature `cuda`): driver probe, context, one non-default stream, cuBLAS, the
//! kernel images of every kernel file in both storage types for this GPU's architecture
//! (prebuilt, cached or compiled by NVRTC: `tensor::kernel_store`; once per process), the
//! function table with each kernel's own launch limits (checked before every launch,
//! `tensor::launch_check`), and raw allocations, copies and launches — the [`Device`] trait over
//! cudarc's driver API.

use crate::tensor::device::{
    DevPtr, Device, DeviceError, Gemm, GemmType, GraphId, KernelArg, LaunchDims, Result,
};
use crate::tensor::kernel_store::{self, Image, Loaded, Origin, Sources, Unit};
use crate::tensor::launch_check::{check_launch, DeviceLimits, FuncLimits};
use crate::tensor::nvrtc::{find_cuda_library, Nvrtc};
use cudarc::cublas::{result::gemm_ex, sys as blas_sys, CudaBlas};
use cudarc::driver::{result as drv, sys, CudaContext, CudaFunction, CudaGraph, CudaStream};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

fn driver(e: cudarc::driver::DriverError) -> DeviceError {
    DeviceError::Driver(e.to_string())
}

/// Is a CUDA driver with at least one device present? Probes libcuda with dlopen first (cudarc
/// panics when the library is missing), then asks the driver for the device count.
pub fn probe() -> Result<usize> {
    let names = ["libcuda.so.1", "libcuda.so"];
    let found = names.iter().any(|n| dlopen_global(n.as_bytes()));
    if !found {
        return Err(DeviceError::NoDevice(
            "libcuda.so.1 (the NVIDIA driver) is not installed".into(),
        ));
    }
    let n = CudaContext::device_count()
        .map_err(|e| DeviceError::NoDevice(format!("cuInit/device count: {e}")))?;
    if n <= 0 {
        return Err(DeviceError::NoDevice(
            "the driver reports no devices".into(),
        ));
    }
    Ok(n as usize)
}

/// dlopen (RTLD_GLOBAL, kept loaded); true when it loaded.
fn dlopen_global(name: &[u8]) -> bool {
    match std::ffi::CString::new(name) {
        // SAFETY: dlopen of a shared library that stays loaded for the process.
        Ok(c) => !unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.is_null(),
        Err(_) => false,
    }
}

/// Make `lib<stem>` loadable for cudarc, which loads by soname and panics when it cannot:
/// load it by full path first (hosts with CUDA only inside PyTorch's wheels have no libcublas
/// on the loader path), else check the soname loads; a missing library is a typed error.
pub(crate) fn preload(stem: &str, env: &str) -> Result<()> {
    if let Ok(p) = find_cuda_library(stem, env) {
        if dlopen_global(p.as_os_str().as_encoded_bytes()) {
            return Ok(());
        }
    }
    let sonames = [
        format!("lib{stem}.so.13"),
        format!("lib{stem}.so.12"),
        format!("lib{stem}.so"),
    ];
    if sonames.iter().any(|n| dlopen_global(n.as_bytes())) {
        return Ok(());
    }
    Err(DeviceError::NoDevice(format!(
        "lib{stem} not found (set {env} to its path)"
    )))
}

/// Every kernel unit's image for `sm` (e.g. "90"), once per process: prebuilt
/// (`$EXECCRITIC_KERNEL_DIR`), from the on-disk cache, or compiled by NVRTC in parallel — a
/// CUBIN for `sm_XX` (so a libnvrtc newer than the driver cannot break loading), PTX for
/// `compute_XX` when this NVRTC cannot emit one (`tensor::kernel_store`).
fn modules_for(sm: &str) -> Result<Vec<Loaded>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Vec<Loaded>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(sm) {
        return Ok(v.clone());
    }
    let t = std::time::Instant::now();
    let out = kernel_store::images(&format!("sm_{sm}"), &Unit::all(), &Sources::from_env(), Nvrtc::get)
        .map_err(|e| DeviceError::Driver(e.to_string()))?;
    let count = |f: fn(&Origin) -> bool| out.iter().filter(|m| f(&m.origin)).count();
    tracing::info!(
        "kernels for sm_{sm}: {} prebuilt, {} cached, {} compiled in {:.1} s",
        count(|o| matches!(o, Origin::Prebuilt(_))),
        count(|o| matches!(o, Origin::Cache(_))),
        count(|o| *o == Origin::Compiled),
        t.elapsed().as_secs_f64()
    );
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(sm.to_string(), out.clone());
    Ok(out)
}

/// A loaded kernel and its own launch limits (read once at load; the dynamic shared memory
/// limit is raised — the opt-in — by the first launch that needs more).
struct Kernel {
    f: CudaFunction,
    limits: Mutex<FuncLimits>,
}

/// A captured graph, owned by its device's list.
struct Graph(CudaGraph);
// SAFETY: a CudaGraph is not internally synchronised; every use (launch, drop) goes through the
// device's `graphs` mutex, so no two threads touch one at the same time.
unsafe impl Send for Graph {}

/// One GPU: context, a non-default stream, cuBLAS handle and all kernels.
pub struct CudaDevice {
    /// Captured graphs (stream capture on `stream`), by id.
    graphs: Mutex<Vec<Option<Graph>>>,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// cuBLAS handle; one GEMM at a time (a handle must not be used by two threads at once).
    blas: Mutex<CudaBlas>,
    pub arch: String,
    funcs: HashMap<String, Kernel>,
    limits: DeviceLimits,
    name: String,
}

impl CudaDevice {
    /// Open device `ordinal`, compile (or reuse) the kernels for its architecture, load them.
    pub fn new(ordinal: usize) -> Result<CudaDevice> {
        probe()?;
        preload("cublasLt", "EXECCRITIC_CUBLASLT")?;
        preload("cublas", "EXECCRITIC_CUBLAS")?;
        let ctx = CudaContext::new(ordinal).map_err(driver)?;
        let (maj, min) = ctx.compute_capability().map_err(driver)?;
        let sm = format!("{maj}{min}");
        let stream = ctx.new_stream().map_err(driver)?;
        if let Err(e) = keep_freed_memory(&ctx) {
            tracing::warn!("memory pool release threshold not set (freed memory is unmapped): {e}");
        }
        let blas = CudaBlas::new(stream.clone()).map_err(|e| DeviceError::Driver(e.to_string()))?;
        let attr = |a| ctx.attribute(a).map(|v| v.max(0) as u32).map_err(driver);
        use sys::CUdevice_attribute as A;
        let limits = DeviceLimits {
            threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            block: (
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ),
            grid: (
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ),
            shared_default: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            shared_opt_in: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            registers_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        };
        let mut funcs = HashMap::new();
        for m in modules_for(&sm)? {
            let (ptx, kind) = match &m.image {
                Image::Cubin(c) => (Ptx::from_binary(c.clone()), "CUBIN"),
                Image::Ptx(p) => (Ptx::from_src(p.clone()), "PTX"),
            };
            let module = ctx.load_module(ptx).map_err(|e| {
                DeviceError::Driver(format!(
                    "loading the {kind} of kernels/{}.cu ({}, {:?}) failed: {e}; PTX or a CUBIN \
                     from a libnvrtc newer than the driver may not load: point EXECCRITIC_NVRTC \
                     at the driver's CUDA version, or prebuild with it (EXECCRITIC_KERNEL_DIR)",
                    m.unit.file,
                    m.unit.act.suffix(),
                    m.origin
                ))
            })?;
            for entry in m.unit.entries() {
                let f = module.load_function(&entry).map_err(driver)?;
                let get = |a| f.get_attribute(a).map(|v| v.max(0) as u32).map_err(driver);
                use sys::CUfunction_attribute as F;
                let limits = FuncLimits {
                    max_threads: get(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                    static_shared: get(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                    max_dynamic_shared: get(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
                };
                funcs.insert(entry, Kernel { f, limits: Mutex::new(limits) });
            }
        }
        let name = format!("{} (sm_{sm})", ctx.name().unwrap_or_else(|_| "GPU".into()));
        Ok(CudaDevice {
            graphs: Mutex::new(Vec::new()),
            ctx,
            stream,
            blas: Mutex::new(blas),
            arch: format!("sm_{sm}"),
            funcs,
            limits,
            name,
        })
    }

    /// The kernel `name`, checked for this launch against the device's limits and its own
    /// (`tensor::launch_check`); raises its dynamic shared memory limit when the launch needs
    /// the opt-in.
    fn checked(&self, name: &str, d: &LaunchDims) -> Result<&CudaFunction> {
        let k = self.funcs.get(name).ok_or_else(|| DeviceError::MissingKernel(name.to_string()))?;
        let mut fl = k.limits.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = check_launch(name, d, &self.limits, &fl)? {
            use sys::CUfunction_attribute as F;
            k.f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, n as i32).map_err(|e| {
                DeviceError::Launch {
                    kernel: name.to_string(),
                    msg: format!("raising its dynamic shared memory limit to {n} bytes (opt-in): {e} {d}"),
                }
            })?;
            fl.max_dynamic_shared = n;
        }
        Ok(&k.f)
    }

    /// The launch limits the driver reports for kernel `name` (None: no such kernel).
    pub fn kernel_limits(&self, name: &str) -> Option<FuncLimits> {
        self.funcs.get(name).map(|k| *k.limits.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn cuda_type(t: GemmType) -> blas_sys::cudaDataType {
    match t {
        GemmType::Bf16 => blas_sys::cudaDataType::CUDA_R_16BF,
        GemmType::F32 => blas_sys::cudaDataType::CUDA_R_32F,
    }
}

impl Device for CudaDevice {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn alloc_zeroed(&self, bytes: usize) -> Result<DevPtr> {
        self.ctx.bind_to_thread().map_err(driver)?;
        // SAFETY: a fresh allocation on this context's stream, zeroed before any use.
        unsafe {
            let p = drv::malloc_async(self.stream.cu_stream(), bytes.max(1))
                .map_err(|_| DeviceError::OutOfMemory(bytes))?;
            drv::memset_d8_async(p, 0, bytes.max(1), self.stream.cu_stream()).map_err(driver)?;
            Ok(p)
        }
    }

    fn free(&self, ptr: DevPtr) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from alloc_zeroed; stream-ordered after the work using it.
            let _ = unsafe { drv::free_async(ptr, self.stream.cu_stream()) };
        }
    }

    fn copy_htod(&self, dst: DevPtr, src: &[u8]) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver)?;
        // SAFETY: the caller's buffer holds at least src.len() bytes; synchronous afterwards
        // so the host slice may be dropped.
        unsafe { drv::memcpy_htod_async(dst, src, self.stream.cu_stream()) }.map_err(driver)?;
        self.stream.synchronize().map_err(driver)
    }

    fn copy_dtoh(&self, src: DevPtr, dst: &mut [u8]) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver)?;
        // SAFETY: as copy_htod; waits for the copy before returning.
        unsafe { drv::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }.map_err(driver)?;
        self.stream.synchronize().map_err(driver)
    }

    fn copy_dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver)?;
        // SAFETY: both ranges lie in live allocations (checked by the typed buffers above).
        unsafe { drv::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }.map_err(driver)
    }

    fn memset_zero(&self, dst: DevPtr, bytes: usize) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver)?;
        // SAFETY: the range lies in a live allocation (checked by the typed buffers above).
        unsafe { drv::memset_d8_async(dst, 0, bytes, self.stream.cu_stream()) }.map_err(driver)
    }

    fn launch(&self, kernel: &str, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        let f = self.checked(kernel, &dims)?;
        self.ctx.bind_to_thread().map_err(driver)?;
        // Argument values live in `vals`; the driver reads them through `params` during the
        // (asynchronous) launch call itself.
        let mut vals: Vec<[u8; 8]> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) | KernelArg::U64(p) => p.to_ne_bytes(),
                KernelArg::I64(v) => v.to_ne_bytes(),
                KernelArg::I32(v) => widen(v.to_ne_bytes()),
                KernelArg::U32(v) => widen(v.to_ne_bytes()),
                KernelArg::F32(v) => widen(v.to_ne_bytes()),
            })
            .collect();
        let mut params: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|v| v.as_mut_ptr() as *mut c_void)
            .collect();
        // SAFETY: the argument list follows the kernel's parameter list (ops.rs); every
        // parameter pointer points at a value of the parameter's size, alive for the call.
        unsafe {
            drv::launch_kernel(
                f.cu_function(),
                dims.grid,
                dims.block,
                dims.shared_bytes,
                self.stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| DeviceError::Launch {
            kernel: kernel.to_string(),
            msg: format!("{e} {dims}"),
        })
    }

    fn gemm(&self, g: &Gemm) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver)?;
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        // SAFETY: pointers from live device buffers whose sizes the caller checked; the handle
        // is bound to the device's stream.
        let blas = self
            .blas
            .lock()
            .map_err(|_| DeviceError::Driver("cuBLAS handle poisoned".into()))?;
        unsafe {
            gemm_ex(
                *blas.handle(),
                op(g.trans_a),
                op(g.trans_b),
                g.m as i32,
                g.n as i32,
                g.k as i32,
                &g.alpha as *const f32 as *const c_void,
                g.a as *const c_void,
                cuda_type(g.a_type),
                g.lda as i32,
                g.b as *const c_void,
                cuda_type(g.b_type),
                g.ldb as i32,
                &g.beta as *const f32 as *const c_void,
                g.c as *mut c_void,
                cuda_type(g.c_type),
                g.ldc as i32,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| DeviceError::Driver(format!("cuBLAS gemm_ex: {e}")))
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver)?;
        self.stream.synchronize().map_err(driver)
    }

    fn memory_info(&self) -> Option<(usize, usize)> {
        self.ctx.bind_to_thread().ok()?;
        drv::mem_get_info().ok()
    }

    fn memory_usage(&self) -> Option<crate::tensor::device::MemoryUsage> {
        use sys::CUmemPool_attribute as P;
        let get = |a| pool_attr(&self.ctx, a, None).ok();
        Some(crate::tensor::device::MemoryUsage {
            in_use: get(P::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            peak: get(P::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
            reserved: get(P::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        })
    }

    fn reset_memory_peak(&self) {
        // the driver accepts only 0 for a high-water mark: restart it from the current use
        let high = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH;
        let _ = pool_attr(&self.ctx, high, Some(0));
    }

    /// Stream capture in thread-local mode: only this thread's work on the stream is recorded.
    fn begin_capture(&self) -> Result<()> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver)
    }

    fn end_capture(&self) -> Result<GraphId> {
        let graph = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(driver)?
            .ok_or_else(|| DeviceError::Driver("stream capture produced no graph".into()))?;
        let mut graphs = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        graphs.push(Some(Graph(graph)));
        Ok((graphs.len() - 1) as GraphId)
    }

    fn launch_graph(&self, id: GraphId) -> Result<()> {
        let graphs = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        match graphs.get(id as usize) {
            Some(Some(g)) => g.0.launch().map_err(driver),
            _ => Err(DeviceError::Driver(format!("no CUDA graph {id}"))),
        }
    }

    fn drop_graph(&self, id: GraphId) {
        let mut graphs = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = graphs.get_mut(id as usize) {
            *g = None;
        }
    }
}

/// Keep freed memory in the device's stream-ordered pool (`alloc_zeroed` is `cuMemAllocAsync`):
/// with the default release threshold of 0 the driver returns it to the OS at every
/// synchronisation and the next step maps it again.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    let threshold = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    pool_attr(ctx, threshold, Some(u64::MAX)).map(|_| ())
}

/// Set (`Some`) or read a 64-bit attribute of the device's default memory pool.
fn pool_attr(ctx: &CudaContext, attr: sys::CUmemPool_attribute, set: Option<u64>) -> Result<u64> {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut value = set.unwrap_or(0);
    let ptr = &mut value as *mut u64 as *mut c_void;
    // SAFETY: `pool` receives the device's default pool; every attribute passed here is a
    // cuuint64_t, read from or written to `value`, which outlives the calls.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()).result().map_err(driver)?;
        match set {
            Some(_) => sys::cuMemPoolSetAttribute(pool, attr, ptr),
            None => sys::cuMemPoolGetAttribute(pool, attr, ptr),
        }
        .result()
        .map_err(driver)?;
    }
    Ok(value)
}

/// A 4-byte value in an 8-byte slot (the driver reads only the parameter's size).
fn widen(b: [u8; 4]) -> [u8; 8] {
    [b[0], b[1], b[2], b[3], 0, 0, 0, 0]
}
