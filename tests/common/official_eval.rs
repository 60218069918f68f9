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
