//! Every kernel file in `kernels/` compiles for sm_90 (Hopper) with NVRTC on a machine without a
//! GPU, and every kernel fits the launches the code makes: each unit (file × storage type) is
//! compiled ONCE, in parallel, to an sm_90 CUBIN with ptxas's report; the CUBINs are read
//! (`tensor::cubin`, checked against ptxas's own numbers) and held against the launch table
//! recorded from the launch wrappers at the full-size Qwen3.5-35B-A3B shapes and the fixtures'
//! (`tensor::kernel_audit`, `train::launch_table`). libnvrtc comes from `$EXECCRITIC_NVRTC` or
//! the `nvidia-cuda-nvrtc` wheel (scripts/ci-deps-cuda.sh installs it); without it the tests say
//! so and pass as skipped.

use execcritic::tensor::kernel_store::{compile_all, Unit};
use execcritic::tensor::launch_check::DeviceLimits;
use execcritic::tensor::nvrtc::{Nvrtc, NvrtcError};
use execcritic::tensor::{cubin, kernel_audit, kernels};
use std::path::PathBuf;
use std::time::Instant;

fn nvrtc() -> Option<&'static Nvrtc> {
    match Nvrtc::get() {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("SKIP cuda_nvrtc: {e}");
            None
        }
    }
}

/// The crate's `dir`, or `./dir` when a prebuilt binary runs elsewhere (gpu-check.sh).
fn crate_dir(dir: &str) -> PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    if built.is_dir() {
        built
    } else {
        PathBuf::from(dir)
    }
}

#[test]
fn every_kernel_file_is_embedded() {
    let mut on_disk: Vec<String> = std::fs::read_dir(crate_dir("kernels"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".cu"))
                .map(str::to_string)
        })
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = kernels::FILES.iter().map(|(n, _)| n.to_string()).collect();
    embedded.sort();
    assert_eq!(
        on_disk, embedded,
        "kernels/*.cu and tensor::kernels::FILES disagree"
    );
}

/// The kernel resource audit (docs/cuda.md, "Kernel resource audit"): every unit compiles to an
/// sm_90 CUBIN holding every `KERNEL(name)` as an entry; the CUBIN reader agrees with ptxas; no
/// launch of the recorded table exceeds the register file, the kernel's launch bounds or the
/// shared memory a block may have, and the hot kernels use no local memory.
#[test]
fn every_kernel_compiles_to_sm90_and_fits_its_launches() {
    let Some(nv) = nvrtc() else { return };
    let (maj, min) = nv.version().unwrap();
    let units = Unit::all();
    let t0 = Instant::now();
    let compiled = compile_all(nv, &units, "sm_90", true).unwrap_or_else(|e| panic!("{e}"));
    let compile_s = t0.elapsed().as_secs_f64();
    for c in &compiled {
        assert_eq!(&c.cubin[..4], b"\x7fELF", "{}: not an ELF CUBIN", c.unit.id());
        let have: Vec<String> = cubin::read(&c.cubin).unwrap().into_iter().map(|k| k.name).collect();
        let want = c.unit.entries();
        assert!(!want.is_empty(), "{}: no kernels found", c.unit.id());
        for k in want {
            assert!(have.contains(&k), "{}: kernel {k} missing from the CUBIN ({have:?})", c.unit.id());
        }
    }
    let (facts, mismatches) = kernel_audit::facts(&compiled).unwrap();
    assert!(mismatches.is_empty(), "the CUBIN reader disagrees with ptxas:\n{}", mismatches.join("\n"));
    let t1 = Instant::now();
    let models = std::env::var_os("EXECCRITIC_MODELS").map(PathBuf::from).unwrap_or_else(|| crate_dir("models"));
    let table = execcritic::train::launch_table::standard(&models).unwrap();
    let record_s = t1.elapsed().as_secs_f64();
    let audit = kernel_audit::audit(&facts, &table, &DeviceLimits::SM90);
    eprintln!(
        "NVRTC {maj}.{min} from {}: {} units compiled in {compile_s:.1} s ({} kernels); {} launch configurations recorded in {record_s:.1} s\n{}",
        nv.path.display(),
        units.len(),
        facts.len(),
        table.uses.len(),
        audit.render()
    );
    assert!(audit.passed(), "kernel resource audit failed:\n{}", audit.failures.join("\n"));
}

/// The CUBIN reader against an independent tool: `cuobjdump --dump-resource-usage` (the
/// `nvidia-cuda-cuobjdump` wheel; `EXECCRITIC_CUOBJDUMP` = its path, else the test is skipped)
/// on every unit: REG = registers, STACK = the local frame, SHARED = static shared memory plus
/// the reserved part the reader reports apart.
#[test]
fn the_cubin_reader_agrees_with_cuobjdump() {
    let Some(tool) = std::env::var_os("EXECCRITIC_CUOBJDUMP") else {
        eprintln!("SKIP: set EXECCRITIC_CUOBJDUMP to a cuobjdump binary");
        return;
    };
    let Some(nv) = nvrtc() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut checked, mut bad) = (0, vec![]);
    for c in compile_all(nv, &Unit::all(), "sm_90", false).unwrap() {
        let path = dir.path().join(format!("{}.cubin", c.unit.id()));
        std::fs::write(&path, &c.cubin).unwrap();
        let out = std::process::Command::new(&tool).arg("--dump-resource-usage").arg(&path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        // " Function NAME:\n  REG:68 STACK:0 SHARED:33808 LOCAL:0 ..."
        let mut theirs = std::collections::HashMap::new();
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if let Some(name) = l.trim().strip_prefix("Function ").and_then(|n| n.strip_suffix(':')) {
                let vals = lines.next().unwrap_or("");
                let field = |k: &str| -> u32 {
                    vals.split_whitespace().find_map(|f| f.strip_prefix(k)).and_then(|v| v.parse().ok()).unwrap()
                };
                theirs.insert(name.to_string(), (field("REG:"), field("STACK:"), field("SHARED:")));
            }
        }
        for k in cubin::read(&c.cubin).unwrap() {
            let mine = (k.registers, k.local_bytes(), k.static_shared_bytes + k.reserved_shared_bytes);
            match theirs.get(&k.name) {
                Some(t) if *t == mine => checked += 1,
                t => bad.push(format!("{} {}: reader {mine:?}, cuobjdump {t:?}", c.unit.id(), k.name)),
            }
        }
    }
    eprintln!("{checked} kernels agree with cuobjdump");
    assert!(bad.is_empty() && checked > 100, "{}", bad.join("\n"));
}

/// Prebuilt kernels, the on-disk cache and compilation (`tensor::kernel_store`), on the two
/// smallest units: a prebuilt directory serves every unit it holds for this source without
/// NVRTC; a unit whose source hash differs (or whose CUBIN is not the one the manifest hashed)
/// is compiled and cached, and served from the cache next time; a named directory without a
/// manifest is an error.
#[test]
fn kernels_load_prebuilt_cached_or_compiled() {
    use execcritic::tensor::kernel_store::{self, Image, Origin, Sources, MANIFEST};
    let Some(nv) = nvrtc() else { return };
    let units: Vec<Unit> = Unit::all().into_iter().filter(|u| u.file == "embedding_bwd").collect();
    assert_eq!(units.len(), 2);
    let tmp = tempfile::tempdir().unwrap();
    let (pre, cache) = (tmp.path().join("pre"), tmp.path().join("cache"));
    let m = kernel_store::prebuild_units(nv, &pre, "sm_90", &units).unwrap();
    assert_eq!((m.arch.as_str(), m.units.len()), ("sm_90", 2));
    let no_nvrtc = || Err(NvrtcError::NotFound("not wanted".into()));
    let src = Sources { prebuilt: Some(pre.clone()), cache: Some(cache.clone()) };
    let got = kernel_store::images("sm_90", &units, &src, no_nvrtc).unwrap();
    for (l, e) in got.iter().zip(&m.units) {
        assert_eq!(l.origin, Origin::Prebuilt(pre.clone()));
        let Image::Cubin(bytes) = &l.image else { panic!("not a CUBIN") };
        assert_eq!(bytes, &std::fs::read(pre.join(&e.cubin)).unwrap());
    }
    // another architecture: nothing prebuilt, and without NVRTC a clear error
    let e = kernel_store::images("sm_100", &units, &src, no_nvrtc).unwrap_err().to_string();
    assert!(e.contains("NVRTC is unavailable") && e.contains("sm_100"), "{e}");
    // the first unit's source "changed": compiled, cached, then served from the cache
    let mut edited = m.clone();
    edited.units[0].source_sha256 = "0".repeat(64);
    std::fs::write(pre.join(MANIFEST), serde_json::to_string(&edited).unwrap()).unwrap();
    let got = kernel_store::images("sm_90", &units, &src, Nvrtc::get).unwrap();
    assert_eq!((&got[0].origin, &got[1].origin), (&Origin::Compiled, &Origin::Prebuilt(pre.clone())));
    let got = kernel_store::images("sm_90", &units, &src, Nvrtc::get).unwrap();
    assert!(matches!(&got[0].origin, Origin::Cache(p) if p.starts_with(&cache)), "{:?}", got[0].origin);
    // verify: every unit but the one still prebuilt is stale
    assert_eq!(kernel_store::stale_units(&pre, "sm_90").unwrap().len(), Unit::all().len() - 1);
    // a CUBIN that is not the one the manifest hashed is not served
    std::fs::write(pre.join(&m.units[1].cubin), b"\x7fELF not this one").unwrap();
    let got = kernel_store::images("sm_90", &units, &Sources { prebuilt: Some(pre.clone()), cache: None }, Nvrtc::get).unwrap();
    assert_eq!(got[1].origin, Origin::Compiled);
    // a directory named on purpose must have a manifest
    let e = kernel_store::images("sm_90", &units, &Sources { prebuilt: Some(tmp.path().into()), cache: None }, Nvrtc::get);
    assert!(e.unwrap_err().to_string().contains(MANIFEST));
}

/// The backend falls back to PTX for `compute_XX` when NVRTC cannot emit a CUBIN for the GPU's
/// architecture: that path compiles too (one unit; the CUBIN test covers every source).
#[test]
fn a_unit_compiles_to_ptx_for_compute_90() {
    let Some(nv) = nvrtc() else { return };
    let (name, src) = kernels::FILES.iter().find(|(n, _)| *n == "init").unwrap();
    for act in kernels::ActType::ALL {
        let ptx = nv.compile_ptx(name, &kernels::unit_for(name, src, act), "compute_90", &[]).unwrap();
        assert!(ptx.contains(".target sm_90"), "{name}: PTX is not for sm_90");
        for k in kernels::entry_points_for(src, act) {
            assert!(ptx.contains(&format!(".entry {k}(")), "{name}: kernel {k} missing from the PTX");
        }
    }
}

#[test]
fn a_broken_kernel_is_a_compile_error_with_the_log() {
    let Some(nv) = nvrtc() else { return };
    let err = nv
        .compile_ptx(
            "broken",
            "extern \"C\" __global__ void f() { undeclared_thing(); }",
            "compute_90",
            &[],
        )
        .unwrap_err();
    match err {
        NvrtcError::Compile { log, .. } => assert!(log.contains("undeclared_thing"), "log: {log}"),
        e => panic!("expected a compile error, got {e}"),
    }
}
