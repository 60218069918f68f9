//! Hugging Face dataset Parquet files (e.g. `princeton-nlp/SWE-bench_Verified`'s
//! `data/test-*.parquet`) as task records: each row becomes one JSON object (strings, numbers,
//! lists as they are stored; `FAIL_TO_PASS`/`PASS_TO_PASS` are JSON-encoded strings there, which
//! the task schema accepts), then goes through the same parsing as a JSONL file. Read with the
//! `parquet` crate alone (no Arrow), snappy-compressed pages included.

use super::error::TaskError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::path::Path;

/// The rows of a Parquet file as JSONL text. The file is untrusted: the `parquet` crate panics on
/// some corrupt metadata (found by the `tasks_parquet` fuzz target: "column start and length
/// should not be negative"), so a panic while reading is caught and returned as
/// [`TaskError::Parquet`] like any other unreadable file.
pub fn parquet_to_jsonl(path: &Path) -> Result<String, TaskError> {
    let bad = |message: String| TaskError::Parquet { path: path.to_path_buf(), message };
    let file = std::fs::File::open(path).map_err(|e| TaskError::io(path, e))?;
    let read = move || -> Result<String, parquet::errors::ParquetError> {
        let reader = SerializedFileReader::new(file)?;
        let mut out = String::new();
        for row in reader.get_row_iter(None)? {
            out.push_str(&row?.to_json_value().to_string());
            out.push('\n');
        }
        Ok(out)
    };
    match crate::panics::caught("the reader", read) {
        Ok(rows) => rows.map_err(|e| bad(e.to_string())),
        Err(panicked) => Err(bad(format!("corrupt Parquet file ({panicked})"))),
    }
}
