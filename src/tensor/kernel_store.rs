//! Where the real device's kernel images come from: every compile unit (a `kernels/*.cu` file in
//! one storage type, [`Unit`]) as an sm_XX CUBIN, taken in this order —
//! 1. a **prebuilt directory** named by `$EXECCRITIC_KERNEL_DIR` ([`prebuild`] writes it:
//!    one CUBIN per unit and `manifest.json` with each unit's source hash, the NVRTC version and
//!    the architecture), for every unit whose source hash and architecture match;
//! 2. the **on-disk cache** `$EXECCRITIC_CACHE/kernels/<arch>/nvrtc-<major>.<minor>/` (default
//!    `~/.cache/execcritic`), keyed by source hash, NVRTC version and architecture;
//!    `EXECCRITIC_KERNEL_CACHE=off` disables it;
//! 3. **NVRTC**, the remaining units compiled in parallel (one worker per CPU) and written to the
//!    cache (atomically: a temporary file renamed into place); PTX for `compute_XX` for a unit
//!    this NVRTC cannot compile to a CUBIN of the architecture.
//!
//! A prebuilt directory needs no NVRTC on the GPU host at all. The source hash covers the
//! prelude, the file, the storage type's define and the compile options, so an edited kernel is
//! never served from a stale image. Not behind the `cuda` feature: CI prebuilds and reloads.

use crate::tensor::device::ActType;
use crate::tensor::kernels;
use crate::tensor::nvrtc::{Nvrtc, NvrtcError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Environment variable naming a prebuilt kernel directory.
pub const KERNEL_DIR_ENV: &str = "EXECCRITIC_KERNEL_DIR";
/// Environment variable that turns the on-disk kernel cache off (`off` or `0`).
pub const KERNEL_CACHE_ENV: &str = "EXECCRITIC_KERNEL_CACHE";
/// The manifest file of a prebuilt directory.
pub const MANIFEST: &str = "manifest.json";
/// Bumped when the manifest's meaning changes.
pub const MANIFEST_FORMAT: u32 = 1;
/// NVRTC options beyond `--gpu-architecture` and `--std=c++17` (part of every source hash).
pub const COMPILE_OPTIONS: &[&str] = &[];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    #[error("{path}: {msg}")]
    Io { path: PathBuf, msg: String },
    #[error("prebuilt kernels {dir}: {msg}")]
    Manifest { dir: PathBuf, msg: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::Io { path: path.to_path_buf(), msg: e.to_string() }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One compile unit: a kernel file in one storage type, its full source and its hash.
#[derive(Clone, Debug)]
pub struct Unit {
    pub file: &'static str,
    pub act: ActType,
    pub source: String,
    /// sha256 of the compile options and the unit's source.
    pub hash: String,
}

impl Unit {
    fn new(file: &'static str, src: &str, act: ActType) -> Unit {
        let source = kernels::unit_for(file, src, act);
        let mut h = Sha256::new();
        for o in COMPILE_OPTIONS {
            h.update(o.as_bytes());
            h.update([0]);
        }
        h.update(source.as_bytes());
        Unit { file, act, hash: hex::encode(h.finalize()), source }
    }

    /// Every kernel file in both storage types.
    pub fn all() -> Vec<Unit> {
        kernels::FILES
            .iter()
            .flat_map(|(f, src)| ActType::ALL.map(|a| Unit::new(f, src, a)))
            .collect()
    }

    /// `moe.bf16`: the unit's name in file names and messages.
    pub fn id(&self) -> String {
        format!("{}.{}", self.file, self.act.suffix())
    }

    /// The entry points the unit defines (`name_bf16` / `name_f32`).
    pub fn entries(&self) -> Vec<String> {
        let src = kernels::FILES.iter().find(|(f, _)| *f == self.file).map_or("", |(_, s)| *s);
        kernels::entry_points_for(src, self.act)
    }
}

/// A unit compiled to a CUBIN, with NVRTC's log of the compile.
pub struct Compiled {
    pub unit: Unit,
    pub cubin: Vec<u8>,
    pub log: String,
}

/// Run `f` over `items` on one worker per CPU (at most one per item); results in input order.
pub fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len()).max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = vec![];
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(x) = items.get(i) else { break };
                        mine.push((i, f(x)));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// Compile `units` to CUBINs for `arch` (e.g. `sm_90`) in parallel. With `ptxas_report` ptxas
/// reports every kernel's registers, frame and spills in the log (`-Xptxas=-v`).
pub fn compile_all(nv: &Nvrtc, units: &[Unit], arch: &str, ptxas_report: bool) -> Result<Vec<Compiled>, NvrtcError> {
    let mut opts: Vec<&str> = COMPILE_OPTIONS.to_vec();
    if ptxas_report {
        opts.push("-Xptxas=-v");
    }
    parallel_map(units, |u| {
        let (cubin, log) = nv.compile_cubin_logged(&u.id(), &u.source, arch, &opts)?;
        Ok(Compiled { unit: u.clone(), cubin, log })
    })
    .into_iter()
    .collect()
}

/// `manifest.json` of a prebuilt kernel directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    /// Real architecture of every CUBIN (`sm_90`).
    pub arch: String,
    /// NVRTC that compiled them (`13.0`).
    pub nvrtc: String,
    pub units: Vec<ManifestUnit>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ManifestUnit {
    pub file: String,
    /// `bf16` or `f32`.
    pub act: String,
    /// [`Unit::hash`] of the source it was compiled from.
    pub source_sha256: String,
    /// The CUBIN's file name in the directory.
    pub cubin: String,
    pub cubin_sha256: String,
    pub entries: Vec<String>,
}

fn nvrtc_version(nv: &Nvrtc) -> Result<String, NvrtcError> {
    let (a, b) = nv.version()?;
    Ok(format!("{a}.{b}"))
}

/// Compile every unit for `arch` into `out` (created if missing): `<file>.<act>.<arch>.cubin`
/// per unit and [`MANIFEST`]. Returns the manifest written.
pub fn prebuild(nv: &Nvrtc, out: &Path, arch: &str) -> Result<Manifest, StoreError> {
    prebuild_units(nv, out, arch, &Unit::all())
}

/// [`prebuild`] of some units only.
pub fn prebuild_units(nv: &Nvrtc, out: &Path, arch: &str, units: &[Unit]) -> Result<Manifest, StoreError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let compiled = compile_all(nv, units, arch, false)?;
    let mut units = vec![];
    for c in compiled {
        let name = format!("{}.{arch}.cubin", c.unit.id());
        let path = out.join(&name);
        std::fs::write(&path, &c.cubin).map_err(io(&path))?;
        units.push(ManifestUnit {
            file: c.unit.file.to_string(),
            act: c.unit.act.suffix().to_string(),
            source_sha256: c.unit.hash.clone(),
            cubin: name,
            cubin_sha256: sha256_hex(&c.cubin),
            entries: c.unit.entries(),
        });
    }
    let m = Manifest { format: MANIFEST_FORMAT, arch: arch.to_string(), nvrtc: nvrtc_version(nv)?, units };
    let path = out.join(MANIFEST);
    let text = serde_json::to_string_pretty(&m).map_err(|e| StoreError::Io { path: path.clone(), msg: e.to_string() })?;
    std::fs::write(&path, text + "\n").map_err(io(&path))?;
    Ok(m)
}

/// A kernel image the driver loads.
#[derive(Clone, Debug)]
pub enum Image {
    Cubin(Vec<u8>),
    /// PTX for `compute_XX` (JIT-compiled by the driver; only when NVRTC has no CUBIN for it).
    Ptx(String),
}

/// Where an image came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Prebuilt(PathBuf),
    Cache(PathBuf),
    Compiled,
}

/// One unit's image.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub unit: Unit,
    pub image: Image,
    pub origin: Origin,
}

/// Where [`images`] looks before it compiles.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// A prebuilt directory (`$EXECCRITIC_KERNEL_DIR`).
    pub prebuilt: Option<PathBuf>,
    /// The cache root (`$EXECCRITIC_CACHE/kernels`); `None`: no cache.
    pub cache: Option<PathBuf>,
}

impl Sources {
    /// `$EXECCRITIC_KERNEL_DIR`, and the cache under `$EXECCRITIC_CACHE` (else
    /// `~/.cache/execcritic`) unless `EXECCRITIC_KERNEL_CACHE=off`.
    pub fn from_env() -> Sources {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let off = var(KERNEL_CACHE_ENV).is_some_and(|v| v == "off" || v == "0");
        let root = var("EXECCRITIC_CACHE")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache").join("execcritic")));
        Sources { prebuilt: var(KERNEL_DIR_ENV).map(PathBuf::from), cache: root.filter(|_| !off).map(|r| r.join("kernels")) }
    }
}

/// Read a prebuilt directory's manifest (an error when it is missing or malformed: a directory
/// named on purpose must be usable).
pub fn read_manifest(dir: &Path) -> Result<Manifest, StoreError> {
    let bad = |msg: String| StoreError::Manifest { dir: dir.to_path_buf(), msg };
    let text = std::fs::read_to_string(dir.join(MANIFEST)).map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
    let m: Manifest = serde_json::from_str(&text).map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
    if m.format != MANIFEST_FORMAT {
        return Err(bad(format!("manifest format {} (this build reads {MANIFEST_FORMAT})", m.format)));
    }
    Ok(m)
}

/// The unit's CUBIN from a prebuilt directory, when the manifest lists it for `arch` with this
/// source hash and the file matches its recorded hash.
fn from_prebuilt(dir: &Path, m: &Manifest, u: &Unit, arch: &str) -> Option<Vec<u8>> {
    let e = m.units.iter().find(|e| e.file == u.file && e.act == u.act.suffix())?;
    if m.arch != arch || e.source_sha256 != u.hash || e.cubin.contains('/') {
        return None;
    }
    let bytes = std::fs::read(dir.join(&e.cubin)).ok()?;
    (sha256_hex(&bytes) == e.cubin_sha256).then_some(bytes)
}

/// The units of this build a prebuilt directory cannot serve for `arch` (source changed, other
/// architecture, CUBIN missing or not the one the manifest hashed): empty when it serves all.
pub fn stale_units(dir: &Path, arch: &str) -> Result<Vec<String>, StoreError> {
    let m = read_manifest(dir)?;
    Ok(Unit::all().iter().filter(|u| from_prebuilt(dir, &m, u, arch).is_none()).map(Unit::id).collect())
}

fn cache_path(root: &Path, arch: &str, nvrtc: &str, u: &Unit) -> PathBuf {
    root.join(arch).join(format!("nvrtc-{nvrtc}")).join(format!("{}-{}.cubin", u.id(), u.hash))
}

/// Write `bytes` to `path` through a temporary file in the same directory, renamed into place
/// (a concurrent reader sees the whole file or none).
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::fs::write(tmp.path(), bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Every unit's image for the real architecture `arch` (`sm_90`): prebuilt, cached, or compiled
/// (in parallel) and cached — see the module documentation. `nvrtc` is called only when some
/// unit is not prebuilt (the cache is keyed by its version).
pub fn images(
    arch: &str,
    units: &[Unit],
    src: &Sources,
    nvrtc: impl FnOnce() -> Result<&'static Nvrtc, NvrtcError>,
) -> Result<Vec<Loaded>, StoreError> {
    let manifest = src.prebuilt.as_deref().map(|d| read_manifest(d).map(|m| (d, m))).transpose()?;
    let mut out: Vec<Option<Loaded>> = units
        .iter()
        .map(|u| {
            let (dir, m) = manifest.as_ref()?;
            let bytes = from_prebuilt(dir, m, u, arch)?;
            Some(Loaded { unit: u.clone(), image: Image::Cubin(bytes), origin: Origin::Prebuilt(dir.to_path_buf()) })
        })
        .collect();
    if out.iter().all(Option::is_some) {
        return Ok(out.into_iter().flatten().collect());
    }
    if let Some((dir, _)) = &manifest {
        let stale: Vec<String> = units.iter().zip(&out).filter(|(_, l)| l.is_none()).map(|(u, _)| u.id()).collect();
        tracing::warn!("prebuilt kernels {}: no matching CUBIN for {} (source changed, other arch, or missing); compiling them", dir.display(), stale.join(", "));
    }
    let nv = nvrtc().map_err(|e| match &manifest {
        Some((dir, _)) => StoreError::Manifest {
            dir: dir.to_path_buf(),
            msg: format!("some units are not prebuilt for this source and {arch}, and NVRTC is unavailable: {e}"),
        },
        None => e.into(),
    })?;
    let version = nvrtc_version(nv)?;
    let cached = |u: &Unit| src.cache.as_ref().map(|root| cache_path(root, arch, &version, u));
    for (u, slot) in units.iter().zip(out.iter_mut()) {
        if slot.is_some() {
            continue;
        }
        if let Some(p) = cached(u) {
            if let Ok(bytes) = std::fs::read(&p) {
                if crate::tensor::cubin::read(&bytes).is_ok() {
                    *slot = Some(Loaded { unit: u.clone(), image: Image::Cubin(bytes), origin: Origin::Cache(p) });
                }
            }
        }
    }
    let missing: Vec<Unit> = units.iter().zip(&out).filter(|(_, l)| l.is_none()).map(|(u, _)| u.clone()).collect();
    let compute = arch.replacen("sm_", "compute_", 1);
    let compiled = parallel_map(&missing, |u| -> Result<Loaded, NvrtcError> {
        let image = match nv.compile_cubin(&u.id(), &u.source, arch, COMPILE_OPTIONS) {
            Ok(c) => {
                if let Some(p) = cached(u) {
                    if let Err(e) = write_atomic(&p, &c) {
                        tracing::warn!("kernel cache {}: {e}", p.display());
                    }
                }
                Image::Cubin(c)
            }
            Err(NvrtcError::Compile { .. }) | Err(NvrtcError::Symbol(_)) if arch.starts_with("sm_") => {
                Image::Ptx(nv.compile_ptx(&u.id(), &u.source, &compute, COMPILE_OPTIONS)?)
            }
            Err(e) => return Err(e),
        };
        Ok(Loaded { unit: u.clone(), image, origin: Origin::Compiled })
    });
    let mut compiled = compiled.into_iter();
    for slot in out.iter_mut().filter(|s| s.is_none()) {
        *slot = Some(compiled.next().expect("one result per missing unit")?);
    }
    Ok(out.into_iter().flatten().collect())
}
