//! Fuzz targets of the one patch parser (`harness::diff`), which every model patch, candidate and
//! test patch goes through before the tamper screen and `git apply`.
//!
//! * `diff_mutated_seeds`: byte-level mutations of every `.patch`/`.diff` under `tests/fixtures`
//!   plus diff-shaped dictionary fragments: no panic; accepted → round trip.
//! * `diff_structured`: a structure-aware generator (several files; modify, create, delete,
//!   rename, copy, mode changes; `\ No newline at end of file`; CR in content; binary markers;
//!   quoted and odd paths; mail preambles) with optional corruption (truncation, wrong counts,
//!   dropped or duplicated lines, CRLF): no panic; accepted → round trip.
//! * `diff_git_differential`: the same generator against git itself. Every accepted patch's
//!   re-serialisation must be read by `git apply --numstat` exactly as the parser reads it (files,
//!   paths, added/removed lines); git's reading of the original text (its final newline restored:
//!   the parser accepts a patch without one, on purpose) must equal its reading of the
//!   re-serialisation; for an uncorrupted patch, `git apply` of the re-serialisation in a scratch
//!   repository holding the pre-image must produce exactly the generator's post-image.
//!
//! Round trip: `parse(to_git(parse(p))) == parse(p)` and `to_git` is a fixpoint.

use crate::driver::{fuzz, mutated, seeds};
use execcritic::harness::diff::{FileChange, FileOp, Patch};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Fragments the byte mutator inserts: the tokens the parser branches on.
const DICTIONARY: &[&str] = &[
    "diff --git a/x b/x\n", "--- a/x\n+++ b/x\n", "--- /dev/null\n", "+++ /dev/null\n",
    "@@ -1,2 +1,2 @@\n", "@@ -0,0 +1 @@\n", "@@ -1 +0,0 @@\n", "\\ No newline at end of file\n",
    "new file mode 100644\n", "deleted file mode 100755\n", "old mode 100644\nnew mode 100755\n",
    "rename from a\nrename to b\n", "copy from a\ncopy to b\n", "similarity index 90%\n",
    "index 0123abc..4567def 100644\n", "GIT binary patch\nliteral 0\nHcmV?d00001\n\n",
    "Binary files a/x and b/x differ\n", "\"a/q\\303\\251\"", "\"b/\\t\"", "\r\n", "\n\n", " b/",
    "*** a\n--- b\n", "***************\n", "+", "-", " ", "\\", "\t", "/dev/null",
];

/// The round-trip property of an accepted patch.
fn round_trip(p: &Patch) -> Result<String, TestCaseError> {
    let text = p.to_git();
    let again = Patch::parse(&text)
        .map_err(|e| TestCaseError::fail(format!("re-serialisation refused: {e}\n{text}")))?;
    prop_assert_eq!(&again, p, "parse(to_git(p)) != p; to_git:\n{}", text);
    prop_assert_eq!(again.to_git(), text.clone(), "to_git is not a fixpoint");
    Ok(text)
}

#[test]
fn diff_mutated_seeds() {
    let corpus = seeds("tests/fixtures", &[".patch", ".diff"]);
    fuzz("diff_mutated_seeds", 3_000, mutated(corpus, DICTIONARY), |text| {
        if let Ok(p) = Patch::parse(&text) {
            round_trip(&p)?;
        }
        Ok(())
    });
}

/// Paths the generator draws from: plain, spaces, ` b/` inside a name, non-ASCII, characters git
/// quotes (tab, quote, backslash), leading dash, deep directories.
const PATHS: &[&str] = &[
    "src/app.py", "tests/test_app.py", "a b.txt", "x b/y.py", "b/a.py", "dir/caf\u{e9}.py",
    "tab\tname.py", "q\"uote.py", "back\\slash.py", "-dash.py", "d/e/f/g.rs", "README",
    "sp ace/n m.py", "a/b", "\u{1f600}.txt",
];

/// One line of a hunk body: kept, removed or added.
#[derive(Clone, Debug)]
enum Op {
    Keep(String),
    Del(String),
    Add(String),
}

/// A file change as the generator means it: the pre-image and post-image follow from `ops`.
#[derive(Clone, Debug)]
struct GenFile {
    op: FileOp,
    old: String,
    new: String,
    mode: (u32, u32),
    ops: Vec<Op>,
    /// The last old / new line has no newline.
    no_eol: (bool, bool),
    binary: bool,
    index: bool,
}

impl GenFile {
    fn image(&self, old: bool) -> Option<String> {
        match (self.op, old) {
            (FileOp::Create, true) | (FileOp::Delete, false) => return None,
            _ => {}
        }
        let lines: Vec<&str> = self
            .ops
            .iter()
            .filter_map(|o| match (o, old) {
                (Op::Keep(l), _) | (Op::Del(l), true) | (Op::Add(l), false) => Some(l.as_str()),
                _ => None,
            })
            .collect();
        let eol = if old { !self.no_eol.0 } else { !self.no_eol.1 };
        let mut s = lines.join("\n");
        if !lines.is_empty() && eol {
            s.push('\n');
        }
        Some(s)
    }
}

/// A generated patch: its files, how to render it, and the corruptions applied to its text.
#[derive(Clone, Debug)]
struct GenPatch {
    files: Vec<GenFile>,
    quote_all: bool,
    preamble: bool,
    plain: bool,
    corruptions: Vec<(u8, prop::sample::Index, u8)>,
}

fn content_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z =()]{0,12}",
        1 => Just(String::new()),
        1 => "[a-z]{1,4}\r",
        1 => prop::sample::select(vec!["+x", "-x", " x", "\\ x", "@@ -1 +1 @@", "diff --git a/a b/a", "--- a/x", "+++ b/x", "\u{e9}\u{2028}"]).prop_map(str::to_string),
    ]
}

fn gen_file() -> impl Strategy<Value = GenFile> {
    let op = prop::sample::select(vec![
        FileOp::Modify, FileOp::Modify, FileOp::Create, FileOp::Delete, FileOp::Rename, FileOp::Copy,
    ]);
    let line_op = (0u8..3, content_line());
    (
        op,
        (0usize..PATHS.len(), 0usize..PATHS.len()),
        prop::collection::vec(line_op, 0..8),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        (any::<bool>(), any::<bool>()),
        prop::sample::select(vec![0o100644u32, 0o100755]),
    )
        .prop_map(|(op, (a, b), raw, (mode_change, no_eol_old, no_eol_new), (binary, index), mode)| {
            let (old, new) = match op {
                FileOp::Rename | FileOp::Copy if a == b => (PATHS[a], PATHS[(b + 1) % PATHS.len()]),
                FileOp::Rename | FileOp::Copy => (PATHS[a], PATHS[b]),
                _ => (PATHS[a], PATHS[a]),
            };
            let ops: Vec<Op> = raw
                .into_iter()
                .map(|(k, l)| match (op, k) {
                    (FileOp::Create, _) => Op::Add(l),
                    (FileOp::Delete, _) => Op::Del(l),
                    (_, 0) => Op::Keep(l),
                    (_, 1) => Op::Del(l),
                    _ => Op::Add(l),
                })
                .collect();
            let mut f = GenFile {
                op,
                old: old.into(),
                new: new.into(),
                mode: if mode_change && matches!(op, FileOp::Modify | FileOp::Rename) {
                    (mode, mode ^ 0o111)
                } else {
                    (mode, mode)
                },
                ops,
                no_eol: (no_eol_old, no_eol_new),
                binary: binary && op == FileOp::Modify,
                index,
            };
            f.normalise_eol();
            f
        })
}

impl GenFile {
    /// Make the end-of-file flags describable: a last line shared by both sides but ending
    /// differently becomes a removal plus an addition.
    /// A last line that is empty and has no newline is no line at all: such a flag is dropped.
    fn normalise_eol(&mut self) {
        let last_old = self.ops.iter().rposition(|o| !matches!(o, Op::Add(_)));
        let last_new = self.ops.iter().rposition(|o| !matches!(o, Op::Del(_)));
        let empty = |i: Option<usize>| i.is_none_or(|i| matches!(&self.ops[i], Op::Keep(l) | Op::Del(l) | Op::Add(l) if l.is_empty()));
        self.no_eol.0 &= !empty(last_old);
        self.no_eol.1 &= !empty(last_new);
        if let (Some(i), Some(j)) = (last_old, last_new) {
            if i == j && self.no_eol.0 != self.no_eol.1 {
                let Op::Keep(l) = self.ops[i].clone() else { unreachable!() };
                self.ops.splice(i..=i, [Op::Del(l.clone()), Op::Add(l)]);
            }
        }
    }

    /// The hunk text (header and body) of the whole-file change, or `None` without changes.
    fn hunk(&self) -> Option<String> {
        let last_old = self.ops.iter().rposition(|o| !matches!(o, Op::Add(_)));
        let last_new = self.ops.iter().rposition(|o| !matches!(o, Op::Del(_)));
        let n_old = self.ops.iter().filter(|o| !matches!(o, Op::Add(_))).count();
        let n_new = self.ops.iter().filter(|o| !matches!(o, Op::Del(_))).count();
        if self.ops.iter().all(|o| matches!(o, Op::Keep(_))) {
            return None;
        }
        let range = |n: usize| match n {
            0 => "0,0".to_string(),
            1 => "1".to_string(),
            n => format!("1,{n}"),
        };
        let mut s = format!("@@ -{} +{} @@\n", range(n_old), range(n_new));
        for (i, o) in self.ops.iter().enumerate() {
            let (sign, l) = match o {
                Op::Keep(l) => (' ', l),
                Op::Del(l) => ('-', l),
                Op::Add(l) => ('+', l),
            };
            s.push(sign);
            s.push_str(l);
            s.push('\n');
            let ends_old = Some(i) == last_old && self.no_eol.0;
            let ends_new = Some(i) == last_new && self.no_eol.1;
            if ends_old || ends_new {
                s.push_str("\\ No newline at end of file\n");
            }
        }
        Some(s)
    }
}

/// git's quoting of a header path: C-style quotes around names with control characters,
/// quotes, backslashes or non-ASCII; `quote_all` also quotes names git would leave bare.
fn git_path(prefix: &str, p: &str, quote_all: bool) -> String {
    let full = format!("{prefix}{p}");
    let needs = full.bytes().any(|b| b < 0x20 || b >= 0x7f || b == b'"' || b == b'\\');
    if !needs && !quote_all {
        return full;
    }
    let mut s = String::from("\"");
    for b in full.bytes() {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\{b:03o}")),
        }
    }
    s.push('"');
    s
}

impl GenPatch {
    fn render(&self) -> String {
        let mut s = String::new();
        if self.preamble {
            s.push_str("From 1234 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] fix\n\n---\n x | 2 +-\n\n");
        }
        for f in &self.files {
            let q = |pre: &str, p: &str| git_path(pre, p, self.quote_all);
            let hunk = f.hunk();
            let (old_side, new_side) = match f.op {
                FileOp::Create => ("/dev/null".to_string(), q("b/", &f.new)),
                FileOp::Delete => (q("a/", &f.old), "/dev/null".to_string()),
                _ => (q("a/", &f.old), q("b/", &f.new)),
            };
            if self.plain {
                if let Some(h) = &hunk {
                    s.push_str(&format!("--- {old_side}\n+++ {new_side}\n{h}"));
                }
                continue;
            }
            s.push_str(&format!("diff --git {} {}\n", q("a/", &f.old), q("b/", &f.new)));
            match f.op {
                FileOp::Create => s.push_str(&format!("new file mode {:06o}\n", f.mode.1)),
                FileOp::Delete => s.push_str(&format!("deleted file mode {:06o}\n", f.mode.0)),
                _ if f.mode.0 != f.mode.1 => s.push_str(&format!(
                    "old mode {:06o}\nnew mode {:06o}\n",
                    f.mode.0, f.mode.1
                )),
                _ => {}
            }
            if let FileOp::Rename | FileOp::Copy = f.op {
                let verb = if f.op == FileOp::Rename { "rename" } else { "copy" };
                s.push_str(&format!(
                    "similarity index 80%\n{verb} from {}\n{verb} to {}\n",
                    q("", &f.old),
                    q("", &f.new)
                ));
            }
            if f.index {
                s.push_str("index 1234567..89abcde");
                if f.mode.0 == f.mode.1 && matches!(f.op, FileOp::Modify | FileOp::Rename | FileOp::Copy) {
                    s.push_str(&format!(" {:06o}", f.mode.0));
                }
                s.push('\n');
            }
            if f.binary {
                s.push_str(&format!("Binary files {} and {} differ\n", q("a/", &f.old), q("b/", &f.new)));
            } else if let Some(h) = &hunk {
                s.push_str(&format!("--- {old_side}\n+++ {new_side}\n{h}"));
            }
        }
        self.corrupt(s)
    }

    /// Apply the corruptions to the rendered text, line by line.
    fn corrupt(&self, text: String) -> String {
        let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
        for (kind, at, arg) in &self.corruptions {
            if lines.is_empty() {
                break;
            }
            let i = at.index(lines.len());
            match kind {
                0 => {
                    lines.remove(i);
                }
                1 => {
                    let l = lines[i].clone();
                    lines.insert(i, l);
                }
                // A hunk header's count off by `arg`.
                2 => {
                    let l = &lines[i];
                    let digit = l.char_indices().filter(|c| c.1.is_ascii_digit()).nth(*arg as usize % 4);
                    if let Some((j, d)) = digit {
                        let n = (d as u8 - b'0' + 1 + arg % 3) % 10;
                        lines[i] = format!("{}{}{}", &l[..j], n, &l[j + 1..]);
                    }
                }
                3 => lines.truncate(i),
                4 => lines[i] = lines[i].replace('\n', "\r\n"),
                5 => {
                    let l = &lines[i];
                    let cut = (*arg as usize).min(l.len());
                    let cut = (0..=cut).rev().find(|&c| l.is_char_boundary(c)).unwrap_or(0);
                    lines[i] = l[..cut].to_string();
                }
                _ => {
                    let junk = ["garbage\n", "\n", "+\n", "-\n", " \n", "\\\n", "@@ -1 +1 @@\n"];
                    lines.insert(i, junk[*arg as usize % junk.len()].to_string());
                }
            }
        }
        lines.concat()
    }
}

fn gen_patch(max_corruptions: usize) -> impl Strategy<Value = GenPatch> {
    (
        prop::collection::vec(gen_file(), 1..4),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::collection::vec((0u8..7, any::<prop::sample::Index>(), any::<u8>()), 0..=max_corruptions),
    )
        .prop_map(|(mut files, quote_all, preamble, plain, corruptions)| {
            // Two sections on one path are a different patch (git applies them in sequence).
            let mut seen = std::collections::BTreeSet::new();
            files.retain(|f| {
                let fresh = !seen.contains(&f.old) && !seen.contains(&f.new);
                seen.extend([f.old.clone(), f.new.clone()]);
                fresh
            });
            GenPatch { files, quote_all, preamble, plain, corruptions }
        })
        .prop_filter("at least one file", |g| !g.files.is_empty())
}

#[test]
fn diff_structured() {
    fuzz("diff_structured", 3_000, gen_patch(3), |g| {
        if let Ok(p) = Patch::parse(&g.render()) {
            round_trip(&p)?;
        }
        Ok(())
    });
}

/// One file as `git apply --numstat -z` reports it: added and removed lines (`None` for a binary
/// change) and the path the change leaves (the old one for a deletion).
type NumStat = (Option<(usize, usize)>, String);

fn git(args: &[&str], dir: &Path, stdin: &str) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// git's reading of a patch (`git apply --numstat -z`), without applying it.
fn git_numstat(text: &str, dir: &Path) -> Result<Vec<NumStat>, String> {
    let out = git(&["apply", "--numstat", "-z", "-"], dir, text)?;
    Ok(out
        .split_terminator('\0')
        .map(|record| {
            let mut parts = record.splitn(3, '\t');
            let (a, d) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            (a.parse().ok().zip(d.parse().ok()), parts.next().unwrap_or("").to_string())
        })
        .collect())
}

/// The parser's reading in the same shape.
fn parser_numstat(p: &Patch) -> Vec<NumStat> {
    p.files
        .iter()
        .map(|f: &FileChange| {
            let counts = (!f.binary).then(|| (f.added_lines().count(), f.removed_lines().count()));
            (counts, f.new_path.clone().or(f.old_path.clone()).unwrap_or_default())
        })
        .collect()
}

/// The regular files under `dir` (outside `.git`), path → content.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e.path().strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn write_tree(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    for (p, c) in files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
}

#[test]
fn diff_git_differential() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    // How many inputs reached git at all, and how many were applied to a pre-image.
    let (accepted, applied) = (AtomicU64::new(0), AtomicU64::new(0));
    fuzz("diff_git_differential", 150, gen_patch(2), |g| {
        let text = g.render();
        let Ok(p) = Patch::parse(&text) else { return Ok(()) };
        accepted.fetch_add(1, Relaxed);
        let canonical = round_trip(&p)?;
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let ours = parser_numstat(&p);
        let theirs = git_numstat(&canonical, dir)
            .map_err(|e| TestCaseError::fail(format!("git refuses the re-serialisation: {e}\n{canonical}")))?;
        prop_assert_eq!(&theirs, &ours, "git reads the re-serialisation differently:\n{}", canonical);
        // The one intended difference: a patch may lack its final newline (a tool call's
        // parameter value loses it); git refuses that, so it reads the text with it restored.
        let restored = if text.ends_with('\n') { text.clone() } else { format!("{text}\n") };
        match git_numstat(&restored, dir) {
            Ok(original) => prop_assert_eq!(&original, &ours, "git reads the original differently:\n{}", text),
            Err(e) => prop_assert!(false, "parser accepts what git refuses ({}):\n{}", e, text),
        }
        // A plain diff has no section for a file without hunks; binary changes carry no content.
        let unrendered = |f: &GenFile| f.binary || (g.plain && f.hunk().is_none());
        if !g.corruptions.is_empty() || g.files.iter().any(unrendered) {
            return Ok(());
        }
        // Uncorrupted: applying the re-serialisation to the pre-image gives the post-image.
        let mut before = BTreeMap::new();
        let mut after = BTreeMap::new();
        for f in &g.files {
            if let Some(c) = f.image(true) {
                before.insert(f.old.clone(), c.into_bytes());
            }
        }
        after.clone_from(&before);
        for f in &g.files {
            if f.op == FileOp::Rename || f.op == FileOp::Delete {
                after.remove(&f.old);
            }
            if let Some(c) = f.image(false) {
                after.insert(f.new.clone(), c.into_bytes());
            }
        }
        git(&["init", "-q"], dir, "").unwrap();
        write_tree(dir, &before);
        git(&["apply", "-"], dir, &canonical)
            .map_err(|e| TestCaseError::fail(format!("git apply refuses the re-serialisation: {e}\n{canonical}")))?;
        prop_assert_eq!(tree(dir), after, "post-image differs:\n{}", canonical);
        applied.fetch_add(1, Relaxed);
        Ok(())
    });
    eprintln!(
        "fuzz diff_git_differential: {} accepted and compared with git, {} applied to their pre-image",
        accepted.into_inner(),
        applied.into_inner()
    );
}
