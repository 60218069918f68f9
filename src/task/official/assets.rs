//! swebench 5.x `image_assets`: binary files a text patch cannot carry (rendering baselines such
//! as `expected.png`), listed per row under `test_patch` and `patch` as `{"path", "url"}`. As
//! swebench's `run_evaluation` stages them, the harness places each in the container at
//! `/image_assets/<path with / as __>` and the eval script copies it into the working tree just
//! before the start-of-test-output marker, after the test patch has been applied.
//!
//! The bytes come from the task repository's layout beside the task file,
//! `tasks/<instance id>/test_assets/<path>` (swebench's `asset_path`); nothing is fetched, so an
//! air-gapped machine grades the same way as one with network. An asset that is not there makes
//! the instance an infrastructure failure at grading (`official_infra:image_asset_missing`),
//! never a verdict: swebench warns and runs the tests without it.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::super::error::TaskError;
use super::swebench::START_TEST_OUTPUT;

/// Where assets are staged in the container (a scratch directory of the sandbox).
pub const STAGING_DIR: &str = "/image_assets";
/// The largest asset read, in bytes.
pub const MAX_ASSET_BYTES: u64 = 64 << 20;

/// One binary file of a row's `image_assets`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageAsset {
    /// Path in the repository, relative.
    pub path: String,
    /// Where the harness places it in the container: `/image_assets/<path, / as __>`.
    pub staged: String,
    /// Where the dataset says it can be downloaded (not fetched here).
    pub url: Option<String>,
    /// The bytes from `tasks/<id>/test_assets/<path>` beside the task file; `None`: not there.
    #[serde(skip)]
    pub bytes: Option<Vec<u8>>,
}

/// The assets of a row's `image_assets` value (an object, or a JSON string of one; `None` or an
/// empty string: no assets), in swebench's order (`test_patch`, then `patch`; entries without a
/// `path` are skipped, as swebench skips them). Bytes are read from under `base_dir`.
pub fn parse(id: &str, value: Option<&Value>, base_dir: Option<&Path>) -> Result<Vec<ImageAsset>, TaskError> {
    let err = |m: String| TaskError::field(id, "image_assets", m);
    let object = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(Vec::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| err(format!("not JSON: {e}")))?,
        Some(v) => v.clone(),
    };
    let Value::Object(map) = object else {
        return Err(err("expected an object".into()));
    };
    let mut assets = Vec::new();
    for key in ["test_patch", "patch"] {
        let entries = match map.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(a)) => a,
            Some(_) => return Err(err(format!("`{key}` must be a list"))),
        };
        for entry in entries {
            let path = match entry.get("path") {
                None | Some(Value::Null) => continue,
                Some(Value::String(p)) if p.is_empty() => continue,
                Some(Value::String(p)) => p.clone(),
                Some(_) => return Err(err(format!("a `{key}` entry's path is not a string"))),
            };
            check_path(&path).map_err(|m| err(format!("asset path {path:?}: {m}")))?;
            let url = entry.get("url").and_then(Value::as_str).map(str::to_string);
            let bytes = match base_dir {
                Some(dir) => read_local(&dir.join("tasks").join(id).join("test_assets").join(&path))
                    .map_err(|m| err(format!("asset {path}: {m}")))?,
                None => None,
            };
            assets.push(ImageAsset {
                staged: format!("{STAGING_DIR}/{}", path.replace('/', "__")),
                path,
                url,
                bytes,
            });
        }
    }
    Ok(assets)
}

/// A relative path inside the repository: no absolute path, no `..` or empty component, no
/// control character (it is written into the eval script, quoted).
fn check_path(path: &str) -> Result<(), &'static str> {
    if path.starts_with('/') {
        return Err("is absolute");
    }
    if path.chars().any(char::is_control) {
        return Err("has a control character");
    }
    if path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err("has an empty, `.` or `..` component");
    }
    Ok(())
}

/// The file's bytes; `Ok(None)` when there is no such file.
fn read_local(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > MAX_ASSET_BYTES {
        return Err(format!("{} is larger than {MAX_ASSET_BYTES} bytes", path.display()));
    }
    std::fs::read(path).map(Some).map_err(|e| format!("{}: {e}", path.display()))
}

/// `eval_script` with a copy command per asset inserted just before the line holding the
/// start-of-test-output marker (at the end where there is none), as swebench's
/// `_inject_asset_restore` does; the paths are quoted.
pub fn inject_restore(eval_script: &str, assets: &[ImageAsset]) -> String {
    if assets.is_empty() {
        return eval_script.to_string();
    }
    let quote = |s: &str| shlex::try_quote(s).map(|q| q.into_owned()).unwrap_or_default();
    let restore: Vec<String> = assets
        .iter()
        .map(|a| {
            let path = quote(&a.path);
            format!("mkdir -p \"$(dirname {path})\" && cp {} {path}", quote(&a.staged))
        })
        .collect();
    let lines: Vec<&str> = eval_script.split('\n').collect();
    match lines.iter().position(|l| l.contains(START_TEST_OUTPUT)) {
        Some(i) => [&lines[..i], &restore.iter().map(String::as_str).collect::<Vec<_>>()[..], &lines[i..]]
            .concat()
            .join("\n"),
        None => format!("{eval_script}\n{}", restore.join("\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn assets_are_read_beside_the_task_file_in_swebench_order() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("tasks/x__y-1/test_assets/tests/baseline/a b.png");
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::write(&local, b"\x89PNG\x00\xff").unwrap();
        let v = json!({
            "patch": [{"path": "lib/icon.png", "url": "https://example.org/icon.png"}],
            "test_patch": [{"path": "tests/baseline/a b.png", "url": "https://example.org/a.png"}, {"url": "no path: skipped"}],
        });
        let a = parse("x__y-1", Some(&Value::String(v.to_string())), Some(dir.path())).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].path, "tests/baseline/a b.png");
        assert_eq!(a[0].staged, "/image_assets/tests__baseline__a b.png");
        assert_eq!(a[0].bytes.as_deref(), Some(&b"\x89PNG\x00\xff"[..]));
        assert_eq!(a[1].path, "lib/icon.png");
        assert_eq!(a[1].bytes, None, "not beside the task file");
        assert_eq!(a[1].url.as_deref(), Some("https://example.org/icon.png"));
        assert!(parse("x", Some(&Value::String(String::new())), None).unwrap().is_empty());
        assert!(parse("x", None, None).unwrap().is_empty());
    }

    #[test]
    fn bad_asset_entries_are_clear_errors() {
        for (v, want) in [
            (json!({"test_patch": [{"path": "/etc/passwd"}]}), "absolute"),
            (json!({"test_patch": [{"path": "a/../../b"}]}), "`..`"),
            (json!({"test_patch": [{"path": "a\nb"}]}), "control"),
            (json!({"test_patch": {"path": "a"}}), "must be a list"),
            (json!({"patch": [{"path": 3}]}), "not a string"),
            (json!([1]), "expected an object"),
        ] {
            let e = parse("x", Some(&v), None).unwrap_err().to_string();
            assert!(e.contains(want), "{v}: {e}");
        }
        assert!(parse("x", Some(&json!("{not json")), None).unwrap_err().to_string().contains("not JSON"));
    }

    #[test]
    fn restore_lines_go_before_the_start_marker_quoted() {
        let a = ImageAsset {
            path: "tests/a b.png".into(),
            staged: "/image_assets/tests__a b.png".into(),
            url: None,
            bytes: Some(vec![1]),
        };
        let script = "#!/bin/bash\ngit apply test.patch\n: '>>>>> Start Test Output'\npytest\n";
        let out = inject_restore(script, std::slice::from_ref(&a));
        assert_eq!(
            out,
            "#!/bin/bash\ngit apply test.patch\nmkdir -p \"$(dirname 'tests/a b.png')\" && cp '/image_assets/tests__a b.png' 'tests/a b.png'\n: '>>>>> Start Test Output'\npytest\n"
        );
        assert_eq!(inject_restore(script, &[]), script);
    }
}
