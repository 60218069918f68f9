//! Unified-diff inspection: the files a patch touches (with creation/deletion/rename/mode
//! flags) and the test functions it adds. Used by bundle validation and the candidate gate.

/// One file section of a unified diff.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileChange {
    /// Path before the change (`None` for a new file).
    pub old_path: Option<String>,
    /// Path after the change (`None` for a deleted file).
    pub new_path: Option<String>,
    pub deleted: bool,
    pub renamed: bool,
    pub symlink: bool,
    pub binary: bool,
    /// Names of `def test_*` / `async def test_*` functions added by this section.
    pub added_tests: Vec<String>,
}

impl FileChange {
    /// Every path this section touches.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.old_path
            .iter()
            .chain(self.new_path.iter())
            .map(|s| s.as_str())
    }
}

fn strip_prefix(raw: &str) -> Option<String> {
    let raw = raw.split('\t').next().unwrap_or(raw).trim_end();
    if raw == "/dev/null" {
        return None;
    }
    let p = raw
        .strip_prefix("a/")
        .or_else(|| raw.strip_prefix("b/"))
        .unwrap_or(raw);
    Some(p.to_string())
}

/// Parse the file sections of a unified diff (git or plain). Returns an error message for a
/// diff with no file headers or with quoted (escaped) paths, which are not supported.
pub fn parse_patch(patch: &str) -> Result<Vec<FileChange>, String> {
    let mut files: Vec<FileChange> = Vec::new();
    let mut in_git_header = false;
    let def_re =
        regex::Regex::new(r"^\+\s*(?:async\s+)?def\s+(test\w*)\s*\(").expect("valid regex");
    let mut lines = patch.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            if rest.contains('"') {
                return Err(format!("quoted paths are not supported: {line}"));
            }
            let (a, b) = match rest.find(" b/") {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => return Err(format!("unparseable diff header: {line}")),
            };
            files.push(FileChange {
                old_path: strip_prefix(a),
                new_path: strip_prefix(b),
                ..Default::default()
            });
            in_git_header = true;
            continue;
        }
        if line.starts_with("--- ") && lines.peek().is_some_and(|n| n.starts_with("+++ ")) {
            let plus = lines.next().unwrap_or_default();
            if line.contains('"') || plus.contains('"') {
                return Err(format!("quoted paths are not supported: {line}"));
            }
            let old = strip_prefix(&line[4..]);
            let new = strip_prefix(&plus[4..]);
            if in_git_header {
                if let Some(f) = files.last_mut() {
                    f.old_path = old;
                    f.new_path = new;
                }
            } else {
                files.push(FileChange {
                    old_path: old,
                    new_path: new,
                    ..Default::default()
                });
            }
            in_git_header = false;
            continue;
        }
        let Some(f) = files.last_mut() else { continue };
        if in_git_header {
            if line.starts_with("deleted file mode") {
                f.deleted = true;
            } else if line.starts_with("rename from") || line.starts_with("copy from") {
                f.renamed = true;
            } else if line.contains(" 120000")
                && (line.starts_with("new file mode")
                    || line.starts_with("new mode")
                    || line.starts_with("index "))
            {
                f.symlink = true;
            } else if line.starts_with("GIT binary patch") || line.starts_with("Binary files") {
                f.binary = true;
            }
            if line.starts_with("@@") {
                in_git_header = false;
            }
            continue;
        }
        if let Some(c) = def_re.captures(line) {
            f.added_tests.push(c[1].to_string());
        }
    }
    for f in &mut files {
        if f.new_path.is_none() {
            f.deleted = true;
        }
    }
    if files.is_empty() {
        return Err("no file headers (`diff --git` or `---`/`+++`) found".into());
    }
    Ok(files)
}

/// Whether a repository path looks like test code or test data (the only paths a Test bundle
/// may touch, and the paths excluded from an exported source candidate).
pub fn is_test_path(path: &str) -> bool {
    let comps: Vec<&str> = path.split('/').collect();
    let file = comps.last().copied().unwrap_or("");
    comps[..comps.len().saturating_sub(1)].iter().any(|c| {
        matches!(*c, "tests" | "test" | "testing") || c.ends_with("tests") || c.starts_with("test_")
    }) || file.starts_with("test_")
        || file.ends_with("_test.py")
        || file.ends_with("_tests.py")
        || file == "conftest.py"
        || file == "tests.py"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_git_diff_with_new_and_deleted_files() {
        let p = "diff --git a/tests/test_a.py b/tests/test_a.py\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/tests/test_a.py\n@@ -0,0 +1,4 @@\n+import x\n+\n+async def test_one():\n+    def test_inner(): pass\n\
diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n";
        let f = parse_patch(p).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].old_path, None);
        assert_eq!(f[0].new_path.as_deref(), Some("tests/test_a.py"));
        assert_eq!(f[0].added_tests, vec!["test_one", "test_inner"]);
        assert!(f[1].deleted);
    }

    #[test]
    fn plain_diff_and_absolute_paths_are_reported() {
        let f = parse_patch("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n").unwrap();
        assert_eq!(f[0].new_path.as_deref(), Some("/etc/passwd"));
        assert!(parse_patch("hello\n").is_err());
    }

    #[test]
    fn test_paths() {
        assert!(is_test_path("tests/test_a.py"));
        assert!(is_test_path("pkg/tests/data/x.json"));
        assert!(is_test_path("conftest.py"));
        assert!(is_test_path("sympy/core/tests/test_basic.py"));
        assert!(!is_test_path("pkg/core.py"));
    }
}
