//! Workspace materialisation and history sanitisation on a real git repository: post-conditions
//! hold, and commits only reachable from deleted branches, tags, remotes or the reflog are gone.

use std::path::Path;
use std::process::Command;

use execcritic::task::{materialize, materialize_with, History, TaskError, TaskInstance};
use serde_json::json;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn cat_file_exists(dir: &Path, sha: &str) -> bool {
    Command::new("git")
        .current_dir(dir)
        .args(["cat-file", "-e", sha])
        .status()
        .unwrap()
        .success()
}

struct Fixture {
    _dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    base: String,
    fix: String,
    side: String,
    tagged: String,
    gold: String,
}

/// A repository whose main branch has a Base commit and a later fix commit, plus a side branch,
/// a tag on a commit of its own, and a stash-like orphan only reachable from a ref.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("upstream");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    let gold = git(&repo, &["diff"]);
    git(&repo, &["commit", "-q", "-am", "fix add"]);
    let fix = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "-b", "side", &base]);
    std::fs::write(repo.join("side.py"), "x = 1\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "side work"]);
    let side = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "--detach", &base]);
    std::fs::write(repo.join("tagged.py"), "y = 2\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "release"]);
    let tagged = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["tag", "v1", &tagged]);
    git(&repo, &["checkout", "-q", "main"]);
    Fixture {
        _dir: dir,
        repo,
        base,
        fix,
        side,
        tagged,
        gold,
    }
}

fn task(f: &Fixture) -> TaskInstance {
    TaskInstance::from_json(
        json!({
            "instance_id": "demo__calc-1", "repo": "demo/calc", "base_commit": f.base,
            "patch": f.gold, "test_patch": "", "problem_statement": "add subtracts",
            "FAIL_TO_PASS": [], "PASS_TO_PASS": [],
            "repo_path": f.repo.to_str().unwrap(),
        }),
        None,
    )
    .unwrap()
}

#[test]
fn unsanitised_workspace_is_clean_checkout_of_base() {
    let f = fixture();
    let dest = f._dir.path().join("ws");
    let ws = materialize(&task(&f), &dest, false).unwrap();
    assert_eq!(ws.base_commit, f.base);
    assert!(ws.sanitization.is_none());
    assert_eq!(git(&dest, &["rev-parse", "HEAD"]), f.base);
    assert_eq!(git(&dest, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(dest.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a - b\n"
    );
    // Not sanitised: the fix is still there.
    assert!(cat_file_exists(&dest, &f.fix));
}

#[test]
fn sanitised_workspace_cannot_reach_other_commits() {
    let f = fixture();
    let dest = f._dir.path().join("ws");
    // The clone brings origin/* refs for `main` (at the fix) and `side`, and the tag `v1`.
    let ws = materialize(&task(&f), &dest, true).unwrap();
    let status = ws.sanitization.expect("sanitised");
    assert!(status.verified, "{:?}", status.failures());
    assert_eq!(status.refs, vec!["refs/heads/main".to_string()]);
    assert!(status.remotes.is_empty());
    assert_eq!(status.reflog_entries, 0);
    assert_eq!(status.unreachable_objects, 0);
    assert_eq!(status.commits_in_store, 1);
    assert!(status.gold_checked);
    assert_eq!(status.gold_blobs_checked, 1);
    assert!(status.gold_reachable.is_empty());
    for sha in [&f.fix, &f.side, &f.tagged] {
        assert!(!cat_file_exists(&dest, sha), "{sha} still in the store");
    }
    assert!(cat_file_exists(&dest, &f.base));
    assert_eq!(git(&dest, &["status", "--porcelain"]), "");
    // The status serialises to JSON for the run record.
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["verified"], true);
}

#[test]
fn sanitisation_removes_commits_reachable_only_from_reflog() {
    let f = fixture();
    // Make the upstream itself carry a reflog-only commit: commit on main, then reset it away.
    std::fs::write(f.repo.join("calc.py"), "def add(a, b):\n    return b + a\n").unwrap();
    git(&f.repo, &["commit", "-q", "-am", "alternative fix"]);
    let dropped = git(&f.repo, &["rev-parse", "HEAD"]);
    git(&f.repo, &["reset", "-q", "--hard", &f.fix]);
    // Sanitise the upstream repository in place (HEAD at Base on main).
    git(&f.repo, &["checkout", "-q", "-B", "main", &f.base]);
    assert!(cat_file_exists(&f.repo, &dropped));
    let status = execcritic::task::sanitize::sanitize(&f.repo, &f.base, &f.gold).unwrap();
    assert!(status.verified, "{:?}", status.failures());
    for sha in [&dropped, &f.fix, &f.side, &f.tagged] {
        assert!(!cat_file_exists(&f.repo, sha), "{sha} still in the store");
    }
}

#[test]
fn gold_fix_present_in_base_history_fails_verification() {
    // A fix that restores a version from Base's own history is reachable: verification fails.
    let f = fixture();
    let upstream = &f.repo;
    git(upstream, &["checkout", "-q", "main"]);
    std::fs::write(
        upstream.join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    git(upstream, &["commit", "-q", "-am", "regress add"]);
    let regressed = git(upstream, &["rev-parse", "HEAD"]);
    let mut t = task(&f);
    t.base_commit = regressed;
    let err = materialize(&t, &f._dir.path().join("ws"), true).unwrap_err();
    match err {
        TaskError::Sanitization { status, .. } => {
            assert_eq!(status.gold_reachable, vec!["calc.py".to_string()]);
            assert!(err_text(&status).contains("fixed version of calc.py"));
        }
        other => panic!("expected a sanitisation error, got {other}"),
    }
}

fn err_text(s: &execcritic::task::SanitizationStatus) -> String {
    s.failures().join("; ")
}

#[test]
fn relative_repo_path_and_destination() {
    // Paths relative to the current directory: build them from the temp dir's absolute path
    // with enough `..` to climb from the current directory to the root.
    let f = fixture();
    let cwd = std::env::current_dir().unwrap();
    let up: std::path::PathBuf = cwd.components().skip(1).map(|_| "..").collect();
    let rel = |p: &Path| up.join(p.strip_prefix("/").unwrap());
    let mut t = task(&f);
    t.repo_path = Some(rel(&f.repo));
    let dest = rel(&f._dir.path().join("nested/ws"));
    assert!(dest.is_relative());
    let ws = materialize(&t, &dest, false).unwrap();
    assert!(ws.path.is_absolute());
    assert_eq!(
        ws.path,
        std::fs::canonicalize(f._dir.path())
            .unwrap()
            .join("nested/ws")
    );
    assert_eq!(git(&ws.path, &["rev-parse", "HEAD"]), f.base);
}

#[test]
fn missing_base_commit_and_non_empty_destination_are_errors() {
    let f = fixture();
    let mut t = task(&f);
    t.base_commit = "0123456789abcdef0123456789abcdef01234567".into();
    let err = materialize(&t, &f._dir.path().join("ws1"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a commit of"), "{err}");
    let dest = f._dir.path().join("ws2");
    std::fs::create_dir(&dest).unwrap();
    std::fs::write(dest.join("x"), "").unwrap();
    let err = materialize(&task(&f), &dest, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not empty"), "{err}");
    let mut t = task(&f);
    t.repo_path = None;
    let err = materialize(&t, &f._dir.path().join("ws3"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no `repo_path`"), "{err}");
}

#[test]
fn base_only_workspace_holds_base_and_nothing_else() {
    let f = fixture();
    let dest = f._dir.path().join("snapshot");
    // A plain clone reaches the fix (the attack works without the policy).
    let plain = materialize_with(&task(&f), &f._dir.path().join("plain"), History::Full).unwrap();
    assert!(cat_file_exists(&plain.path, &f.fix));
    let ws = materialize_with(&task(&f), &dest, History::BaseOnly).unwrap();
    assert_eq!(ws.base_commit, f.base);
    let status = ws.sanitization.expect("verified");
    assert!(status.verified, "{:?}", status.failures());
    assert_eq!(status.refs, vec!["refs/heads/main".to_string()]);
    assert!(status.remotes.is_empty());
    assert_eq!(status.reflog_entries, 0);
    assert_eq!(status.commits_in_store, 1);
    assert!(status.gold_checked && status.gold_reachable.is_empty());
    for sha in [&f.fix, &f.side, &f.tagged] {
        assert!(!cat_file_exists(&dest, sha), "{sha} in the store");
    }
    assert_eq!(git(&dest, &["rev-parse", "HEAD"]), f.base);
    assert_eq!(git(&dest, &["status", "--porcelain"]), "");
    assert!(!dest.join(".git/FETCH_HEAD").exists());
    // Every object in the store is Base's commit or an object of Base's tree: checking the gold
    // patch wrote nothing into the store.
    let store = git(
        &dest,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ],
    );
    let tree = git(
        &dest,
        &["ls-tree", "-r", "-t", "--format=%(objectname)", "HEAD"],
    );
    let mut expected: Vec<&str> = tree.lines().collect();
    let root = git(&dest, &["rev-parse", "HEAD^{tree}"]);
    expected.push(&root);
    expected.push(&f.base);
    expected.sort();
    expected.dedup();
    let mut found: Vec<&str> = store.lines().collect();
    found.sort();
    assert_eq!(found, expected);
}

/// A source repository in each form users have: the upstream itself, a mirror whose packs carry
/// `.promisor` markers (git never prunes those), a clone borrowing objects through `alternates`,
/// a shallow clone, a linked worktree and a mirror with packed refs. Returns (form, path).
fn clone_forms(f: &Fixture) -> Vec<(&'static str, std::path::PathBuf)> {
    let root = f._dir.path();
    let up = f.repo.to_str().unwrap();
    let promisor = root.join("promisor.git");
    git(
        root,
        &["clone", "-q", "--mirror", up, promisor.to_str().unwrap()],
    );
    git(&promisor, &["repack", "-a", "-d", "-q"]);
    for e in std::fs::read_dir(promisor.join("objects/pack")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "pack") {
            std::fs::write(p.with_extension("promisor"), "").unwrap();
        }
    }
    git(&promisor, &["config", "extensions.partialClone", "origin"]);
    git(&promisor, &["config", "remote.origin.promisor", "true"]);
    let shared = root.join("shared");
    git(
        root,
        &["clone", "-q", "--shared", up, shared.to_str().unwrap()],
    );
    let shallow = root.join("shallow");
    let url = format!("file://{up}");
    git(
        root,
        &[
            "clone",
            "-q",
            "--depth",
            "2",
            "--no-single-branch",
            &url,
            shallow.to_str().unwrap(),
        ],
    );
    let worktree = root.join("linked");
    git(
        &f.repo,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            worktree.to_str().unwrap(),
            &f.fix,
        ],
    );
    let packed = root.join("packed.git");
    git(
        root,
        &["clone", "-q", "--mirror", up, packed.to_str().unwrap()],
    );
    git(&packed, &["pack-refs", "--all"]);
    vec![
        ("upstream", f.repo.clone()),
        ("promisor packs", promisor),
        ("alternates", shared),
        ("shallow", shallow),
        ("linked worktree", worktree),
        ("packed refs", packed),
    ]
}

#[test]
fn workspaces_from_any_clone_form_are_sanitised_and_verified() {
    let f = fixture();
    let forms = clone_forms(&f);
    // Without the policy, clone-and-prune keeps the fix in a promisor-marked store: git never
    // prunes a promisor pack (what made every workspace of such a mirror fail closed).
    let plain = f._dir.path().join("plain-of-promisor");
    git(
        f._dir.path(),
        &[
            "clone",
            "-q",
            "--no-hardlinks",
            forms[1].1.to_str().unwrap(),
            plain.to_str().unwrap(),
        ],
    );
    git(&plain, &["checkout", "-q", "-B", "main", &f.base]);
    git(&plain, &["remote", "remove", "origin"]);
    git(&plain, &["reflog", "expire", "--expire=now", "--all"]);
    git(
        &plain,
        &["-c", "gc.cruftPacks=false", "gc", "--prune=now", "--quiet"],
    );
    assert!(
        cat_file_exists(&plain, &f.fix),
        "the promisor pack kept the fix"
    );

    for (form, source) in &forms {
        let mut t = task(&f);
        t.repo_path = Some(source.clone());
        for history in [History::Sanitized, History::BaseOnly] {
            let dest = f
                ._dir
                .path()
                .join(format!("ws-{form}-{history:?}").replace(' ', "-"));
            let ws = materialize_with(&t, &dest, history)
                .unwrap_or_else(|e| panic!("{form} / {history:?}: {e}"));
            let status = ws.sanitization.expect("verified");
            assert!(
                status.verified,
                "{form} / {history:?}: {:?}",
                status.failures()
            );
            assert_eq!(ws.base_commit, f.base, "{form}");
            for sha in [&f.fix, &f.side, &f.tagged] {
                assert!(
                    !cat_file_exists(&dest, sha),
                    "{form} / {history:?}: {sha} in the store"
                );
            }
            assert!(
                !dest.join(".git/objects/info/alternates").exists(),
                "{form}"
            );
            assert_eq!(git(&dest, &["status", "--porcelain"]), "", "{form}");
            assert_eq!(
                std::fs::read_to_string(dest.join("calc.py")).unwrap(),
                "def add(a, b):\n    return a - b\n",
                "{form}"
            );
        }
    }
}

#[test]
fn in_place_sanitisation_owns_borrowed_objects_and_drops_promisor_markers() {
    let f = fixture();
    let forms = clone_forms(&f);
    for (form, source) in [&forms[1], &forms[2]] {
        // A working clone of that form, at Base on main.
        let ws = f
            ._dir
            .path()
            .join(format!("inplace-{}", form.replace(' ', "-")));
        if source.join("objects/info/alternates").exists() || *form == "alternates" {
            git(
                f._dir.path(),
                &[
                    "clone",
                    "-q",
                    "--shared",
                    f.repo.to_str().unwrap(),
                    ws.to_str().unwrap(),
                ],
            );
        } else {
            git(
                f._dir.path(),
                &[
                    "clone",
                    "-q",
                    "--no-hardlinks",
                    source.to_str().unwrap(),
                    ws.to_str().unwrap(),
                ],
            );
            for e in std::fs::read_dir(ws.join(".git/objects/pack")).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "pack") {
                    std::fs::write(p.with_extension("promisor"), "").unwrap();
                }
            }
        }
        git(&ws, &["checkout", "-q", "-B", "main", &f.base]);
        let status = execcritic::task::sanitize::sanitize(&ws, &f.base, &f.gold)
            .unwrap_or_else(|e| panic!("{form}: {e}"));
        assert!(status.verified, "{form}: {:?}", status.failures());
        assert!(!cat_file_exists(&ws, &f.fix), "{form}");
        // The store is whole on its own: fsck is clean and the work tree reads.
        git(&ws, &["fsck", "--no-progress", "--no-dangling"]);
        assert_eq!(git(&ws, &["status", "--porcelain"]), "", "{form}");
    }
}

#[test]
fn a_partial_clone_missing_history_is_a_clear_error() {
    // Base has an ancestor whose file version the partial clone never fetched.
    let dir = tempfile::tempdir().unwrap();
    let up = dir.path().join("up");
    std::fs::create_dir(&up).unwrap();
    git(&up, &["init", "-q", "-b", "main"]);
    git(&up, &["config", "uploadpack.allowFilter", "true"]);
    git(&up, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
    for (i, body) in ["v = 1\n", "v = 2\n", "v = 3\n"].iter().enumerate() {
        std::fs::write(up.join("m.py"), body).unwrap();
        git(&up, &["add", "."]);
        git(&up, &["commit", "-q", "-m", &format!("c{i}")]);
    }
    let base = git(&up, &["rev-parse", "HEAD~1"]);
    let partial = dir.path().join("partial");
    let url = format!("file://{}", up.display());
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--filter=blob:none",
            "--no-checkout",
            &url,
            partial.to_str().unwrap(),
        ],
    );
    git(&partial, &["checkout", "-q", "-B", "main", &base]);
    let err = execcritic::task::sanitize::sanitize(&partial, &base, "").unwrap_err();
    assert!(err.to_string().contains("partial clone"), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");
}
