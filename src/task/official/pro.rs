//! SWE-bench Pro rows (ScaleAI/SWE-bench_Pro): the per-instance run script, parser and
//! Dockerfile `ENV` lines, read from the row or from the files beside the task file as laid
//! out in scaleapi/SWE-bench_Pro-os (`run_scripts/<id>/run_script.sh`,
//! `run_scripts/<id>/parser.py`, `dockerfiles/{base,instance}_dockerfile/<id>/Dockerfile`),
//! and the eval script built from them the way `swe_bench_pro_eval.py`'s `create_entryscript`
//! does, wrapped with SWE-bench's test-output markers and exit-code record.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::swebench::{END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE, TEST_EXIT_CODE_VAR};

/// The work directory of every Pro image (`WORKDIR /app`).
pub const PRO_WORKDIR: &str = "/app";
/// Where the run script, the parser and the parser's result live in the container.
pub const PRO_RUN_SCRIPT_PATH: &str = "/workspace/run_script.sh";
pub const PRO_PARSER_PATH: &str = "/workspace/parser.py";
pub const PRO_OUTPUT_PATH: &str = "/workspace/output.json";
/// Where the parser's two inputs lie when it runs (written by the harness, in the parser's own
/// sandbox, from the run script's tagged output: see [`eval_script`]).
pub const PRO_STDOUT_PATH: &str = "/workspace/stdout.log";
pub const PRO_STDERR_PATH: &str = "/workspace/stderr.log";
/// The tags [`eval_script`] puts before each line the run script writes to stdout and to
/// stderr; [`split_run_output`] reads them back.
pub const STDOUT_TAG: &str = "O|";
pub const STDERR_TAG: &str = "E|";
/// The row's test patch, placed for [`eval_script`]'s test-file step.
pub const PRO_TEST_PATCH_PATH: &str = "/workspace/test.patch";
/// The directory all of the above live in: a writable scratch directory in the sandbox.
pub const PRO_SCRATCH_DIR: &str = "/workspace";
/// The Docker Hub repository of the published Pro images (`<repo>:<dockerhub_tag>`).
pub const PRO_IMAGE_REPOSITORY: &str = "jefzda/sweap-images";
/// The log parser name of Pro rows: the instance's own `parser.py`.
pub const PRO_PARSER: &str = "pro_parser_py";

/// A Pro row's evaluation inputs, kept as given (written back by `to_json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProRow {
    /// The row's `before_repo_set_cmd` (the official evaluation runs only its last line).
    pub before_repo_set_cmd: String,
    /// `selected_test_files_to_run`, decoded.
    pub selected_test_files: Vec<String>,
    pub dockerhub_tag: Option<String>,
    pub repo_language: Option<String>,
    /// `run_script.sh` text.
    pub run_script: String,
    /// `parser.py` text.
    pub parser_script: String,
    pub base_dockerfile: String,
    pub instance_dockerfile: String,
}

/// One of a Pro row's texts: the row's own field, else the file beside the task file.
pub struct Sidecar {
    /// The row field that may carry the text inline.
    pub field: &'static str,
    /// The file's path under the task file's directory, `{id}` = the instance id.
    pub file: &'static str,
}

pub const RUN_SCRIPT: Sidecar = Sidecar {
    field: "run_script",
    file: "run_scripts/{id}/run_script.sh",
};
pub const PARSER_SCRIPT: Sidecar = Sidecar {
    field: "parser_script",
    file: "run_scripts/{id}/parser.py",
};
pub const BASE_DOCKERFILE: Sidecar = Sidecar {
    field: "base_dockerfile",
    file: "dockerfiles/base_dockerfile/{id}/Dockerfile",
};
pub const INSTANCE_DOCKERFILE: Sidecar = Sidecar {
    field: "instance_dockerfile",
    file: "dockerfiles/instance_dockerfile/{id}/Dockerfile",
};

impl Sidecar {
    /// The file's path for instance `id` under `base_dir`.
    pub fn path(&self, base_dir: &Path, id: &str) -> PathBuf {
        base_dir.join(self.file.replace("{id}", id))
    }

    /// Read the file for `id` (the row had no inline text). `Err` is the message.
    pub fn read(&self, base_dir: Option<&Path>, id: &str) -> Result<String, String> {
        if id.contains('/') || id.contains('\\') || id == "." || id == ".." {
            return Err(format!(
                "not in the row, and the instance id cannot name a file under {}",
                self.file
            ));
        }
        let Some(dir) = base_dir else {
            return Err(format!(
                "not in the row, and there is no task file directory to find {} in",
                self.file.replace("{id}", id)
            ));
        };
        let path = self.path(dir, id);
        std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "not in the row, and {} cannot be read ({e}); put the task file at the root of a \
                 SWE-bench_Pro-os checkout or give `{}` in the row",
                path.display(),
                self.field
            )
        })
    }
}

/// The `export` lines the official evaluation makes of the Dockerfiles' `ENV` lines: every
/// stripped line starting with `ENV`, its first `ENV` replaced by `export` (base image first).
pub fn env_exports(base_dockerfile: &str, instance_dockerfile: &str) -> Vec<String> {
    [base_dockerfile, instance_dockerfile]
        .iter()
        .flat_map(|d| d.split('\n'))
        .map(str::trim)
        .filter(|l| l.starts_with("ENV"))
        .map(|l| l.replacen("ENV", "export", 1))
        .collect()
}

/// The default image of a Pro row: `jefzda/sweap-images:<dockerhub_tag>`.
pub fn image(dockerhub_tag: &str) -> String {
    format!("{PRO_IMAGE_REPOSITORY}:{dockerhub_tag}")
}

/// The test files step of a Pro row. The official entry script runs the last line of
/// `before_repo_set_cmd`, `git checkout <fix commit> -- <test files>`: the test files as the
/// fix commit has them. Our containers hold no commit after Base (the history is sanitised, or
/// the code under test could read the fix out of the store), so that line becomes the same
/// files from the row's test patch, the diff from Base to the fix commit: each path reset to
/// Base (removed where Base lacks it), then the test patch applied to those paths only
/// (`git apply --include`). A test patch that does not apply stops the script before the
/// test-output markers: an infrastructure failure, never a verdict. Any other last line is
/// kept as given.
pub fn test_files_step(last_line: &str, base_commit: &str) -> Vec<String> {
    let words = shlex::split(last_line).unwrap_or_default();
    let paths = match words.iter().position(|w| w == "--") {
        Some(dd) if dd == 3 && words[0] == "git" && words[1] == "checkout" && words.len() > 4 => {
            &words[dd + 1..]
        }
        _ => return vec![last_line.to_string()],
    };
    let quote = |p: &str| shlex::try_quote(p).map(|q| q.into_owned()).unwrap_or_default();
    let base = quote(base_commit);
    let mut lines = Vec::new();
    let mut include = String::new();
    for p in paths {
        let q = quote(p);
        lines.push(format!(
            "if git cat-file -e {base}:{q} 2>/dev/null; then git checkout {base} -- {q}; else rm -rf -- {q}; fi"
        ));
        let dir = quote(&format!("{}/*", p.trim_end_matches('/')));
        include.push_str(&format!(" --include={q} --include={dir}"));
    }
    lines.push(format!(
        "git apply -v{include} {PRO_TEST_PATCH_PATH} || {{ echo 'execcritic: the test patch does not apply' >&2; exit 97; }}"
    ));
    lines
}

/// The eval script of a Pro row. The harness applies the candidate patch at `/app` on Base
/// first and places `run_script.sh`, `parser.py` and the test patch under `/workspace` (as for
/// SWE-bench, where eval.sh does not apply the patch either). Then, as the official entry
/// script: the exports, `cd /app`, the last line of `before_repo_set_cmd` (which puts the
/// official test files in place: see [`test_files_step`]), `bash run_script.sh <files,
/// comma-joined>` — the test command between SWE-bench's markers, its `$?` echoed as
/// `>>>>> Test Exit Code`. The instance's `parser.py` does not run here: the harness runs it on
/// the two logs in a fresh sandbox, where the code under test cannot have changed it (see
/// `harness::official`).
///
/// One departure: the official script sends the run script's stdout and stderr to
/// `/workspace/{stdout,stderr}.log`, files the code under test can rewrite (an `atexit` hook
/// that replaces the failures with passes). Here each line goes into the script's own output
/// stream instead, tagged [`STDOUT_TAG`] or [`STDERR_TAG`] by a shell loop that is not the code
/// under test; what the tests wrote cannot be taken back from a pipe, and the harness rebuilds
/// the two logs from the tags ([`split_run_output`]). xtrace is off meanwhile, so the loops do
/// not trace themselves.
pub fn eval_script(row: &ProRow, base_commit: &str) -> String {
    let mut lines = vec!["#!/bin/bash".to_string(), "set -x".to_string()];
    lines.extend(env_exports(&row.base_dockerfile, &row.instance_dockerfile));
    lines.push(format!("cd {PRO_WORKDIR}"));
    let last = row
        .before_repo_set_cmd
        .trim()
        .split('\n')
        .next_back()
        .unwrap_or("");
    if !last.trim().is_empty() {
        lines.extend(test_files_step(last.trim(), base_commit));
    }
    lines.extend([
        format!(": '{START_TEST_OUTPUT}'"),
        "{ set +x; } 2>/dev/null".to_string(),
        format!(
            "_execcritic_tag() {{ local l; while IFS= read -r l || [ -n \"$l\" ]; do printf '%s%s\\n' \"$1\" \"$l\"; done; }}"
        ),
        "exec 4>&1".to_string(),
        "set -o pipefail".to_string(),
        // stderr into the first loop (to the saved stdout, fd 4), stdout through fd 3 into the
        // second; with pipefail the pipeline's status is the run script's.
        format!(
            "{{ bash {PRO_RUN_SCRIPT_PATH} {} 2>&1 1>&3 3>&- 4>&- | _execcritic_tag '{STDERR_TAG}' >&4 4>&-; }} 3>&1 | _execcritic_tag '{STDOUT_TAG}'",
            row.selected_test_files.join(",")
        ),
        format!("{TEST_EXIT_CODE_VAR}=$?"),
        "set +o pipefail".to_string(),
        "exec 4>&-".to_string(),
        "set -x".to_string(),
        format!(": '{END_TEST_OUTPUT}'"),
        format!("echo \"{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}\""),
    ]);
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The run script's stdout and stderr, rebuilt from the tagged lines of the eval script's
/// output after its first start marker (see [`eval_script`]). Lines without a tag (the
/// script's trace, anything written around the loops) are in neither log.
pub fn split_run_output(output: &str) -> (String, String) {
    let section = output
        .find(START_TEST_OUTPUT)
        .map_or("", |i| &output[i..]);
    let (mut out, mut err) = (String::new(), String::new());
    for line in section.split_inclusive('\n') {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if let Some(l) = line.strip_prefix(STDOUT_TAG) {
            out.push_str(l);
            out.push('\n');
        } else if let Some(l) = line.strip_prefix(STDERR_TAG) {
            err.push_str(l);
            err.push('\n');
        }
    }
    (out, err)
}

/// The command that runs the instance's parser on the two logs, as the official evaluation
/// does: `python parser.py stdout.log stderr.log output.json`.
pub fn parser_command() -> String {
    format!("python {PRO_PARSER_PATH} {PRO_STDOUT_PATH} {PRO_STDERR_PATH} {PRO_OUTPUT_PATH}")
}

#[cfg(test)]
mod tests {
    use super::{env_exports, test_files_step};

    #[test]
    fn the_fix_commit_checkout_becomes_base_plus_the_test_patch() {
        let lines = test_files_step("git checkout 9f8e -- tests/a.py 'd ir/'", "0b1c");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(
            lines[0],
            "if git cat-file -e 0b1c:tests/a.py 2>/dev/null; then git checkout 0b1c -- tests/a.py; else rm -rf -- tests/a.py; fi"
        );
        assert!(lines[1].contains("0b1c:'d ir/'"), "{}", lines[1]);
        assert!(
            lines[2].starts_with("git apply -v --include=tests/a.py --include='tests/a.py/*' --include='d ir/' --include='d ir/*' /workspace/test.patch || {"),
            "{}",
            lines[2]
        );
        // Any other form is kept as given.
        assert_eq!(test_files_step("git checkout 9f8e", "0b1c"), vec!["git checkout 9f8e"]);
        assert_eq!(test_files_step("make tests", "0b1c"), vec!["make tests"]);
    }

    #[test]
    fn the_run_scripts_streams_are_rebuilt_from_their_tags() {
        let out = "+ git apply\nO|before the marker\n+ : '>>>>> Start Test Output'\nO|a::t PASSED\nE|warning\n\
                   untagged\nO|\nO|a::u FAILED\n+ : '>>>>> End Test Output'\n";
        let (stdout, stderr) = super::split_run_output(out);
        assert_eq!(stdout, "a::t PASSED\n\na::u FAILED\n");
        assert_eq!(stderr, "warning\n");
        assert_eq!(super::split_run_output("O|no marker\n"), (String::new(), String::new()));
    }

    /// The eval script's tagging, run by bash: each stream tagged, lines without a final
    /// newline kept, the run script's status recorded, and a file the tests write is not read.
    #[test]
    fn the_tagging_shell_keeps_both_streams_and_the_status() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run.sh");
        std::fs::write(&run, "echo out1; echo err1 >&2; printf 'out2'; echo x > /dev/null; exit 3\n").unwrap();
        let row = super::ProRow {
            before_repo_set_cmd: String::new(),
            selected_test_files: vec!["t.py".into()],
            dockerhub_tag: None,
            repo_language: None,
            run_script: String::new(),
            parser_script: String::new(),
            base_dockerfile: String::new(),
            instance_dockerfile: String::new(),
        };
        let script = super::eval_script(&row, "0b1c")
            .replace(super::PRO_RUN_SCRIPT_PATH, &run.display().to_string())
            .replace(&format!("cd {}", super::PRO_WORKDIR), "cd .");
        let eval = dir.path().join("eval.sh");
        std::fs::write(&eval, script).unwrap();
        let out = std::process::Command::new("bash").arg("-c").arg(format!("bash {} 2>&1", eval.display())).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (stdout, stderr) = super::split_run_output(&text);
        assert_eq!(stdout, "out1\nout2\n", "{text}");
        assert_eq!(stderr, "err1\n", "{text}");
        assert!(text.contains(">>>>> Test Exit Code: 3"), "{text}");
        assert!(!text.contains("_execcritic_tag"), "the loops are not traced: {text}");
    }

    #[test]
    fn env_lines_become_exports_in_order() {
        let base = "FROM x\nENV A=1\n  ENV B=\"two words\"\nRUN echo ENV\n";
        let inst = "ENV PATH=/go/bin:$PATH\n";
        assert_eq!(
            env_exports(base, inst),
            vec!["export A=1", "export B=\"two words\"", "export PATH=/go/bin:$PATH"]
        );
    }
}
