//! The device: driver probe, context + stream + cuBLAS, NVRTC compilation of every kernel file
//! for this GPU's architecture (cached per process), and the table of loaded kernel functions.

use crate::tensor::kernels;
use crate::tensor::nvrtc::{find_cuda_library, Nvrtc, NvrtcError};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("cuBLAS: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    #[error("loading the PTX of kernels/{file}.cu failed ({msg}); PTX from a libnvrtc newer than the driver cannot load: point EXECCRITIC_NVRTC at the driver's CUDA version")]
    ModuleLoad { file: String, msg: String },
    #[error("kernel {0} was not compiled into any module")]
    MissingKernel(String),
    #[error("bad arguments to {op}: {msg}")]
    Shape { op: &'static str, msg: String },
}

pub type Result<T> = std::result::Result<T, CudaError>;

/// Is a CUDA driver with at least one device present? Probes libcuda with dlopen first (cudarc
/// panics when the library is missing), then asks the driver for the device count.
pub fn probe() -> Result<usize> {
    let names = ["libcuda.so.1", "libcuda.so"];
    let found = names.iter().any(|n| dlopen_global(n.as_bytes()));
    if !found {
        return Err(CudaError::NoDevice(
            "libcuda.so.1 (the NVIDIA driver) is not installed".into(),
        ));
    }
    let n = CudaContext::device_count()
        .map_err(|e| CudaError::NoDevice(format!("cuInit/device count: {e}")))?;
    if n <= 0 {
        return Err(CudaError::NoDevice("the driver reports no devices".into()));
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
fn preload(stem: &str, env: &str) -> Result<()> {
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
    Err(CudaError::NoDevice(format!(
        "lib{stem} not found (set {env} to its path)"
    )))
}

/// (kernel file, PTX) for every kernel file.
type Modules = Vec<(&'static str, String)>;

/// PTX of every kernel file per architecture, compiled once per process.
fn ptx_for(arch: &str) -> Result<Modules> {
    static CACHE: OnceLock<Mutex<HashMap<String, Modules>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().expect("ptx cache poisoned").get(arch) {
        return Ok(v.clone());
    }
    let nv = Nvrtc::get()?;
    let mut out = vec![];
    for (name, src) in kernels::FILES {
        out.push((
            *name,
            nv.compile_ptx(name, &kernels::unit(name, src), arch, &[])?,
        ));
    }
    cache
        .lock()
        .expect("ptx cache poisoned")
        .insert(arch.to_string(), out.clone());
    Ok(out)
}

/// One GPU: context, stream, cuBLAS handle and all kernels.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    pub arch: String,
    funcs: HashMap<String, CudaFunction>,
}

impl Gpu {
    /// Open device `ordinal`, compile (or reuse) the kernels for its architecture, load them.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        probe()?;
        preload("cublasLt", "EXECCRITIC_CUBLASLT")?;
        preload("cublas", "EXECCRITIC_CUBLAS")?;
        let ctx = CudaContext::new(ordinal)?;
        let (maj, min) = ctx.compute_capability()?;
        let arch = format!("compute_{maj}{min}");
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())?;
        let mut funcs = HashMap::new();
        for (name, ptx) in ptx_for(&arch)? {
            let module =
                ctx.load_module(Ptx::from_src(ptx))
                    .map_err(|e| CudaError::ModuleLoad {
                        file: name.to_string(),
                        msg: e.to_string(),
                    })?;
            let src = kernels::FILES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| *s)
                .unwrap_or("");
            for entry in kernels::entry_points(src) {
                funcs.insert(entry.clone(), module.load_function(&entry)?);
            }
        }
        Ok(Gpu {
            ctx,
            stream,
            blas,
            arch,
            funcs,
        })
    }

    /// A loaded kernel by name.
    pub fn func(&self, name: &str) -> Result<&CudaFunction> {
        self.funcs
            .get(name)
            .ok_or_else(|| CudaError::MissingKernel(name.to_string()))
    }

    /// Device buffer of `n` zeros (weights, caches and scratch are allocated up front).
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        Ok(self.stream.alloc_zeros::<T>(n.max(1))?)
    }

    /// Copy a host slice to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, x: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(x)?)
    }

    /// Copy a device buffer back (synchronises the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(&self, x: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(x)?)
    }

    pub fn sync(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}
