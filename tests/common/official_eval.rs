//! `execcritic eval --sandbox docker` on published rows (swebench 4.x/5.x, SWE-bench Pro) in
//! locally built images: a scripted Repair agent that applies a patch in the image's workdir and
//! submits it at Round 0 (no Test agent: the `none` condition); the rows of `results.jsonl`.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

fn call(cmd: &str) -> String {
    let content = format!("<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n</tool_call>");
    serde_json::json!({ "content": content }).to_string()
}

/// Run `eval` over `rows`, the Repair agent applying `patches[i]` in `workdirs[i]`; returns the
/// result rows (panics, with the output, if the command fails).
pub fn eval_rows(dir: &Path, rows: &[serde_json::Value], work: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let scripts = dir.join("repair-scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    for (row, (workdir, patch)) in rows.iter().zip(work) {
        let id = row["instance_id"].as_str().unwrap();
        let turns = [
            call(&format!("cd {workdir} && git apply <<'ECPATCH'\n{patch}ECPATCH")),
            call(&format!("cd {workdir} && git add -AN && git diff --no-color > /tmp/fix.patch")),
            call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/fix.patch"),
        ];
        std::fs::write(scripts.join(format!("{id}.jsonl")), turns.join("\n") + "\n").unwrap();
    }
    let tasks = dir.join("tasks.jsonl");
    let lines: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    std::fs::write(&tasks, lines.join("\n") + "\n").unwrap();
    let out = dir.join("eval-out");
    let run = Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["eval", "--sandbox", "docker", "--tests", "none", "--runs", "1", "--tasks"])
        .arg(&tasks)
        .arg("--out")
        .arg(&out)
        .arg(format!("--repair-policy=scripted:{}", scripts.display()))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `execcritic grade --sandbox docker` of `predictions` on `tasks` into `out` (panics, with its
/// stderr, if the command fails); returns `swebench_summary.json`.
pub fn grade_cli(tasks: &Path, predictions: &Path, out: &Path) -> serde_json::Value {
    let run = Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["grade", "--sandbox", "docker", "--tasks"])
        .arg(tasks)
        .arg("--predictions")
        .arg(predictions)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    serde_json::from_str(&std::fs::read_to_string(out.join("swebench_summary.json")).unwrap()).unwrap()
}

/// swebench 5.0.2's own `report.json` for `log` of `task` read with `parser`
/// (scripts/swebench-oracle.py); `None`, saying why, when the package is not installed.
pub fn swebench_report(log: &str, task: &execcritic::task::TaskInstance, parser: &str, patch: &str) -> Option<String> {
    let have = Command::new("python3")
        .args(["-c", "import importlib.metadata as m; assert m.version('swebench') == '5.0.2'"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("swebench 5.0.2 not installed: report.json not compared (scripts/ci-deps-swebench.sh)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.json");
    let case = serde_json::json!([{
        "id": task.instance_id, "parser": parser, "log": log,
        "fail_to_pass": task.fail_to_pass, "pass_to_pass": task.pass_to_pass,
        "eval_type": "pass_and_fail", "model_patch": patch,
    }]);
    std::fs::write(&cases, case.to_string()).unwrap();
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/swebench-oracle.py"))
        .arg(&cases)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The oracle reports under the case id; swebench keys the report by instance id.
    Some(v[0]["report_json"].as_str().unwrap().to_string())
}

/// A test image, removed when dropped.
pub struct Image(pub String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// Run the shell script `layout` in a container of `from` (no network) and commit the result as
/// `image`; returns the script's stdout, trimmed.
pub fn build_image(from: &str, image: &str, layout: &str) -> String {
    let name = image.replace([':', '/'], "-");
    let out = Command::new("docker")
        .args(["run", "--name", &name, "--network", "none", from, "bash", "-c", layout])
        .output()
        .expect("docker run");
    let commit = Command::new("docker").args(["commit", &name, image]).output().expect("docker commit");
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(commit.status.success(), "{}", String::from_utf8_lossy(&commit.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
