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
/// to check that every kernel has a launch wrapper and appears in the PTX).
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
