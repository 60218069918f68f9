//! The minimal inputs of the bugs the fuzz targets (or the git probes made while writing them)
//! found, as plain tests, each naming what found it; and the tests of the parsers' stated bounds.

use execcritic::harness::diff::Patch;
use execcritic::model::checkpoint::Checkpoint;
use execcritic::task::parquet::parquet_to_jsonl;
use execcritic::task::TaskError;
use std::path::Path;
use serde_json::json;

/// A checkpoint directory holding one valid, empty safetensors shard, and an index naming `shard`.
fn checkpoint_with_index(shard: &str) -> tempfile::TempDir {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    let empty = [&2u64.to_le_bytes()[..], b"{}"].concat();
    std::fs::write(scratch.path().join("outside.safetensors"), &empty).unwrap();
    std::fs::write(dir.join("model-00001-of-00001.safetensors"), &empty).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let index = json!({"weight_map": {"t": shard}});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    scratch
}

/// Found by review while writing checkpoint_open (which now covers it): a shard index could
/// name a file outside the checkpoint.
#[test]
fn checkpoint_index_may_not_name_a_file_outside_the_checkpoint() {
    for shard in ["../outside.safetensors", "/etc/hostname", ".", ""] {
        let scratch = checkpoint_with_index(shard);
        let err = Checkpoint::open(&scratch.path().join("ckpt")).err();
        assert!(err.is_some_and(|e| e.to_string().contains("not a file name")), "{shard}");
    }
    let ok = checkpoint_with_index("model-00001-of-00001.safetensors");
    assert!(Checkpoint::open(&ok.path().join("ckpt")).is_ok());
}

/// Found by review while writing checkpoint_open (which now covers it): a shard that is a FIFO
/// blocked `open` for ever.
#[test]
fn checkpoint_shard_must_be_a_regular_file() {
    let scratch = checkpoint_with_index("fifo");
    let err = Checkpoint::open(&scratch.path().join("ckpt")).err();
    assert!(err.is_some_and(|e| e.to_string().contains("not a regular file")));
}

/// Parse `patch` expecting a malformed-patch refusal.
fn refused(patch: &str) {
    let got = Patch::parse(patch);
    assert!(
        got.as_ref().is_err_and(|e| e.class() == "malformed_patch"),
        "accepted or refused otherwise: {patch:?} -> {got:?}"
    );
}

/// Parse `patch`, expecting it accepted and its re-serialisation to parse to the same structure.
fn round_trips(patch: &str) -> Patch {
    let p = Patch::parse(patch).unwrap_or_else(|e| panic!("{patch:?}: {e}"));
    assert_eq!(Patch::parse(&p.to_git()).unwrap(), p, "{patch:?}");
    p
}

/// A git probe (`git apply --check`) while writing diff_git_differential: a git section that
/// changes nothing (only an `index` line, equal `old mode`/`new mode`) was accepted; `git apply`
/// refuses it ("patch with only garbage").
#[test]
fn diff_git_section_that_changes_nothing_is_refused() {
    refused("diff --git a/x b/x\nindex 1234567..89abcde 100644\n");
    refused("diff --git a/x b/x\nold mode 100644\nnew mode 100644\n");
    refused("diff --git a/x b/x\n");
    round_trips("diff --git a/x b/x\nold mode 100644\nnew mode 100755\n");
}

/// A git probe while writing diff_git_differential: `\ No newline at end of file` was accepted
/// anywhere in a hunk and at any length; git refuses one under 12 bytes and, inside a hunk, joins
/// the lines around it.
#[test]
fn diff_no_newline_marker_only_ends_a_side() {
    let hunk = |body: &str| format!("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n{body}");
    refused(&hunk("-a\n\\ No newline at end of file\n+b\n c\n"));
    refused(&hunk("\\ No newline at end of file\n-a\n-c\n+b\n+c\n"));
    refused(&hunk("-a\n-c\n\\\n+b\n+c\n"));
    refused(&hunk("-a\n-c\n\\ No newline at end of file\n\\ No newline at end of file\n+b\n+c\n"));
    round_trips(&hunk("-a\n-c\n\\ No newline at end of file\n+b\n+c\n"));
    round_trips(&hunk(" a\n-c\n+d\n\\ No newline at end of file\n"));
    round_trips("--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n a\n+b\n c\n\\ No newline at end of file\n");
}

/// A git probe while writing diff_git_differential: a line holding only `\r` in a hunk was read as
/// an empty context line (and re-serialised without the `\r`); git refuses it as a corrupt patch.
#[test]
fn diff_lone_carriage_return_in_a_hunk_is_refused() {
    refused("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n\r\n");
    round_trips("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n\n");
}

/// A git probe while writing diff_git_differential: a hunk of no lines (`@@ -0,0 +0,0 @@`) was
/// accepted; git refuses it.
#[test]
fn diff_empty_hunk_is_refused() {
    refused("--- a/x\n+++ b/x\n@@ -0,0 +0,0 @@\n");
    refused("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n@@ -5,0 +5,0 @@\n");
}

/// Review while writing diff_structured: a `Binary files … differ` section lost its binary marker
/// in `to_git` (the re-serialisation was a section that changes nothing).
#[test]
fn diff_binary_marker_survives_the_round_trip() {
    let p = round_trips("diff --git a/x.bin b/x.bin\nindex 1234567..89abcde 100644\nBinary files a/x.bin and b/x.bin differ\n");
    assert!(p.files[0].binary);
    round_trips("diff --git a/x.bin b/x.bin\nnew file mode 100644\nindex 0000000..89abcde\nBinary files /dev/null and b/x.bin differ\n");
}

/// Review while writing diff_structured: modes that `to_git` could not write back (a lone `old
/// mode`, an `index` mode contradicting the mode lines, an old mode on a created file, a plain
/// diff's new file) broke the round trip.
#[test]
fn diff_modes_round_trip_or_are_refused() {
    refused("diff --git a/x b/x\nold mode 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n");
    refused("diff --git a/x b/x\nold mode 100644\nnew mode 100755\nindex 1234567..89abcde 100644\n");
    refused("diff --git a/x b/x\nnew file mode 100644\nold mode 100755\n");
    refused("diff --git a/x b/x\nnew file mode 100644\nindex 0000000..89abcde 100755\n");
    round_trips("diff --git a/x b/x\nindex 1234567..89abcde 100755\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n");
    round_trips("diff --git a/x b/x\nold mode 100644\nnew mode 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n");
    let created = round_trips("--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n");
    assert_eq!(created.files[0].new_mode, Some(0o100644));
    round_trips("--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n");
}

/// diff_mutated_seeds: a `diff --git` line not starting with `a/` whose length split it inside a
/// multi-byte character panicked (string slice off a char boundary).
#[test]
fn diff_git_header_split_inside_a_character_does_not_panic() {
    refused("diff --git a\u{e9}a--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n");
}

/// diff_git_differential: a binary section right after its `diff --git` line was accepted; git
/// does not read such a line as a section start (it folds the next section into it), and cannot
/// apply a binary change without the `index` line anyway.
#[test]
fn diff_binary_section_needs_its_index_line() {
    refused("diff --git a/s b/s\nBinary files a/s and b/s differ\ndiff --git a/t b/t\nnew file mode 100644\n--- /dev/null\n+++ b/t\n@@ -0,0 +1 @@\n+x\n");
    refused("diff --git a/s b/s\nGIT binary patch\nliteral 0\nHcmV?d00001\n\n");
}

/// diff_git_differential: a `Binary files … differ` line ending in `\r`, and (soak) any line
/// ending in ` differ`, were read as binary; git 2.x reads a binary change from a line starting
/// with `Binary files ` or `Files `, older git from one ending in ` differ`. Only a line both
/// read alike is accepted.
#[test]
fn diff_binary_differ_line_is_read_as_git_reads_it() {
    let section = "diff --git a/x b/x\nindex 1234567..89abcde 100644\n";
    refused(&format!("{section}Binary files a/x and b/x differ\r\n"));
    refused(&format!("{section}dBinary files a/x and b/x differ\n"));
    refused(&format!("{section}Binary files a/x and b/x\n"));
    let p = round_trips(&format!("{section}Files a/x and b/x differ\n"));
    assert!(p.files[0].binary);
}

/// diff_git_differential (soak): a git section's `--- /dev/null` given twice ended the section
/// (an empty new file) and the rest was read as a second, plain section on the same path; git
/// reads both `---` lines as header lines of one section.
#[test]
fn diff_unpaired_marker_line_in_a_git_section_is_refused() {
    refused("diff --git a/g.rs b/g.rs\nnew file mode 100644\n--- /dev/null\n--- /dev/null\n+++ b/g.rs\n@@ -0,0 +1 @@\n+\n");
    refused("diff --git a/g.rs b/g.rs\nnew file mode 100644\n+++ b/g.rs\n@@ -0,0 +1 @@\n+\n");
}

/// The patch parser's bound (docs/testing.md, "Bounds"): over `MAX_PATCH_BYTES` a typed refusal.
#[test]
fn diff_over_the_size_bound_is_a_typed_refusal() {
    use execcritic::harness::diff::{PatchError, MAX_PATCH_BYTES};
    let big = format!("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n{}", " ".repeat(MAX_PATCH_BYTES));
    let err = Patch::parse(&big).unwrap_err();
    assert!(matches!(err, PatchError::TooLarge { .. }) && err.class() == "patch_too_large");
}

/// diff_git_differential (`scripts/fuzz-soak.sh`): a `diff --git` line ending in `\r` was read
/// with the `\r` trimmed; git keeps it in the names, so a CRLF section without `---`/`+++` lines
/// (binary, mode change, empty new file) has no file name for git.
#[test]
fn diff_crlf_git_line_without_marker_lines_is_refused() {
    refused("diff --git a/x b/x\r\nindex 1234567..89abcde 100644\nBinary files a/x and b/x differ\n");
    refused("diff --git a/x b/x\r\nold mode 100644\r\nnew mode 100755\r\n");
    refused("diff --git a/x b/x\r\nnew file mode 100644\r\n");
    round_trips("diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n");
}

/// diff_git_differential (soak): a created file whose `diff --git` halves differ (a corrupted
/// quoted name) was accepted under the second name; git finds no file name there.
#[test]
fn diff_created_file_with_two_header_names_is_refused() {
    refused("diff --git \"a/caf\\333\\251.py\" \"b/caf\\303\\251.py\"\nnew file mode 100644\n");
    refused("diff --git a/x b/y\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n");
}

/// diff_git_differential (soak): a hunk of context lines only was accepted; git refuses it as a
/// corrupt patch.
#[test]
fn diff_hunk_that_changes_nothing_is_refused() {
    refused("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n c\n");
    refused("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n c\n@@ -5 +5 @@\n-a\n+b\n");
}

/// tasks_parquet (`scripts/fuzz-soak.sh`): one corrupted metadata byte made the `parquet` crate
/// panic inside `parquet_to_jsonl`; now a typed `TaskError::Parquet`.
#[test]
fn corrupt_parquet_metadata_is_a_typed_error() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/swebench-sample.parquet");
    let mut bytes = std::fs::read(fixture).unwrap();
    bytes[3632] = 5;
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("t.parquet");
    std::fs::write(&file, &bytes).unwrap();
    let err = parquet_to_jsonl(&file).unwrap_err();
    assert!(matches!(err, TaskError::Parquet { .. }), "{err}");
}

/// diff_git_differential (soak): a deleted file's second hunk added lines (the next section's
/// `---`/`+++` lines, swallowed as body lines); git refuses a deletion that leaves contents.
#[test]
fn diff_created_or_deleted_file_hunks_only_add_or_remove() {
    refused("diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n@@ -1 +1 @@\n--- /dev/null\n+++ b/y\n");
    refused("--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+a\n c\n");
    round_trips("--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+a\n+c\n");
}

/// diff_git_differential (soak): repeated or mixed `rename`/`copy` lines in one section were
/// accepted (the last won); git refuses them ("inconsistent header lines").
#[test]
fn diff_repeated_or_mixed_rename_lines_are_refused() {
    refused("diff --git a/a b/b\ncopy from a\ncopy to diff --git a/c b/d\nrename from c\nrename to d\n");
    refused("diff --git a/a b/b\nrename from a\ncopy to b\n");
    // The `to` line first (found by review of the fix above).
    refused("diff --git a/a b/b\ncopy to b\nrename from a\n");
    round_trips("diff --git a/a b/b\nsimilarity index 100%\nrename to b\nrename from a\n");
    round_trips("diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to b\n");
}

/// git's `check_header_line`: a section is at most one of created, deleted, renamed, copied.
/// Found by the git differential soak (seed 20013): a create section with no hunk whose next
/// section lost its `diff --git` line, so `new file mode` and `rename from/to` met in one section.
#[test]
fn diff_sections_with_two_kinds_of_extension_lines_are_refused() {
    refused("diff --git a/t.py b/t.py\nnew file mode 100644\nindex 1234567..89abcde\nold mode 100644\nnew mode 100755\nsimilarity index 80%\nrename from src/app.py\nrename to a b.txt\n--- a/src/app.py\n+++ b/a b.txt\n@@ -1,2 +1,2 @@\n \n-=\n+=\n\\ No newline at end of file\n");
    for (first, second) in [
        ("new file mode 100644", "deleted file mode 100644"),
        ("deleted file mode 100644", "new file mode 100644"),
        ("new file mode 100644", "copy from a"),
        ("rename to b", "deleted file mode 100644"),
        ("deleted file mode 100644", "rename from a"),
    ] {
        refused(&format!("diff --git a/a b/a\n{first}\n{second}\n"));
    }
    // One kind, its lines in either order, still parses.
    round_trips("diff --git a/a b/a\nnew file mode 100644\nindex 0000000..1234567\n--- /dev/null\n+++ b/a\n@@ -0,0 +1 @@\n+x\n");
}

/// toml_differential (seeds 1000 and 2000): where the `toml` crate (0.8) and Python's `tomllib`
/// read a config differently, kept as the target's documented exceptions. A positive float
/// literal past `f64` is refused by the crate and a negative one read as `-inf` (tomllib reads
/// both as infinities); a leap second is read by the crate (tomllib refuses it). A change of
/// the crate that moves these fails here first.
#[test]
fn toml_float_overflow_and_leap_second() {
    let float = |text: &str| toml::from_str::<toml::Table>(text).map(|t| t["a"].as_float());
    assert!(float("a = 1e309").is_err());
    assert!(float("a = +1e309").is_err());
    assert_eq!(float("a = -1e309").unwrap(), Some(f64::NEG_INFINITY));
    assert_eq!(float("a = inf").unwrap(), Some(f64::INFINITY));
    let t = toml::from_str::<toml::Table>("a = 2000-02-29T23:59:60Z").unwrap();
    assert!(matches!(&t["a"], toml::Value::Datetime(d) if d.time.is_some_and(|t| t.second == 60)));
}

/// A model folder with `tokenizer.json` (a small WordLevel tokenizer, `added` as its added
/// tokens) and `config.json` holding `eos`.
fn tokenizer_folder(added: serde_json::Value, decoder: serde_json::Value, eos: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tok = json!({ "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": { "type": "WhitespaceSplit" }, "post_processor": null,
        "decoder": decoder, "model": { "type": "WordLevel", "vocab": { "a": 0, "b": 1, "<unk>": 2 }, "unk_token": "<unk>" } });
    std::fs::write(dir.path().join("tokenizer.json"), tok.to_string()).unwrap();
    std::fs::write(dir.path().join("config.json"), json!({ "eos_token_id": eos }).to_string()).unwrap();
    dir
}

/// Found by `tokenizer_load`: the `tokenizers` crate panics (`expect("Helper")`) on a decoder
/// section it cannot read (now a load error), and its `BPEDecoder` on an empty id list (which
/// the crate is no longer asked to decode).
#[test]
fn tokenizer_crate_panics_are_load_errors() {
    use execcritic::model::tokenizer::{Tokenizer, TokenizerError};
    let dir = tokenizer_folder(json!([]), json!({ "type": "ByteLevel" }), json!(1));
    let text = std::fs::read_to_string(dir.path().join("tokenizer.json")).unwrap();
    // The decoder object cut so that its helper enum cannot parse it: `"decoder":type": …`.
    std::fs::write(dir.path().join("tokenizer.json"), text.replace("\"decoder\":{\"", "\"decoder\":")).unwrap();
    assert!(matches!(Tokenizer::from_dir(dir.path()), Err(TokenizerError::Load { .. })));
    let dir = tokenizer_folder(json!([]), json!({ "type": "BPEDecoder", "suffix": "</w>" }), json!(1));
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.decode(&[], false).unwrap(), "");
}

/// Found by `tokenizer_load`: an added token declared with an id past a gap is moved to another
/// id (differently on each load), and an unknown token missing from the vocabulary maps text to
/// arbitrary ids; such files are refused. An eos id outside `u32` was wrapped (2³² + 1 read as 1).
#[test]
fn tokenizer_ids_are_the_declared_ones() {
    use execcritic::model::tokenizer::{Tokenizer, TokenizerError};
    let token = |id: u32, content: &str| json!({ "id": id, "content": content, "single_word": false,
        "lstrip": false, "rstrip": false, "normalized": false, "special": true });
    let ok = tokenizer_folder(json!([token(3, "<|im_end|>")]), json!(null), json!(3));
    let tok = Tokenizer::from_dir(ok.path()).unwrap();
    assert_eq!(tok.stop_ids(), &[3]);
    assert_eq!(tok.encode("a <|im_end|>").unwrap(), [0, 3]);
    let gap = tokenizer_folder(json!([token(11, "<|im_end|>")]), json!(null), json!(3));
    let err = Tokenizer::from_dir(gap.path()).unwrap_err();
    assert!(matches!(err, TokenizerError::Inconsistent { .. }), "{err}");
    assert!(err.to_string().contains("declared as id 11"), "{err}");
    for eos in [json!(4294967297u64), json!([1, "2"]), json!(-1), json!(1.5)] {
        let dir = tokenizer_folder(json!([]), json!(null), eos.clone());
        assert!(matches!(Tokenizer::from_dir(dir.path()), Err(TokenizerError::Config { .. })), "{eos}");
    }
    let dir = tokenizer_folder(json!([]), json!(null), json!(null));
    assert!(Tokenizer::from_dir(dir.path()).unwrap().stop_ids().is_empty());
}

/// Found by `chat_template_render`: Python's `str.strip()` (jinja2's `trim`) removes U+001C–U+001F,
/// Rust's `trim` does not, so a tool output ending in one gave another prompt than transformers.
#[test]
fn chat_template_whitespace_is_pythons() {
    use execcritic::model::chat::{ChatOptions, ChatTemplate, Message};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer");
    let t = ChatTemplate::from_dir(&dir).unwrap();
    let opts = ChatOptions { add_generation_prompt: false, enable_thinking: None };
    let text = t.render(&[Message::user("\u{1c}hi\u{1f} \u{1e}")], &[], opts).unwrap();
    assert_eq!(text, "<|im_start|>user\nhi<|im_end|>\n");
    let t = ChatTemplate::from_source(
        "{{ '\u{1c}a b\u{1f}c '.split() | join(',') }}|{{ ' x\u{1d}'.strip() }}|{{ '\u{1f}'.isspace() }}|{{ ''.isspace() }}|{{ 'xax'.strip('x') }}".into(),
        None,
        None,
    )
    .unwrap();
    assert_eq!(t.render_json(&json!([]), &[], opts).unwrap(), "a,b,c|x|True|False|a");
}

/// Found while writing `chat_template_load`: `tojson(indent=N)` built an `N`-space string and wrote
/// it once per nesting level, with no bound; it is now a `ChatError::Bound`.
#[test]
fn chat_template_tojson_indent_is_bounded() {
    use execcritic::model::chat::{ChatError, ChatOptions, ChatTemplate};
    let opts = ChatOptions::default();
    for indent in ["1000000000000", "40000000"] {
        let source = format!("{{{{ messages | tojson(indent={indent}) }}}}");
        let t = ChatTemplate::from_source(source, None, None).unwrap();
        let err = t.render_json(&json!([[[[1]]]]), &[], opts).unwrap_err();
        assert!(matches!(err, ChatError::Bound(_)), "{err}");
    }
    let t = ChatTemplate::from_source("{{ messages | tojson(indent=2) }}".into(), None, None).unwrap();
    assert_eq!(t.render_json(&json!([1]), &[], opts).unwrap(), "[\n  1\n]");
}

/// Found by the `chat_template_load` soak: minijinja 2.24 panics (a subtraction that underflows)
/// while formatting the source excerpt of the error `{%- for in messages %}` raises when rendered;
/// it is a `ChatError::Render` now.
#[test]
fn chat_template_error_with_a_backwards_span_is_an_error() {
    use execcritic::model::chat::{ChatError, ChatOptions, ChatTemplate, Message};
    let committed = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer/chat_template.jinja")).unwrap();
    let broken = committed.replace("{%- for message in messages %}", "{%- for in messages %}");
    assert_ne!(broken, committed);
    let conversation = [Message::system("s"), Message::user("Fix the bug."), Message::assistant("done")];
    let t = ChatTemplate::from_source(broken, None, None).unwrap();
    let err = t.render(&conversation, &[], ChatOptions::default()).unwrap_err();
    assert!(matches!(err, ChatError::Render(_)), "{err}");
}

/// `libtest_plan_mutated_seeds`, batch seed 1101: a file that is only a shebang line parses (syn
/// skips the line, and its spans start after it) but the planner tokenised the shebang and
/// failed. A shebang before a test: the rewrite keeps it, and the test is planned at its place.
#[test]
fn libtest_plan_a_shebang_line() {
    use execcritic::harness::guard::libtest::{plan_file, test_paths};
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let only = "#!![te";
    assert_eq!(plan_file("f.rs", only, &test_paths(only).unwrap(), 6, &mut rng).unwrap().source, only);
    let text = "#!/usr/bin/env run-cargo-script\n#[test]\nfn t() { assert_eq!(f(), 1); }\n";
    let plan = plan_file("f.rs", text, &test_paths(text).unwrap(), 6, &mut rng).unwrap();
    assert!(plan.source.starts_with("#!/usr/bin/env run-cargo-script\n#[allow(unused_extern_crates)] extern crate std as execcritic_std__; #[test]\nfn t_"), "{}", plan.source);
    // 13 copies' assertions, 6 tail copies' drop guards, the must-fail control.
    assert_eq!(plan.source.matches("execcritic_std__::process::abort()").count(), 13 + 6 + 1);
    assert!(plan.map.groups[0].real.is_some());
}

/// `gotest_plan_mutated_seeds`, soak seed 4301, batch seed 4498: `func TestLabel (t *testing.T)`
/// (a space before the parameters; batch seed 4807: two after `func`) is planned as any test; the
/// rewrite keeps the blanks, so the target's property (each run name defined once) now reads
/// tokens, not text.
#[test]
fn gotest_plan_a_space_before_the_parameters() {
    use execcritic::harness::guard::gotest::{plan_file, test_functions};
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let text = "package calc\n\nfunc TestLabel (t *testing.T) {\n\tif got := Label(7); got != \"n=7\" {\n\t\tt.Errorf(\"x\")\n\t}\n}\n";
    let plan = plan_file("calc_test.go", text, &["TestLabel".to_string()], 6, &mut rng).unwrap();
    let g = &plan.map.groups[0];
    assert!(g.why.is_none(), "{g:?}");
    let defined = test_functions(&plan.source).unwrap();
    let real = g.real.as_deref().unwrap();
    assert_eq!(defined.iter().filter(|d| *d == real).count(), 1, "{}", plan.source);
    for m in &g.mutants {
        assert_eq!(defined.iter().filter(|d| *d == m).count(), 1, "{m}");
    }
}

/// `gotest_plan_mutated_seeds`, soak seed 4302, batch seed 5248: `package func TestA(t
/// *testing.T) {…` — a keyword where the package name goes. The planner took `func` for the
/// package name and inserted its imports inside the test function it was rewriting (overlapping
/// edits, a rewrite that did not tokenize). A keyword is no package name: no package clause.
#[test]
fn gotest_plan_a_keyword_for_the_package_name() {
    use execcritic::harness::guard::gotest::plan_file;
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let text = "package func TestA(t *testing.T) {ing.T)\n\tif got := F(); got != 5 {\n\t\tt.Errorf(\"x\")\n\t}\n}\n";
    let err = plan_file("f_test.go", text, &["TestA".to_string()], 6, &mut rng).unwrap_err();
    assert!(err.contains("no package clause"), "{err}");
}
