//! Harness-generated non-fixes for balanced accuracy. A Test agent's bundle is rewarded for
//! telling correct candidates from incorrect ones; a bundle that reads the source instead of
//! exercising it ("the fixed line is present") would score well on candidates that are either
//! the fix or something unrelated. So the pool of incorrect candidates always includes patches
//! that LOOK like the fix and change no behaviour:
//! - `gold_as_comments`: every line the gold patch adds, as a comment at the same place (the
//!   gold patch's removed lines stay);
//! - `issue_words`: the first words as a comment where the gold patch first changes code.
//!
//! They are built from the gold patch's own hunks (its context and removed lines are Base), so
//! they apply to Base exactly where the gold patch does. Source files whose line comment is known
//! ([`line_comment`]: `#` in Python, `//` in Rust, Go, C, C++, Java, JavaScript/TypeScript).

use super::diff::{parse_patch, FileChange, FileOp, Hunk, Patch};
use crate::task::{Candidate, TaskInstance};

/// The task with the generated non-fixes placed first among its candidates (so the reward's
/// balanced selection of at most eight always keeps them).
pub fn with_non_fixes(task: &TaskInstance) -> TaskInstance {
    let mut t = task.clone();
    let mut pool: Vec<Candidate> = non_fixes(task)
        .into_iter()
        .map(|patch| Candidate {
            patch,
            resolved: false,
        })
        .collect();
    pool.extend(task.candidates.iter().cloned());
    t.candidates = pool;
    t
}

/// The line-comment marker of a source file, by extension (`None`: not a known source file).
pub fn line_comment(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.').map(|(_, e)| e)?;
    match ext {
        "py" => Some("#"),
        "rs" | "go" | "c" | "h" | "cc" | "cpp" | "cxx" | "hpp" | "hh" | "java" | "js" | "mjs"
        | "cjs" | "jsx" | "ts" | "tsx" => Some("//"),
        _ => None,
    }
}

/// The non-fix patches of a task (empty when its gold patch changes no known source file).
pub fn non_fixes(task: &TaskInstance) -> Vec<String> {
    let Ok(files) = parse_patch(&task.patch) else {
        return Vec::new();
    };
    let sources: Vec<&FileChange> = files
        .iter()
        .filter(|f| {
            f.op == FileOp::Modify
                && f.new_path.as_deref().and_then(line_comment).is_some()
                && !f.hunks.is_empty()
        })
        .collect();
    if sources.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let commented: Vec<FileChange> = sources
        .iter()
        .map(|f| rebuild(f, |h| comment_added(h, marker(f))))
        .collect();
    if let Some(p) = serialise(commented) {
        out.push(p);
    }
    let words: String = task
        .problem_statement
        .split_whitespace()
        .take(16)
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .take(160)
        .collect();
    if !words.is_empty() {
        let first = sources[0];
        let mut done = false;
        let f = rebuild(first, |h| {
            let mut lines: Vec<String> = context_only(h);
            if !done {
                lines.insert(0, format!("+{} {words}", marker(first)));
                done = true;
            }
            lines
        });
        if let Some(p) = serialise(vec![f]) {
            out.push(p);
        }
    }
    out
}

/// The comment marker of a file the filter kept.
fn marker(f: &FileChange) -> &'static str {
    f.new_path.as_deref().and_then(line_comment).unwrap_or("#")
}

/// A hunk's Base lines (context and removed) as context.
fn context_only(h: &Hunk) -> Vec<String> {
    h.lines
        .iter()
        .filter_map(|l| match l.chars().next() {
            Some(' ') => Some(l.clone()),
            Some('-') => Some(format!(" {}", &l[1..])),
            _ => None,
        })
        .collect()
}

/// A hunk whose added lines are comments and whose removed lines stay.
fn comment_added(h: &Hunk, marker: &str) -> Vec<String> {
    h.lines
        .iter()
        .filter_map(|l| match l.chars().next() {
            Some(' ') => Some(l.clone()),
            Some('-') => Some(format!(" {}", &l[1..])),
            Some('+') => {
                let body = &l[1..];
                let indent: String = body.chars().take_while(|c| c.is_whitespace()).collect();
                Some(format!("+{indent}{marker} {}", body.trim_start()))
            }
            _ => None,
        })
        .collect()
}

/// The file section with each hunk's lines replaced by `lines(hunk)`, headers recomputed; a hunk
/// left with no change is dropped (git refuses a hunk of context only).
fn rebuild(f: &FileChange, mut lines: impl FnMut(&Hunk) -> Vec<String>) -> FileChange {
    let mut out = f.clone();
    let mut offset: i64 = 0;
    out.hunks = f
        .hunks
        .iter()
        .filter_map(|h| {
            let body = lines(h);
            let old_start = h.old_start().map_or(1, |n| n as i64);
            let old = body.iter().filter(|l| l.starts_with(' ')).count() as i64;
            let new = old + body.iter().filter(|l| l.starts_with('+')).count() as i64;
            let new_start = old_start + offset;
            offset += new - old;
            body.iter().any(|l| l.starts_with('+')).then(|| Hunk {
                header: format!("@@ -{old_start},{old} +{new_start},{new} @@"),
                lines: body,
            })
        })
        .collect();
    out
}

fn serialise(files: Vec<FileChange>) -> Option<String> {
    let files: Vec<FileChange> = files
        .into_iter()
        .filter(|f| {
            f.hunks
                .iter()
                .any(|h| h.lines.iter().any(|l| l.starts_with('+')))
        })
        .collect();
    if files.is_empty() {
        return None;
    }
    let text = Patch { files }.to_git();
    // Round trip through the one parser: only what it accepts is a candidate.
    parse_patch(&text).ok().map(|_| text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_fixes_keep_base_and_comment_the_fix() {
        let gold = "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n@@ -10,2 +10,3 @@\n x = 1\n+y = 2\n z = 3\n";
        let task = TaskInstance::from_json(
            serde_json::json!({"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0123456789abcdef0123456789abcdef01234567", "patch": gold,
                "test_patch": "", "problem_statement": "add() subtracts instead of adding",
                "FAIL_TO_PASS": ["t.py::test_a"], "PASS_TO_PASS": []}),
            None,
        )
        .unwrap();
        let nf = non_fixes(&task);
        assert_eq!(nf.len(), 2);
        assert!(
            nf[0].contains(
                "@@ -1,5 +1,6 @@\n def add(a, b):\n     return a - b\n+    # return a + b\n"
            ),
            "{}",
            nf[0]
        );
        assert!(
            nf[0].contains("@@ -10,2 +11,3 @@\n x = 1\n+# y = 2\n z = 3\n"),
            "{}",
            nf[0]
        );
        assert!(
            nf[1].contains(
                "+# add() subtracts instead of adding\n def add(a, b):\n     return a - b\n"
            ),
            "{}",
            nf[1]
        );
        // Only the hunk that carries the words: git refuses a hunk of context only.
        assert_eq!(nf[1].matches("@@ -").count(), 1, "{}", nf[1]);
        let t = with_non_fixes(&task);
        assert_eq!(t.candidates.len(), 2);
        assert!(t.candidates.iter().all(|c| !c.resolved));
    }

    #[test]
    fn a_rust_fix_is_commented_with_rusts_marker() {
        let gold = "diff --git a/src/imp.rs b/src/imp.rs\n--- a/src/imp.rs\n+++ b/src/imp.rs\n@@ -1,3 +1,3 @@\n pub fn add(a: i32, b: i32) -> i32 {\n-    a - b\n+    a + b\n }\n";
        let task = TaskInstance::from_json(
            serde_json::json!({"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0123456789abcdef0123456789abcdef01234567", "patch": gold,
                "test_patch": "", "problem_statement": "add subtracts",
                "FAIL_TO_PASS": [], "PASS_TO_PASS": []}),
            None,
        )
        .unwrap();
        let nf = non_fixes(&task);
        assert_eq!(nf.len(), 2);
        assert!(nf[0].contains("     a - b\n+    // a + b\n }\n"), "{}", nf[0]);
        assert!(nf[1].contains("+// add subtracts\n pub fn add"), "{}", nf[1]);
        assert_eq!(line_comment("README.md"), None);
        assert_eq!(line_comment("Makefile"), None);
    }
}
