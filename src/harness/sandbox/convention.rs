//! Image conventions: how an image expects its commands to run. Official benchmark images keep
//! the repository and its environment in their own places — SWE-bench instance images hold the
//! repository at `/testbed` and the environment in a conda env that every official command
//! activates first (`source /opt/miniconda3/bin/activate && conda activate testbed`); SWE-bench
//! Pro images work in `/app` with environment variables to export. An [`ImageConvention`] says
//! so once, and the docker sandbox applies it to every command the code under test runs (agent
//! shell, gates, grading): working directory, environment, user, and the activation prelude.
//!
//! The prelude runs inside the command's own shell (so `conda`, a shell function, stays usable)
//! with its stdout sent to stderr and no stdin; once it succeeds the shell prints
//! [`ACTIVATED`] as the first bytes of stdout before the command starts. The command cannot
//! forge a missing marker, so a command whose stdout does not start with it never ran: an
//! infrastructure failure of the image, never a test verdict (see [`MarkerGate`]).
//! The harness's own commands (git snapshot, restore, reset) never run the prelude, and the
//! prelude itself reads nothing the code under test can write (a `~/.condarc` or Python user site
//! under the writable HOME `/tmp`, the workdir): see [`ImageConvention::wrap`].

use super::WORKDIR;

/// The conda activation every official SWE-bench command runs first.
pub const SWEBENCH_ACTIVATION: &str = "source /opt/miniconda3/bin/activate && conda activate testbed";
/// Working directory of SWE-bench Pro images.
pub const PRO_WORKDIR: &str = "/app";
/// Before the prelude: nothing a command can write reaches it. Its HOME is a directory that
/// cannot exist (the root filesystem is read-only), so no `~/.condarc`, `~/.config` or Python
/// user site from the writable `/tmp`; no `CONDARC`/`XDG_CONFIG_HOME`; run from `/`, not the
/// writable workdir.
const PRELUDE_ISOLATION: &str = "__execcritic_home=$HOME; export HOME=/nonexistent-execcritic-home PYTHONNOUSERSITE=1; unset CONDARC XDG_CONFIG_HOME; cd /";
/// After the prelude: the command's own HOME back.
const PRELUDE_RESTORE: &str = "export HOME=$__execcritic_home; unset __execcritic_home PYTHONNOUSERSITE";
/// Printed (stdout) by a wrapped command once its prelude succeeded; stripped from the output.
pub const ACTIVATED: &str = "\u{1}execcritic-activated\u{1}";

/// How an image expects its commands to run (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageConvention {
    /// In-sandbox path of the repository and every command's working directory.
    pub workdir: String,
    /// Shell prelude run before every command of the code under test (e.g. a conda activation);
    /// its failure is an infrastructure error.
    pub activation: Option<String>,
    /// Environment variables of every command.
    pub env: Vec<(String, String)>,
    /// User every command runs as when the repository is the image's own (`None`: the image's
    /// user). A repository the harness uploads always runs as the unprivileged sandbox user.
    pub user: Option<String>,
    /// Writable directories besides the workdir and `/tmp` (each a fresh empty volume, the
    /// root filesystem being read-only): SWE-bench Pro's `/workspace`.
    pub scratch_dirs: Vec<String>,
}

impl Default for ImageConvention {
    /// Our own images: `/testbed`, no prelude, no extra environment, the image's user.
    fn default() -> Self {
        ImageConvention {
            workdir: WORKDIR.to_string(),
            activation: None,
            env: Vec::new(),
            user: None,
            scratch_dirs: Vec::new(),
        }
    }
}

impl ImageConvention {
    /// Our own images (the default).
    pub fn plain() -> Self {
        Self::default()
    }

    /// SWE-bench instance images: `/testbed` and the `testbed` conda env activated.
    pub fn swebench() -> Self {
        ImageConvention {
            activation: Some(SWEBENCH_ACTIVATION.to_string()),
            ..Self::default()
        }
    }

    /// SWE-bench Pro images: `/app`, with the instance's environment variables exported.
    pub fn pro(env: Vec<(String, String)>) -> Self {
        ImageConvention {
            workdir: PRO_WORKDIR.to_string(),
            env,
            ..Self::default()
        }
    }

    /// Whether this is the plain convention (nothing to apply beyond the defaults).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }

    /// The script that runs `command` under this convention (as `bash -c`'s argument): with an
    /// activation, the prelude (from `/`, with an unwritable HOME, stdout to stderr, stdin
    /// closed; a failure names it and exits before the command), then HOME and the workdir back,
    /// [`ACTIVATED`] on stdout, and the command. Without one, the command as it is.
    pub fn wrap(&self, command: &str) -> String {
        match &self.activation {
            None => command.to_string(),
            Some(prelude) => format!(
                "{PRELUDE_ISOLATION}\n{{ {prelude}\n}} >&2 </dev/null || {{ echo {msg} >&2; exit 1; }}\n\
                 {PRELUDE_RESTORE}; cd {wd} || exit 1\nprintf '%s' {marker}\n{command}",
                msg = super::shell_quote(&format!("execcritic: the image's activation failed: {prelude}")),
                wd = super::shell_quote(&self.workdir),
                marker = super::shell_quote(ACTIVATED),
            ),
        }
    }

    /// `KEY=VALUE` pairs of this convention's environment; `Err` names a malformed key.
    pub fn env_pairs(&self) -> Result<Vec<String>, String> {
        self.env
            .iter()
            .map(|(k, v)| {
                let ok = !k.is_empty()
                    && !k.starts_with(|c: char| c.is_ascii_digit())
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if ok {
                    Ok(format!("{k}={v}"))
                } else {
                    Err(format!("environment variable name {k:?} of the image convention is not a shell name"))
                }
            })
            .collect()
    }
}

/// Filters a wrapped command's stdout: holds back the first bytes until they are (and strips)
/// [`ACTIVATED`], or passes everything through once they are not (the command never ran).
#[derive(Debug)]
pub struct MarkerGate {
    held: Vec<u8>,
    state: GateState,
}

#[derive(Debug, PartialEq, Eq)]
enum GateState {
    Waiting,
    Activated,
    Failed,
}

impl MarkerGate {
    /// A gate expecting the marker (`expect = false`: everything passes, always activated).
    pub fn new(expect: bool) -> Self {
        MarkerGate {
            held: Vec::new(),
            state: if expect { GateState::Waiting } else { GateState::Activated },
        }
    }

    /// The stdout bytes to pass on after `chunk`.
    pub fn stdout(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.state != GateState::Waiting {
            return chunk.to_vec();
        }
        self.held.extend_from_slice(chunk);
        let marker = ACTIVATED.as_bytes();
        let n = self.held.len().min(marker.len());
        if self.held[..n] != marker[..n] {
            self.state = GateState::Failed;
            return std::mem::take(&mut self.held);
        }
        if self.held.len() < marker.len() {
            return Vec::new();
        }
        self.state = GateState::Activated;
        let rest = self.held.split_off(marker.len());
        self.held.clear();
        rest
    }

    /// Whether the prelude succeeded (the command ran). Bytes still held are returned.
    pub fn finish(&mut self) -> (bool, Vec<u8>) {
        (self.state == GateState::Activated, std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_runs_the_command_as_is() {
        let c = ImageConvention::plain();
        assert!(c.is_plain());
        assert_eq!(c.workdir, "/testbed");
        assert_eq!(c.wrap("pytest -x"), "pytest -x");
    }

    #[test]
    fn swebench_activates_conda_first() {
        let c = ImageConvention::swebench();
        assert_eq!(c.workdir, "/testbed");
        assert!(!c.is_plain());
        assert_eq!(
            c.wrap("pytest -x"),
            "__execcritic_home=$HOME; export HOME=/nonexistent-execcritic-home PYTHONNOUSERSITE=1; \
             unset CONDARC XDG_CONFIG_HOME; cd /\n\
             { source /opt/miniconda3/bin/activate && conda activate testbed\n} >&2 </dev/null \
             || { echo 'execcritic: the image'\\''s activation failed: source /opt/miniconda3/bin/activate \
             && conda activate testbed' >&2; exit 1; }\n\
             export HOME=$__execcritic_home; unset __execcritic_home PYTHONNOUSERSITE; cd '/testbed' || exit 1\n\
             printf '%s' '\u{1}execcritic-activated\u{1}'\npytest -x"
        );
    }

    #[test]
    fn pro_works_in_app_with_its_environment() {
        let c = ImageConvention::pro(vec![("GOPATH".into(), "/go".into()), ("A_1".into(), "x y".into())]);
        assert_eq!(c.workdir, "/app");
        assert_eq!(c.activation, None);
        assert_eq!(c.wrap("go test ./..."), "go test ./...");
        assert_eq!(c.env_pairs().unwrap(), vec!["GOPATH=/go", "A_1=x y"]);
        let bad = ImageConvention::pro(vec![("A=B".into(), "x".into())]);
        assert!(bad.env_pairs().unwrap_err().contains("\"A=B\""));
        assert!(ImageConvention::pro(vec![("1A".into(), String::new())]).env_pairs().is_err());
    }

    #[test]
    fn the_marker_is_stripped_even_when_split() {
        let m = ACTIVATED.as_bytes();
        let mut g = MarkerGate::new(true);
        assert!(g.stdout(&m[..3]).is_empty());
        let mut rest = m[3..].to_vec();
        rest.extend_from_slice(b"hello");
        assert_eq!(g.stdout(&rest), b"hello");
        assert_eq!(g.stdout(b" world"), b" world");
        assert_eq!(g.finish(), (true, Vec::new()));
    }

    #[test]
    fn output_without_the_marker_means_the_command_never_ran() {
        let mut g = MarkerGate::new(true);
        assert_eq!(g.stdout(b"forged"), b"forged");
        assert!(!g.finish().0);
        // Nothing on stdout at all (the prelude failed): held bytes come back, not activated.
        let mut g = MarkerGate::new(true);
        assert!(g.stdout(&ACTIVATED.as_bytes()[..2]).is_empty());
        assert_eq!(g.finish(), (false, ACTIVATED.as_bytes()[..2].to_vec()));
        // No marker expected: everything passes.
        let mut g = MarkerGate::new(false);
        assert_eq!(g.stdout(b"x"), b"x");
        assert!(g.finish().0);
    }
}
