//! Hugging Face dataset Parquet files (e.g. `princeton-nlp/SWE-bench_Verified`'s
//! `data/test-*.parquet`) as task records: each row becomes one JSON object (strings, numbers,
//! lists as they are stored; `FAIL_TO_PASS`/`PASS_TO_PASS` are JSON-encoded strings there, which
//! the task schema accepts), then goes through the same parsing as a JSONL file. Read with the
//! `parquet` crate alone (no Arrow), snappy-compressed pages included.

use super::error::TaskError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::path::Path;

/// The rows of a Parquet file as JSONL text.
pub fn parquet_to_jsonl(path: &Path) -> Result<String, TaskError> {
    let bad = |e: parquet::errors::ParquetError| TaskError::Parquet { path: path.to_path_buf(), message: e.to_string() };
    let file = std::fs::File::open(path).map_err(|e| TaskError::io(path, e))?;
    let reader = SerializedFileReader::new(file).map_err(bad)?;
    let mut out = String::new();
    for row in reader.get_row_iter(None).map_err(bad)? {
        out.push_str(&row.map_err(bad)?.to_json_value().to_string());
        out.push('\n');
    }
    Ok(out)
}
