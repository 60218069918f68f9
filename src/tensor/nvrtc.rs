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
    /// The `libnvrtc-builtins` loaded from the same folder before the first compile, if any.
    pub builtins: Option<PathBuf>,
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

    /// dlopen `path` (RTLD_GLOBAL, so later loads by soname, e.g. cudarc's, find the same copy),
    /// then its `libnvrtc-builtins.so.<major>.<minor>` from the same folder ([`builtins_beside`]):
    /// libnvrtc opens the builtins by soname at its first compile, and a libnvrtc without a
    /// RUNPATH (the 13.0 wheel's) loaded by full path finds them only when they are already
    /// loaded (or on `LD_LIBRARY_PATH`) — otherwise every compile fails with "failed to open
    /// libnvrtc-builtins.so.13.0".
    pub fn load(path: &Path) -> Result<Nvrtc, NvrtcError> {
        let h = dlopen_global(path)?;
        fn sym<T: Copy>(h: *mut c_void, name: &'static str) -> Result<T, NvrtcError> {
            let c = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: dlsym on a live handle; T is the documented fn-pointer type of `name`.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                return Err(NvrtcError::Symbol(name));
            }
            Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
        }
        let version: VersionFn = sym(h, "nvrtcVersion")?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: out-pointers to locals.
        check("nvrtcVersion", unsafe { version(&mut major, &mut minor) })?;
        // not fatal: libnvrtc may still find its builtins on the loader path
        let builtins = builtins_beside(path, major, minor).filter(|b| match dlopen_global(b) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!("{e}; NVRTC will look for its builtins on the loader path");
                false
            }
        });
        Ok(Nvrtc {
            path: path.to_path_buf(),
            builtins,
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
            version,
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
        Ok(self.compile_cubin_logged(name, src, arch, extra_opts)?.0)
    }

    /// [`Self::compile_cubin`] and NVRTC's program log of the compile (with `-Xptxas=-v` among
    /// the options: ptxas's per-kernel report, see `tensor::cubin::parse_ptxas_log`).
    pub fn compile_cubin_logged(
        &self,
        name: &str,
        src: &str,
        arch: &str,
        extra_opts: &[&str],
    ) -> Result<(Vec<u8>, String), NvrtcError> {
        let (size, get) = self.cubin.ok_or(NvrtcError::Symbol("nvrtcGetCUBIN"))?;
        let guard = self.compile_prog(name, src, arch, extra_opts)?;
        let cubin = self.read(guard.prog, size, get)?;
        Ok((cubin, self.log_of(guard.prog)))
    }

    fn log_of(&self, prog: Prog) -> String {
        self.read(prog, self.log_size, self.log)
            .map(|b| {
                let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                String::from_utf8_lossy(&b[..end]).into_owned()
            })
            .unwrap_or_else(|e| e.to_string())
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
            return Err(NvrtcError::Compile {
                name: name.into(),
                arch: arch.into(),
                log: self.log_of(guard.prog),
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

/// dlopen a shared library by path (RTLD_NOW | RTLD_GLOBAL), kept loaded for the process.
fn dlopen_global(path: &Path) -> Result<*mut c_void, NvrtcError> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| NvrtcError::Input(e.to_string()))?;
    // SAFETY: plain dlopen of a shared library; the handle is intentionally never closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let msg = unsafe { libc::dlerror() };
        let msg = if msg.is_null() {
            "dlopen failed".into()
        } else {
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        };
        return Err(NvrtcError::Load { path: path.to_path_buf(), msg });
    }
    Ok(h)
}

/// The `libnvrtc-builtins` of NVRTC `major.minor` in the folder of the libnvrtc at `nvrtc`:
/// `libnvrtc-builtins.so.<major>.<minor>` (the soname libnvrtc asks for), else any
/// `libnvrtc-builtins.so*` there (never the `.alt` variant).
pub fn builtins_beside(nvrtc: &Path, major: i32, minor: i32) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(nvrtc).ok()?.parent()?.to_path_buf();
    let exact = dir.join(format!("libnvrtc-builtins.so.{major}.{minor}"));
    if exact.is_file() {
        return Some(exact);
    }
    let mut any: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libnvrtc-builtins.so")))
        .collect();
    any.sort();
    any.pop()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtins_are_found_beside_libnvrtc() {
        let dir = tempfile::tempdir().unwrap();
        let touch = |n: &str| std::fs::write(dir.path().join(n), b"").unwrap();
        touch("libnvrtc.so.13");
        touch("libnvrtc-builtins.alt.so.13.0");
        let lib = dir.path().join("libnvrtc.so.13");
        assert_eq!(builtins_beside(&lib, 13, 0), None);
        touch("libnvrtc-builtins.so.13.5");
        touch("libnvrtc-builtins.so.13.0");
        let canon = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(builtins_beside(&lib, 13, 0), Some(canon.join("libnvrtc-builtins.so.13.0")));
        assert_eq!(builtins_beside(&lib, 13, 5), Some(canon.join("libnvrtc-builtins.so.13.5")));
        // another version: the newest builtins there
        assert_eq!(builtins_beside(&lib, 13, 2), Some(canon.join("libnvrtc-builtins.so.13.5")));
    }
}
