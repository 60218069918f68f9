//! `execcritic kernels …`: the CUDA kernels without a GPU — `prebuild` compiles every unit to
//! CUBINs for an architecture into a directory the GPU host loads through
//! `EXECCRITIC_KERNEL_DIR` (`tensor::kernel_store`), `verify` says whether such a directory
//! serves this build, `audit` runs the kernel resource audit (`tensor::kernel_audit`).

use crate::tensor::kernel_audit;
use crate::tensor::kernel_store::{self, Unit};
use crate::tensor::launch_check::DeviceLimits;
use crate::tensor::nvrtc::Nvrtc;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum KernelsCommand {
    /// Compile every kernel unit to CUBINs (one per file and storage type) plus manifest.json.
    Prebuild(PrebuildArgs),
    /// Check that a prebuilt directory holds a current CUBIN of every unit of this build.
    Verify(VerifyArgs),
    /// Kernel resource audit: registers, local memory, shared memory and launch bounds of every
    /// kernel against every launch the code makes (full-size Qwen3.5-35B-A3B and the fixtures).
    Audit(AuditArgs),
}

#[derive(Args, Debug)]
pub struct PrebuildArgs {
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Real GPU architecture.
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The prebuilt directory.
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Fixture models whose shapes are audited besides the full-size config (each folder with a
    /// config.json).
    #[arg(long, default_value = "models")]
    pub models: PathBuf,
}

fn check_arch(arch: &str) -> anyhow::Result<()> {
    match arch.strip_prefix("sm_") {
        Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric()) => Ok(()),
        _ => bail!("--arch {arch:?}: expected a real architecture such as sm_90"),
    }
}

fn nvrtc() -> anyhow::Result<&'static Nvrtc> {
    let nv = Nvrtc::get()?;
    let (a, b) = nv.version()?;
    eprintln!("NVRTC {a}.{b} from {}", nv.path.display());
    Ok(nv)
}

pub fn kernels(c: KernelsCommand) -> anyhow::Result<ExitCode> {
    match c {
        KernelsCommand::Prebuild(a) => {
            check_arch(&a.arch)?;
            let nv = nvrtc()?;
            let t = Instant::now();
            let m = kernel_store::prebuild(nv, &a.out, &a.arch)?;
            let bytes: u64 = m
                .units
                .iter()
                .filter_map(|u| std::fs::metadata(a.out.join(&u.cubin)).ok())
                .map(|md| md.len())
                .sum();
            println!(
                "{} units ({} kernels) for {} by NVRTC {} in {:.1} s: {} ({:.1} MiB)",
                m.units.len(),
                m.units.iter().map(|u| u.entries.len()).sum::<usize>(),
                m.arch,
                m.nvrtc,
                t.elapsed().as_secs_f64(),
                a.out.display(),
                bytes as f64 / (1 << 20) as f64
            );
            Ok(ExitCode::SUCCESS)
        }
        KernelsCommand::Verify(a) => {
            check_arch(&a.arch)?;
            let m = kernel_store::read_manifest(&a.dir)?;
            let stale = kernel_store::stale_units(&a.dir, &a.arch)?;
            if stale.is_empty() {
                println!("{}: all {} units current for {} (NVRTC {})", a.dir.display(), Unit::all().len(), a.arch, m.nvrtc);
                Ok(ExitCode::SUCCESS)
            } else {
                println!("{}: {} of {} units stale or missing: {}", a.dir.display(), stale.len(), Unit::all().len(), stale.join(", "));
                Ok(ExitCode::from(1))
            }
        }
        KernelsCommand::Audit(a) => {
            let nv = nvrtc()?;
            let t = Instant::now();
            let compiled = kernel_store::compile_all(nv, &Unit::all(), "sm_90", true)?;
            let (facts, mismatches) = kernel_audit::facts(&compiled)?;
            let table = crate::train::launch_table::standard(&a.models)
                .with_context(|| format!("recording the launch table (fixtures under {})", a.models.display()))?;
            let audit = kernel_audit::audit(&facts, &table, &DeviceLimits::SM90);
            println!("{}", audit.render());
            for m in &mismatches {
                println!("reader/ptxas mismatch: {m}");
            }
            eprintln!("{} kernels, {} launch configurations, {:.1} s", facts.len(), table.uses.len(), t.elapsed().as_secs_f64());
            Ok(if audit.passed() && mismatches.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}
