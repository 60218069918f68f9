//! Results that survive interrupts and crashes, and reruns that finish the work.
//!
//! Every result of `audit`, `grade` and the units of `eval` is one JSON line carrying an `input_key`: a hash of
//! everything the result depends on (the task, the bundle or prediction, the sandbox kind and
//! this program: its version and executable build). Each line is appended and fsynced the
//! moment its item completes.
//! A rerun with the same `--out` reads the file back and keeps exactly the lines whose key is
//! one of the current run's keys and that are final verdicts: lines of an earlier, different
//! run (another bundle, another prediction, another binary), torn lines of a killed writer and
//! operational errors (retried) are dropped. At the end the file is rewritten in input order
//! (write to a temporary file, fsync, rename), so an interrupted-and-resumed run leaves the same
//! file as an uninterrupted one.
//!
//! The single-episode commands (`gen-test`, `repair`) use [`write_atomically`] for each output
//! file and a completion marker ([`Marker`]) written last.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The field of a result line that names its inputs.
pub const KEY_FIELD: &str = "input_key";

/// Which program produced a result: the version and the executable's size and modification
/// time, so results of another build (whose harness may judge differently) are never reused.
fn program_identity() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let exe = std::env::current_exe()
            .and_then(std::fs::metadata)
            .map(|m| {
                let modified = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                format!("{} bytes, modified {modified}", m.len())
            })
            .unwrap_or_default();
        format!("{} ({exe})", env!("CARGO_PKG_VERSION"))
    })
}

/// Hash of a result's inputs: a kind, then each part length-prefixed (so part boundaries are
/// unambiguous), with the program's identity folded in.
pub fn input_key(kind: &str, parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in [program_identity().as_bytes(), kind.as_bytes()]
        .into_iter()
        .chain(parts.iter().copied())
    {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// Write `bytes` to `path` so that a reader sees either the old file or the complete new one:
/// a temporary file in the same directory, fsynced, renamed over `path`, directory fsynced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(&dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(&dir)?.sync_all()
}

/// Remove the temporary files of [`write_atomically`] calls that a kill interrupted in `dir`.
pub fn remove_partials(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(".partial-") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// An append-only, fsynced JSONL result file keyed by [`KEY_FIELD`].
pub struct ResultLog {
    path: PathBuf,
    file: std::fs::File,
}

impl ResultLog {
    /// Open `path` for a run whose items have the keys `keys`. Lines of an earlier run are kept
    /// when their key is in `keys` and `is_final` accepts them; the file is rewritten with only
    /// those before anything is appended. Returns the log and the kept lines by key.
    pub fn open(
        path: &Path,
        keys: &HashSet<String>,
        is_final: impl Fn(&Value) -> bool,
    ) -> std::io::Result<(ResultLog, HashMap<String, Value>)> {
        ResultLog::open_keeping(path, |k, v| keys.contains(k) && is_final(v))
    }

    /// [`ResultLog::open`] for runs whose keys are not all known up front (a key that hashes an
    /// earlier result's output): a line is kept when `keep(key, line)` accepts it.
    pub fn open_keeping(
        path: &Path,
        keep: impl Fn(&str, &Value) -> bool,
    ) -> std::io::Result<(ResultLog, HashMap<String, Value>)> {
        if let Some(dir) = path.parent() {
            remove_partials(dir);
        }
        let mut kept: HashMap<String, Value> = HashMap::new();
        let mut order = Vec::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                // A line that does not parse is the torn tail of a killed writer.
                let Ok(v) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                let Some(k) = v.get(KEY_FIELD).and_then(Value::as_str).map(str::to_string) else {
                    continue;
                };
                if keep(&k, &v) && !kept.contains_key(&k) {
                    order.push(k.clone());
                    kept.insert(k, v);
                }
            }
        }
        let mut text = String::new();
        for k in &order {
            text.push_str(&kept[k].to_string());
            text.push('\n');
        }
        write_atomically(path, text.as_bytes())?;
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        Ok((
            ResultLog {
                path: path.to_path_buf(),
                file,
            },
            kept,
        ))
    }

    /// Append one result line and make it durable.
    pub fn append(&mut self, row: &Value) -> std::io::Result<()> {
        let mut line = row.to_string();
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }

    /// Replace the file by `rows` (the complete results, in input order).
    pub fn finish(self, rows: &[Value]) -> std::io::Result<()> {
        let mut text = String::new();
        for r in rows {
            text.push_str(&r.to_string());
            text.push('\n');
        }
        drop(self.file);
        write_atomically(&self.path, text.as_bytes())
    }
}

/// The completion marker of a single-episode command (`OUT/done.json`), written after every
/// other output file: its key says which inputs the outputs belong to.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Marker {
    pub input_key: String,
    /// The command's exit status, replayed by a rerun that skips the work.
    pub exit_code: u8,
    /// What the command printed as its result.
    pub summary: String,
}

impl Marker {
    /// The marker of the whole command.
    pub const DONE: &'static str = "done.json";

    /// The marker named `name` in `out` if it belongs to `key` (a marker of other inputs is
    /// removed, so a half-rewritten directory is never mistaken for a finished one).
    pub fn load_named(out: &Path, name: &str, key: &str) -> std::io::Result<Option<Marker>> {
        let path = out.join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        match serde_json::from_str::<Marker>(&text) {
            Ok(m) if m.input_key == key => Ok(Some(m)),
            _ => {
                std::fs::remove_file(&path)?;
                Ok(None)
            }
        }
    }

    /// [`Marker::load_named`] of [`Marker::DONE`].
    pub fn load(out: &Path, key: &str) -> std::io::Result<Option<Marker>> {
        Marker::load_named(out, Marker::DONE, key)
    }

    pub fn store_named(&self, out: &Path, name: &str) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        write_atomically(&out.join(name), (text + "\n").as_bytes())
    }

    /// Store as [`Marker::DONE`] (after every other output).
    pub fn store(&self, out: &Path) -> std::io::Result<()> {
        self.store_named(out, Marker::DONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(ks: &[&str]) -> HashSet<String> {
        ks.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keys_separate_parts_and_kinds() {
        assert_ne!(
            input_key("a", &[b"xy", b"z"]),
            input_key("a", &[b"x", b"yz"])
        );
        assert_ne!(input_key("a", &[b"x"]), input_key("b", &[b"x"]));
        assert_eq!(input_key("a", &[b"x"]), input_key("a", &[b"x"]));
    }

    #[test]
    fn reopen_keeps_final_current_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let text = [
            json!({"input_key": "k1", "v": 1}).to_string(),
            json!({"input_key": "stale", "v": 2}).to_string(),
            json!({"input_key": "k2", "v": 3, "error": "infra"}).to_string(),
            json!({"v": 4}).to_string(),
            "{\"input_key\": \"k3\", \"v".to_string(), // torn by a kill
        ]
        .join("\n");
        std::fs::write(&p, text).unwrap();
        let (mut log, kept) =
            ResultLog::open(&p, &keys(&["k1", "k2", "k3"]), |v| v.get("error").is_none()).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept["k1"]["v"], 1);
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            json!({"input_key": "k1", "v": 1}).to_string() + "\n"
        );
        log.append(&json!({"input_key": "k2", "v": 5})).unwrap();
        let (_, kept) = ResultLog::open(&p, &keys(&["k1", "k2"]), |_| true).unwrap();
        assert_eq!(kept["k2"]["v"], 5);
        let (log, _) = ResultLog::open(&p, &keys(&["k1", "k2"]), |_| true).unwrap();
        log.finish(&[json!({"input_key": "k2"}), json!({"input_key": "k1"})])
            .unwrap();
        let lines: Vec<String> = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(
            lines,
            vec![r#"{"input_key":"k2"}"#, r#"{"input_key":"k1"}"#]
        );
    }

    #[test]
    fn marker_of_other_inputs_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let m = Marker {
            input_key: "a".into(),
            exit_code: 1,
            summary: "s".into(),
        };
        m.store(dir.path()).unwrap();
        assert_eq!(Marker::load(dir.path(), "a").unwrap(), Some(m));
        assert_eq!(Marker::load(dir.path(), "b").unwrap(), None);
        assert!(!dir.path().join("done.json").exists());
        assert_eq!(Marker::load(dir.path(), "a").unwrap(), None);
    }
}
