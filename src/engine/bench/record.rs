//! A benchmark's record that keeps what it measured: [`PhaseLog`] runs a benchmark as named
//! phases and rewrites its JSON file (atomically: a temporary file renamed over it) before and
//! after every phase, so a phase that fails, panics or hangs loses nothing measured before it —
//! its error is recorded and the next phase runs. [`DeviceProbe`] adds what each phase saw of
//! the device: memory in use and its peak (the allocator's own figures), launches, GEMMs,
//! memsets and graph replays (per engine step where the phase reports its steps), decode graphs
//! kept, and the GPU's clocks and temperature from `nvidia-smi` where there is one.

use crate::tensor::cuda::{Gpu, OpCounts};
use crate::tensor::device::MemoryUsage;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a phase returns: its figures, or why it failed (any error converts with `?`).
pub type PhaseResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Counters of the device at one moment.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    ops: OpCounts,
    graph_launches: u64,
    allocations: u64,
}

/// The device a benchmark measures, as its phases see it.
pub struct DeviceProbe {
    gpu: Gpu,
    /// A real GPU (its driver reports memory): `nvidia-smi` describes it.
    real: bool,
    /// Decode-step graphs kept by the model under test, where the benchmark can tell.
    graphs: Option<Box<dyn Fn() -> Option<usize>>>,
}

impl DeviceProbe {
    pub fn new(gpu: &Gpu) -> Self {
        DeviceProbe {
            gpu: gpu.clone(),
            real: gpu.device().memory_info().is_some(),
            graphs: None,
        }
    }

    /// Report the decode graphs `f` says are kept (e.g. a `CudaDecoder`'s).
    pub fn with_graphs(mut self, f: impl Fn() -> Option<usize> + 'static) -> Self {
        self.graphs = Some(Box::new(f));
        self
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            ops: self.gpu.op_counts(),
            graph_launches: self.gpu.graph_launches(),
            allocations: self.gpu.allocations(),
        }
    }

    /// The allocator's memory figures now.
    pub fn memory(&self) -> Option<MemoryUsage> {
        self.gpu.device().memory_usage()
    }

    /// The phase's device figures: work enqueued since `before` (and per step when the phase
    /// ran `steps` engine or model steps), memory, graphs, clocks.
    fn describe(&self, before: Snapshot, steps: Option<u64>) -> Value {
        let now = self.snapshot();
        let ops = now.ops.since(before.ops);
        let graphs = now.graph_launches - before.graph_launches;
        let mut d = json!({
            "ops": {"launches": ops.launches, "gemms": ops.gemms, "memsets": ops.memsets,
                    "graph_launches": graphs, "allocations": now.allocations - before.allocations},
            "memory": self.memory(),
            "driver_memory": self.gpu.device().memory_info()
                .map(|(free, total)| json!({"used_bytes": total - free, "total_bytes": total})),
            "decode_graphs": self.graphs.as_ref().and_then(|f| f()),
            "clocks": if self.real { gpu_clocks() } else { None },
        });
        if let Some(n) = steps.filter(|&n| n > 0) {
            let per = |x: u64| x as f64 / n as f64;
            d["ops_per_step"] = json!({
                "launches": per(ops.launches), "gemms": per(ops.gemms), "memsets": per(ops.memsets),
                "graph_launches": per(graphs), "total": per(ops.total() + graphs),
            });
        }
        d
    }
}

/// Clocks, temperature and power of GPU 0 from `nvidia-smi` (`None` without it, or when it
/// does not answer within 5 s).
pub fn gpu_clocks() -> Option<Value> {
    const FIELDS: [&str; 8] = [
        "clocks.sm",
        "clocks.mem",
        "clocks.max.sm",
        "clocks.max.mem",
        "temperature.gpu",
        "power.draw",
        "pstate",
        "utilization.gpu",
    ];
    let mut child = std::process::Command::new("nvidia-smi")
        .args(["-i", "0", "--format=csv,noheader,nounits"])
        .arg(format!("--query-gpu={}", FIELDS.join(",")))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let t = Instant::now();
    while child.try_wait().ok()?.is_none() {
        if t.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().ok()?;
    let line = String::from_utf8_lossy(&out.stdout);
    let values: Vec<&str> = line.lines().next()?.split(',').map(str::trim).collect();
    (out.status.success() && values.len() == FIELDS.len()).then(|| {
        let pairs = FIELDS.iter().zip(values).map(|(k, v)| {
            let v = v.parse::<f64>().map_or_else(|_| json!(v), |x| json!(x));
            (k.to_string(), v)
        });
        Value::Object(pairs.collect())
    })
}

/// A benchmark run as phases, its JSON rewritten before and after each one.
pub struct PhaseLog {
    path: Option<PathBuf>,
    head: Map<String, Value>,
    phases: Vec<Value>,
    on_write: Option<Box<dyn FnMut(&Value)>>,
}

impl PhaseLog {
    /// A record written to `path` (`None`: kept in memory only).
    pub fn new(path: Option<PathBuf>) -> Self {
        PhaseLog {
            path,
            head: Map::new(),
            phases: vec![],
            on_write: None,
        }
    }

    /// A record written to `$OUT/<file>` when `OUT` is set; the head names the commit and date
    /// (`EXECCRITIC_COMMIT`, `EXECCRITIC_DATE`, as `scripts/gpu-check.sh` sets them) and `source`.
    pub fn from_env(file: &str, source: &str) -> Self {
        let mut log = Self::new(std::env::var_os("OUT").map(|d| Path::new(&d).join(file)));
        let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
        log.head
            .insert("commit".into(), json!(var("EXECCRITIC_COMMIT")));
        log.head
            .insert("date".into(), json!(var("EXECCRITIC_DATE")));
        log.head.insert("source".into(), json!(source));
        log
    }

    /// Called with the whole document after each write (tests watch the file grow).
    pub fn on_write(&mut self, f: impl FnMut(&Value) + 'static) {
        self.on_write = Some(Box::new(f));
    }

    /// Set a top-level key (configuration, a summary) and write.
    pub fn set(&mut self, key: &str, value: impl Serialize) {
        let v =
            serde_json::to_value(value).unwrap_or_else(|e| json!(format!("unserialisable: {e}")));
        self.head.insert(key.to_string(), v);
        self.write();
    }

    /// Run phase `name`: recorded as `running` first, then `ok` with its result and what
    /// `probe` saw of the device (`None`: no device yet), or `failed` with the error (a panic
    /// included) — the caller goes on with the next phase either way. A result with a positive
    /// `steps` field gets per-step launch counts.
    pub fn phase<'p, T: Serialize>(
        &mut self,
        name: &str,
        probe: impl Into<Option<&'p DeviceProbe>>,
        f: impl FnOnce() -> PhaseResult<T>,
    ) -> Option<T> {
        let probe = probe.into();
        self.phases.push(json!({"name": name, "status": "running"}));
        self.write();
        let before = probe.map(|p| {
            p.gpu.device().reset_memory_peak();
            p.snapshot()
        });
        let t = Instant::now();
        let out = std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
            let msg = p.downcast_ref::<&str>().map(|s| s.to_string());
            let msg = msg.or_else(|| p.downcast_ref::<String>().cloned());
            Err(format!("panicked: {}", msg.unwrap_or_default()).into())
        });
        let seconds = t.elapsed().as_secs_f64();
        let mut rec = json!({"name": name, "seconds": seconds});
        let (kept, steps) = match out {
            Ok(v) => match serde_json::to_value(&v) {
                Ok(j) => {
                    let steps = j.get("steps").and_then(Value::as_u64);
                    rec["status"] = json!("ok");
                    rec["result"] = j;
                    (Some(v), steps)
                }
                Err(e) => {
                    rec["status"] = json!("failed");
                    rec["error"] = json!(format!("result not serialisable: {e}"));
                    (None, None)
                }
            },
            Err(e) => {
                eprintln!("phase {name} failed: {e}");
                rec["status"] = json!("failed");
                rec["error"] = json!(e.to_string());
                (None, None)
            }
        };
        if let (Some(p), Some(before)) = (probe, before) {
            rec["device"] = p.describe(before, steps);
        }
        if let Some(last) = self.phases.last_mut() {
            *last = rec;
        }
        self.write();
        kept
    }

    /// Record phase `name` as skipped (something it needs failed before it).
    pub fn skip(&mut self, name: &str, why: &str) {
        self.phases
            .push(json!({"name": name, "status": "skipped", "error": why}));
        self.write();
    }

    /// The names of the phases that failed.
    pub fn failed(&self) -> Vec<String> {
        self.phases
            .iter()
            .filter(|p| p["status"] == "failed")
            .filter_map(|p| p["name"].as_str().map(str::to_string))
            .collect()
    }

    /// The record of phase `name` (status, seconds, result or error, device figures).
    pub fn record(&self, name: &str) -> Option<&Value> {
        self.phases.iter().find(|p| p["name"] == name)
    }

    /// The result of phase `name`, if it succeeded.
    pub fn result(&self, name: &str) -> Option<&Value> {
        let p = self.record(name)?;
        (p["status"] == "ok").then(|| &p["result"])
    }

    /// The whole record: the head's keys, then `phases` in the order run.
    pub fn document(&self) -> Value {
        let mut doc = self.head.clone();
        doc.insert("phases".into(), Value::Array(self.phases.clone()));
        Value::Object(doc)
    }

    /// Rewrite the file (a temporary file in the same folder renamed over it); a failure to
    /// write is reported and the benchmark goes on.
    fn write(&mut self) {
        let doc = self.document();
        if let Some(path) = &self.path {
            if let Err(e) = write_atomic(path, &doc) {
                eprintln!("could not write {}: {e}", path.display());
            }
        }
        if let Some(f) = self.on_write.as_mut() {
            f(&doc);
        }
    }
}

/// Write `value` as pretty JSON to `path` through a temporary file renamed over it.
pub fn write_atomic(path: &Path, value: &Value) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(serde_json::to_string_pretty(value)?.as_bytes())?;
    tmp.as_file().sync_all()?;
    // readable as a file written plainly would be (the temporary file is private)
    let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o644);
    tmp.as_file().set_permissions(mode)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
