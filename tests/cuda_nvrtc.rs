//! Every kernel file in `kernels/` compiles to PTX for sm_90 (Hopper) with NVRTC, on a machine
//! without a GPU. libnvrtc comes from `$EXECCRITIC_NVRTC` or the `nvidia-cuda-nvrtc` wheel
//! (scripts/ci-deps-cuda.sh installs it); without it the test says so and passes as skipped.

use execcritic::tensor::kernels;
use execcritic::tensor::nvrtc::{Nvrtc, NvrtcError};

fn nvrtc() -> Option<&'static Nvrtc> {
    match Nvrtc::get() {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("SKIP cuda_nvrtc: {e}");
            None
        }
    }
}

#[test]
fn every_kernel_file_is_embedded() {
    // the crate's kernels/, or ./kernels when a prebuilt binary runs elsewhere (gpu-check.sh)
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let dir = if built.is_dir() {
        built
    } else {
        std::path::PathBuf::from("kernels")
    };
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
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

#[test]
fn every_kernel_compiles_to_ptx_for_sm90() {
    let Some(nv) = nvrtc() else { return };
    let (maj, min) = nv.version().unwrap();
    eprintln!("NVRTC {maj}.{min} from {}", nv.path.display());
    let mut failures = vec![];
    for ((name, src), act) in kernels::FILES
        .iter()
        .flat_map(|f| kernels::ActType::ALL.map(|a| (f, a)))
    {
        let unit = kernels::unit_for(name, src, act);
        let ptx = match nv.compile_ptx(name, &unit, "compute_90", &[]) {
            Ok(p) => p,
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        assert!(
            ptx.contains(".target sm_90"),
            "{name}: PTX is not for sm_90"
        );
        let entries = kernels::entry_points_for(src, act);
        assert!(!entries.is_empty(), "{name}: no kernels found");
        for k in entries {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "{name}: kernel {k} missing from the PTX"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The backend loads a CUBIN for the present architecture (PTX only as a fallback): every file
/// in both storage types compiles to an sm_90 ELF image.
#[test]
fn every_kernel_compiles_to_a_cubin_for_sm90() {
    let Some(nv) = nvrtc() else { return };
    for (name, src) in kernels::FILES {
        for act in kernels::ActType::ALL {
            let cubin = nv
                .compile_cubin(name, &kernels::unit_for(name, src, act), "sm_90", &[])
                .unwrap_or_else(|e| panic!("{name} ({act:?}): {e}"));
            assert_eq!(
                &cubin[..4],
                b"\x7fELF",
                "{name} ({act:?}): not an ELF CUBIN"
            );
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
