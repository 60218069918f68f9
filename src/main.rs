//! The `execcritic` binary: parses the command line and hands over to `execcritic::cli`.
fn main() -> std::process::ExitCode {
    execcritic::cli::main()
}
