//! One task instance: the SWE-bench schema plus this project's extensions (`repo_path`,
//! `environment_setup`, `test_cmd`, `runner`, `image`, `candidates`), parsed field by field so
//! that every unknown or malformed field is reported with the instance and field name. Rows in
//! a published SWE-bench format (swebench 4.x, 5.x, SWE-bench Pro) also get their official
//! evaluation, [`OfficialSpec`] (see [`super::official`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::TaskError;
use super::git;
use super::official::{self, OfficialSpec};

/// How the repository's tests are run and their output parsed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// `python -m pytest -rA <node ids>`; ids `tests/test_x.py::test_y`.
    Pytest,
    /// Django-style `tests/runtests.py --verbosity 2 <labels>`; ids `test_name (module.Class)`.
    Django,
    /// sympy `bin/test -C --verbose`; ids are bare test function names.
    Sympy,
    /// Rust's `cargo test` (optionally with build flags such as `--features=x`); ids
    /// `<package>/<target>::<test path>` (`strsim/test/lib::levenshtein_works`,
    /// `calc/lib::tests::adds`), run by the native guarded run (`harness::guard::libtest_run`).
    Cargo,
    /// Go's `go test` (optionally with `-short`, `-tags`, `-timeout`); ids `<package dir>::<Test>`
    /// (`./calc::TestAdd`, `.::TestRoot`), run by the native guarded run
    /// (`harness::guard::gotest_run`).
    Go,
}

impl Runner {
    pub fn as_str(self) -> &'static str {
        match self {
            Runner::Pytest => "pytest",
            Runner::Django => "django",
            Runner::Sympy => "sympy",
            Runner::Cargo => "cargo",
            Runner::Go => "go",
        }
    }

    fn parse(s: &str) -> Option<Runner> {
        match s {
            "pytest" => Some(Runner::Pytest),
            "django" => Some(Runner::Django),
            "sympy" => Some(Runner::Sympy),
            "cargo" => Some(Runner::Cargo),
            "go" => Some(Runner::Go),
            _ => None,
        }
    }

    /// The official grading command prefix used when a task gives no `test_cmd`.
    pub fn default_test_cmd(self) -> &'static str {
        match self {
            Runner::Pytest => "python -m pytest -rA",
            Runner::Django => {
                "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
            }
            Runner::Sympy => "bin/test -C --verbose",
            Runner::Cargo => "cargo test",
            Runner::Go => "go test",
        }
    }
}

/// A labelled candidate patch: `resolved` says whether official grading resolves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub patch: String,
    pub resolved: bool,
}

/// Shell commands run once per environment inside the sandbox at the workspace path, with
/// network; the result is cached under `cache_key` (tests later run without network). Executed
/// by `harness::environment`, which builds the directory every later sandbox mounts at `/env`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentSetup {
    pub commands: Vec<String>,
    pub cache_key: String,
}

/// A task instance (SWE-bench fields + extensions). Serialises back to the same JSON schema.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskInstance {
    pub instance_id: String,
    pub repo: String,
    pub base_commit: String,
    /// Gold patch (hidden from agents).
    pub patch: String,
    /// Official test patch (hidden from agents).
    pub test_patch: String,
    pub problem_statement: String,
    pub hints_text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_setup_commit: Option<String>,
    /// SWE-bench Verified difficulty bucket, kept as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difficulty: Option<String>,
    /// Local git repository (bare or not) holding `base_commit`; relative paths in a task file
    /// are resolved against the file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_path: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_setup: Option<EnvironmentSetup>,
    pub test_cmd: String,
    pub runner: Runner,
    pub image: String,
    pub candidates: Vec<Candidate>,
    /// The official evaluation of a row in a published SWE-bench format (`None` for other
    /// rows). Its source fields are written back by [`TaskInstance::to_json`].
    #[serde(skip)]
    pub official: Option<OfficialSpec>,
    /// Top-level fields this crate does not know (SWE-rebench's `meta`, `install_config`,
    /// `license_name`, …): kept as given, written back by [`TaskInstance::to_json`], and
    /// otherwise ignored.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// The SWE-bench core fields and this crate's extensions. With the published formats' own
/// fields ([`super::official::SWEBENCH5_FIELDS`], [`super::official::PRO_FIELDS`]) they are every
/// field this crate reads ([`is_known_field`]); any other top-level field is kept in
/// [`TaskInstance::extra`] and ignored.
pub const KNOWN_FIELDS: &[&str] = &[
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
    "difficulty",
    "repo_path",
    "environment_setup",
    "test_cmd",
    "runner",
    "image",
    "candidates",
];

/// Whether this crate reads top-level field `name` of a task record.
pub fn is_known_field(name: &str) -> bool {
    use super::official::{PRO_FIELDS, SWEBENCH5_FIELDS};
    [KNOWN_FIELDS, SWEBENCH5_FIELDS, PRO_FIELDS]
        .iter()
        .any(|fields| fields.contains(&name))
}

/// The SWE-bench image name rule: `swebench/sweb.eval.x86_64.<id, "__" → "_1776_">:latest`
/// (lower-cased, as Docker requires).
pub fn default_image(instance_id: &str) -> String {
    format!(
        "swebench/sweb.eval.x86_64.{}:latest",
        instance_id.to_lowercase().replace("__", "_1776_")
    )
}

impl TaskInstance {
    /// Parse one record. `base_dir` resolves a relative `repo_path` (the task file's directory).
    pub fn from_json(value: Value, base_dir: Option<&Path>) -> Result<TaskInstance, TaskError> {
        let Value::Object(obj) = value else {
            return Err(TaskError::field(
                "<unknown>",
                "<record>",
                "expected a JSON object",
            ));
        };
        let id = match obj.get("instance_id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => {
                return Err(TaskError::field(
                    "<unknown>",
                    "instance_id",
                    "must not be empty",
                ))
            }
            Some(other) => {
                return Err(TaskError::field(
                    "<unknown>",
                    "instance_id",
                    format!("expected a string, got {}", kind(other)),
                ))
            }
            None => return Err(TaskError::field("<unknown>", "instance_id", "missing")),
        };
        let extra: BTreeMap<String, Value> = obj
            .iter()
            .filter(|(k, _)| !is_known_field(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let f = Fields { id: &id, obj: &obj };
        let repo = f.required_string("repo")?;
        let base_commit = f.required_string("base_commit")?;
        if base_commit.len() < 7 || !base_commit.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(TaskError::field(
                &id,
                "base_commit",
                "expected a hexadecimal commit id",
            ));
        }
        let repo_path = f.optional_string("repo_path")?.map(|p| {
            let p = PathBuf::from(p);
            match base_dir {
                Some(dir) if p.is_relative() => dir.join(p),
                _ => p,
            }
        });
        let test_patch = f.required_string("test_patch")?;
        let version = f.optional_string_or_number("version")?;
        let official = official::from_row(&official::Row {
            id: &id,
            obj: &obj,
            repo: &repo,
            base_commit: &base_commit,
            test_patch: &test_patch,
            version: version.as_deref(),
            base_dir,
        })?;
        let runner = match f.optional_string("runner")? {
            Some(s) => Runner::parse(&s).ok_or_else(|| {
                TaskError::field(
                    &id,
                    "runner",
                    format!("`{s}` is not one of pytest, django, sympy"),
                )
            })?,
            None => match &official {
                Some(spec) => spec.runner(),
                None => infer_runner(&repo, repo_path.as_deref(), &base_commit),
            },
        };
        let test_cmd = match f.optional_string("test_cmd")? {
            Some(cmd) if cmd.trim().is_empty() => {
                return Err(TaskError::field(&id, "test_cmd", "must not be empty"))
            }
            Some(cmd) => cmd,
            None => runner.default_test_cmd().to_string(),
        };
        let image = match (f.optional_string("image")?, &official) {
            (Some(image), _) => image,
            (None, Some(spec)) => spec.image.clone(),
            (None, None) => default_image(&id),
        };
        Ok(TaskInstance {
            repo,
            base_commit,
            patch: f.required_string("patch")?,
            test_patch,
            problem_statement: f.required_string("problem_statement")?,
            hints_text: f.optional_string("hints_text")?.unwrap_or_default(),
            created_at: f.optional_string("created_at")?,
            version,
            fail_to_pass: f.test_list_of_either("FAIL_TO_PASS", "fail_to_pass")?,
            pass_to_pass: f.test_list_of_either("PASS_TO_PASS", "pass_to_pass")?,
            environment_setup_commit: f.optional_string("environment_setup_commit")?,
            difficulty: f.optional_string("difficulty")?,
            repo_path,
            environment_setup: f.environment_setup()?,
            test_cmd,
            runner,
            image,
            candidates: f.candidates()?,
            official,
            extra,
            instance_id: id,
        })
    }

    /// The record as SWE-bench-style JSON (the same schema [`TaskInstance::from_json`] reads).
    /// Fails only for a `repo_path` that is not valid UTF-8 (JSON cannot hold it).
    pub fn to_json(&self) -> Result<Value, TaskError> {
        let mut value = serde_json::to_value(self).map_err(|e| {
            TaskError::field(
                &self.instance_id,
                "repo_path",
                format!("cannot be written as JSON: {e}"),
            )
        })?;
        if let (Some(spec), Value::Object(obj)) = (&self.official, &mut value) {
            spec.write_fields(obj);
        }
        Ok(value)
    }
}

/// Runner inference: Django-style if the repository has `tests/runtests.py` at Base or is
/// django/django, sympy for sympy/sympy, cargo when Base has a `Cargo.toml` at its root and no
/// Python project file (`setup.py`, `pyproject.toml`, `setup.cfg`), go likewise with a root
/// `go.mod`, pytest otherwise.
fn infer_runner(repo: &str, repo_path: Option<&Path>, base_commit: &str) -> Runner {
    if repo.eq_ignore_ascii_case("django/django") {
        return Runner::Django;
    }
    if repo.eq_ignore_ascii_case("sympy/sympy") {
        return Runner::Sympy;
    }
    if let Some(path) = repo_path {
        let spec = format!("{base_commit}:tests/runtests.py");
        if git::succeeds(path, &["cat-file", "-e", &spec]) {
            return Runner::Django;
        }
        let at_base = |f: &str| git::succeeds(path, &["cat-file", "-e", &format!("{base_commit}:{f}")]);
        let python = ["setup.py", "pyproject.toml", "setup.cfg"].iter().any(|f| at_base(f));
        if at_base("Cargo.toml") && !python {
            return Runner::Cargo;
        }
        if at_base("go.mod") && !python {
            return Runner::Go;
        }
    }
    Runner::Pytest
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field accessors that turn every type error into a [`TaskError::Field`].
struct Fields<'a> {
    id: &'a str,
    obj: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> TaskError {
        TaskError::field(self.id, field, message)
    }

    fn required_string(&self, field: &str) -> Result<String, TaskError> {
        self.optional_string(field)?
            .ok_or_else(|| self.err(field, "missing"))
    }

    /// Absent or null → None.
    fn optional_string(&self, field: &str) -> Result<Option<String>, TaskError> {
        match self.obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.err(field, format!("expected a string, got {}", kind(other)))),
        }
    }

    fn optional_string_or_number(&self, field: &str) -> Result<Option<String>, TaskError> {
        match self.obj.get(field) {
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            _ => self.optional_string(field),
        }
    }

    /// A list of test ids from `upper` (SWE-bench) or `lower` (SWE-bench Pro, whose strings
    /// are Python list literals); both at once is an error.
    fn test_list_of_either(&self, upper: &str, lower: &str) -> Result<Vec<String>, TaskError> {
        match (self.obj.get(upper), self.obj.get(lower)) {
            (Some(_), Some(_)) => Err(self.err(
                lower,
                format!("given together with `{upper}`: ambiguous test list"),
            )),
            (None, Some(Value::String(s))) => super::official::pylist::parse_string_list(s)
                .map_err(|m| self.err(lower, m))
                .and_then(|items| self.test_ids(lower, items.into_iter().map(Value::String).collect())),
            (None, Some(_)) => self.test_list(lower),
            _ => self.test_list(upper),
        }
    }

    /// A list of test ids, given as a JSON list or as a JSON-encoded string of a list.
    fn test_list(&self, field: &str) -> Result<Vec<String>, TaskError> {
        let value = match self.obj.get(field) {
            None => return Err(self.err(field, "missing")),
            Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| {
                self.err(
                    field,
                    format!("string is not a JSON-encoded list of test ids: {e}"),
                )
            })?,
            Some(v) => v.clone(),
        };
        let Value::Array(items) = value else {
            return Err(self.err(
                field,
                format!("expected a list of test ids, got {}", kind(&value)),
            ));
        };
        self.test_ids(field, items)
    }

    fn test_ids(&self, field: &str, items: Vec<Value>) -> Result<Vec<String>, TaskError> {
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) if !s.trim().is_empty() => Ok(s),
                Value::String(_) => Err(self.err(field, format!("entry {i} is empty"))),
                other => Err(self.err(
                    field,
                    format!("entry {i}: expected a string, got {}", kind(&other)),
                )),
            })
            .collect()
    }

    fn environment_setup(&self) -> Result<Option<EnvironmentSetup>, TaskError> {
        const FIELD: &str = "environment_setup";
        let obj = match self.obj.get(FIELD) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(self.err(FIELD, format!("expected an object, got {}", kind(other))))
            }
        };
        if let Some(k) = obj.keys().find(|k| *k != "commands" && *k != "cache_key") {
            return Err(self.err(
                &format!("{FIELD}.{k}"),
                "unknown field (known: commands, cache_key)",
            ));
        }
        let commands: Vec<String> = match obj.get("commands") {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.err(
                        &format!("{FIELD}.commands"),
                        format!("entry {i}: expected a string, got {}", kind(other)),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(self.err(
                    &format!("{FIELD}.commands"),
                    format!("expected a list, got {}", kind(other)),
                ))
            }
            None => return Err(self.err(&format!("{FIELD}.commands"), "missing")),
        };
        let cache_key = match obj.get("cache_key") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => {
                return Err(self.err(&format!("{FIELD}.cache_key"), "must not be empty"))
            }
            Some(other) => {
                return Err(self.err(
                    &format!("{FIELD}.cache_key"),
                    format!("expected a string, got {}", kind(other)),
                ))
            }
            // Default key: the repository and the exact commands.
            None => {
                use sha2::{Digest, Sha256};
                let mut h = Sha256::new();
                h.update(
                    self.obj
                        .get("repo")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .as_bytes(),
                );
                for c in &commands {
                    h.update([0u8]);
                    h.update(c.as_bytes());
                }
                hex::encode(&h.finalize()[..8])
            }
        };
        Ok(Some(EnvironmentSetup {
            commands,
            cache_key,
        }))
    }

    fn candidates(&self) -> Result<Vec<Candidate>, TaskError> {
        match self.obj.get("candidates") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    Candidate::deserialize(v)
                        .map_err(|e| self.err(&format!("candidates[{i}]"), e.to_string()))
                })
                .collect(),
            Some(other) => Err(self.err(
                "candidates",
                format!("expected a list, got {}", kind(other)),
            )),
        }
    }
}
