//! Cost of the task layer's steps on the bundled suite: building the suite from scratch (cold
//! cache), materialising a task's workspace at Base, and materialising it sanitised for the
//! Test agent (clone + ref/reflog removal + gc + verification).

use criterion::{criterion_group, criterion_main, Criterion};
use execcritic::task::suite::bundled_suite_in;
use execcritic::task::{find_task, load_tasks, materialize};

fn bench(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let tasks = load_tasks(&bundled_suite_in(cache.path()).unwrap()).unwrap();
    let task = find_task(&tasks, "inikit__inikit-3").unwrap().clone();

    let mut g = c.benchmark_group("task");
    g.sample_size(10);
    g.bench_function("bundled_suite_cold_build", |b| {
        b.iter(|| {
            let fresh = tempfile::tempdir().unwrap();
            bundled_suite_in(fresh.path()).unwrap()
        })
    });
    g.bench_function("materialize_base", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            materialize(&task, &dir.path().join("ws"), false).unwrap()
        })
    });
    g.bench_function("materialize_sanitized", |b| {
        b.iter(|| {
            let dir = tempfile::tempdir().unwrap();
            materialize(&task, &dir.path().join("ws"), true).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
