//! Task files: a JSON list of instances or JSONL (one instance per line; any stream of JSON
//! objects is accepted), or a Hugging Face dataset Parquet file (`*.parquet`, see
//! [`super::parquet`]), and lookup by instance id.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use super::error::TaskError;
use super::instance::TaskInstance;

/// Load every task instance of a JSON-list or JSONL file. Relative `repo_path`s resolve against
/// the file's directory. Duplicate ids are an error.
pub fn load_tasks(path: &Path) -> Result<Vec<TaskInstance>, TaskError> {
    let text = if path.extension().is_some_and(|e| e == "parquet") {
        super::parquet::parquet_to_jsonl(path)?
    } else {
        std::fs::read_to_string(path).map_err(|e| TaskError::io(path, e))?
    };
    let base_dir = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    parse_tasks(&text, path, base_dir.as_deref())
}

/// Parse task records from text (`origin` names the source in errors).
pub fn parse_tasks(
    text: &str,
    origin: &Path,
    base_dir: Option<&Path>,
) -> Result<Vec<TaskInstance>, TaskError> {
    let json_err = |e: serde_json::Error| TaskError::Json {
        path: origin.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    };
    let mut records = Vec::new();
    if text.trim_start().starts_with('[') {
        match serde_json::from_str::<Value>(text).map_err(json_err)? {
            Value::Array(items) => records = items,
            _ => unreachable!("text starting with '[' parses to an array"),
        }
    } else {
        for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            records.push(value.map_err(json_err)?);
        }
    }
    let mut seen = HashSet::new();
    let mut tasks = Vec::with_capacity(records.len());
    for (index, record) in records.into_iter().enumerate() {
        if !record.is_object() {
            return Err(TaskError::NotAnObject {
                path: origin.to_path_buf(),
                index,
            });
        }
        let task = TaskInstance::from_json(record, base_dir).map_err(|e| match e {
            // A record without a usable id is named by its position in the file.
            TaskError::Field {
                instance,
                field,
                message,
            } if instance == "<unknown>" => TaskError::Field {
                instance: format!("#{index} of {}", origin.display()),
                field,
                message,
            },
            other => other,
        })?;
        if !seen.insert(task.instance_id.clone()) {
            return Err(TaskError::Duplicate {
                path: origin.to_path_buf(),
                instance: task.instance_id,
            });
        }
        tasks.push(task);
    }
    Ok(tasks)
}

/// The instance with id `id`.
pub fn find_task<'a>(tasks: &'a [TaskInstance], id: &str) -> Result<&'a TaskInstance, TaskError> {
    tasks
        .iter()
        .find(|t| t.instance_id == id)
        .ok_or_else(|| TaskError::NotFound {
            id: id.to_string(),
            available: tasks.len(),
        })
}

/// Write instances as JSONL (one record per line), the format [`load_tasks`] reads.
pub fn write_tasks(path: &Path, tasks: &[TaskInstance]) -> Result<(), TaskError> {
    let mut out = String::new();
    for t in tasks {
        out.push_str(&t.to_json()?.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).map_err(|e| TaskError::io(path, e))
}
