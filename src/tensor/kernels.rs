//! The CUDA C kernel sources (`kernels/*.cu`), embedded in the binary, and how they are turned
//! into one compilable unit: the header-free prelude (`kernels/prelude.cuh`: bf16 conversions,
//! reductions) is prepended to every file. Compiled by [`super::nvrtc`] for the present GPU.

/// The shared prelude prepended to every kernel file.
pub const PRELUDE: &str = include_str!("../../kernels/prelude.cuh");

/// Every kernel file: (module name, source). Each becomes one CUDA module.
pub const FILES: &[(&str, &str)] = &[
    ("norm", include_str!("../../kernels/norm.cu")),
    ("attention", include_str!("../../kernels/attention.cu")),
    ("gdn", include_str!("../../kernels/gdn.cu")),
    ("moe", include_str!("../../kernels/moe.cu")),
    ("sample", include_str!("../../kernels/sample.cu")),
    ("init", include_str!("../../kernels/init.cu")),
];

/// The full compile unit of one kernel file.
pub fn unit(name: &str, src: &str) -> String {
    format!("#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{name}.cu\"\n{src}")
}

/// The `extern "C" __global__` function names a source defines (used to check that every
/// kernel has a launch wrapper and appears in the PTX).
pub fn entry_points(src: &str) -> Vec<String> {
    let mut names = vec![];
    for chunk in src.split("__global__ void ").skip(1) {
        if let Some(end) = chunk.find('(') {
            names.push(chunk[..end].trim().to_string());
        }
    }
    names
}
