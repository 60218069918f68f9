//! The one patch parser. Every patch the harness applies (a Test bundle's test patch, a
//! candidate, a model patch, an official test patch) is parsed here ONCE into typed file
//! operations (modify, create, delete, rename, copy, mode change, symlink, binary), every path
//! it can touch is checked from that structure, and what is applied is the re-serialisation of
//! exactly that structure ([`Patch::to_git`]), never the original text. Anything the parser does
//! not understand is an error, not a fallback: context diffs, ed scripts, hunks whose bodies do
//! not match their headers, headers that disagree about a file's path, unknown extended header
//! lines inside a git section. Text outside file sections (a mail header, a commit message) is
//! dropped, as `git apply` drops it.
//!
//! Plain (non-git) unified diffs are read with `-p1` semantics (the first path component is
//! stripped, as `git apply` and `patch -p1` do) and may not rename. Quoted git paths
//! (`"a/caf\303\251.py"`) are unquoted.

use regex::Regex;
use std::fmt::Write as _;
use std::sync::OnceLock;

/// What a file section does.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOp {
    #[default]
    Modify,
    Create,
    Delete,
    Rename,
    Copy,
}

/// One hunk: its `@@` header line and its body lines (each starting with ` `, `+`, `-` or `\`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hunk {
    pub header: String,
    pub lines: Vec<String>,
}

impl Hunk {
    /// The first old-file line the hunk covers (`@@ -START,…`), 1-based; `None` if unreadable.
    pub fn old_start(&self) -> Option<usize> {
        self.header
            .split_whitespace()
            .find(|w| w.starts_with('-'))
            .and_then(|w| w[1..].split(',').next())
            .and_then(|n| n.parse().ok())
    }
}

/// One file section of a patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileChange {
    /// Path before the change (`None` for a new file).
    pub old_path: Option<String>,
    /// Path after the change (`None` for a deleted file).
    pub new_path: Option<String>,
    pub op: FileOp,
    /// `old mode` / `deleted file mode` (octal, e.g. `0o100644`).
    pub old_mode: Option<u32>,
    /// `new mode` / `new file mode` / the mode of an `index` line.
    pub new_mode: Option<u32>,
    /// Deleted (`op == Delete`).
    pub deleted: bool,
    /// Renamed or copied (`op` is `Rename` or `Copy`).
    pub renamed: bool,
    /// Either side is a symbolic link (mode 120000).
    pub symlink: bool,
    /// A binary change (`GIT binary patch` or `Binary files … differ`).
    pub binary: bool,
    /// Names of `def test_*` / `async def test_*` functions added by this section.
    pub added_tests: Vec<String>,
    /// The `index <old>..<new>[ mode]` line, when present (needed by `--3way` and binary).
    pub index: Option<String>,
    pub hunks: Vec<Hunk>,
    /// The body of a `GIT binary patch` (base85 lines), kept verbatim.
    pub binary_body: Vec<String>,
}

impl FileChange {
    /// Every path this section touches.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        let same = self.old_path == self.new_path;
        self.old_path
            .iter()
            .chain(self.new_path.iter().filter(move |_| !same))
            .map(|s| s.as_str())
    }

    /// The content lines this section adds (without the leading `+`).
    pub fn added_lines(&self) -> impl Iterator<Item = &str> {
        self.body_lines('+')
    }

    /// The content lines this section removes (without the leading `-`).
    pub fn removed_lines(&self) -> impl Iterator<Item = &str> {
        self.body_lines('-')
    }

    fn body_lines(&self, sign: char) -> impl Iterator<Item = &str> {
        self.hunks
            .iter()
            .flat_map(|h| h.lines.iter())
            .filter_map(move |l| l.strip_prefix(sign))
    }

    /// Whether the section brings a file into existence at `new_path` (create, rename, copy).
    pub fn creates(&self) -> bool {
        matches!(self.op, FileOp::Create | FileOp::Rename | FileOp::Copy)
    }

    /// Every mode the section mentions.
    pub fn modes(&self) -> impl Iterator<Item = u32> + '_ {
        self.old_mode.into_iter().chain(self.new_mode)
    }
}

/// Why a patch could not be parsed. Each variant has a stable class name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("no file headers (`diff --git` or `---`/`+++`) found")]
    NoFileHeaders,
    #[error("unsupported patch format ({0}); send a unified diff (`git diff` output)")]
    UnsupportedFormat(String),
    #[error("{0}")]
    Malformed(String),
    #[error("patch of {bytes} bytes is over the parser's limit of {limit}")]
    TooLarge { bytes: usize, limit: usize },
}

/// The largest patch [`Patch::parse`] reads (64 MiB; callers cap tighter, e.g. a bundle's
/// `test.patch` at 4 MiB). Parsing is one pass over the lines, each hunk consuming the lines its
/// header counts, so time and memory are linear in the text up to this bound.
pub const MAX_PATCH_BYTES: usize = 64 << 20;

impl PatchError {
    /// Stable class name of the error.
    pub fn class(&self) -> &'static str {
        match self {
            PatchError::NoFileHeaders => "no_file_headers",
            PatchError::UnsupportedFormat(_) => "unsupported_patch_format",
            PatchError::Malformed(_) => "malformed_patch",
            PatchError::TooLarge { .. } => "patch_too_large",
        }
    }
}

fn malformed(m: impl Into<String>) -> PatchError {
    PatchError::Malformed(m.into())
}

/// A parsed patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patch {
    pub files: Vec<FileChange>,
}

/// Parse the file sections of a patch (git or plain unified diff). See the module doc.
pub fn parse_patch(patch: &str) -> Result<Vec<FileChange>, PatchError> {
    Patch::parse(patch).map(|p| p.files)
}

/// Parse `patch` and re-serialise it (what the harness applies).
pub fn canonical(patch: &str) -> Result<String, PatchError> {
    Patch::parse(patch).map(|p| p.to_git())
}

/// Why a path is unsafe to touch in any patch (the path classes of every rejection).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PathProblem {
    /// Starts with `/`.
    Absolute,
    /// Has a `..` component.
    Traversal,
    /// Has a `.git` component (any case).
    GitDir,
    /// Empty, `.` or empty components, control characters, backslashes.
    NotPlain,
}

/// What is wrong with a repository path, if anything.
pub fn path_problem(p: &str) -> Option<PathProblem> {
    if p.starts_with('/') {
        return Some(PathProblem::Absolute);
    }
    let comps: Vec<&str> = p.split('/').collect();
    if comps.contains(&"..") {
        return Some(PathProblem::Traversal);
    }
    if comps.iter().any(|c| {
        let c = c.trim_end_matches(['.', ' ']);
        c.eq_ignore_ascii_case(".git")
    }) {
        return Some(PathProblem::GitDir);
    }
    if p.is_empty()
        || comps.iter().any(|c| c.is_empty() || *c == ".")
        || p.chars().any(|c| c.is_control() || c == '\\')
    {
        return Some(PathProblem::NotPlain);
    }
    None
}

/// Unquote a git C-style quoted path (`"a/x\ty"`), or return the raw token.
fn unquote(raw: &str) -> Result<String, PatchError> {
    let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return Ok(raw.to_string());
    };
    let mut bytes = Vec::new();
    let mut it = inner.bytes().peekable();
    while let Some(b) = it.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        let e = it
            .next()
            .ok_or_else(|| malformed(format!("bad quoted path {raw}")))?;
        bytes.push(match e {
            b'a' => 7,
            b'b' => 8,
            b't' => b'\t',
            b'n' => b'\n',
            b'v' => 11,
            b'f' => 12,
            b'r' => b'\r',
            b'"' | b'\\' => e,
            b'0'..=b'3' => {
                let mut v = (e - b'0') as u32;
                for _ in 0..2 {
                    match it.next() {
                        Some(d @ b'0'..=b'7') => v = v * 8 + (d - b'0') as u32,
                        _ => return Err(malformed(format!("bad octal escape in {raw}"))),
                    }
                }
                v as u8
            }
            _ => return Err(malformed(format!("bad escape in quoted path {raw}"))),
        });
    }
    String::from_utf8(bytes).map_err(|_| malformed(format!("quoted path {raw} is not UTF-8")))
}

/// Quote a path for a git header when it has any character outside a conservative set.
fn quote(p: &str) -> String {
    if p.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/+@,=~".contains(c))
    {
        return p.to_string();
    }
    let mut s = String::from("\"");
    for b in p.bytes() {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\{b:03o}");
            }
        }
    }
    s.push('"');
    s
}

/// A `---`/`+++`/`Binary files` side: the prefixed, quoted path, or `/dev/null`.
fn side_path(p: &Option<String>, prefix: &str) -> String {
    match p {
        Some(p) => quote(&format!("{prefix}{p}")),
        None => "/dev/null".to_string(),
    }
}

/// Split the first (possibly quoted) token of `s`; returns (token, rest).
fn take_token(s: &str) -> Result<(String, &str), PatchError> {
    if s.starts_with('"') {
        let mut escaped = false;
        for (i, c) in s.char_indices().skip(1) {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                return Ok((unquote(&s[..=i])?, &s[i + 1..]));
            }
        }
        return Err(malformed(format!("unterminated quoted path: {s}")));
    }
    Ok(match s.find(' ') {
        Some(i) => (s[..i].to_string(), &s[i..]),
        None => (s.to_string(), ""),
    })
}

/// The paths of a `diff --git` line (prefixes `a/`, `b/` removed). For unquoted names with
/// spaces, the split where both halves name the same file is taken (git's own rule); a
/// rename's names come from its `rename from/to` lines.
fn git_header_paths(rest: &str) -> Result<(Option<String>, Option<String>), PatchError> {
    let strip = |t: &str, pre: &str| t.strip_prefix(pre).map(str::to_string);
    if rest.starts_with('"') || rest.ends_with('"') {
        let (a, tail) = if rest.starts_with('"') {
            take_token(rest)?
        } else {
            let i = rest
                .find(" \"")
                .ok_or_else(|| malformed(format!("bad diff header: {rest}")))?;
            (rest[..i].to_string(), &rest[i..])
        };
        let b = unquote(tail.trim_start())?;
        return Ok((strip(&a, "a/"), strip(&b, "b/")));
    }
    if rest.starts_with("a/") && rest.len() >= 5 && (rest.len() - 5) % 2 == 0 {
        let n = (rest.len() - 5) / 2;
        if rest.is_char_boundary(2 + n) && rest.is_char_boundary(5 + n) {
            let (a, b) = (&rest[2..2 + n], &rest[5 + n..]);
            if &rest[2 + n..5 + n] == " b/" && a == b {
                return Ok((Some(a.to_string()), Some(b.to_string())));
            }
        }
    }
    match rest.find(" b/") {
        Some(i) if rest.starts_with("a/") => {
            Ok((strip(&rest[..i], "a/"), strip(&rest[i + 1..], "b/")))
        }
        _ => Err(malformed(format!(
            "unparseable diff header: diff --git {rest}"
        ))),
    }
}

/// A `---`/`+++` path: `None` for `/dev/null`; timestamps after a tab are dropped.
fn marker_path(raw: &str, git: bool, prefix: &str) -> Result<Option<String>, PatchError> {
    let raw = raw.trim_end_matches('\r');
    let tok = if raw.starts_with('"') {
        take_token(raw)?.0
    } else {
        raw.split('\t').next().unwrap_or(raw).trim_end().to_string()
    };
    if tok == "/dev/null" {
        return Ok(None);
    }
    if git {
        return tok
            .strip_prefix(prefix)
            .map(|p| Some(p.to_string()))
            .ok_or_else(|| {
                malformed(format!("`{tok}` lacks the `{prefix}` prefix of a git diff"))
            });
    }
    // An absolute path stays absolute (and is refused by every path check); otherwise -p1
    // strips the first component.
    if tok.starts_with('/') {
        return Ok(Some(tok));
    }
    match tok.split_once('/') {
        Some((_, p)) => Ok(Some(p.to_string())),
        None => Err(malformed(format!(
            "`{tok}` has no leading directory to strip (-p1); send `git diff` output"
        ))),
    }
}

fn parse_mode(s: &str) -> Result<u32, PatchError> {
    let s = s.trim();
    if s.len() != 6 {
        return Err(malformed(format!("bad file mode `{s}`")));
    }
    u32::from_str_radix(s, 8).map_err(|_| malformed(format!("bad file mode `{s}`")))
}

/// The mode of an `index <old>..<new> <mode>` value, if it has one.
fn index_mode(index: &str) -> Option<u32> {
    let (_, m) = index.split_once(' ')?;
    u32::from_str_radix(m, 8).ok()
}

/// Check a section's modes against its operation and complete them from its `index` line, so
/// that every accepted combination is one [`Patch::to_git`] writes back: a new file has no old
/// mode, a deleted file no new mode, `old mode` and `new mode` come in pairs, and an `index`
/// mode names the unchanged mode of a modified, renamed or copied file (or the mode of a created
/// or deleted one).
fn settle_modes(f: &mut FileChange) -> Result<(), PatchError> {
    let ix = f.index.as_deref().and_then(index_mode);
    let (mode, other) = match f.op {
        FileOp::Create => (f.new_mode, f.old_mode),
        FileOp::Delete => (f.old_mode, f.new_mode),
        _ => {
            match (f.old_mode, f.new_mode, ix) {
                (None, None, Some(m)) => (f.old_mode, f.new_mode) = (Some(m), Some(m)),
                (Some(o), Some(n), Some(m)) if o != n || o != m => {
                    return Err(malformed("`index` mode contradicts `old mode`/`new mode`"))
                }
                (Some(_), None, _) | (None, Some(_), _) => {
                    return Err(malformed("`old mode` and `new mode` must come together"))
                }
                _ => {}
            }
            return Ok(());
        }
    };
    if other.is_some() {
        return Err(malformed("a created or deleted file has only one mode"));
    }
    if ix.is_some() && ix != mode {
        return Err(malformed("`index` mode contradicts the file's mode"));
    }
    Ok(())
}

fn hunk_counts(header: &str) -> Result<(usize, usize), PatchError> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@").expect("valid regex")
    });
    let c = re
        .captures(header)
        .ok_or_else(|| malformed(format!("bad hunk header `{header}`")))?;
    let n = |i: usize| -> Result<usize, PatchError> {
        c.get(i).map_or(Ok(1), |m| {
            m.as_str()
                .parse()
                .map_err(|_| malformed("hunk count overflows"))
        })
    };
    Ok((n(2)?, n(4)?))
}

/// The line that opens a `GIT binary patch` body, exactly as git matches it.
fn is_git_binary(line: &str) -> bool {
    line == "GIT binary patch"
}

/// Whether git reads a line that directly follows a section's header lines as a binary change
/// (`Binary files a/x and b/x differ`): git 2.x reads one that starts with `Binary files ` or
/// `Files `, older git one that ends in ` differ` (no `\r`). `Some(true)` where both agree it is,
/// `Some(false)` where both agree it is not, `None` where they disagree.
fn binary_differ(line: &str) -> Option<bool> {
    let prefix = line.starts_with("Binary files ") || line.starts_with("Files ");
    match (prefix, line.ends_with(" differ")) {
        (true, true) => Some(true),
        (false, false) => Some(false),
        _ => None,
    }
}

fn is_binary_differ(line: &str) -> bool {
    binary_differ(line) == Some(true)
}

/// A created file's hunks may only add lines and a deleted file's only remove them (git: "deleted
/// file still has contents", "new file depends on old contents").
fn check_side_lines(f: &FileChange) -> Result<(), PatchError> {
    let forbidden: &[char] = match f.op {
        FileOp::Create => &['-', ' '],
        FileOp::Delete => &['+', ' '],
        _ => return Ok(()),
    };
    let mut body = f.hunks.iter().flat_map(|h| h.lines.iter());
    match body.find(|l| l.starts_with(forbidden)) {
        Some(l) => Err(malformed(format!(
            "a {} file's hunk has the line `{l}`",
            if f.op == FileOp::Create { "created" } else { "deleted" }
        ))),
        None => Ok(()),
    }
}

fn is_section_start(lines: &[&str], i: usize) -> bool {
    let l = lines[i];
    l.starts_with("diff --git ")
        || (l.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ ")))
}

impl Patch {
    /// Parse a patch; see the module doc. Bounded: over [`MAX_PATCH_BYTES`] it is
    /// [`PatchError::TooLarge`], below it time and memory are linear in the text.
    pub fn parse(text: &str) -> Result<Patch, PatchError> {
        if text.len() > MAX_PATCH_BYTES {
            return Err(PatchError::TooLarge {
                bytes: text.len(),
                limit: MAX_PATCH_BYTES,
            });
        }
        static DEF_RE: OnceLock<Regex> = OnceLock::new();
        let def_re = DEF_RE.get_or_init(|| {
            Regex::new(r"^\+\s*(?:async\s+)?def\s+(test\w*)\s*\(").expect("valid regex")
        });
        let mut lines: Vec<&str> = text.split('\n').collect();
        // The element after the text's last newline is no line.
        if text.ends_with('\n') {
            lines.pop();
        }
        let mut files = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let l = lines[i].trim_end_matches('\r');
            if let Some(rest) = l.strip_prefix("diff --git ") {
                let (f, next) = Self::git_section(&lines, i, rest)?;
                files.push(f);
                i = next;
            } else if is_section_start(&lines, i) {
                let old = marker_path(&l[4..], false, "")?;
                let new = marker_path(&lines[i + 1][4..], false, "")?;
                let op = match (&old, &new) {
                    (None, None) => return Err(malformed("both sides are /dev/null")),
                    (None, Some(_)) => FileOp::Create,
                    (Some(_), None) => FileOp::Delete,
                    (Some(a), Some(b)) if a == b => FileOp::Modify,
                    (Some(a), Some(b)) => {
                        return Err(malformed(format!(
                        "plain diff names two files (`{a}`, `{b}`); renames need `git diff` output"
                    )))
                    }
                };
                // The mode `git apply` gives a file a plain diff creates (and that
                // [`Patch::to_git`] writes for it).
                let mode = |side: FileOp| (op == side).then_some(0o100644);
                let mut f = FileChange {
                    old_path: old,
                    new_path: new,
                    op,
                    old_mode: mode(FileOp::Delete),
                    new_mode: mode(FileOp::Create),
                    ..Default::default()
                };
                i = Self::hunks(&lines, i + 2, &mut f)?;
                if f.hunks.is_empty() {
                    return Err(malformed("a plain diff section without hunks"));
                }
                check_side_lines(&f)?;
                files.push(f);
            } else if l == "***************"
                || (l.starts_with("*** ")
                    && lines.get(i + 1).is_some_and(|n| n.starts_with("--- ")))
            {
                return Err(PatchError::UnsupportedFormat("context diff".into()));
            } else if l.starts_with("GIT binary patch") || l.starts_with("Binary files ") {
                return Err(PatchError::UnsupportedFormat(
                    "binary change outside a git section".into(),
                ));
            } else if l.starts_with("@@ ") {
                return Err(malformed(format!("hunk outside a file section: {l}")));
            } else {
                i += 1;
            }
        }
        if files.is_empty() {
            return Err(PatchError::NoFileHeaders);
        }
        for f in &mut files {
            f.deleted = f.op == FileOp::Delete;
            f.renamed = matches!(f.op, FileOp::Rename | FileOp::Copy);
            let symlink = f.modes().any(|m| m == 0o120000);
            f.symlink = symlink;
            f.added_tests = f
                .hunks
                .iter()
                .flat_map(|h| h.lines.iter())
                .filter_map(|l| def_re.captures(l).map(|c| c[1].to_string()))
                .collect();
        }
        Ok(Patch { files })
    }

    /// One `diff --git` section starting at `lines[start]`; returns it and the next index.
    fn git_section(
        lines: &[&str],
        start: usize,
        rest: &str,
    ) -> Result<(FileChange, usize), PatchError> {
        let (mut old, mut new) = git_header_paths(rest)?;
        let mut f = FileChange::default();
        let (mut from, mut to): (Option<String>, Option<String>) = (None, None);
        // The extension lines seen, as git's `check_header_line` counts them: a section may be
        // at most one of created, deleted, renamed, copied ("inconsistent header lines"), with
        // whatever spelling and order the lines come in.
        let mut extensions: Vec<FileOp> = Vec::new();
        let mut extension = |op: FileOp, l: &str| {
            if !extensions.contains(&op) {
                extensions.push(op);
            }
            if extensions.len() > 1 {
                return Err(malformed(format!("inconsistent header lines: `{l}` in a {:?} section", extensions[0])));
            }
            Ok(())
        };
        let mut i = start + 1;
        while i < lines.len() {
            let l = lines[i].trim_end_matches('\r');
            let val = |p: &str| l.strip_prefix(p);
            if let Some(m) = val("old mode ") {
                f.old_mode = Some(parse_mode(m)?);
            } else if let Some(m) = val("new mode ") {
                f.new_mode = Some(parse_mode(m)?);
            } else if let Some(m) = val("deleted file mode ") {
                extension(FileOp::Delete, l)?;
                f.op = FileOp::Delete;
                f.old_mode = Some(parse_mode(m)?);
            } else if let Some(m) = val("new file mode ") {
                extension(FileOp::Create, l)?;
                f.op = FileOp::Create;
                f.new_mode = Some(parse_mode(m)?);
            } else if let Some(p) = val("rename from ").or_else(|| val("copy from ")) {
                let verb = if l.starts_with("rename") { FileOp::Rename } else { FileOp::Copy };
                extension(verb, l)?;
                // git refuses a repeated `from` too.
                if from.is_some() {
                    return Err(malformed(format!("repeated `{l}`")));
                }
                f.op = verb;
                from = Some(unquote(p)?);
            } else if let Some(p) = val("rename to ").or_else(|| val("copy to ")) {
                let verb = if l.starts_with("rename") { FileOp::Rename } else { FileOp::Copy };
                extension(verb, l)?;
                if to.is_some() {
                    return Err(malformed(format!("repeated `{l}`")));
                }
                f.op = verb;
                to = Some(unquote(p)?);
            } else if val("similarity index ").is_some() || val("dissimilarity index ").is_some() {
            } else if let Some(ix) = val("index ") {
                static RE: OnceLock<Regex> = OnceLock::new();
                let re = RE.get_or_init(|| {
                    Regex::new(r"^[0-9a-f]{4,64}\.\.[0-9a-f]{4,64}(?: ([0-7]{6}))?$")
                        .expect("valid regex")
                });
                if !re.is_match(ix) {
                    return Err(malformed(format!("bad index line `{l}`")));
                }
                f.index = Some(ix.to_string());
            } else {
                break;
            }
            i += 1;
        }
        settle_modes(&mut f)?;
        match f.op {
            FileOp::Rename | FileOp::Copy => {
                let (Some(a), Some(b)) = (from, to) else {
                    return Err(malformed("rename/copy without both `from` and `to`"));
                };
                (old, new) = (Some(a), Some(b));
            }
            // git names a created or deleted file by the `diff --git` line alone when it has no
            // `---`/`+++` lines: only if both halves agree.
            FileOp::Create | FileOp::Delete if old != new => {
                return Err(malformed(format!(
                    "diff header names two files for a created or deleted file: diff --git {rest}"
                )))
            }
            FileOp::Create => old = None,
            FileOp::Delete => new = None,
            FileOp::Modify => {
                if old != new {
                    return Err(malformed(format!(
                        "diff header names two files without a rename: diff --git {rest}"
                    )));
                }
            }
        }
        let raw = lines.get(i).copied().unwrap_or("");
        let l = raw.trim_end_matches('\r');
        if l.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ ")) {
            let m_old = marker_path(&l[4..], true, "a/")?;
            let m_new = marker_path(&lines[i + 1][4..], true, "b/")?;
            if m_old != old || m_new != new {
                return Err(malformed(format!(
                    "`---`/`+++` names ({m_old:?}, {m_new:?}) disagree with the section's ({old:?}, {new:?})"
                )));
            }
            i = Self::hunks(lines, i + 2, &mut f)?;
            if f.hunks.is_empty() {
                return Err(malformed("`---`/`+++` without hunks"));
            }
        } else if l.starts_with("--- ") || l.starts_with("+++ ") {
            // git reads every `---`/`+++` line here as the section's own header line.
            return Err(malformed(format!("`{l}` without its `---`/`+++` partner")));
        } else if binary_differ(raw).is_none() {
            return Err(malformed(format!(
                "`{l}`: git versions disagree on whether it is a binary change"
            )));
        } else if (is_git_binary(raw) || is_binary_differ(raw)) && f.index.is_none() {
            // git cannot apply one without it, and without any header line it does not even
            // read the `diff --git` line as the section's start.
            return Err(malformed(format!(
                "binary section `diff --git {rest}` without an `index` line"
            )));
        } else if is_git_binary(raw) {
            f.binary = true;
            i += 1;
            while i < lines.len() && !lines[i].starts_with("diff --git ") {
                let b = lines[i].trim_end_matches('\r');
                let ok = b.is_empty()
                    || b.starts_with("literal ")
                    || b.starts_with("delta ")
                    || b.chars().all(|c| c.is_ascii_graphic());
                if !ok {
                    return Err(malformed(format!("bad binary patch line `{b}`")));
                }
                f.binary_body.push(b.to_string());
                i += 1;
            }
            while f.binary_body.last().is_some_and(|b| b.is_empty()) {
                f.binary_body.pop();
            }
        } else if is_binary_differ(raw) {
            f.binary = true;
            i += 1;
        }
        f.old_path = old;
        f.new_path = new;
        if f.old_path.is_none() && f.new_path.is_none() {
            return Err(malformed("a section without paths"));
        }
        check_side_lines(&f)?;
        if lines[start].ends_with('\r') && f.hunks.is_empty() {
            // git keeps the `\r` in the names of the `diff --git` line, so only `---`/`+++`
            // lines can name the files of a CRLF section.
            return Err(malformed(format!(
                "CRLF `diff --git {rest}` without `---`/`+++` lines"
            )));
        }
        let mode_change = matches!((f.old_mode, f.new_mode), (Some(o), Some(n)) if o != n);
        if f.op == FileOp::Modify && f.hunks.is_empty() && !f.binary && !mode_change {
            // `git apply` refuses it too ("patch with only garbage").
            return Err(malformed(format!("`diff --git {rest}` changes nothing")));
        }
        Ok((f, i))
    }

    /// Hunks from `lines[i]` on; each body must match its header's counts, and a
    /// `\ No newline at end of file` line may only follow the last line of the side(s) it ends
    /// (after it, that side has no more lines in this file): `git apply` would otherwise join
    /// the lines around it, a reading the typed hunks could not show.
    fn hunks(lines: &[&str], mut i: usize, f: &mut FileChange) -> Result<usize, PatchError> {
        // Whether the old / new side of the file has ended with a `\` line.
        let mut ended = (false, false);
        while i < lines.len() && lines[i].starts_with("@@ ") {
            let header = lines[i].trim_end_matches('\r').to_string();
            let (mut old, mut new) = hunk_counts(&header)?;
            let mut body: Vec<String> = Vec::new();
            i += 1;
            loop {
                let counted = old > 0 || new > 0;
                let Some(&l) = lines.get(i) else {
                    if counted {
                        return Err(malformed(format!(
                            "hunk `{header}` is shorter than its header says"
                        )));
                    }
                    break;
                };
                if !counted && !l.starts_with('\\') {
                    break;
                }
                // An empty line is a context line whose space was lost (git apply agrees; a
                // lone `\r` it refuses).
                let l = if l.is_empty() { " " } else { l };
                let bad = || malformed(format!("hunk `{header}`: unexpected line `{l}`"));
                match l.as_bytes()[0] {
                    b' ' if old > 0 && new > 0 && ended == (false, false) => {
                        (old, new) = (old - 1, new - 1)
                    }
                    b'-' if old > 0 && !ended.0 => old -= 1,
                    b'+' if new > 0 && !ended.1 => new -= 1,
                    // git reads any line of at least 12 bytes starting with `\` as the marker.
                    b'\\' if l.len() >= 11 => {
                        match body.last().map(|p| p.as_bytes()[0]) {
                            Some(b' ') => ended = (true, true),
                            Some(b'-') => ended.0 = true,
                            Some(b'+') => ended.1 = true,
                            _ => return Err(bad()),
                        }
                    }
                    _ => return Err(bad()),
                }
                body.push(l.to_string());
                i += 1;
            }
            // git refuses a hunk that changes nothing ("corrupt patch").
            if !body.iter().any(|l| l.starts_with(['+', '-'])) {
                return Err(malformed(format!("hunk `{header}` changes no line")));
            }
            f.hunks.push(Hunk {
                header,
                lines: body,
            });
        }
        Ok(i)
    }

    /// The git-format text of exactly this structure (what the harness applies).
    pub fn to_git(&self) -> String {
        let mut s = String::new();
        for f in &self.files {
            let a = f
                .old_path
                .as_deref()
                .or(f.new_path.as_deref())
                .unwrap_or_default();
            let b = f
                .new_path
                .as_deref()
                .or(f.old_path.as_deref())
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "diff --git {} {}",
                quote(&format!("a/{a}")),
                quote(&format!("b/{b}"))
            );
            let mode = |m: Option<u32>| format!("{:06o}", m.unwrap_or(0o100644));
            match f.op {
                FileOp::Create => {
                    let _ = writeln!(s, "new file mode {}", mode(f.new_mode));
                }
                FileOp::Delete => {
                    let _ = writeln!(s, "deleted file mode {}", mode(f.old_mode));
                }
                _ => {
                    // Unless the `index` line carries the (unchanged) mode.
                    let ix = f.index.as_deref().and_then(index_mode);
                    if let (Some(o), Some(n)) = (f.old_mode, f.new_mode) {
                        if o != n || ix != Some(o) {
                            let _ = writeln!(s, "old mode {o:06o}\nnew mode {n:06o}");
                        }
                    }
                }
            }
            if matches!(f.op, FileOp::Rename | FileOp::Copy) {
                let verb = if f.op == FileOp::Rename {
                    "rename"
                } else {
                    "copy"
                };
                let _ = writeln!(s, "{verb} from {}\n{verb} to {}", quote(a), quote(b));
            }
            if let Some(ix) = &f.index {
                let _ = writeln!(s, "index {ix}");
            }
            if !f.hunks.is_empty() {
                let _ = writeln!(
                    s,
                    "--- {}\n+++ {}",
                    side_path(&f.old_path, "a/"),
                    side_path(&f.new_path, "b/")
                );
                for h in &f.hunks {
                    s.push_str(&h.header);
                    s.push('\n');
                    for l in &h.lines {
                        s.push_str(l);
                        s.push('\n');
                    }
                }
            }
            if f.binary && !f.binary_body.is_empty() {
                s.push_str("GIT binary patch\n");
                for l in &f.binary_body {
                    s.push_str(l);
                    s.push('\n');
                }
                s.push('\n');
            } else if f.binary {
                let _ = writeln!(
                    s,
                    "Binary files {} and {} differ",
                    side_path(&f.old_path, "a/"),
                    side_path(&f.new_path, "b/")
                );
            }
        }
        s
    }
}

/// Where a repository's tests live, for [`is_test_path_in`]: the task's own test files
/// (FAIL_TO_PASS / PASS_TO_PASS paths, the official test patch's paths) and the library
/// directories that look like tests by name but are source (`django/test/`, `sphinx/testing/`,
/// `astropy/tests/helper.py`).
#[derive(Clone, Debug, Default)]
pub struct TestLayout {
    /// Paths the task itself names as its tests.
    pub test_files: Vec<String>,
    /// Path prefixes (a directory with a trailing `/`, or a file) that are library source.
    pub source_prefixes: Vec<String>,
}

/// Library source that the naming convention would take for tests, per well-known repository
/// package (the package's test *support* code ships to users; its tests live elsewhere).
pub const LIBRARY_TEST_SUPPORT: &[&str] = &[
    "django/test/",
    "django/core/management/commands/test.py",
    "django/core/management/commands/testserver.py",
    "sphinx/testing/",
    "astropy/tests/helper.py",
    "astropy/tests/runner.py",
    "astropy/tests/command.py",
    "astropy/tests/test_logger.py",
    "astropy/tests/__init__.py",
    "astropy/tests/figures/",
    "src/_pytest/",
    "_pytest/",
    "numpy/testing/",
    "sympy/testing/",
    "xarray/testing.py",
    "xarray/tests/__init__.py",
    "pandas/_testing/",
    "matplotlib/testing/",
    "sklearn/utils/_testing.py",
    "requests/testing/",
];

impl TestLayout {
    /// The layout of a task: its test files from FAIL_TO_PASS/PASS_TO_PASS node ids (pytest
    /// `path::name` ids) and the official test patch, plus [`LIBRARY_TEST_SUPPORT`].
    pub fn for_task(task: &crate::task::TaskInstance) -> TestLayout {
        let mut test_files: Vec<String> = parse_patch(&task.test_patch)
            .map(|fs| {
                fs.iter()
                    .flat_map(|f| f.paths().map(str::to_string).collect::<Vec<_>>())
                    .collect()
            })
            .unwrap_or_default();
        for id in task.fail_to_pass.iter().chain(&task.pass_to_pass) {
            if let Some((path, _)) = id.split_once("::") {
                if !test_files.iter().any(|p| p == path) {
                    test_files.push(path.to_string());
                }
            }
        }
        TestLayout {
            test_files,
            source_prefixes: LIBRARY_TEST_SUPPORT.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Library support only (no task files).
    pub fn library() -> TestLayout {
        TestLayout {
            test_files: Vec::new(),
            source_prefixes: LIBRARY_TEST_SUPPORT.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Whether a path is test code or test data under the runner's naming conventions, with the
/// task's own test files always tests and known library test-support source never (see
/// [`TestLayout`]).
pub fn is_test_path_in(path: &str, layout: &TestLayout) -> bool {
    if layout.test_files.iter().any(|f| f == path) {
        return true;
    }
    let library = layout.source_prefixes.iter().any(|p| {
        if p.ends_with('/') {
            path.starts_with(p.as_str()) && !is_conventional_test_file(path)
        } else {
            path == p
        }
    });
    !library && is_test_path_by_convention(path)
}

/// Test files by name alone (`test_*.py`, `*_test.py`, `*_tests.py`, `tests.py`, conftest.py;
/// Go's `*_test.go`, which only `go test` compiles).
fn is_conventional_test_file(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.starts_with("test_")
        || file.ends_with("_test.py")
        || file.ends_with("_test.go")
        || file.ends_with("_tests.py")
        || file == "conftest.py"
        || file == "tests.py"
}

fn is_test_path_by_convention(path: &str) -> bool {
    let comps: Vec<&str> = path.split('/').collect();
    comps[..comps.len().saturating_sub(1)].iter().any(|c| {
        matches!(*c, "tests" | "test" | "testing" | "testdata") || c.ends_with("tests") || c.starts_with("test_")
    }) || is_conventional_test_file(path)
}

/// [`is_test_path_in`] with the library layout and no task files (the paths a Test bundle may
/// touch, and the paths excluded from an exported source candidate).
pub fn is_test_path(path: &str) -> bool {
    is_test_path_in(path, &TestLayout::library())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_git_diff_with_new_and_deleted_files() {
        let p = "diff --git a/tests/test_a.py b/tests/test_a.py\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/tests/test_a.py\n@@ -0,0 +1,4 @@\n+import x\n+\n+async def test_one():\n+    def test_inner(): pass\n\
diff --git a/old.py b/old.py\ndeleted file mode 100644\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n";
        let f = parse_patch(p).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].old_path, None);
        assert_eq!(f[0].op, FileOp::Create);
        assert_eq!(f[0].new_path.as_deref(), Some("tests/test_a.py"));
        assert_eq!(f[0].added_tests, vec!["test_one", "test_inner"]);
        assert!(f[1].deleted);
        // Re-serialisation is a fixed point.
        let c = canonical(p).unwrap();
        assert_eq!(canonical(&c).unwrap(), c);
        assert_eq!(parse_patch(&c).unwrap(), f);
    }

    #[test]
    fn plain_diff_is_read_with_p1_and_absolute_paths_are_reported() {
        let f = parse_patch("--- x/etc/passwd\n+++ y/etc/passwd\n@@ -1 +1 @@\n-a\n+b\n").unwrap();
        assert_eq!(f[0].new_path.as_deref(), Some("etc/passwd"));
        let f = parse_patch("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n").unwrap();
        assert_eq!(
            path_problem(f[0].new_path.as_deref().unwrap()),
            Some(PathProblem::Absolute)
        );
        let f = parse_patch("--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n").unwrap();
        assert_eq!(
            path_problem(f[0].new_path.as_deref().unwrap()),
            Some(PathProblem::Absolute)
        );
        assert_eq!(
            parse_patch("hello\n").unwrap_err(),
            PatchError::NoFileHeaders
        );
    }

    #[test]
    fn renames_copies_modes_symlinks_and_quoted_paths() {
        let p = "diff --git a/src/x.py b/conftest.py\nsimilarity index 100%\nrename from src/x.py\nrename to conftest.py\n\
diff --git a/a.py b/b.py\ncopy from a.py\ncopy to \"pkg/caf\\303\\251 x.py\"\n\
diff --git a/link b/link\nnew file mode 120000\nindex 0000000..1234567\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n\
diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n";
        let f = parse_patch(p).unwrap();
        assert_eq!(f[0].op, FileOp::Rename);
        assert_eq!(
            f[0].paths().collect::<Vec<_>>(),
            vec!["src/x.py", "conftest.py"]
        );
        assert_eq!(f[1].op, FileOp::Copy);
        assert_eq!(f[1].new_path.as_deref(), Some("pkg/café x.py"));
        assert!(f[2].symlink && f[2].creates());
        assert_eq!(
            (f[3].old_mode, f[3].new_mode),
            (Some(0o100644), Some(0o100755))
        );
        let c = canonical(p).unwrap();
        assert_eq!(parse_patch(&c).unwrap(), f);
    }

    #[test]
    fn what_is_not_understood_is_rejected() {
        let context =
            "*** a/conftest.py\n--- b/conftest.py\n***************\n*** 0 ****\n--- 1 ----\n+ x\n";
        assert_eq!(
            parse_patch(context).unwrap_err().class(),
            "unsupported_patch_format"
        );
        let short = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a\n+b\n";
        assert_eq!(parse_patch(short).unwrap_err().class(), "malformed_patch");
        let disagree =
            "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/conftest.py\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(
            parse_patch(disagree).unwrap_err().class(),
            "malformed_patch"
        );
        // Junk after a hunk is dropped from what is applied.
        let junk = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\nrm -rf /\n";
        assert!(!canonical(junk).unwrap().contains("rm -rf"));
        // A patch without its final newline is complete.
        assert_eq!(
            parse_patch("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b")
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn path_problems() {
        assert_eq!(path_problem("a/../b"), Some(PathProblem::Traversal));
        assert_eq!(
            path_problem(".git/hooks/pre-commit"),
            Some(PathProblem::GitDir)
        );
        assert_eq!(path_problem("x/.GIT/config"), Some(PathProblem::GitDir));
        assert_eq!(path_problem("a//b"), Some(PathProblem::NotPlain));
        assert_eq!(path_problem("a\nb"), Some(PathProblem::NotPlain));
        assert_eq!(path_problem("pkg/x.py"), None);
    }

    #[test]
    fn test_paths() {
        assert!(is_test_path("tests/test_a.py"));
        assert!(is_test_path("pkg/tests/data/x.json"));
        assert!(is_test_path("conftest.py"));
        assert!(is_test_path("sympy/core/tests/test_basic.py"));
        assert!(!is_test_path("pkg/core.py"));
        // Go: `*_test.go` files and `testdata/` directories.
        assert!(is_test_path("calc/calc_test.go"));
        assert!(is_test_path("calc/testdata/golden.txt"));
        assert!(!is_test_path("calc/calc.go"));
        // Library test-support source is source.
        assert!(!is_test_path("django/test/runner.py"));
        assert!(!is_test_path("sphinx/testing/fixtures.py"));
        assert!(!is_test_path("astropy/tests/helper.py"));
        assert!(is_test_path("astropy/tests/test_helper_tests.py"));
        // The task's own test files are tests whatever their name.
        let layout = TestLayout {
            test_files: vec!["checks/verify.py".into()],
            ..TestLayout::library()
        };
        assert!(is_test_path_in("checks/verify.py", &layout));
    }
}
