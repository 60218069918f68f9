//! The Test agent's gold-free guard: refuses commands that inspect git history, refs or `.git`
//! internals (paper B.3.1 "Gold-free boundary"). It is a HINT to the agent, not a defence: a
//! refused command is answered with an explanation and not run, but any program can read git
//! (python, `env git`, the object files). The defence is the workspace itself: no commit, object
//! or ref after Base exists in it (`task::workspace::History`, verified before a sandbox opens).
//!
//! Git is allowed only for working-tree operations (`status`, `add`, plain `diff`, `apply`,
//! `ls-files`, `grep`, `rm`, `mv`, `restore`/`checkout -- <paths>`, `clean`, `--version`).

const ALLOWED_GIT: &[&str] = &[
    "status",
    "add",
    "diff",
    "apply",
    "ls-files",
    "grep",
    "rm",
    "mv",
    "restore",
    "checkout",
    "clean",
    "--version",
    "version",
    "help",
];

/// Git global options that take a separate value.
const GIT_OPTS_WITH_VALUE: &[&str] = &["-C", "-c", "--git-dir", "--work-tree", "--namespace"];

/// `Some(reason)` when `command` would cross the gold-free boundary.
pub fn history_guard(command: &str) -> Option<String> {
    for segment in split_segments(command) {
        // Unbalanced quotes (shlex fails): fall back to whitespace words.
        let words = shlex::split(&segment)
            .unwrap_or_else(|| segment.split_whitespace().map(str::to_string).collect());
        if let Some(reason) = check_words(&words) {
            return Some(format!(
                "{reason} The gold-free boundary forbids inspecting git history, refs or `.git` \
                 internals; for git use only `git status`, `git add -AN` and plain working-tree `git diff`."
            ));
        }
    }
    None
}

/// Split a command line at shell control operators and substitutions (approximately: quoting is
/// respected, so `echo 'a;b'` stays one segment).
fn split_segments(command: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (Some('"'), '$') if chars.peek() == Some(&'(') => {
                segments.push(std::mem::take(&mut cur));
                chars.next();
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                cur.push(c);
            }
            (None, ';' | '\n' | '|' | '&' | '(' | ')' | '`') => {
                segments.push(std::mem::take(&mut cur));
            }
            (None, '$') if chars.peek() == Some(&'(') => {
                segments.push(std::mem::take(&mut cur));
                chars.next();
            }
            (None, c) => cur.push(c),
        }
    }
    segments.push(cur);
    segments
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect()
}

fn check_words(words: &[String]) -> Option<String> {
    // `.git` internals through any command (cat .git/HEAD, ls .git/refs, cd .git).
    for (i, w) in words.iter().enumerate() {
        let prev = if i > 0 { words[i - 1].as_str() } else { "" };
        let excluding = matches!(
            prev,
            "-path" | "-wholename" | "-ipath" | "--exclude-dir" | "-name"
        );
        if is_git_internal_path(w) && !excluding {
            return Some(format!("`{w}` is inside `.git`."));
        }
    }
    // Find the git invocation (skipping env assignments and wrappers like `sudo`, `env`, `command`).
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let base = w.rsplit('/').next().unwrap_or(w);
        if base == "git" {
            return check_git(&words[i + 1..]);
        }
        if w.contains('=')
            || matches!(
                w,
                "env" | "command" | "sudo" | "time" | "nice" | "xargs" | "exec"
            )
        {
            i += 1;
            continue;
        }
        return None;
    }
    None
}

fn is_git_internal_path(w: &str) -> bool {
    let w = w.trim_matches(|c| c == '\'' || c == '"');
    let w = w.strip_prefix("./").unwrap_or(w);
    w == ".git" || w.starts_with(".git/") || w.ends_with("/.git") || w.contains("/.git/")
}

fn check_git(args: &[String]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if GIT_OPTS_WITH_VALUE.contains(&a) {
            i += 2;
            continue;
        }
        if a.starts_with("--") && a != "--version" || a == "-p" || a == "-P" {
            i += 1;
            continue;
        }
        break;
    }
    let sub = args.get(i)?;
    let rest = &args[i + 1..];
    if !ALLOWED_GIT.contains(&sub.as_str()) {
        return Some(format!("`git {sub}` is not allowed."));
    }
    match sub.as_str() {
        "diff" | "grep" => {
            // Plain working-tree diff only: no revision arguments before `--`.
            for a in rest {
                if a == "--" {
                    break;
                }
                if !a.starts_with('-') && looks_like_revision(a) {
                    return Some(format!("`git {sub} {a}` compares against a commit or ref."));
                }
            }
            None
        }
        "checkout" | "restore" => {
            if rest.iter().any(|a| a.starts_with("--source") || a == "-s") {
                return Some(format!("`git {sub} --source` reads another commit."));
            }
            if sub == "checkout" && !rest.iter().any(|a| a == "--") {
                return Some("`git checkout` is allowed only as `git checkout -- <paths>`.".into());
            }
            if sub == "checkout" && rest.first().is_some_and(|a| a != "--") {
                return Some("`git checkout <ref>` switches commits.".into());
            }
            None
        }
        _ => None,
    }
}

fn looks_like_revision(a: &str) -> bool {
    let hexish = a.len() >= 4 && a.chars().all(|c| c.is_ascii_hexdigit());
    hexish
        || a.contains("..")
        || a.contains('@')
        || a.contains('~')
        || a.contains('^')
        || a.starts_with("HEAD")
        || a.starts_with("ORIG_HEAD")
        || a.starts_with("FETCH_HEAD")
        || a.starts_with("origin/")
        || a.starts_with("refs/")
        || matches!(a, "main" | "master")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_history_commands() {
        for c in [
            "git log --all --oneline",
            "git log",
            "cd /testbed && git show abc1234",
            "git cat-file -p HEAD",
            "git rev-list --all",
            "git reflog",
            "git fsck --lost-found",
            "git branch -a",
            "git tag",
            "git -C /testbed log",
            "git --no-pager log -1",
            "git diff HEAD~1",
            "git diff deadbeef -- a.py",
            "git diff main..feature",
            "git checkout abc123",
            "git restore --source=HEAD~2 a.py",
            "ls .git/refs",
            "cat /testbed/.git/packed-refs",
            "cd .git && ls",
            "echo $(git log -1)",
            "x=1 git for-each-ref",
            "git stash list",
            "git blame a.py",
            "git ls-remote .",
            "find . | xargs git log",
        ] {
            assert!(history_guard(c).is_some(), "{c}");
        }
    }

    #[test]
    fn allows_working_tree_commands() {
        for c in [
            "git status",
            "cd /testbed && git add -AN && git diff --no-color > /tmp/test.patch",
            "git diff -- tests/test_a.py",
            "git diff --stat",
            "git checkout -- src/a.py",
            "git ls-files | head",
            "grep -rn foo --exclude-dir=.git .",
            "find . -not -path './.git/*' -name '*.py'",
            "echo 'git log is forbidden'",
            "python -m pytest tests/test_a.py::test_x",
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /tmp/test.patch",
            "cat .gitignore",
        ] {
            assert_eq!(history_guard(c), None, "{c}");
        }
    }
}
