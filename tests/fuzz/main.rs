//! Property and fuzz targets of every parser of untrusted input, in one test binary (issue #26;
//! docs/testing.md, "Fuzz targets"). Each target is a `#[test]`: `cargo test --test fuzz` runs all
//! of them in CI mode (a fixed number of inputs from a fixed seed, seconds each);
//! `scripts/fuzz-soak.sh TARGET SECONDS` soaks one. The driver is in [`driver`].

mod bounds;
mod diff;
mod driver;
mod go_tests;
#[path = "../common/in_process_server.rs"]
mod in_process_server;
mod inputs;
mod logs;
mod model_files;
mod oracle;
mod regressions;
mod rust_tests;
mod serve_routes;
mod tokenizer;
mod toml_config;
mod toolcall;
