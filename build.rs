//! Build script: compiles the CUDA kernels (`kernels/*.cu`, and the deliberately broken kernels
//! of `tests/fixtures/emu/*.cu`) with the host C++ compiler against the emulation header
//! (`kernels/emu/cuda_emu.h`) into one static library, together with the emulator's runtime and a
//! generated launch table: one entry per `extern "C" __global__` function, whose parameter types
//! the C++ side deduces from the function itself. The emulated device (`tensor::emu`) launches
//! kernels by name through that table.
//!
//! `EXECCRITIC_EMU_ENGINE=os-threads` picks the OS-thread engine. The sanitizer builds of the same
//! sources are shared libraries made by `scripts/emu-sanitize.sh` from the list this script
//! writes (`OUT_DIR/emu_sources.txt`) and loaded at run time (`EXECCRITIC_EMU_LIBRARY`).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The `extern "C" __global__` function names a source defines (as `tensor::kernels`).
/// A kernel declared `KERNEL(name)` is `name` + `suffix` (`_bf16` / `_f32`, the storage-type
/// builds of `kernels/prelude.cuh`).
fn entry_points(src: &str, suffix: &str) -> Vec<String> {
    src.split("__global__ void ")
        .skip(1)
        .filter_map(|chunk| {
            let chunk = chunk.trim_start();
            match chunk.strip_prefix("KERNEL(") {
                Some(rest) => rest.find(')').map(|e| format!("{}{suffix}", rest[..e].trim())),
                None => chunk.find('(').map(|end| chunk[..end].trim().to_string()),
            }
        })
        .collect()
}

fn cu_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "cu"));
    files.sort();
    files
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=tests/fixtures/emu");
    println!("cargo:rerun-if-env-changed=EXECCRITIC_EMU_ENGINE");

    let mut sources = vec![];
    let mut modules = String::new();
    // (module prefix, module suffix, defines, file): every kernels/*.cu twice, once per storage
    // type of activations and weights (bf16; f32 with ACT_F32), as tensor::kernels::unit_for.
    let mut units: Vec<(String, &str, &str, PathBuf)> = vec![];
    for p in cu_files(&root.join("kernels")) {
        units.push((String::new(), "_bf16", "", p.clone()));
        units.push((String::new(), "_f32", "#define ACT_F32 1\n", p));
    }
    units.extend(
        cu_files(&root.join("tests/fixtures/emu"))
            .into_iter()
            .map(|p| ("fixture_".to_string(), "", "", p)),
    );
    for (prefix, suffix, defines, path) in units {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("kernel file name")
            .to_string();
        let module = format!("{prefix}{stem}{suffix}");
        let src = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = path
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let entries: Vec<String> = entry_points(&src, suffix)
            .iter()
            .map(|k| format!("        emu::make_entry(\"{k}\", \"{file}\", &{k}),\n"))
            .collect();
        let table = if entries.is_empty() {
            "    *n = 0;\n    return nullptr;\n".to_string()
        } else {
            format!(
                "    static const emu::Entry e[] = {{\n{}    }};\n    *n = sizeof e / sizeof e[0];\n    return e;\n",
                entries.concat()
            )
        };
        // The NVRTC unit is prelude + file (tensor::kernels::unit); so is this one.
        let unit = format!(
            "{defines}#include \"cuda_emu.h\"\n#include \"prelude.cuh\"\n#include \"{}\"\n\
             extern \"C\" const emu::Entry* execcritic_emu_module_{module}(size_t* n) {{\n{table}}}\n",
            path.display()
        );
        let unit_path = out.join(format!("emu_{module}.cpp"));
        fs::write(&unit_path, unit).expect("write emulator unit");
        sources.push(unit_path);
        modules.push_str(&format!("EMU_MODULE({module})\n"));
    }
    fs::write(out.join("emu_modules.inc"), modules).expect("write emu_modules.inc");
    sources.push(root.join("kernels/emu/runtime.cpp"));

    // The same sources as one shared library, under a sanitizer, are scripts/emu-sanitize.sh's
    // business (it reads this list and loads the library through EXECCRITIC_EMU_LIBRARY): the
    // crate itself is built once.
    let list: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    fs::write(out.join("emu_sources.txt"), list.join("\n") + "\n").expect("write emu_sources.txt");
    let os_threads = env::var("EXECCRITIC_EMU_ENGINE").is_ok_and(|e| e == "os-threads");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .warnings(false)
        .include(root.join("kernels/emu"))
        .include(root.join("kernels"))
        .include(&out)
        .define("EMU_OS_THREADS", if os_threads { "1" } else { "0" })
        .files(&sources);
    build.compile("execcritic_emu");
}
