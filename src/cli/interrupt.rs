//! Ctrl-C and SIGTERM as an orderly shutdown: the command's work is a future; on a signal it is
//! dropped (which drops every sandbox and workspace it holds, running their destructors), the
//! runtime is shut down (dropping every task still spawned on it and waiting for blocking
//! sections such as a workspace being populated), the docker containers this process still
//! owns are removed, and the command returns exit code 130 (SIGINT) or 143 (SIGTERM) from
//! `main` like any other result — never `process::exit`, which would skip those destructors.

use std::future::Future;
use std::process::ExitCode;

/// The signal that ended a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupted {
    Int,
    Term,
}

impl Interrupted {
    /// The shell's convention: 128 + signal number.
    pub fn exit_code(self) -> ExitCode {
        ExitCode::from(match self {
            Interrupted::Int => 130,
            Interrupted::Term => 143,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Interrupted::Int => "SIGINT",
            Interrupted::Term => "SIGTERM",
        }
    }
}

/// Resolves when SIGINT or SIGTERM arrives (pending forever if the handlers cannot be installed,
/// in which case the default actions stay in force).
async fn signalled() -> Interrupted {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => Interrupted::Int,
            _ = term.recv() => Interrupted::Term,
        },
        _ => std::future::pending().await,
    }
}

/// Run `work` on a fresh multi-threaded runtime until it completes or a signal arrives. On a
/// signal everything is torn down as the module doc says before `Err` is returned. Either way,
/// once the runtime is gone, this process's sandbox directories are removed
/// ([`crate::harness::orphans::remove_own`]): for a CLI command only, which holds no sandbox
/// outside `work`.
pub fn run_interruptible<T, F>(work: impl FnOnce() -> F) -> anyhow::Result<Result<T, Interrupted>>
where
    F: Future<Output = T>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = rt.block_on(async {
        // `biased`: the signal branch is polled first, so its handlers are installed before
        // the work takes its first step.
        let work = work();
        tokio::select! {
            biased;
            s = signalled() => Err(s),
            out = work => Ok(out),
        }
    });
    if let Err(s) = outcome {
        eprintln!("{}: stopping; removing sandboxes and workspaces", s.name());
        // The work future is gone; tasks it spawned go with the runtime.
        rt.block_on(crate::harness::sandbox::docker::cleanup_all());
    }
    drop(rt);
    // A command whose future outlived the runtime is killed here, and directories that earlier,
    // killed runs left behind are swept as well as this run's own.
    crate::harness::sandbox::local::kill_live_groups();
    crate::harness::orphans::sweep();
    // Every sandbox of this run is dropped now; a directory that a dying sandboxed process was
    // still writing into when its destructor ran is removed here.
    let left = crate::harness::orphans::remove_own(std::time::Duration::from_secs(10));
    if left > 0 {
        eprintln!("warning: {left} sandbox directories could not be removed; the next command removes them");
    }
    Ok(outcome)
}
