//! Task files as Hugging Face dataset Parquet: the fixture (written by
//! scripts/make-parquet-fixture.py with pyarrow, snappy-compressed, the dataset's column layout)
//! loads to exactly the instances of its JSONL twin; a file that is not Parquet is a typed error.

use execcritic::task::{load_tasks, TaskError};
use std::path::Path;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks").join(name)
}

#[test]
fn parquet_loads_like_its_jsonl_twin() {
    let from_parquet = load_tasks(&fixture("swebench-sample.parquet")).unwrap();
    let from_jsonl = load_tasks(&fixture("swebench-sample.jsonl")).unwrap();
    assert_eq!(from_parquet.len(), 2);
    for (p, j) in from_parquet.iter().zip(&from_jsonl) {
        assert_eq!(p.to_json().unwrap(), j.to_json().unwrap());
    }
    assert_eq!(from_parquet[1].pass_to_pass, vec!["test_w.py::test_y".to_string()]);
    assert_eq!(from_parquet[0].fail_to_pass, vec!["test_w.py::test_x".to_string()]);
}

#[test]
fn a_file_that_is_not_parquet_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tasks.parquet");
    std::fs::write(&p, b"{\"instance_id\": \"x\"}\n").unwrap();
    assert!(matches!(load_tasks(&p), Err(TaskError::Parquet { .. })), "{:?}", load_tasks(&p).err());
}
