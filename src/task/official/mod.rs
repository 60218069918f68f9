//! The official evaluation of a task row as SWE-bench publishes it: swebench 4.x rows (only
//! `repo` + `version`; the facts come from the embedded 4.x table), swebench 5.x rows (their
//! own `eval_script`, `log_parser`, `eval_type`, `image`, `image_assets`) and SWE-bench Pro
//! rows (per-instance run script, parser and Dockerfiles). [`OfficialSpec`] says, for every
//! family alike, which image to run, where, with what environment, which eval script, and
//! how its log is parsed and graded. Detection is by the fields present; nothing here needs
//! network.

pub mod assets;
pub mod pro;
pub mod pylist;
pub mod specs;
pub mod swebench;

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::error::TaskError;
use super::instance::default_image;
use super::Runner;
pub use assets::ImageAsset;
pub use pro::ProRow;

/// Which published format a row is in.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// swebench 4.x: `repo` + `version`, facts from `data/swebench-specs.json`.
    Swebench4,
    /// swebench 5.x: the row carries its eval script, parser, eval type and image.
    Swebench5,
    /// SWE-bench Pro (ScaleAI/SWE-bench_Pro + scaleapi/SWE-bench_Pro-os).
    Pro,
}

/// How grading compares the parsed statuses with FAIL_TO_PASS/PASS_TO_PASS (swebench
/// `EvalType`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalType {
    /// Every FAIL_TO_PASS and PASS_TO_PASS test must pass.
    PassAndFail,
    /// Only failures count: no listed test may fail (for parsers that record failures only).
    FailOnly,
}

impl EvalType {
    pub fn as_str(self) -> &'static str {
        match self {
            EvalType::PassAndFail => "pass_and_fail",
            EvalType::FailOnly => "fail_only",
        }
    }

    fn parse(s: &str) -> Option<EvalType> {
        match s {
            "pass_and_fail" => Some(EvalType::PassAndFail),
            "fail_only" => Some(EvalType::FailOnly),
            _ => None,
        }
    }
}

/// The environment the eval script runs in. Informational for a harness that runs the
/// script as is (the script sets it up itself); needed by one that runs other commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `source /opt/miniconda3/bin/activate && conda activate <env>` (SWE-bench images).
    Conda { env: String },
    /// `export ...` lines, one per Dockerfile `ENV` line (Pro images).
    Exports { lines: Vec<String> },
    /// Nothing to activate (a 5.x row whose script activates no conda environment, e.g.
    /// a non-Python repository).
    None,
}

impl Activation {
    /// The activation as shell commands, one per line.
    pub fn shell(&self) -> String {
        match self {
            Activation::Conda { env } => {
                format!("source /opt/miniconda3/bin/activate\nconda activate {env}\n")
            }
            Activation::Exports { lines } => lines.iter().map(|l| format!("{l}\n")).collect(),
            Activation::None => String::new(),
        }
    }
}

/// A file the harness writes into the container before running the eval script.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OfficialFile {
    /// Absolute path in the container.
    pub path: String,
    pub content: String,
}

/// A row's official evaluation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OfficialSpec {
    pub family: Family,
    /// Docker image holding the repository at Base with its environment.
    pub image: String,
    /// The repository's directory in the image: `/testbed` or `/app`.
    pub workdir: String,
    pub activation: Activation,
    /// The script to run (after the candidate patch is applied in `workdir`), in swebench
    /// 5.x's run form: `#!/bin/bash`, the commands, the test command between
    /// `: '>>>>> Start Test Output'` and `: '>>>>> End Test Output'`, its `$?` echoed after
    /// the end marker as `>>>>> Test Exit Code: <n>` (see [`swebench`]).
    pub eval_script: String,
    /// The log parser by name: swebench's (`parse_log_pytest`, `parse_log_django`, …) or
    /// [`pro::PRO_PARSER`] (the instance's own `parser.py`, in [`OfficialSpec::files`],
    /// writing [`pro::PRO_OUTPUT_PATH`]).
    pub log_parser: String,
    pub eval_type: EvalType,
    /// swebench 5.x `image_assets`, kept as given (a JSON string or an object).
    pub image_assets: Option<Value>,
    /// The binary files of `image_assets`, staged before the eval script runs (see [`assets`]).
    pub assets: Vec<ImageAsset>,
    /// Files to place in the container first (Pro: run script and parser).
    pub files: Vec<OfficialFile>,
    /// The official test command prefix (4.x: the table's `test_cmd`), when known.
    pub test_cmd: Option<String>,
    /// Writable directories the sandbox must provide beside the workdir (Pro: `/workspace`,
    /// where the run script, parser, test patch and logs live; the image's root is read-only).
    pub scratch_dirs: Vec<String>,
    /// The row's own fields behind this spec, written back by `TaskInstance::to_json`.
    pub source: Source,
}

/// The fields a spec was read from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// 4.x: everything is derived from `repo`, `version` and the table.
    Swebench4,
    /// 5.x: the row's `eval_script` as given.
    Swebench5 { eval_script: String },
    Pro(ProRow),
}

/// Fields only SWE-bench Pro rows carry (or this crate writes back for them).
pub const PRO_FIELDS: &[&str] = &[
    "fail_to_pass",
    "pass_to_pass",
    "before_repo_set_cmd",
    "selected_test_files_to_run",
    "dockerhub_tag",
    "repo_language",
    "run_script",
    "parser_script",
    "base_dockerfile",
    "instance_dockerfile",
];

/// Fields only swebench 5.x rows carry.
pub const SWEBENCH5_FIELDS: &[&str] = &["eval_script", "log_parser", "eval_type", "image_assets"];

/// The row fields an [`OfficialSpec`] is made from, besides the SWE-bench core ones.
pub struct Row<'a> {
    pub id: &'a str,
    pub obj: &'a Map<String, Value>,
    pub repo: &'a str,
    pub base_commit: &'a str,
    pub test_patch: &'a str,
    pub version: Option<&'a str>,
    /// The task file's directory (Pro's files beside it).
    pub base_dir: Option<&'a Path>,
}

/// The family of a row, from the fields present: any Pro field → Pro, any 5.x field → 5.x
/// (both → error), else 4.x when `repo` is a repository of the 4.x table and `version` is
/// given; otherwise `None` (not an official SWE-bench row, e.g. our own suites, SWE-rebench).
pub fn detect(row: &Row) -> Result<Option<Family>, TaskError> {
    let present = |keys: &[&'static str]| keys.iter().copied().find(|k| row.obj.contains_key(*k));
    match (present(PRO_FIELDS), present(SWEBENCH5_FIELDS)) {
        (Some(p), Some(s)) => Err(TaskError::field(
            row.id,
            s,
            format!("swebench 5.x field in a row that has the SWE-bench Pro field `{p}`: ambiguous format"),
        )),
        (Some(_), None) => Ok(Some(Family::Pro)),
        (None, Some(_)) => Ok(Some(Family::Swebench5)),
        (None, None) => Ok((row.version.is_some()
            && specs::table().repos.contains_key(row.repo))
        .then_some(Family::Swebench4)),
    }
}

/// The official spec of a row (`None` when it is in none of the three formats).
pub fn from_row(row: &Row) -> Result<Option<OfficialSpec>, TaskError> {
    Ok(match detect(row)? {
        None => None,
        Some(Family::Swebench4) => Some(swebench4(row)?),
        Some(Family::Swebench5) => Some(swebench5(row)?),
        Some(Family::Pro) => Some(pro(row)?),
    })
}

fn swebench4(row: &Row) -> Result<OfficialSpec, TaskError> {
    let table = specs::table();
    let version = row.version.unwrap_or_default();
    let err = |m: String| TaskError::field(row.id, "version", m);
    let (repo_spec, spec) = table.lookup(row.repo, version).map_err(err)?;
    let log_parser = swebench::repo_parser(table, row.repo, repo_spec).map_err(err)?;
    let row4 = swebench::Row4 {
        repo: row.repo,
        base_commit: row.base_commit,
        test_patch: row.test_patch,
    };
    let script = swebench::swebench4_eval_script(table, repo_spec, &row4, version, spec).map_err(err)?;
    // SWE-bench Multilingual's images have no conda environment: their eval scripts activate
    // nothing.
    let activation = if repo_spec.ext == "py" { conda() } else { Activation::None };
    Ok(OfficialSpec {
        family: Family::Swebench4,
        image: default_image(row.id),
        workdir: swebench::TESTBED.into(),
        activation,
        eval_script: swebench::run_form(&script),
        log_parser: log_parser.into(),
        eval_type: EvalType::parse(&repo_spec.eval_type).unwrap_or(EvalType::PassAndFail),
        image_assets: None,
        assets: Vec::new(),
        files: Vec::new(),
        test_cmd: spec.test_cmd.clone(),
        scratch_dirs: Vec::new(),
        source: Source::Swebench4,
    })
}

/// The eval script swebench 4.x itself writes for a row (`TestSpec.eval_script`, before the
/// 5.x run form is made of it). `Err` names what the table lacks.
pub fn swebench4_published_script(
    repo: &str,
    version: &str,
    base_commit: &str,
    test_patch: &str,
) -> Result<String, String> {
    let table = specs::table();
    let (repo_spec, spec) = table.lookup(repo, version)?;
    let row = swebench::Row4 {
        repo,
        base_commit,
        test_patch,
    };
    swebench::swebench4_eval_script(table, repo_spec, &row, version, spec)
}

fn swebench5(row: &Row) -> Result<OfficialSpec, TaskError> {
    let f = Strings(row);
    let eval_script = f.required("eval_script")?;
    if eval_script.trim().is_empty() {
        return Err(TaskError::field(row.id, "eval_script", "must not be empty"));
    }
    let log_parser = f.required("log_parser")?;
    if log_parser.trim().is_empty() {
        return Err(TaskError::field(row.id, "log_parser", "must not be empty"));
    }
    let eval_type = f.required("eval_type")?;
    let eval_type = EvalType::parse(&eval_type).ok_or_else(|| {
        TaskError::field(
            row.id,
            "eval_type",
            format!("`{eval_type}` is not one of pass_and_fail, fail_only"),
        )
    })?;
    let image = f.required("image")?;
    let image_assets = match row.obj.get("image_assets") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => Some(Value::String(s.clone())),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(_)) => Some(Value::String(s.clone())),
            _ => {
                return Err(TaskError::field(
                    row.id,
                    "image_assets",
                    "string is not a JSON-encoded object",
                ))
            }
        },
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => {
            return Err(TaskError::field(
                row.id,
                "image_assets",
                "expected an object or a JSON-encoded object",
            ))
        }
    };
    let test_cmd = row
        .version
        .and_then(|v| specs::table().lookup(row.repo, v).ok())
        .and_then(|(_, s)| s.test_cmd.clone());
    let assets = assets::parse(row.id, image_assets.as_ref(), row.base_dir)?;
    let scratch_dirs = if assets.is_empty() { Vec::new() } else { vec![assets::STAGING_DIR.to_string()] };
    Ok(OfficialSpec {
        family: Family::Swebench5,
        image,
        workdir: swebench::TESTBED.into(),
        activation: script_activation(&eval_script),
        eval_script: assets::inject_restore(&swebench::run_form(&eval_script), &assets),
        log_parser,
        eval_type,
        image_assets,
        assets,
        files: Vec::new(),
        test_cmd,
        scratch_dirs,
        source: Source::Swebench5 { eval_script },
    })
}

fn pro(row: &Row) -> Result<OfficialSpec, TaskError> {
    let f = Strings(row);
    // The official evaluation reads the CSV with `fillna("")`: a null command is empty.
    let before_repo_set_cmd = f.optional("before_repo_set_cmd")?.unwrap_or_default();
    let selected_test_files = match row.obj.get("selected_test_files_to_run") {
        None | Some(Value::Null) => {
            return Err(TaskError::field(row.id, "selected_test_files_to_run", "missing"))
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    TaskError::field(
                        row.id,
                        "selected_test_files_to_run",
                        format!("entry {i} is not a string"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::String(s)) => pylist::parse_string_list(s)
            .map_err(|m| TaskError::field(row.id, "selected_test_files_to_run", m))?,
        Some(_) => {
            return Err(TaskError::field(
                row.id,
                "selected_test_files_to_run",
                "expected a list of paths or a string encoding one",
            ))
        }
    };
    let dockerhub_tag = f.optional("dockerhub_tag")?;
    let image = match (f.optional("image")?, &dockerhub_tag) {
        (Some(image), _) => image,
        (None, Some(tag)) if !tag.trim().is_empty() => pro::image(tag),
        (None, _) => {
            return Err(TaskError::field(
                row.id,
                "dockerhub_tag",
                "missing (and no `image`): the Pro image cannot be named",
            ))
        }
    };
    let text = |s: &pro::Sidecar| -> Result<String, TaskError> {
        match f.optional(s.field)? {
            Some(t) => Ok(t),
            None => s
                .read(row.base_dir, row.id)
                .map_err(|m| TaskError::field(row.id, s.field, m)),
        }
    };
    let pro_row = ProRow {
        before_repo_set_cmd,
        selected_test_files,
        dockerhub_tag,
        repo_language: f.optional("repo_language")?,
        run_script: text(&pro::RUN_SCRIPT)?,
        parser_script: text(&pro::PARSER_SCRIPT)?,
        base_dockerfile: text(&pro::BASE_DOCKERFILE)?,
        instance_dockerfile: text(&pro::INSTANCE_DOCKERFILE)?,
    };
    Ok(OfficialSpec {
        family: Family::Pro,
        image,
        workdir: pro::PRO_WORKDIR.into(),
        activation: Activation::Exports {
            lines: pro::env_exports(&pro_row.base_dockerfile, &pro_row.instance_dockerfile),
        },
        eval_script: pro::eval_script(&pro_row, row.base_commit),
        log_parser: pro::PRO_PARSER.into(),
        eval_type: EvalType::PassAndFail,
        image_assets: None,
        assets: Vec::new(),
        files: vec![
            OfficialFile {
                path: pro::PRO_RUN_SCRIPT_PATH.into(),
                content: pro_row.run_script.clone(),
            },
            OfficialFile {
                path: pro::PRO_PARSER_PATH.into(),
                content: pro_row.parser_script.clone(),
            },
            OfficialFile {
                path: pro::PRO_TEST_PATCH_PATH.into(),
                content: row.test_patch.to_string(),
            },
        ],
        test_cmd: Some(format!("bash {}", pro::PRO_RUN_SCRIPT_PATH)),
        scratch_dirs: vec![pro::PRO_SCRATCH_DIR.into()],
        source: Source::Pro(pro_row),
    })
}

/// The conda environment a 5.x script activates (its first `conda activate <env>` line).
fn script_activation(eval_script: &str) -> Activation {
    eval_script
        .lines()
        .find_map(|l| l.trim().strip_prefix("conda activate "))
        .map(|env| Activation::Conda {
            env: env.trim().to_string(),
        })
        .unwrap_or(Activation::None)
}

fn conda() -> Activation {
    Activation::Conda {
        env: swebench::CONDA_ENV.into(),
    }
}

impl OfficialSpec {
    /// Our runner for this row when it names none: from the log parser (django, sympy,
    /// else pytest; Pro rows: pytest, whatever their language — `official` is what grades
    /// them).
    pub fn runner(&self) -> Runner {
        swebench::runner_for_parser(&self.log_parser)
    }

    /// Write the row fields this spec was read from into `obj` (the inverse of
    /// [`from_row`]; `FAIL_TO_PASS`/`PASS_TO_PASS` and `image` are written by the caller).
    pub fn write_fields(&self, obj: &mut Map<String, Value>) {
        let mut put = |k: &str, v: Value| {
            obj.insert(k.to_string(), v);
        };
        match &self.source {
            Source::Swebench4 => {}
            Source::Swebench5 { eval_script } => {
                put("eval_script", eval_script.clone().into());
                put("log_parser", self.log_parser.clone().into());
                put("eval_type", self.eval_type.as_str().into());
                if let Some(a) = &self.image_assets {
                    put("image_assets", a.clone());
                }
            }
            Source::Pro(p) => {
                put("before_repo_set_cmd", p.before_repo_set_cmd.clone().into());
                put(
                    "selected_test_files_to_run",
                    Value::from(p.selected_test_files.clone()),
                );
                if let Some(t) = &p.dockerhub_tag {
                    put("dockerhub_tag", t.clone().into());
                }
                if let Some(l) = &p.repo_language {
                    put("repo_language", l.clone().into());
                }
                put("run_script", p.run_script.clone().into());
                put("parser_script", p.parser_script.clone().into());
                put("base_dockerfile", p.base_dockerfile.clone().into());
                put("instance_dockerfile", p.instance_dockerfile.clone().into());
            }
        }
    }
}

/// String fields of a row, with errors naming instance and field.
struct Strings<'a>(&'a Row<'a>);

impl Strings<'_> {
    fn optional(&self, field: &str) -> Result<Option<String>, TaskError> {
        match self.0.obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(TaskError::field(self.0.id, field, "expected a string")),
        }
    }

    fn required(&self, field: &str) -> Result<String, TaskError> {
        self.optional(field)?
            .ok_or_else(|| TaskError::field(self.0.id, field, "missing"))
    }
}
