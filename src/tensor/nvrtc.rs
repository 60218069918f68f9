//! NVRTC, the CUDA run-time compiler, loaded from a shared library at run time: turns the CUDA C
//! sources in `kernels/` into PTX for a virtual architecture (`compute_90`) or a CUBIN for a real
//! one (`sm_90`; the backend prefers it, since PTX from an NVRTC newer than the driver does not
//! load). It needs no GPU and no toolkit,
//! only `libnvrtc.so` (a driver install, a PyTorch install or the `nvidia-cuda-nvrtc` wheel), so
//! CI compiles every kernel for sm_90 on a CPU machine. This is not behind the `cuda` feature;
//! the CUDA backend loads the PTX it produces through the driver API.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming the libnvrtc shared library to use (a file path).
pub const NVRTC_ENV: &str = "EXECCRITIC_NVRTC";

#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("libnvrtc not found (set {NVRTC_ENV} to its path, or pip install nvidia-cuda-nvrtc); searched: {0}")]
    NotFound(String),
    #[error("cannot load {path}: {msg}")]
    Load { path: PathBuf, msg: String },
    #[error("libnvrtc lacks symbol {0}")]
    Symbol(&'static str),
    #[error("NVRTC {call} failed with code {code}")]
    Call { call: &'static str, code: c_int },
    #[error("NVRTC could not compile {name} for {arch}:\n{log}")]
    Compile {
        name: String,
        arch: String,
        log: String,
    },
    #[error("invalid compile input: {0}")]
    Input(String),
}

type Prog = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Prog) -> c_int;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

/// A loaded libnvrtc (kept for the life of the process).
pub struct Nvrtc {
    pub path: PathBuf,
    create: CreateFn,
    compile: CompileFn,
    ptx_size: SizeFn,
    ptx: GetFn,
    /// `nvrtcGetCUBIN*` (absent from very old NVRTCs: then only PTX is available).
    cubin: Option<(SizeFn, GetFn)>,
    log_size: SizeFn,
    log: GetFn,
    destroy: DestroyFn,
    version: VersionFn,
}

// SAFETY: NVRTC's API is thread-safe for distinct programs; the struct only holds fn pointers.
unsafe impl Send for Nvrtc {}
unsafe impl Sync for Nvrtc {}

impl Nvrtc {
    /// The process-wide NVRTC, located by [`find_library`] on first use.
    pub fn get() -> Result<&'static Nvrtc, NvrtcError> {
        static CELL: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
        let r = CELL.get_or_init(|| {
            let path = find_library().map_err(|e| e.to_string())?;
            Nvrtc::load(&path).map_err(|e| e.to_string())
        });
        match r {
            Ok(n) => Ok(n),
            Err(m) => Err(NvrtcError::NotFound(m.clone())),
        }
    }

    /// dlopen `path` (RTLD_GLOBAL, so later loads by soname, e.g. cudarc's, find the same copy).
    pub fn load(path: &Path) -> Result<Nvrtc, NvrtcError> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|e| NvrtcError::Input(e.to_string()))?;
        // SAFETY: plain dlopen of a shared library; the handle is intentionally never closed.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a thread-local C string or null.
            let msg = unsafe { libc::dlerror() };
            let msg = if msg.is_null() {
                "dlopen failed".into()
            } else {
                unsafe { CStr::from_ptr(msg) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(NvrtcError::Load {
                path: path.to_path_buf(),
                msg,
            });
        }
        fn sym<T: Copy>(h: *mut c_void, name: &'static str) -> Result<T, NvrtcError> {
            let c = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: dlsym on a live handle; T is the documented fn-pointer type of `name`.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                return Err(NvrtcError::Symbol(name));
            }
            Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
        }
        Ok(Nvrtc {
            path: path.to_path_buf(),
            create: sym(h, "nvrtcCreateProgram")?,
            compile: sym(h, "nvrtcCompileProgram")?,
            ptx_size: sym(h, "nvrtcGetPTXSize")?,
            ptx: sym(h, "nvrtcGetPTX")?,
            cubin: match (sym(h, "nvrtcGetCUBINSize"), sym(h, "nvrtcGetCUBIN")) {
                (Ok(a), Ok(b)) => Some((a, b)),
                _ => None,
            },
            log_size: sym(h, "nvrtcGetProgramLogSize")?,
            log: sym(h, "nvrtcGetProgramLog")?,
            destroy: sym(h, "nvrtcDestroyProgram")?,
            version: sym(h, "nvrtcVersion")?,
        })
    }

    /// NVRTC's (major, minor) version.
    pub fn version(&self) -> Result<(i32, i32), NvrtcError> {
        let (mut a, mut b) = (0, 0);
        // SAFETY: out-pointers to locals.
        check("nvrtcVersion", unsafe { (self.version)(&mut a, &mut b) })?;
        Ok((a, b))
    }

    /// Compile one CUDA C source to PTX for `arch` (e.g. "compute_90"). `name` labels errors.
    pub fn compile_ptx(
        &self,
        name: &str,
        src: &str,
        arch: &str,
        extra_opts: &[&str],
    ) -> Result<String, NvrtcError> {
        let guard = self.compile_prog(name, src, arch, extra_opts)?;
        let bytes = self.read(guard.prog, self.ptx_size, self.ptx)?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }

    /// Compile one CUDA C source to a CUBIN for the real architecture `arch` (e.g. "sm_90").
    pub fn compile_cubin(
        &self,
        name: &str,
        src: &str,
        arch: &str,
        extra_opts: &[&str],
    ) -> Result<Vec<u8>, NvrtcError> {
        let (size, get) = self.cubin.ok_or(NvrtcError::Symbol("nvrtcGetCUBIN"))?;
        let guard = self.compile_prog(name, src, arch, extra_opts)?;
        self.read(guard.prog, size, get)
    }

    fn compile_prog(
        &self,
        name: &str,
        src: &str,
        arch: &str,
        extra_opts: &[&str],
    ) -> Result<ProgGuard, NvrtcError> {
        let csrc = CString::new(src)
            .map_err(|_| NvrtcError::Input(format!("{name}: source contains NUL")))?;
        let cname =
            CString::new(name).map_err(|_| NvrtcError::Input("name contains NUL".into()))?;
        let mut opts: Vec<CString> =
            vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()]
                .into_iter()
                .chain(extra_opts.iter().map(|s| s.to_string()))
                .map(|s| {
                    CString::new(s).map_err(|_| NvrtcError::Input("option contains NUL".into()))
                })
                .collect::<Result<_, _>>()?;
        opts.shrink_to_fit();
        let optp: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: valid C strings; no headers.
        check("nvrtcCreateProgram", unsafe {
            (self.create)(
                &mut prog,
                csrc.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        let guard = ProgGuard {
            prog,
            destroy: self.destroy,
        };
        // SAFETY: prog is live; options outlive the call.
        let rc = unsafe { (self.compile)(guard.prog, optp.len() as c_int, optp.as_ptr()) };
        if rc != 0 {
            let log = self
                .read(guard.prog, self.log_size, self.log)
                .map(|b| {
                    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                    String::from_utf8_lossy(&b[..end]).into_owned()
                })
                .unwrap_or_else(|e| e.to_string());
            return Err(NvrtcError::Compile {
                name: name.into(),
                arch: arch.into(),
                log,
            });
        }
        Ok(guard)
    }

    fn read(&self, prog: Prog, size: SizeFn, get: GetFn) -> Result<Vec<u8>, NvrtcError> {
        let mut n = 0usize;
        // SAFETY: prog is live; the buffer has the size NVRTC reported.
        check("nvrtcGet*Size", unsafe { size(prog, &mut n) })?;
        let mut buf = vec![0u8; n.max(1)];
        check("nvrtcGet*", unsafe {
            get(prog, buf.as_mut_ptr() as *mut c_char)
        })?;
        buf.truncate(n);
        Ok(buf)
    }
}

struct ProgGuard {
    prog: Prog,
    destroy: DestroyFn,
}
impl Drop for ProgGuard {
    fn drop(&mut self) {
        // SAFETY: prog came from nvrtcCreateProgram and is destroyed once.
        unsafe { (self.destroy)(&mut self.prog) };
    }
}

fn check(call: &'static str, code: c_int) -> Result<(), NvrtcError> {
    if code == 0 {
        Ok(())
    } else {
        Err(NvrtcError::Call { call, code })
    }
}

/// Locate libnvrtc: `$EXECCRITIC_NVRTC`, then `nvidia/*/lib/libnvrtc.so*` under Python's
/// site-packages (the PyPI wheel, or the copy PyTorch depends on), then the CUDA toolkit dirs.
pub fn find_library() -> Result<PathBuf, NvrtcError> {
    find_cuda_library("nvrtc", NVRTC_ENV)
}

/// Locate `lib<stem>.so*`: `$env` (a file path) first, then the NVIDIA wheels in Python's
/// site-packages, then the CUDA toolkit dirs. The CUDA backend also uses it for cuBLAS(Lt) on
/// hosts where those only exist inside PyTorch's wheels. (`libcublas.so*` does not match
/// `libcublasLt.so*`: the prefix ends in ".so".)
pub fn find_cuda_library(stem: &str, env: &str) -> Result<PathBuf, NvrtcError> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(NvrtcError::NotFound(format!(
                "{env}={} is not a file",
                p.display()
            )))
        };
    }
    let prefix = format!("lib{stem}.so");
    let mut dirs: Vec<PathBuf> = python_site_dirs()
        .into_iter()
        .flat_map(|sp| {
            let nv = sp.join("nvidia");
            let mut v = vec![
                nv.join(format!("cuda_{stem}/lib")),
                nv.join(format!("{}/lib", stem.to_lowercase())),
            ];
            if let Ok(rd) = std::fs::read_dir(&nv) {
                v.extend(rd.flatten().map(|e| e.path().join("lib")));
            }
            v
        })
        .collect();
    dirs.extend(
        [
            "/usr/local/cuda/lib64",
            "/usr/local/cuda/targets/x86_64-linux/lib",
            "/usr/lib/x86_64-linux-gnu",
        ]
        .map(PathBuf::from),
    );
    for d in &dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut hits: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect();
        hits.sort();
        if let Some(p) = hits.pop() {
            return Ok(p);
        }
    }
    Err(NvrtcError::NotFound(
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    ))
}

/// Python's site-packages directories (empty when python3 is absent).
fn python_site_dirs() -> Vec<PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import site,sys;print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))"])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => vec![],
    }
}
