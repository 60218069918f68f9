//! SWE-bench eval scripts: the 4.x script derived from a row and the table (what swebench
//! 4.1.0's `make_eval_script_list_py`, `_js` and `_common` write: SWE-bench's Python
//! repositories, SWE-bench Multilingual's others), and the 5.x run form of any eval script
//! (`parse_eval_script` + `record_test_exit_code` of swebench 5.0.2), so that one grader
//! reads the test command's exit status the same way for every family.

use super::specs::{RepoSpec, SpecTable, VersionSpec};

/// The shell variable and log line that carry the test command's own exit status.
pub const TEST_EXIT_CODE_VAR: &str = "SWEBENCH_TEST_EXIT_CODE";
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
/// The conda environment and work directory of every SWE-bench image.
pub const CONDA_ENV: &str = "testbed";
pub const TESTBED: &str = "/testbed";
const CONDA_ACTIVATE: &str = "source /opt/miniconda3/bin/activate";
const HEREDOC_DELIMITER: &str = "EOF_114329324912";
const SHEBANG: &str = "#!/bin/bash";
const SET_FLAGS: &str = "set -uxo pipefail";

/// What a 4.x eval script is made of: the row's fields that matter.
pub struct Row4<'a> {
    pub repo: &'a str,
    pub base_commit: &'a str,
    pub test_patch: &'a str,
}

/// The eval script swebench 4.x writes for a row (`TestSpec.eval_script`), byte for byte, by
/// the repository's language (`make_eval_script_list`). `Err` says why it cannot be made (no
/// test command for this version).
pub fn swebench4_eval_script(
    table: &SpecTable,
    repo: &RepoSpec,
    row: &Row4,
    version: &str,
    spec: &VersionSpec,
) -> Result<String, String> {
    match repo.ext.as_str() {
        "py" => python_eval_script(table, row, version, spec),
        "js" => common_eval_script(table, row, version, spec, js_test_commands(row, version)),
        _ => common_eval_script(table, row, version, spec, None),
    }
}

/// `make_eval_script_list_common` (and `_js`, whose image downloads come from a row's
/// `image_assets`, which a 4.x row has not): test files reset, test patch applied with
/// `--reject`, the `build` commands, the test commands between the markers, no conda.
fn common_eval_script(
    table: &SpecTable,
    row: &Row4,
    version: &str,
    spec: &VersionSpec,
    custom_tests: Option<Vec<String>>,
) -> Result<String, String> {
    let tests = custom_tests.unwrap_or_else(|| spec.test_cmds.clone());
    if tests.is_empty() && spec.test_cmds.is_empty() {
        return Err(format!(
            "{} {} gives no test_cmd for `{}` version `{version}`",
            table.source.package, table.source.version, row.repo
        ));
    }
    let test_files = modified_files(row.test_patch);
    let reset = if test_files.is_empty() {
        "echo \"No test files to reset\"".to_string()
    } else {
        format!("git checkout {} {}", row.base_commit, test_files.join(" "))
    };
    let mut lines: Vec<String> = vec![
        format!("cd {TESTBED}"),
        format!("git config --global --add safe.directory {TESTBED}"),
        format!("cd {TESTBED}"),
        reset.clone(),
        format!(
            "git apply --verbose --reject - <<'{HEREDOC_DELIMITER}'\n{}\n{HEREDOC_DELIMITER}",
            row.test_patch
        ),
    ];
    lines.extend(spec.build.iter().cloned());
    lines.push(format!(": '{}'", table.start_test_output));
    lines.extend(tests);
    lines.extend([format!(": '{}'", table.end_test_output), reset]);
    Ok(with_header(&lines))
}

/// swebench 4.x `MAP_REPO_TO_TEST_CMDS` (JavaScript): wp-calypso's tests run per changed test
/// path (`get_test_cmds_calypso`); `None` for every other repository.
fn js_test_commands(row: &Row4, version: &str) -> Option<Vec<String>> {
    if row.repo != "Automattic/wp-calypso" {
        return None;
    }
    const JEST_JS: &[&str] = &["10.10.0", "10.12.0", "10.13.0", "10.14.0", "10.15.2", "10.16.3"];
    const JEST_JSON: &[&str] =
        &["6.11.5", "8.9.1", "8.9.3", "8.9.4", "8.11.0", "8.11.2", "10.4.1", "10.5.0", "10.6.0", "10.9.0"];
    let mut cmds = Vec::new();
    for path in patched_paths(row.test_patch) {
        let mut path = path;
        if path.ends_with(".js.snap") && path.contains("__snapshots__/") {
            let parts: Vec<&str> = path.split('/').collect();
            path = parts[..parts.len().saturating_sub(2)].join("/");
        }
        if path.starts_with("client") || path.starts_with("packages") {
            let pkg = path.split('/').next().unwrap_or("");
            if JEST_JS.contains(&version) {
                cmds.push(format!("./node_modules/.bin/jest --verbose -c=test/{pkg}/jest.config.js '{path}'"));
            } else if JEST_JSON.contains(&version) {
                cmds.push(format!("./node_modules/.bin/jest --verbose -c=test/{pkg}/jest.config.json '{path}'"));
            } else {
                cmds.push(format!("npm run test-{pkg} --verbose '{path}'"));
            }
        } else if path.starts_with("test/e2e") {
            cmds.extend([
                "cd test/e2e".to_string(),
                format!("NODE_CONFIG_ENV=test npm run test {path}"),
                "cd ../..".to_string(),
            ]);
        }
    }
    Some(cmds)
}

/// unidiff's `PatchedFile.path` of every file in the patch: the target path (without `b/`),
/// or the source path for a deleted file.
fn patched_paths(patch: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut lines = patch.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(source) = line.strip_prefix("--- ") else { continue };
        let Some(target) = lines.peek().and_then(|l| l.strip_prefix("+++ ")) else { continue };
        let name = |s: &str| s.split('\t').next().unwrap_or(s).trim_end().to_string();
        let (source, target) = (name(source), name(target));
        let path = match (source.strip_prefix("a/"), target.strip_prefix("b/")) {
            (_, Some(t)) => t.to_string(),
            (Some(s), None) => s.to_string(),
            (None, None) => target,
        };
        paths.push(path);
        lines.next();
    }
    paths
}

/// `make_eval_script_list_py`: conda activation, the repository's eval commands, the install
/// command, and the test command with the test patch's files as directives.
fn python_eval_script(
    table: &SpecTable,
    row: &Row4,
    version: &str,
    spec: &VersionSpec,
) -> Result<String, String> {
    let test_cmd = spec.test_cmd.as_deref().ok_or_else(|| {
        format!(
            "{} {} gives no test_cmd for `{}` version `{version}`",
            table.source.package, table.source.version, row.repo
        )
    })?;
    let test_files = modified_files(row.test_patch);
    let reset = format!("git checkout {} {}", row.base_commit, test_files.join(" "));
    let mut test_command = vec![test_cmd.to_string()];
    test_command.extend(test_directives(table, row.repo, row.test_patch));
    let mut lines: Vec<String> = vec![
        CONDA_ACTIVATE.into(),
        format!("conda activate {CONDA_ENV}"),
        format!("cd {TESTBED}"),
    ];
    lines.extend(spec.eval_commands.iter().cloned());
    lines.extend([
        format!("git config --global --add safe.directory {TESTBED}"),
        format!("cd {TESTBED}"),
        "git status".into(),
        "git show".into(),
        format!("git -c core.fileMode=false diff {}", row.base_commit),
        CONDA_ACTIVATE.into(),
        format!("conda activate {CONDA_ENV}"),
    ]);
    lines.extend(spec.install.iter().cloned());
    lines.extend([
        reset.clone(),
        format!(
            "git apply -v - <<'{HEREDOC_DELIMITER}'\n{}\n{HEREDOC_DELIMITER}",
            row.test_patch
        ),
        format!(": '{}'", table.start_test_output),
        test_command.join(" "),
        format!(": '{}'", table.end_test_output),
        reset,
    ]);
    Ok(with_header(&lines))
}

/// The script as swebench 5.x runs it: `parse_eval_script` (drops every line that is exactly
/// the shebang or `set -uxo pipefail`), `record_test_exit_code` (stores `$?` right after the
/// test command and echoes it after the end marker), and the header again.
pub fn run_form(eval_script: &str) -> String {
    let lines: Vec<String> = eval_script
        .trim()
        .split('\n')
        .filter(|l| *l != SHEBANG && *l != SET_FLAGS)
        .map(str::to_string)
        .collect();
    with_header(&record_test_exit_code(lines))
}

/// swebench 5.x `record_test_exit_code`: unchanged when no line holds the end marker.
pub fn record_test_exit_code(mut lines: Vec<String>) -> Vec<String> {
    if let Some(i) = lines.iter().position(|l| l.contains(END_TEST_OUTPUT)) {
        lines.insert(i, format!("{TEST_EXIT_CODE_VAR}=$?"));
        lines.insert(
            i + 2,
            format!("echo \"{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}\""),
        );
    }
    lines
}

fn with_header(lines: &[String]) -> String {
    let mut out = format!("{SHEBANG}\n{SET_FLAGS}");
    for l in lines {
        out.push('\n');
        out.push_str(l);
    }
    out.push('\n');
    out
}

/// swebench `get_test_directives`: the `b/` paths of the test patch's `diff --git` lines
/// (Python `re.findall(r"diff --git a/.* b/(.*)")`, so a line's last ` b/` wins), minus
/// non-test extensions; for django/django module labels (`tests/` and `.py` dropped, `/` → `.`).
pub fn test_directives(table: &SpecTable, repo: &str, test_patch: &str) -> Vec<String> {
    if repo == "swe-bench/humaneval" {
        return vec!["test.py".into()];
    }
    const HEAD: &str = "diff --git a/";
    let directives = test_patch.split('\n').filter_map(|line| {
        let rest = &line[line.find(HEAD)? + HEAD.len()..];
        Some(rest[rest.rfind(" b/")? + 3..].to_string())
    });
    let directives =
        directives.filter(|d| !table.non_test_exts.iter().any(|ext| d.ends_with(ext.as_str())));
    if repo != "django/django" {
        return directives.collect();
    }
    directives
        .map(|d| {
            let d = d.strip_suffix(".py").unwrap_or(&d);
            let d = d.strip_prefix("tests/").unwrap_or(d);
            d.replace('/', ".")
        })
        .collect()
}

/// swebench `get_modified_files` (unidiff `PatchSet`): the `a/` source path of every file
/// the patch changes, in order; created files (`--- /dev/null`) are left out. Hunk bodies
/// are skipped by their line counts, so a removed line starting with `-- ` is not a header.
pub fn modified_files(patch: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut lines = patch.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("--- ") {
            if !lines.peek().is_some_and(|l| l.starts_with("+++ ")) {
                continue;
            }
            let name = rest.split('\t').next().unwrap_or(rest).trim_end();
            if let Some(path) = name.strip_prefix("a/") {
                files.push(path.to_string());
            }
        } else if let Some((mut old, mut new)) = hunk_counts(line) {
            while old > 0 || new > 0 {
                let Some(body) = lines.next() else { break };
                match body.chars().next() {
                    Some('-') => old = old.saturating_sub(1),
                    Some('+') => new = new.saturating_sub(1),
                    Some('\\') => {}
                    _ => {
                        old = old.saturating_sub(1);
                        new = new.saturating_sub(1);
                    }
                }
            }
        }
    }
    files
}

/// `@@ -a,b +c,d @@` → (b, d); a missing count is 1.
fn hunk_counts(line: &str) -> Option<(usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let count = |r: &str| -> Option<usize> {
        match r.split_once(',') {
            Some((_, n)) => n.parse().ok(),
            None => r.parse::<usize>().ok().map(|_| 1),
        }
    };
    Some((count(old)?, count(new)?))
}

/// Our runner for a SWE-bench log parser name.
pub fn runner_for_parser(parser: &str) -> crate::task::Runner {
    match parser {
        "parse_log_django" => crate::task::Runner::Django,
        "parse_log_sympy" => crate::task::Runner::Sympy,
        _ => crate::task::Runner::Pytest,
    }
}

/// The log parser and eval type of a table repository (`None` parser → error text).
pub fn repo_parser<'a>(
    table: &SpecTable,
    repo: &str,
    spec: &'a RepoSpec,
) -> Result<&'a str, String> {
    spec.parser.as_deref().ok_or_else(|| {
        format!(
            "{} {} names no log parser for `{repo}`",
            table.source.package, table.source.version
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::official::specs::table;

    #[test]
    fn modified_files_skip_created_files_and_hunk_bodies() {
        let patch = "diff --git a/t/a.py b/t/a.py\n--- a/t/a.py\n+++ b/t/a.py\n@@ -1,2 +1,2 @@\n--- not a header\n+++ not either\n x\ndiff --git a/t/new.py b/t/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/t/new.py\n@@ -0,0 +1 @@\n+y\n";
        assert_eq!(modified_files(patch), vec!["t/a.py"]);
    }

    #[test]
    fn django_directives_are_module_labels() {
        let patch = "diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py\ndiff --git a/tests/data.json b/tests/data.json\n";
        assert_eq!(
            test_directives(table(), "django/django", patch),
            vec!["admin_views.tests"]
        );
        assert_eq!(
            test_directives(table(), "psf/requests", patch),
            vec!["tests/admin_views/tests.py"]
        );
    }

    #[test]
    fn run_form_records_the_exit_code_after_the_test_command() {
        let s = run_form("#!/bin/bash\nset -uxo pipefail\ncd /x\n: '>>>>> Start Test Output'\npytest\n: '>>>>> End Test Output'\ngit checkout x\n");
        assert_eq!(s, "#!/bin/bash\nset -uxo pipefail\ncd /x\n: '>>>>> Start Test Output'\npytest\nSWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End Test Output'\necho \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\ngit checkout x\n");
        // No end marker: left as it is.
        assert_eq!(run_form("echo hi"), "#!/bin/bash\nset -uxo pipefail\necho hi\n");
    }
}
