//! The CUDA C kernel sources (`kernels/*.cu`), embedded in the binary, and how they are turned
//! into one compilable unit: the header-free prelude (`kernels/prelude.cuh`: the storage type
//! `act_t` and its conversions, reductions) is prepended to every file. Every file is compiled
//! once per [`ActType`] (bf16, or f32 with `ACT_F32` defined); its entry points, declared
//! `KERNEL(name)`, are then `name_bf16` / `name_f32`. Compiled by [`super::nvrtc`] for the present
//! GPU, or by the host C++ compiler for the emulated device.

pub use super::device::ActType;

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
    ("optim", include_str!("../../kernels/optim.cu")),
    // Backward (training) kernels: tensor::cuda::backward.
    ("norm_bwd", include_str!("../../kernels/norm_bwd.cu")),
    ("act_bwd", include_str!("../../kernels/act_bwd.cu")),
    ("attention_bwd", include_str!("../../kernels/attention_bwd.cu")),
    ("embedding_bwd", include_str!("../../kernels/embedding_bwd.cu")),
    ("gdn_bwd", include_str!("../../kernels/gdn_bwd.cu")),
    ("loss", include_str!("../../kernels/loss.cu")),
    ("moe_bwd", include_str!("../../kernels/moe_bwd.cu")),
];

/// The full compile unit of one kernel file in its bf16 variant.
pub fn unit(name: &str, src: &str) -> String {
    unit_for(name, src, ActType::Bf16)
}

/// The full compile unit of one kernel file for one storage type.
pub fn unit_for(name: &str, src: &str, act: ActType) -> String {
    let define = match act {
        ActType::Bf16 => "",
        ActType::F32 => "#define ACT_F32 1\n",
    };
    format!("{define}#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{name}.cu\"\n{src}")
}

/// The entry points of `src` as compiled for `act` (`name_bf16` / `name_f32`).
pub fn entry_points_for(src: &str, act: ActType) -> Vec<String> {
    entry_points(src)
        .into_iter()
        .map(|n| format!("{n}_{}", act.suffix()))
        .collect()
}

/// The base names of the `extern "C" __global__ void KERNEL(name)(...)` a source defines (used
/// to check that every kernel has a launch wrapper and appears in the PTX). Launch bounds go
/// before `__global__` (`extern "C" __launch_bounds__(256) __global__ void KERNEL(name)`), where
/// this parser and build.rs's do not see them.
pub fn entry_points(src: &str) -> Vec<String> {
    let mut names = vec![];
    for chunk in src.split("__global__ void ").skip(1) {
        let chunk = chunk.trim_start();
        let name = match chunk.strip_prefix("KERNEL(") {
            Some(rest) => rest.find(')').map(|e| &rest[..e]),
            None => chunk.find('(').map(|e| &chunk[..e]),
        };
        if let Some(n) = name {
            names.push(n.trim().to_string());
        }
    }
    names
}

/// The base names of the kernels of `src` whose parameter lists do not mention `act_t`: their
/// two builds take and compute the same things, and the wrappers launch the `_f32` one
/// (`ops::plain`).
pub fn storage_independent(src: &str) -> Vec<String> {
    let mut names = vec![];
    for chunk in src.split("__global__ void KERNEL(").skip(1) {
        let Some(close) = chunk.find(')') else { continue };
        let params = &chunk[close + 1..];
        let Some(params) = params.trim_start().strip_prefix('(') else { continue };
        // the parameter list ends at the first ')' (no parameter has parentheses)
        let list = params.split(')').next().unwrap_or("");
        if !list.contains("act_t") {
            names.push(chunk[..close].trim().to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_without_storage_parameters_are_found() {
        let src = "extern \"C\" __global__ void KERNEL(a)(const float* x, int n) {}\n\
                   extern \"C\" __global__ void KERNEL(b)(const act_t* x, float* y) {}\n\
                   extern \"C\" __launch_bounds__(256) __global__ void KERNEL(c)(int* k) {}";
        assert_eq!(entry_points(src), vec!["a", "b", "c"]);
        assert_eq!(storage_independent(src), vec!["a", "c"]);
    }
}
