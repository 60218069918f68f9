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
/// Where the run script's output goes (the parser's two inputs).
pub const PRO_STDOUT_PATH: &str = "/workspace/stdout.log";
pub const PRO_STDERR_PATH: &str = "/workspace/stderr.log";
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
/// comma-joined>` with stdout and stderr to `/workspace/{stdout,stderr}.log` — the test
/// command between SWE-bench's markers, its `$?` echoed as `>>>>> Test Exit Code`. The
/// instance's `parser.py` does not run here: the harness runs it on the two logs in a fresh
/// sandbox, where the code under test cannot have changed it (see `harness::official`).
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
        format!(
            "bash {PRO_RUN_SCRIPT_PATH} {} > {PRO_STDOUT_PATH} 2> {PRO_STDERR_PATH}",
            row.selected_test_files.join(",")
        ),
        format!("{TEST_EXIT_CODE_VAR}=$?"),
        format!(": '{END_TEST_OUTPUT}'"),
        format!("echo \"{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}\""),
    ]);
    let mut out = lines.join("\n");
    out.push('\n');
    out
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
    fn env_lines_become_exports_in_order() {
        let base = "FROM x\nENV A=1\n  ENV B=\"two words\"\nRUN echo ENV\n";
        let inst = "ENV PATH=/go/bin:$PATH\n";
        assert_eq!(
            env_exports(base, inst),
            vec!["export A=1", "export B=\"two words\"", "export PATH=/go/bin:$PATH"]
        );
    }
}
