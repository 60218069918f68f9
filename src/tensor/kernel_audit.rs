//! The kernel resource audit: what every compiled kernel needs (registers, local frame, spills,
//! static shared memory, launch bounds — read from its sm_90 CUBIN, [`crate::tensor::cubin`])
//! held against every launch configuration the host code makes (a
//! [`LaunchTable`](crate::tensor::cuda::record::LaunchTable) recorded from the launch wrappers
//! themselves at the full-size and the fixtures' shapes). It finds, without a GPU, the launches
//! the hardware would refuse — more registers per block than the register file, more threads
//! than the launch bounds, more shared memory than a block may have — and the local memory the
//! hot kernels must not touch. `tests/cuda_nvrtc.rs` runs it in CI; `execcritic kernels audit`
//! prints it.

use crate::tensor::cubin::{self, KernelResources, PtxasReport};
use crate::tensor::cuda::record::{LaunchTable, LaunchUse};
use crate::tensor::kernel_store::Compiled;
use crate::tensor::launch_check::{max_threads_for, registers_per_block, DeviceLimits};

/// Kernels of the serving path whose speed the engine's figures rest on (base names, both
/// builds): the expert GEMMs, attention, GDN and sampling. Any local memory (frame or spills)
/// in them fails the audit. Not here: `rope_partial`, whose 32-byte frame is the Payne–Hanek
/// argument reduction inside `sinf`/`cosf`, touched only for angles above 105,615 rad
/// (positions past 105k); `router_topk` (per-token top-k lists, one warp per token).
pub const HOT_KERNELS: &[&str] = &[
    "grouped_gemm",
    "grouped_gemm_mma",
    "grouped_gemm_stream",
    "split_q_gate",
    "kv_append",
    "attn_prefill",
    "attn_decode_split",
    "attn_decode_combine",
    "sigmoid_gate_mul",
    "causal_conv",
    "gdn_gates",
    "gdn_qkv_prep",
    "gdn_recurrent",
    "gdn_chunked",
    "gdn_chunk_prep",
    "gdn_chunk_state",
    "sample_tokens",
];

/// Entry points no serving or training path launches, with the reason (everything else must
/// appear in the launch table, so a new kernel cannot escape the audit).
pub const NOT_LAUNCHED: &[(&str, &str)] = &[
    ("mma_probe_bf16", "the tensor-core lane test kernel (tests/cuda_ops.rs)"),
    ("mma_probe_f32", "the tensor-core lane test kernel, f32 build (never used)"),
    ("grouped_gemm_mma_f32", "the f32 build runs the FMA expert GEMM; tests run the tensor-core kernels on f32 storage"),
    ("grouped_gemm_stream_f32", "the f32 build runs the FMA expert GEMM; tests run the tensor-core kernels on f32 storage"),
    ("gdn_gates_bf16", "the forward computes the gates inside gdn_qkv_prep (ops::gdn_qkv_prep_gates)"),
    ("gdn_gates_f32", "the forward computes the gates inside gdn_qkv_prep (ops::gdn_qkv_prep_gates)"),
];

/// The base name of an entry point (`gdn_recurrent_bf16` → `gdn_recurrent`).
pub fn base_name(entry: &str) -> &str {
    entry.strip_suffix("_bf16").or_else(|| entry.strip_suffix("_f32")).unwrap_or(entry)
}

/// One compiled kernel: its unit, its resources and ptxas's spill counts.
#[derive(Clone, Debug)]
pub struct KernelFacts {
    pub unit: String,
    pub res: KernelResources,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Read every unit's CUBIN and join ptxas's report of the same compile (`-Xptxas=-v`). The
/// second value lists every disagreement between the two accounts (the reader checked against
/// ptxas); empty when they agree.
pub fn facts(compiled: &[Compiled]) -> Result<(Vec<KernelFacts>, Vec<String>), cubin::CubinError> {
    let (mut out, mut mismatches) = (vec![], vec![]);
    for c in compiled {
        let unit = c.unit.id();
        let reports: Vec<PtxasReport> = cubin::parse_ptxas_log(&c.log);
        for res in cubin::read(&c.cubin)? {
            let rep = reports.iter().find(|r| r.name == res.name);
            match rep {
                None if !reports.is_empty() => mismatches.push(format!("{unit}: ptxas reported nothing for {}", res.name)),
                None => {}
                Some(r) => {
                    let mine = (res.registers, res.frame_bytes, res.static_shared_bytes);
                    let theirs = (r.registers, r.frame_bytes, r.shared_bytes);
                    if mine != theirs {
                        mismatches.push(format!(
                            "{unit} {}: CUBIN says (registers, frame, shared) = {mine:?}, ptxas {theirs:?}",
                            res.name
                        ));
                    }
                }
            }
            let (spill_stores, spill_loads) = rep.map_or((0, 0), |r| (r.spill_store_bytes, r.spill_load_bytes));
            out.push(KernelFacts { unit: unit.clone(), res, spill_stores, spill_loads });
        }
    }
    Ok((out, mismatches))
}

/// The audit's verdict: a table of every kernel, the failures and the notes.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    pub table: String,
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

impl Audit {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The table, then the failures and notes.
    pub fn render(&self) -> String {
        let mut s = self.table.clone();
        for (title, lines) in [("FAILURES", &self.failures), ("notes", &self.notes)] {
            if !lines.is_empty() {
                s += &format!("\n{title} ({}):\n", lines.len());
                for l in lines {
                    s += &format!("  - {l}\n");
                }
            }
        }
        s
    }
}

fn kib(b: u64) -> String {
    if b == 0 {
        "0".into()
    } else {
        format!("{:.1}K", b as f64 / 1024.0)
    }
}

/// Hold every kernel of `kernels` against every launch of `table` under `dev`'s limits.
///
/// A kernel without storage-type parameters ([`crate::tensor::kernels::storage_independent`]) is launched in
/// its `_f32` build only; its `_bf16` build (the same code) is held against those launches.
pub fn audit(kernels: &[KernelFacts], table: &LaunchTable, dev: &DeviceLimits) -> Audit {
    let shared_builds: Vec<String> =
        crate::tensor::kernels::FILES.iter().flat_map(|(_, src)| crate::tensor::kernels::storage_independent(src)).collect();
    let mut a = Audit::default();
    let mut t = format!(
        "{:<28} {:>4} {:>5} {:>7} {:>6} {:>5} {:>6} | {:>7} {:>8} {:>7}  {}\n",
        "kernel", "regs", "local", "spill", "smem", "bound", "maxthr", "threads", "regs/blk", "dynsmem", "widest launch (workload)"
    );
    for k in kernels {
        let r = &k.res;
        let hot = HOT_KERNELS.contains(&base_name(&r.name));
        let mut uses: Vec<&LaunchUse> = table.uses.iter().filter(|u| u.kernel == r.name).collect();
        let mut twin = "";
        if uses.is_empty() && r.name.ends_with("_bf16") && shared_builds.iter().any(|b| b == base_name(&r.name)) {
            let f32_build = format!("{}_f32", base_name(&r.name));
            uses = table.uses.iter().filter(|u| u.kernel == f32_build).collect();
            twin = "(as the f32 build) ";
        }
        let bound = r.max_threads.unwrap_or(dev.threads_per_block);
        // the first of the widest (the full-size workloads are recorded first)
        let widest = uses.iter().rev().max_by_key(|u| (u.threads(), u.dims.shared_bytes));
        let most_shared = uses.iter().map(|u| u.dims.shared_bytes).max().unwrap_or(0);
        let spill = format!("{}/{}", k.spill_stores, k.spill_loads);
        t += &format!(
            "{:<28} {:>4} {:>5} {:>7} {:>6} {:>5} {:>6} | {:>7} {:>8} {:>7}  {}\n",
            r.name,
            r.registers,
            r.local_bytes(),
            spill,
            kib(r.static_shared_bytes as u64),
            r.max_threads.map_or("-".into(), |b| b.to_string()),
            max_threads_for(r.registers, r.max_threads, dev),
            widest.map_or("-".into(), |u| u.threads().to_string()),
            widest.map_or("-".into(), |u| registers_per_block(r.registers, u.threads()).to_string()),
            kib(most_shared as u64),
            widest.map_or("never launched".into(), |u| format!("{twin}{} {}", u.workload, u.dims)),
        );
        if hot && (r.local_bytes() > 0 || k.spill_stores > 0 || k.spill_loads > 0) {
            a.failures.push(format!(
                "{} ({}): a hot kernel with {} bytes of local memory per thread (frame {}, stack {}, spill stores {}, loads {})",
                r.name, k.unit, r.local_bytes(), r.frame_bytes, r.stack_bytes, k.spill_stores, k.spill_loads
            ));
        } else if r.local_bytes() > 0 || k.spill_stores > 0 {
            a.notes.push(format!(
                "{} ({}): {} bytes of local memory per thread (spill stores {}, loads {})",
                r.name, k.unit, r.local_bytes(), k.spill_stores, k.spill_loads
            ));
        }
        if uses.is_empty() {
            match NOT_LAUNCHED.iter().find(|(n, _)| *n == r.name) {
                Some((_, why)) => a.notes.push(format!("{} is not launched by the recorded workloads: {why}", r.name)),
                None => a.failures.push(format!(
                    "{} ({}): no recorded workload launches it — add it to a workload of the launch table \
                     (train::launch_table) or to kernel_audit::NOT_LAUNCHED with the reason",
                    r.name, k.unit
                )),
            }
        }
        // one failure per kernel and rule: the widest offending launch, and how many there were
        let mut rule = |what: &str, bad: &dyn Fn(&LaunchUse) -> Option<String>| {
            let offending: Vec<(&LaunchUse, String)> = uses.iter().filter_map(|u| bad(u).map(|m| (*u, m))).collect();
            if let Some((u, msg)) = offending.iter().rev().max_by_key(|(u, _)| (u.threads(), u.dims.shared_bytes)) {
                let more = if offending.len() > 1 { format!(" (and {} more launch configurations)", offending.len() - 1) } else { String::new() };
                a.failures.push(format!("{} ({}): {what}: {msg} — {twin}{} {}{more}", r.name, k.unit, u.workload, u.dims));
            }
        };
        rule("register file", &|u| {
            let need = registers_per_block(r.registers, u.threads());
            (need > dev.registers_per_block as u64).then(|| {
                format!(
                    "{} registers/thread ({} allocated) × {} threads = {need} > {} registers per block",
                    r.registers,
                    r.registers.div_ceil(8) * 8,
                    u.threads(),
                    dev.registers_per_block
                )
            })
        });
        rule("launch bounds", &|u| {
            (u.threads() > bound as u64).then(|| format!("{} threads per block > its maximum of {bound}", u.threads()))
        });
        rule("shared memory", &|u| {
            let total = r.static_shared_bytes as u64 + u.dims.shared_bytes as u64;
            (total > dev.shared_opt_in as u64).then(|| {
                format!(
                    "{} static + {} dynamic = {total} bytes > {} per block even with the opt-in",
                    r.static_shared_bytes, u.dims.shared_bytes, dev.shared_opt_in
                )
            })
        });
        rule("grid", &|u| {
            let g = u.dims.grid;
            (g.0 > dev.grid.0 || g.1 > dev.grid.1 || g.2 > dev.grid.2).then(|| format!("grid {g:?} > {:?}", dev.grid))
        });
        if let Some(u) = uses
            .iter()
            .find(|u| r.static_shared_bytes as u64 + u.dims.shared_bytes as u64 > dev.shared_default as u64)
        {
            a.notes.push(format!(
                "{}: {} bytes of shared memory per block in {} needs the opt-in above {} (the device sets it at launch)",
                r.name,
                r.static_shared_bytes as u64 + u.dims.shared_bytes as u64,
                u.workload,
                dev.shared_default
            ));
        }
    }
    for k in table.kernels() {
        if !kernels.iter().any(|f| f.res.name == k) {
            a.failures.push(format!("{k}: launched by the host code but in no compiled unit"));
        }
    }
    a.table = t;
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::device::LaunchDims;

    fn kernel(name: &str, regs: u32, frame: u32, bounds: Option<u32>) -> KernelFacts {
        KernelFacts {
            unit: "x.bf16".into(),
            res: KernelResources { name: name.into(), registers: regs, frame_bytes: frame, max_threads: bounds, ..Default::default() },
            spill_stores: 0,
            spill_loads: 0,
        }
    }

    fn launch(kernel: &str, threads: u32, shared: u32) -> LaunchUse {
        LaunchUse {
            kernel: kernel.into(),
            dims: LaunchDims { grid: (1, 1, 1), block: (threads, 1, 1), shared_bytes: shared },
            workload: "w".into(),
            count: 1,
            args: vec![],
        }
    }

    #[test]
    fn finds_what_the_hardware_would_refuse() {
        let sm90 = DeviceLimits::SM90;
        let ks = vec![
            kernel("sample_tokens_f32", 68, 0, None),
            kernel("gdn_recurrent_bf16", 134, 0, None),
            kernel("grouped_gemm_mma_bf16", 56, 128, None),
            kernel("norm_dw_f32", 40, 16, None),
            kernel("bounded_f32", 32, 0, Some(256)),
            kernel("big_smem_f32", 32, 0, None),
            kernel("orphan_f32", 32, 0, None),
        ];
        let table = LaunchTable {
            uses: vec![
                launch("sample_tokens_f32", 1024, 0),
                launch("gdn_recurrent_bf16", 16, 0),
                launch("gdn_recurrent_bf16", 512, 0),
                launch("grouped_gemm_mma_bf16", 128, 0),
                launch("norm_dw_f32", 256, 0),
                launch("bounded_f32", 512, 0),
                launch("big_smem_f32", 128, 100 * 1024),
                launch("big_smem_f32", 128, 300 * 1024),
                launch("gone_f32", 32, 0),
            ],
        };
        let a = audit(&ks, &table, &sm90);
        let f = a.failures.join("\n");
        assert!(f.contains("sample_tokens_f32 (x.bf16): register file: 68 registers/thread (72 allocated) × 1024 threads = 73728 > 65536"), "{f}");
        assert!(f.contains("gdn_recurrent_bf16 (x.bf16): register file: 134 registers/thread (136 allocated) × 512 threads = 69632"), "{f}");
        assert!(f.contains("grouped_gemm_mma_bf16 (x.bf16): a hot kernel with 128 bytes of local memory"), "{f}");
        assert!(f.contains("bounded_f32 (x.bf16): launch bounds: 512 threads per block > its maximum of 256"), "{f}");
        assert!(f.contains("big_smem_f32 (x.bf16): shared memory: 0 static + 307200 dynamic"), "{f}");
        assert!(f.contains("orphan_f32 (x.bf16): no recorded workload launches it"), "{f}");
        assert!(f.contains("gone_f32: launched by the host code but in no compiled unit"), "{f}");
        assert_eq!(a.failures.len(), 7, "{f}");
        // a cold kernel's frame and the opt-in are notes, not failures
        let n = a.notes.join("\n");
        assert!(n.contains("norm_dw_f32 (x.bf16): 16 bytes of local memory") && n.contains("needs the opt-in"), "{n}");
        // within limits: passes
        let ok = audit(&[kernel("sample_tokens_f32", 64, 0, Some(1024))], &LaunchTable { uses: vec![launch("sample_tokens_f32", 1024, 0)] }, &sm90);
        assert!(ok.passed(), "{}", ok.render());
    }
}
