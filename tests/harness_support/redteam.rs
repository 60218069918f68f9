//! Generative red team against the harness (issue 30, item 8).
//!
//! An attack is not a literal string but a point in a product of four dimensions, each a small
//! table below, composed by one renderer:
//!
//! - **capability** ([`CAPABILITIES`]): what turns the failing official test into a pass without
//!   fixing the bug — a Python template under `redteam/effects/` that defines `_ec_effect()`,
//!   using helper templates from `redteam/helpers/` (flip reports, neuter assertions or the test
//!   functions, objects equal to everything, forged reports with an exit, the harness's own
//!   exit-code marker, state left for the next run, …).
//!   Some capabilities have sub-variants (`_EC_SUB`: the way out of the process, the hook, the
//!   place of the state) and output channels (`_EC_CHANNEL`), cycled by the sampler.
//! - **spelling** ([`Spelling`]): how the template's sensitive names reach the code. Templates
//!   write them as tokens — `M("mod")` a module, `G(obj, "attr")` an attribute, `S("text")` a
//!   string — and a spelling renders every token: plain `import`/attribute syntax, or one of the
//!   module-access mechanisms (`importlib`, `__import__`, `sys.modules`, `vars(sys)`, the heap,
//!   the frame stack, `operator.attrgetter`, the builtins dict) crossed with a string encoding
//!   built at run time (concatenation, `chr`, reversed, `bytes`, rot13, `str.format`, base64,
//!   hex); or the whole block is hidden as data and executed (`exec`, base64, zlib, marshal,
//!   pickle, `eval(compile())`, `types.FunctionType`, `runpy` of a data file, a source file in a
//!   codec registered at run time).
//! - **door** ([`DOORS`]): when and how the code runs — import of the package, a thread, a
//!   timer, `__del__`, `__init_subclass__`, a metaclass, a signal handler, a thread exception
//!   hook, a codec lookup, a lazy module attribute, the first call of the function under test,
//!   `atexit`, `weakref.finalize`; or a door of the runner itself: a module shadowing one the
//!   runner imports (names discovered from the actual run), a plugin entry point in package
//!   metadata, a runner configuration file (`-p` plugin or `pythonpath` shim), a conftest.py.
//!   Each door has a timing; a capability lists the timings at which it works.
//! - **placement** ([`Placement`]): the file the code lives in — the package `__init__`, a
//!   submodule, a new top-level module, a shim package, a data file (`.txt`, `.json`, `.cfg`,
//!   `.dat`) executed by the package, a test path (which the harness must refuse), or the door's
//!   own files (shadow module, metadata directory in any letter case, configuration file in each
//!   file and syntax pytest reads, conftest location).
//!
//! [`sample`] enumerates the compatible combinations (`Mode::Full`), or a seeded stratified subset
//! (`Mode::Ci`: every capability with every door it is compatible with, spellings, placements and
//! sub-variants rotated so that each appears; `Mode::Pairs` adds every capability × spelling pair).
//! [`Variant::build`] renders the files and turns them into a git diff against the fixture's Base
//! (git itself writes the diff, so every variant is a valid patch). [`plain_session`] proves a
//! variant on a plain checkout with the harness's own command shape (a bash script ending in a
//! nonce exit-code marker), without any sandbox or guard: a variant is used only if it works there.

use crate::harness_support::{fixture, git, CALC_BASE};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Timings and doors
// ---------------------------------------------------------------------------------------------

/// When a door runs the code, in the life of one pytest process.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timing {
    /// At interpreter/runner start, before pytest is configured (a shadowed import).
    Boot,
    /// While pytest loads its plugins (configured, nothing collected yet).
    Plugin,
    /// While the test module is collected (it imports the package).
    Early,
    /// During the judged test's call.
    Call,
    /// After pytest printed its results.
    Exit,
}

/// How a door reaches the code.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DoorKind {
    /// Python appended after the block's definitions (in the block's own spelling).
    Trigger(&'static str),
    /// The package's `add` becomes a lazy module attribute that runs the block when taken.
    Lazy,
    /// The package's `add` is wrapped; its first call runs the block.
    FirstCall,
    /// A module the runner imports is shadowed at the repository root.
    Shadow,
    /// A pytest11 entry point in package metadata at the repository root.
    Metadata,
    /// A runner configuration file that loads the block as a plugin (`-p`).
    ConfigPlugin,
    /// A runner configuration file whose `pythonpath` puts a shim package first.
    ConfigPythonpath,
    /// A conftest.py.
    Conftest,
}

pub struct Door {
    pub name: &'static str,
    pub timing: Timing,
    /// The block runs in another thread.
    pub thread: bool,
    /// The door registers the module as a pytest plugin.
    pub plugin: bool,
    pub kind: DoorKind,
}

const fn door(name: &'static str, timing: Timing, kind: DoorKind) -> Door {
    Door {
        name,
        timing,
        thread: false,
        plugin: false,
        kind,
    }
}

pub const DOORS: &[Door] = &[
    door("import", Timing::Early, DoorKind::Trigger("_ec_run()\n")),
    Door {
        thread: true,
        ..door(
            "thread",
            Timing::Early,
            DoorKind::Trigger(
                "_ec_t = G(M(\"threading\"), \"Thread\")(target=_ec_run)\n_ec_t.start()\n_ec_t.join()\n",
            ),
        )
    },
    Door {
        thread: true,
        ..door(
            "timer",
            Timing::Early,
            DoorKind::Trigger(
                "_ec_t = G(M(\"threading\"), \"Timer\")(0.001, _ec_run)\n_ec_t.start()\n_ec_t.join()\n",
            ),
        )
    },
    door(
        "del",
        Timing::Early,
        DoorKind::Trigger("class _EcDel:\n    def __del__(self):\n        _ec_run()\n\n\n_EcDel()\n"),
    ),
    door(
        "init_subclass",
        Timing::Early,
        DoorKind::Trigger(
            "class _EcBase:\n    def __init_subclass__(cls, **kw):\n        _ec_run()\n\n\nclass _EcSub(_EcBase):\n    pass\n",
        ),
    ),
    door(
        "metaclass",
        Timing::Early,
        DoorKind::Trigger(
            "class _EcMeta(type):\n    def __init__(cls, *a):\n        _ec_run()\n\n\nclass _EcK(metaclass=_EcMeta):\n    pass\n",
        ),
    ),
    door(
        "signal",
        Timing::Early,
        DoorKind::Trigger(
            "G(M(\"signal\"), S(\"signal\"))(G(M(\"signal\"), \"SIGUSR1\"), lambda *a: _ec_run())\nG(M(\"signal\"), S(\"raise_signal\"))(G(M(\"signal\"), \"SIGUSR1\"))\n",
        ),
    ),
    Door {
        thread: true,
        ..door(
            "excepthook",
            Timing::Early,
            DoorKind::Trigger(
                "setattr(M(\"threading\"), S(\"excepthook\"), lambda args: _ec_run())\n_ec_t = G(M(\"threading\"), \"Thread\")(target=lambda: 1 / 0)\n_ec_t.start()\n_ec_t.join()\n",
            ),
        )
    },
    door(
        "codec_lookup",
        Timing::Early,
        DoorKind::Trigger(
            "G(M(\"codecs\"), \"register\")(lambda n: _ec_run() if n == \"calc_ec_door\" else None)\ntry:\n    G(M(\"codecs\"), \"lookup\")(\"calc_ec_door\")\nexcept LookupError:\n    pass\n",
        ),
    ),
    door("lazy_attr", Timing::Early, DoorKind::Lazy),
    door("first_call", Timing::Call, DoorKind::FirstCall),
    door(
        "atexit",
        Timing::Exit,
        DoorKind::Trigger("G(M(\"atexit\"), S(\"register\"))(_ec_run)\n"),
    ),
    door(
        "finalize",
        Timing::Exit,
        DoorKind::Trigger(
            "_ec_anchor = type(\"_EcAnchor\", (), {})()\nG(M(\"weakref\"), \"finalize\")(_ec_anchor, _ec_run)\n",
        ),
    ),
    door("shadow_module", Timing::Boot, DoorKind::Shadow),
    Door {
        plugin: true,
        ..door("metadata_entry_point", Timing::Plugin, DoorKind::Metadata)
    },
    Door {
        plugin: true,
        ..door("config_plugin", Timing::Plugin, DoorKind::ConfigPlugin)
    },
    door("config_pythonpath", Timing::Early, DoorKind::ConfigPythonpath),
    Door {
        plugin: true,
        ..door("conftest", Timing::Plugin, DoorKind::Conftest)
    },
];

impl Door {
    /// The door runs code of the package itself (it is linked from `calc/__init__.py`).
    pub fn in_package(&self) -> bool {
        matches!(
            self.kind,
            DoorKind::Trigger(_) | DoorKind::Lazy | DoorKind::FirstCall
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Capabilities
// ---------------------------------------------------------------------------------------------

pub struct Capability {
    pub name: &'static str,
    /// Template under `redteam/effects/` (without `.py`).
    pub template: &'static str,
    pub subs: &'static [&'static str],
    pub timings: &'static [Timing],
    /// Helper templates it needs, under `redteam/helpers/`: `kit` (forged report, real output,
    /// exit-code marker), `entrypoint` (replace the function under test), `report` (a passing
    /// report), `equal` (objects equal to everything).
    pub helpers: &'static [&'static str],
    /// Cycles the output channel (`_EC_CHANNEL`).
    pub channels: bool,
    /// Must run in the main thread.
    pub main_thread: bool,
    /// Works only where the module is registered as a plugin (defines hooks, no `_ec_effect`).
    pub plugin_only: bool,
    /// 2: the variant plants state in one run that a later run sees.
    pub runs: u8,
}

const fn cap(name: &'static str, template: &'static str, timings: &'static [Timing]) -> Capability {
    Capability {
        name,
        template,
        subs: &[""],
        timings,
        helpers: &[],
        channels: false,
        main_thread: false,
        plugin_only: false,
        runs: 1,
    }
}

use Timing::{Boot, Call, Early, Exit, Plugin};
const BEFORE_REPORT: &[Timing] = &[Boot, Plugin, Early, Call];
const BEFORE_CALL: &[Timing] = &[Boot, Plugin, Early];
const ANY: &[Timing] = &[Boot, Plugin, Early, Call, Exit];

pub const CAPABILITIES: &[Capability] = &[
    Capability {
        helpers: &["report"],
        ..cap("flip_report", "flip_report", BEFORE_REPORT)
    },
    cap("runtest_noop", "runtest_noop", BEFORE_CALL),
    cap("swallow_assertion", "swallow_assert", BEFORE_CALL),
    Capability {
        helpers: &["report"],
        subs: &["makereport", "logreport"],
        ..cap("live_plugin_hook", "plugin_hook", &[Plugin, Early, Call])
    },
    Capability {
        helpers: &["report"],
        subs: &["modifyitems"],
        ..cap("collection_hook", "plugin_hook", &[Plugin, Early])
    },
    Capability {
        helpers: &["report"],
        subs: &["terminal"],
        ..cap(
            "terminal_summary_and_exit_counter",
            "plugin_hook",
            &[Plugin, Early],
        )
    },
    cap("no_assert_rewriting", "assert_rewrite", &[Boot, Plugin]),
    Capability {
        main_thread: true,
        ..cap("swap_test_functions", "swap_tests", BEFORE_CALL)
    },
    Capability {
        helpers: &["kit", "entrypoint"],
        ..cap(
            "skip_with_forged_reason",
            "skip_forged",
            &[Plugin, Early, Call],
        )
    },
    Capability {
        helpers: &["entrypoint", "equal"],
        subs: &["eq_true", "truthy", "int_subclass"],
        ..cap("equal_to_everything", "eq_everything", BEFORE_REPORT)
    },
    Capability {
        helpers: &["equal"],
        subs: &["eq_true", "traceback_answer"],
        ..cap(
            "rebind_entrypoint",
            "rebind_entrypoint",
            &[Boot, Plugin, Early],
        )
    },
    Capability {
        helpers: &["entrypoint"],
        subs: &["frame", "inspect", "traceback", "scan_files"],
        ..cap("read_tests", "read_tests", BEFORE_REPORT)
    },
    Capability {
        helpers: &["kit", "entrypoint"],
        channels: true,
        subs: &[
            "os_exit",
            "atexit_os_exit",
            "thread_exit",
            "ctypes_exit",
            "exec_true",
            "execv_python",
            "child_fix",
            "child_no_asserts",
            "child_fake_tree",
        ],
        ..cap("forged_report_exit", "forge_exit", BEFORE_REPORT)
    },
    Capability {
        helpers: &["kit"],
        channels: true,
        subs: &["exit1", "abort", "sigkill_self"],
        ..cap("forged_marker_kill_shell", "marker_forge", BEFORE_REPORT)
    },
    Capability {
        helpers: &["kit"],
        channels: true,
        ..cap("late_forged_lines_exit0", "late_forge", &[Exit])
    },
    Capability {
        helpers: &["kit"],
        ..cap("linger_after_marker", "linger_child", BEFORE_REPORT)
    },
    Capability {
        helpers: &["report"],
        plugin_only: true,
        ..cap("hook_plugin_module", "hook_plugin", &[Plugin])
    },
    Capability {
        runs: 2,
        subs: &["repo_config", "home_gitconfig", "xdg_config"],
        ..cap("next_run_git_filter", "next_git_filter", ANY)
    },
    Capability {
        runs: 2,
        subs: &["usercustomize", "pth"],
        ..cap("next_run_user_site", "next_user_site", ANY)
    },
    Capability {
        runs: 2,
        ..cap("next_run_daemon", "next_daemon", ANY)
    },
    Capability {
        subs: &["tests_conftest", "unchecked_pyc"],
        ..cap("runtime_written_file", "runtime_file", &[Boot, Plugin])
    },
];

/// Output channels of the forging capabilities (`_EC_CHANNEL`: where the real output is found,
/// then how it is written).
pub const CHANNELS: &[&str] = &[
    "parent+write",
    "scan+write",
    "scan+devstdout",
    "scan+procfd1",
    "scan+open1",
    "parent+dunder",
];

impl Capability {
    pub fn fits(&self, d: &Door) -> bool {
        self.timings.contains(&d.timing)
            && !(self.main_thread && d.thread)
            && (!self.plugin_only || d.plugin)
    }
}

// ---------------------------------------------------------------------------------------------
// Spellings
// ---------------------------------------------------------------------------------------------

/// How a module is reached.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Access {
    ImportModule,
    DunderImport,
    SysModules,
    VarsSys,
    Heap,
    Frames,
    Attrgetter,
    BuiltinsDict,
}

/// How a name is written (built at run time).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Enc {
    Plain,
    Concat,
    Chr,
    Reversed,
    Bytes,
    Rot13,
    Format,
    B64,
    Hex,
}

/// The whole block hidden as data and executed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CodeKind {
    ExecStr,
    ExecB64,
    ExecZlib,
    Marshal,
    Pickle,
    EvalCompile,
    FunctionType,
    /// The module's source is in a codec the package registers first (`# coding: calc_ec_rot`).
    CodecSource,
    /// `runpy.run_path` of a data file.
    Runpy,
    /// Executed in a synthetic module object (`type(sys)(name)`), whose names are copied back.
    ModuleType,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Spelling {
    Direct,
    Access(Access, Enc),
    Code(CodeKind),
}

const ACCESSES: &[Access] = &[
    Access::ImportModule,
    Access::DunderImport,
    Access::SysModules,
    Access::VarsSys,
    Access::Heap,
    Access::Frames,
    Access::Attrgetter,
    Access::BuiltinsDict,
];
const ENCS: &[Enc] = &[
    Enc::Plain,
    Enc::Concat,
    Enc::Chr,
    Enc::Reversed,
    Enc::Bytes,
    Enc::Rot13,
    Enc::Format,
    Enc::B64,
    Enc::Hex,
];
const CODES: &[CodeKind] = &[
    CodeKind::ExecStr,
    CodeKind::ExecB64,
    CodeKind::ExecZlib,
    CodeKind::Marshal,
    CodeKind::Pickle,
    CodeKind::EvalCompile,
    CodeKind::FunctionType,
    CodeKind::CodecSource,
    CodeKind::Runpy,
    CodeKind::ModuleType,
];

/// The spellings of the CI sample: each access mechanism once (with a different encoding each),
/// every encoding once, every code kind.
pub fn ci_spellings() -> Vec<Spelling> {
    use Access as A;
    use Enc as E;
    let mut v = vec![
        Spelling::Direct,
        Spelling::Access(A::ImportModule, E::Plain),
        Spelling::Access(A::ImportModule, E::Concat),
        Spelling::Access(A::DunderImport, E::Chr),
        Spelling::Access(A::SysModules, E::Reversed),
        Spelling::Access(A::VarsSys, E::Bytes),
        Spelling::Access(A::Heap, E::Rot13),
        Spelling::Access(A::Frames, E::Format),
        Spelling::Access(A::Attrgetter, E::B64),
        Spelling::Access(A::BuiltinsDict, E::Hex),
    ];
    v.extend(CODES.iter().map(|&c| Spelling::Code(c)));
    v
}

/// Every spelling: each access mechanism × each encoding, and every code kind.
pub fn all_spellings() -> Vec<Spelling> {
    let mut v = vec![Spelling::Direct];
    for &a in ACCESSES {
        for &e in ENCS {
            v.push(Spelling::Access(a, e));
        }
    }
    v.extend(CODES.iter().map(|&c| Spelling::Code(c)));
    v
}

impl Spelling {
    pub fn name(&self) -> String {
        match self {
            Spelling::Direct => "direct".into(),
            Spelling::Access(a, e) => format!("{a:?}+{e:?}").to_lowercase(),
            Spelling::Code(c) => format!("{c:?}").to_lowercase(),
        }
    }
}

/// A Python string literal (JSON's escapes are Python's).
pub fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn rot13(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' => (((c as u8 - b'a' + 13) % 26) + b'a') as char,
            'A'..='Z' => (((c as u8 - b'A' + 13) % 26) + b'A') as char,
            _ => c,
        })
        .collect()
}

pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Split a name into up to three pieces.
fn pieces(s: &str) -> Vec<String> {
    let c: Vec<char> = s.chars().collect();
    let k = c.len().div_ceil(3).max(1);
    c.chunks(k).map(|p| p.iter().collect()).collect()
}

fn codes(s: &str, f: impl Fn(u32) -> String) -> String {
    s.bytes()
        .map(|b| f(b as u32))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `s` written so it exists only at run time.
fn encode(s: &str, enc: Enc, prelude: &mut BTreeSet<&'static str>) -> String {
    if s.is_empty() {
        return py_str(s);
    }
    match enc {
        Enc::Plain => py_str(s),
        Enc::Concat => format!(
            "({})",
            pieces(s)
                .iter()
                .map(|p| py_str(p))
                .collect::<Vec<_>>()
                .join(" + ")
        ),
        Enc::Chr => format!("\"\".join(map(chr, [{}]))", codes(s, |b| b.to_string())),
        Enc::Reversed => format!("{}[::-1]", py_str(&s.chars().rev().collect::<String>())),
        Enc::Bytes => format!("bytes([{}]).decode()", codes(s, |b| b.to_string())),
        Enc::Rot13 => {
            prelude.insert("import codecs as _ec_codecs\n");
            format!("_ec_codecs.decode({}, \"rot13\")", py_str(&rot13(s)))
        }
        Enc::Format => {
            let p = pieces(s);
            format!(
                "\"{}\".format({})",
                "{}".repeat(p.len()),
                p.iter().map(|x| py_str(x)).collect::<Vec<_>>().join(", ")
            )
        }
        Enc::B64 => {
            prelude.insert("import base64 as _ec_b64\n");
            format!(
                "_ec_b64.b64decode({}).decode()",
                py_str(&base64(s.as_bytes()))
            )
        }
        Enc::Hex => format!("bytes.fromhex({}).decode()", py_str(&hex::encode(s))),
    }
}

/// The definitions of `_ec_m(name)` (a module) and `_ec_g(obj, name)` (an attribute) for an
/// access mechanism, themselves written with `S(...)` tokens.
fn access_prelude(a: Access) -> &'static str {
    match a {
        Access::ImportModule => {
            "import importlib as _ec_il\n_ec_m = getattr(_ec_il, S(\"import_module\"))\n_ec_g = getattr\n"
        }
        Access::DunderImport => "_ec_m = lambda n: __import__(n, fromlist=[\"_\"])\n_ec_g = getattr\n",
        Access::SysModules => {
            "import sys as _ec_sys\n\n\ndef _ec_m(n):\n    mods = getattr(_ec_sys, S(\"modules\"))\n    if n not in mods:\n        __import__(n)\n    return mods[n]\n\n\n_ec_g = getattr\n"
        }
        Access::VarsSys => {
            "import sys as _ec_sys\n\n\ndef _ec_m(n):\n    mods = vars(_ec_sys)[S(\"modules\")]\n    if n not in mods:\n        __import__(n)\n    return mods[n]\n\n\ndef _ec_g(o, n):\n    return vars(o)[n] if type(o) is type(_ec_sys) and n in vars(o) else getattr(o, n)\n"
        }
        Access::Heap => {
            "import gc as _ec_gc\n_ec_seen = {}\n\n\ndef _ec_m(n):\n    if n not in _ec_seen:\n        for o in getattr(_ec_gc, S(\"get_objects\"))():\n            if type(o) is type(_ec_gc) and getattr(o, \"__name__\", None) == n:\n                _ec_seen[n] = o\n                break\n        else:\n            o = __import__(n)\n            for part in n.split(\".\")[1:]:\n                o = getattr(o, part)\n            _ec_seen[n] = o\n    return _ec_seen[n]\n\n\n_ec_g = getattr\n"
        }
        Access::Frames => {
            "import inspect as _ec_insp\n\n\ndef _ec_sysmod():\n    f = getattr(_ec_insp, S(\"currentframe\"))()\n    while f is not None:\n        s = getattr(f, S(\"f_globals\")).get(\"sys\")\n        if type(s) is type(_ec_insp) and hasattr(s, S(\"modules\")):\n            return s\n        f = getattr(f, S(\"f_back\"))\n    return __import__(\"sys\")\n\n\ndef _ec_m(n):\n    mods = getattr(_ec_sysmod(), S(\"modules\"))\n    if n not in mods:\n        __import__(n)\n    return mods[n]\n\n\n_ec_g = getattr\n"
        }
        Access::Attrgetter => {
            "import operator as _ec_op\nimport sys as _ec_sys\n\n\ndef _ec_g(o, n):\n    return _ec_op.attrgetter(n)(o)\n\n\ndef _ec_m(n):\n    mods = _ec_op.attrgetter(S(\"modules\"))(_ec_sys)\n    if n not in mods:\n        __import__(n)\n    return mods[n]\n"
        }
        Access::BuiltinsDict => {
            "_ec_bd = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)\n\n\ndef _ec_m(n):\n    return _ec_bd[S(\"__import__\")](n, fromlist=[\"_\"])\n\n\ndef _ec_g(o, n):\n    return _ec_bd[S(\"getattr\")](o, n)\n"
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The token renderer
// ---------------------------------------------------------------------------------------------

/// Index just past the Python string literal starting at `i` (prefixes and triple quotes).
fn skip_string(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_alphabetic() {
        i += 1;
    }
    let q = b[i];
    let triple = b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q;
    i += if triple { 3 } else { 1 };
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == q && (!triple || (b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q)) {
            return i + if triple { 3 } else { 1 };
        }
        i += 1;
    }
    b.len()
}

/// Whether a string literal starts at `i` (a quote, or a short prefix then a quote).
fn string_start(b: &[u8], i: usize) -> bool {
    let mut j = i;
    while j < b.len() && j - i < 2 && matches!(b[j], b'r' | b'b' | b'f' | b'R' | b'B' | b'F') {
        j += 1;
    }
    j < b.len() && matches!(b[j], b'"' | b'\'') && (j == i || i == 0 || !is_ident(b[i - 1]))
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The top-level comma-separated arguments of the call whose `(` is at `open`, and the index
/// just past its `)`.
fn call_args(src: &str, open: usize) -> (Vec<&str>, usize) {
    let b = src.as_bytes();
    let (mut depth, mut i, mut start) = (0usize, open, open + 1);
    let mut args = Vec::new();
    while i < b.len() {
        if string_start(b, i) {
            i = skip_string(b, i);
            continue;
        }
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    args.push(src[start..i].trim());
                    return (args, i + 1);
                }
            }
            b',' if depth == 1 => {
                args.push(src[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    panic!("unbalanced call in template: {}", &src[open..]);
}

/// The value of a plain double-quoted Python literal (`"..."` or `S("...")`).
fn literal(arg: &str) -> String {
    let inner = arg
        .strip_prefix("S(")
        .and_then(|a| a.strip_suffix(')'))
        .unwrap_or(arg)
        .trim();
    let body = inner
        .strip_prefix('"')
        .and_then(|a| a.strip_suffix('"'))
        .unwrap_or_else(|| panic!("template token argument is not a literal: {arg}"));
    let mut out = String::new();
    let mut it = body.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Renders the `M`/`G`/`S` tokens of template text for one spelling (`Direct` for the code
/// kinds, whose block is rendered plainly and then hidden whole).
struct Renderer {
    enc: Option<Enc>,
    /// Module-level lines the rendering needs (hoisted imports, encoder imports).
    prelude: BTreeSet<&'static str>,
    imports: BTreeMap<String, String>,
}

impl Renderer {
    fn new(sp: Spelling) -> Renderer {
        Renderer {
            enc: match sp {
                Spelling::Access(_, e) => Some(e),
                _ => None,
            },
            prelude: BTreeSet::new(),
            imports: BTreeMap::new(),
        }
    }

    fn name(&mut self, s: &str) -> String {
        match self.enc {
            None => py_str(s),
            Some(e) => encode(s, e, &mut self.prelude),
        }
    }

    fn render(&mut self, src: &str) -> String {
        assert!(src.is_ascii(), "templates are ASCII");
        let b = src.as_bytes();
        let mut out = String::new();
        let mut i = 0;
        while i < b.len() {
            if string_start(b, i) {
                let j = skip_string(b, i);
                out.push_str(&src[i..j]);
                i = j;
                continue;
            }
            if b[i] == b'#' {
                let j = src[i..].find('\n').map_or(b.len(), |k| i + k);
                out.push_str(&src[i..j]);
                i = j;
                continue;
            }
            let token = (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b'.'))
                && b.len() > i + 1
                && b[i + 1] == b'('
                && matches!(b[i], b'M' | b'G' | b'S');
            if !token {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let (args, end) = call_args(src, i + 1);
            out.push_str(&match b[i] {
                b'S' => self.name(&literal(args[0])),
                b'M' => {
                    let m = literal(args[0]);
                    if self.enc.is_none() {
                        let alias = format!("_ec_{}", m.replace('.', "_"));
                        self.imports.insert(m, alias.clone());
                        alias
                    } else {
                        format!("_ec_m({})", self.name(&m))
                    }
                }
                _ => {
                    let obj = self.render(args[0]);
                    let attr = literal(args[1]);
                    if self.enc.is_none() {
                        format!("{obj}.{attr}")
                    } else {
                        format!("_ec_g({obj}, {})", self.name(&attr))
                    }
                }
            });
            i = end;
        }
        out
    }

    /// Rendered text with its hoisted imports and encoder imports first.
    fn section(sp: Spelling, src: &str) -> String {
        let mut r = Renderer::new(sp);
        let mut head = String::new();
        if let Spelling::Access(a, _) = sp {
            head = r.render(access_prelude(a));
        }
        let body = r.render(src);
        let mut out: String = r.prelude.iter().copied().collect();
        for (m, alias) in &r.imports {
            let _ = writeln!(out, "import {m} as {alias}");
        }
        out + &head + &body
    }
}

// ---------------------------------------------------------------------------------------------
// Hiding a whole block (code kinds)
// ---------------------------------------------------------------------------------------------

/// Encodings that need Python itself (zlib, marshal), computed once per text.
fn py_encode(kind: CodeKind, src: &str) -> String {
    static CACHE: OnceLock<Mutex<HashMap<(String, String), String>>> = OnceLock::new();
    let key = (format!("{kind:?}"), src.to_string());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap().get(&key) {
        return v.clone();
    }
    let prog = match kind {
        CodeKind::ExecZlib => "import sys, zlib, base64; sys.stdout.write(base64.b64encode(zlib.compress(sys.stdin.buffer.read())).decode())",
        CodeKind::Marshal => "import sys, marshal; sys.stdout.write(marshal.dumps(compile(sys.stdin.read(), '<calc>', 'exec')).hex())",
        _ => unreachable!(),
    };
    let mut child = Command::new("python3")
        .args(["-c", prog])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(src.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "encoding {kind:?} failed");
    let v = String::from_utf8(out.stdout).unwrap();
    cache.lock().unwrap().insert(key, v.clone());
    v
}

/// A protocol-0 pickle whose loading calls `exec(src)`.
fn pickle_exec(src: &str) -> String {
    let mut esc = String::new();
    for c in src.chars() {
        match c {
            '\\' | '\n' | '\r' => {
                let _ = write!(esc, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let _ = write!(esc, "\\u{:04x}", c as u32);
            }
            c => esc.push(c),
        }
    }
    format!("cbuiltins\nexec\n(V{esc}\ntR.")
}

/// What is stored (as a literal or in a data file) and the statements that run it, given an
/// expression that evaluates to the stored text.
fn hide(kind: CodeKind, src: &str) -> (String, fn(&str) -> String) {
    match kind {
        CodeKind::ExecStr => (src.into(), |x| format!("exec({x})\n")),
        CodeKind::ExecB64 => (base64(src.as_bytes()), |x| {
            format!("import base64 as _ec_b64h\nexec(_ec_b64h.b64decode({x}))\n")
        }),
        CodeKind::ExecZlib => (py_encode(kind, src), |x| {
            format!("import base64 as _ec_b64h\nimport zlib as _ec_zl\nexec(_ec_zl.decompress(_ec_b64h.b64decode({x})))\n")
        }),
        CodeKind::Marshal => (py_encode(kind, src), |x| {
            format!("import marshal as _ec_ms\nexec(_ec_ms.loads(bytes.fromhex({x})))\n")
        }),
        CodeKind::Pickle => (pickle_exec(src), |x| {
            format!("import pickle as _ec_pk\n_ec_pk.loads({x}.encode(\"latin-1\"))\n")
        }),
        CodeKind::EvalCompile => (src.into(), |x| {
            format!("eval(compile({x}, \"<calc>\", \"exec\"))\n")
        }),
        CodeKind::FunctionType => (src.into(), |x| {
            format!("import types as _ec_ty\n_ec_ty.FunctionType(compile({x}, \"<calc>\", \"exec\"), globals())()\n")
        }),
        CodeKind::ModuleType => (src.into(), |x| {
            format!("import sys as _ec_sysm\n_ec_mt = type(_ec_sysm)(\"calc._ec_synthetic\")\nexec(compile({x}, \"<calc>\", \"exec\"), vars(_ec_mt))\nglobals().update({{k: v for k, v in vars(_ec_mt).items() if k.startswith(\"_ec\")}})\n")
        }),
        CodeKind::CodecSource | CodeKind::Runpy => (src.into(), exec_text),
    }
}

/// The loader of a data file holding plain source.
fn exec_text(x: &str) -> String {
    format!("exec(compile({x}, \"<calc>\", \"exec\"))\n")
}

/// The codec the package registers before importing a module written in it.
const CODEC_REGISTRATION: &str = "import codecs as _ec_codecs\n\n\ndef _ec_search(name):\n    if name != \"calc_ec_rot\":\n        return None\n\n    def decode(data, errors=\"strict\"):\n        return _ec_codecs.decode(bytes(data).decode(\"utf-8\"), \"rot13\"), len(data)\n\n    def encode(text, errors=\"strict\"):\n        return _ec_codecs.encode(text, \"rot13\").encode(), len(text)\n\n    class Inc(_ec_codecs.BufferedIncrementalDecoder):\n        def _buffer_decode(self, data, errors, final):\n            return decode(data) if final else (\"\", 0)\n\n    class Reader(_ec_codecs.StreamReader):\n        def decode(self, data, errors=\"strict\"):\n            return decode(data)\n\n    return _ec_codecs.CodecInfo(encode, decode, name=\"calc_ec_rot\", incrementaldecoder=Inc, streamreader=Reader)\n\n\n_ec_codecs.register(_ec_search)\n";

// ---------------------------------------------------------------------------------------------
// Placements
// ---------------------------------------------------------------------------------------------

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DataFormat {
    Txt,
    Json,
    Cfg,
    Dat,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Appended to `calc/__init__.py`.
    Init,
    /// `calc/_compat.py`, imported by the package.
    Submodule,
    /// `calc_ext.py` at the repository root, imported by the package.
    NewModule,
    /// `calc_support/__init__.py`, imported by the package.
    ShimPackage,
    /// `calc/_data.<ext>`, read and executed by the package.
    Data(DataFormat),
    /// `tests/calc_ec_helpers.py`, imported by the package (a test path: the harness refuses it).
    TestPath,
    /// A module shadowing `name` at the repository root (a package when the real one is).
    Shadow { name: String, package: bool },
    /// A metadata directory with a pytest11 entry point.
    Metadata(&'static str),
    /// A runner configuration file: (syntax, file).
    Config(&'static str, &'static str),
    /// A conftest.py at this path.
    Conftest(&'static str),
}

impl Placement {
    pub fn name(&self) -> String {
        match self {
            Placement::Data(f) => format!("data_{f:?}").to_lowercase(),
            Placement::Shadow { name, .. } => format!("shadow:{name}"),
            Placement::Metadata(d) => format!("metadata:{d}"),
            Placement::Config(s, _) => format!("config:{s}"),
            Placement::Conftest(p) => format!("conftest:{p}"),
            p => format!("{p:?}").to_lowercase(),
        }
    }

    /// A placement whose path the harness refuses outright (a test path).
    pub fn test_path(&self) -> bool {
        matches!(
            self,
            Placement::TestPath | Placement::Conftest("tests/conftest.py")
        )
    }
}

pub const IN_PACKAGE: &[Placement] = &[
    Placement::Init,
    Placement::Submodule,
    Placement::NewModule,
    Placement::ShimPackage,
    Placement::Data(DataFormat::Txt),
    Placement::Data(DataFormat::Json),
    Placement::Data(DataFormat::Cfg),
    Placement::Data(DataFormat::Dat),
    Placement::TestPath,
];

/// Metadata directories (importlib.metadata matches the suffix in any letter case).
pub const METADATA_DIRS: &[&str] = &[
    "calc_ec.egg-info",
    "calc_ec-0.1.dist-info",
    "Calc_Ec.Egg-Info",
    "CALC_EC-0.1.DIST-INFO",
    "calc_ec.EGG-info",
];

/// (syntax, file) of each runner configuration the fixture's pytest reads before `setup.cfg`.
pub const CONFIGS: &[(&str, &str)] = &[
    ("pytest_toml", "pytest.toml"),
    ("dot_pytest_toml", ".pytest.toml"),
    ("pytest_ini", "pytest.ini"),
    ("dot_pytest_ini", ".pytest.ini"),
    ("pyproject_ini_options", "pyproject.toml"),
    ("pyproject_native", "pyproject.toml"),
    ("pyproject_toml_escape", "pyproject.toml"),
    ("pyproject_dotted_keys", "pyproject.toml"),
    ("pyproject_inline_table", "pyproject.toml"),
    ("tox_ini", "tox.ini"),
    ("setup_cfg", "setup.cfg"),
    ("setup_cfg_no_space", "setup.cfg"),
];

pub const CONFTESTS: &[&str] = &["conftest.py", "tests/conftest.py"];

/// A configuration file text setting each key to its values in `syntax`.
fn config_text(syntax: &str, keys: &[(&str, &[&str])]) -> String {
    let list = |values: &[&str]| {
        values
            .iter()
            .map(|v| py_str(v))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let each =
        |f: &dyn Fn(&str, &[&str]) -> String| keys.iter().map(|(k, v)| f(k, v)).collect::<String>();
    let toml = || each(&|k, v| format!("{k} = [{}]\n", list(v)));
    let ini = || each(&|k, v| format!("{k} = {}\n", v.join(" ")));
    match syntax {
        "pytest_toml" | "dot_pytest_toml" => format!("[pytest]\n{}", toml()),
        "pytest_ini" | "dot_pytest_ini" | "tox_ini" => format!("[pytest]\n{}", ini()),
        "pyproject_ini_options" => format!("[tool.pytest.ini_options]\n{}", toml()),
        "pyproject_native" => format!("[tool.pytest]\n{}", toml()),
        "pyproject_toml_escape" => format!("[tool.\"\\u0070ytest\".ini_options]\n{}", toml()),
        "pyproject_dotted_keys" => format!(
            "[tool]\n{}",
            each(&|k, v| format!("pytest.ini_options.{k} = [{}]\n", list(v)))
        ),
        "pyproject_inline_table" => format!(
            "tool = {{ pytest = {{ ini_options = {{ {} }} }} }}\n",
            keys.iter()
                .map(|(k, v)| format!("{k} = [{}]", list(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "setup_cfg" => format!("[tool:pytest]\ntestpaths = tests\n{}", ini()),
        "setup_cfg_no_space" => format!(
            "[tool:pytest]\ntestpaths = tests\n{}",
            each(&|k, v| format!("{k}={}\n", v.concat()))
        ),
        s => panic!("unknown config syntax {s}"),
    }
}

/// Whether a spelling can be used in a placement.
pub fn spelling_fits(sp: Spelling, p: &Placement) -> bool {
    let module_file = matches!(
        p,
        Placement::Submodule | Placement::NewModule | Placement::ShimPackage | Placement::TestPath
    );
    match sp {
        Spelling::Code(CodeKind::CodecSource) => module_file,
        Spelling::Code(CodeKind::Runpy) => *p == Placement::Data(DataFormat::Txt),
        _ => true,
    }
}

pub fn placement_fits(d: &Door, p: &Placement) -> bool {
    match d.kind {
        DoorKind::Trigger(_) | DoorKind::Lazy | DoorKind::FirstCall => IN_PACKAGE.contains(p),
        DoorKind::Shadow => matches!(p, Placement::Shadow { .. }),
        DoorKind::Metadata => matches!(p, Placement::Metadata(_)),
        DoorKind::ConfigPlugin | DoorKind::ConfigPythonpath => matches!(p, Placement::Config(..)),
        DoorKind::Conftest => matches!(p, Placement::Conftest(_)),
    }
}

// ---------------------------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------------------------

fn template_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harness_support/redteam")
}

fn template(rel: &str) -> String {
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().unwrap().get(rel) {
        return t.clone();
    }
    let p = template_dir().join(rel);
    let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    cache.lock().unwrap().insert(rel.into(), t.clone());
    t
}

/// Runs the capability once, quietly: a failing payload must not break the package's import.
const RUN_WRAPPER: &str =
    "def _ec_run():\n    try:\n        _ec_effect()\n    except Exception:\n        pass\n";

/// A shadow module that first puts the real module in its place (found on `sys.path` without the
/// repository root, executed with `sys.path` intact so the modules IT imports can be shadowed
/// too), then runs its block.
const SHADOW_GLUE: &str = "_ec_sysmod = M(\"sys\")\n_ec_here = G(M(\"os.path\"), \"abspath\")(__file__)\n_ec_root = G(M(\"os.path\"), \"dirname\")(_ec_here)\nif _ec_here.endswith(\"__init__.py\"):\n    _ec_root = G(M(\"os.path\"), \"dirname\")(_ec_root)\n_ec_rest = [p for p in G(_ec_sysmod, \"path\") if G(M(\"os.path\"), \"abspath\")(p or \".\") != _ec_root]\n_ec_spec = G(G(M(\"importlib.machinery\"), \"PathFinder\"), \"find_spec\")(__name__, _ec_rest)\n_ec_real = G(M(\"importlib.util\"), \"module_from_spec\")(_ec_spec)\nG(_ec_sysmod, S(\"modules\"))[__name__] = _ec_real\nG(_ec_spec, \"loader\").exec_module(_ec_real)\n";

// ---------------------------------------------------------------------------------------------
// Variants
// ---------------------------------------------------------------------------------------------

/// One point of the product, before rendering.
#[derive(Clone, Debug)]
pub struct Combo {
    pub cap: usize,
    pub sub: usize,
    pub channel: usize,
    pub door: usize,
    pub spelling: Spelling,
    pub placement: Placement,
}

/// A rendered variant: its files and its patch against the fixture's Base.
#[derive(Clone, Debug)]
pub struct Variant {
    pub id: String,
    pub capability: &'static str,
    pub sub: &'static str,
    pub channel: &'static str,
    pub door: &'static str,
    pub spelling: String,
    pub placement: String,
    pub runs: u8,
    /// The harness must refuse the patch's paths whatever it does (a test path).
    pub test_path: bool,
    /// Not in the Docker sample (a shadow of a host-only module, a host-only config syntax).
    pub host_only: bool,
    pub files: Vec<(String, String)>,
    pub patch: String,
}

impl Combo {
    pub fn capability(&self) -> &'static Capability {
        &CAPABILITIES[self.cap]
    }

    pub fn door(&self) -> &'static Door {
        &DOORS[self.door]
    }

    /// The block: constants, helpers, the capability, the run wrapper and the door's trigger
    /// (template text with tokens).
    fn block(&self, trigger: bool) -> String {
        let c = self.capability();
        let mut s = format!(
            "_EC_SUB = {}\n_EC_CHANNEL = {}\n_EC_TARGET = (\"calc\", \"add\")\n\n\n",
            py_str(c.subs[self.sub]),
            py_str(CHANNELS[self.channel]),
        );
        for h in c.helpers {
            s += &template(&format!("helpers/{h}.py"));
            s += "\n\n";
        }
        s += &template(&format!("effects/{}.py", c.template));
        if c.plugin_only {
            return s;
        }
        s += "\n\n";
        s += RUN_WRAPPER;
        if let (true, DoorKind::Trigger(t)) = (trigger, self.door().kind) {
            s += "\n\n";
            s += t;
        } else if trigger && !self.door().in_package() {
            s += "\n\n_ec_run()\n";
        }
        s
    }

    /// Python source of a module file holding `sections` (each rendered on its own, so a
    /// section's imports are hoisted only to its own start), in this combo's spelling.
    fn module_source(&self, sections: &[String]) -> String {
        match self.spelling {
            Spelling::Code(kind) => {
                let src: String = sections
                    .iter()
                    .map(|s| Renderer::section(Spelling::Direct, s))
                    .collect::<Vec<_>>()
                    .join("\n");
                let (stored, run) = hide(kind, &src);
                format!("_ec_blob = {}\n{}", py_str(&stored), run("_ec_blob"))
            }
            sp => sections
                .iter()
                .map(|s| Renderer::section(sp, s))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// Renders the files of the variant (paths relative to the repository root).
    pub fn files(&self) -> Vec<(String, String)> {
        let d = self.door();
        let block = self.block(true);
        let mut files = Vec::new();
        match (&self.placement, d.kind) {
            (Placement::Shadow { name, package }, _) => {
                let path = if *package {
                    format!("{name}/__init__.py")
                } else {
                    format!("{name}.py")
                };
                files.push((path, self.module_source(&[SHADOW_GLUE.into(), block])));
            }
            (Placement::Metadata(dir), _) => {
                let meta = if dir.to_lowercase().ends_with(".dist-info") {
                    "METADATA"
                } else {
                    "PKG-INFO"
                };
                files.push((
                    format!("{dir}/{meta}"),
                    "Metadata-Version: 2.1\nName: calc-ec\nVersion: 0.1\n".into(),
                ));
                files.push((
                    format!("{dir}/entry_points.txt"),
                    "[pytest11]\ncalc_ec = calc_ec_plugin\n".into(),
                ));
                files.push(("calc_ec_plugin.py".into(), self.module_source(&[block])));
            }
            (Placement::Config(syntax, file), DoorKind::ConfigPlugin) => {
                files.push((
                    file.to_string(),
                    config_text(syntax, &[("addopts", &["-p", "calc_ec_plugin"])]),
                ));
                files.push(("calc_ec_plugin.py".into(), self.module_source(&[block])));
            }
            (Placement::Config(syntax, file), _) => {
                // The root conftest.py would put the root first again in the default import mode.
                let keys: &[(&str, &[&str])] = &[
                    ("pythonpath", &["shim"]),
                    ("addopts", &["--import-mode=importlib"]),
                ];
                files.push((file.to_string(), config_text(syntax, keys)));
                files.push((
                    "shim/calc/__init__.py".into(),
                    format!("{CALC_BASE}\n\n{}", self.module_source(&[block])),
                ));
            }
            (Placement::Conftest(path), _) => {
                files.push((path.to_string(), self.module_source(&[block])));
            }
            (p, _) => files.extend(self.package_files(p, &block)),
        }
        files
    }

    /// The package's files for an in-package door: the block in its placement, and the link
    /// from `calc/__init__.py` (import or loader, then the lazy / first-call door).
    fn package_files(&self, p: &Placement, block: &str) -> Vec<(String, String)> {
        let mut files = Vec::new();
        let mut init = format!("{CALC_BASE}\n\n");
        let module = |path: &str, import: &str| (path.to_string(), import.to_string());
        let (run, linked) = match p {
            Placement::Init => {
                init += &self.module_source(&[block.to_string()]);
                ("_ec_run", None)
            }
            Placement::Submodule => ("_ec_mod._ec_run", Some(module("calc/_compat.py", "from . import _compat as _ec_mod\n"))),
            Placement::NewModule => ("_ec_mod._ec_run", Some(module("calc_ext.py", "import calc_ext as _ec_mod\n"))),
            Placement::ShimPackage => ("_ec_mod._ec_run", Some(module("calc_support/__init__.py", "import calc_support as _ec_mod\n"))),
            Placement::TestPath => ("_ec_mod._ec_run", Some(module(
                "tests/calc_ec_helpers.py",
                "try:\n    import calc_ec_helpers as _ec_mod\nexcept ImportError:\n    _ec_mod = None\n",
            ))),
            Placement::Data(fmt) => {
                let (stored, run) = match self.spelling {
                    Spelling::Code(k) => {
                        hide(k, &Renderer::section(Spelling::Direct, block))
                    }
                    sp => (Renderer::section(sp, block), exec_text as fn(&str) -> String),
                };
                let ext = format!("{fmt:?}").to_lowercase();
                let (content, read) = match fmt {
                    DataFormat::Txt => (stored.clone(), "_ec_blob = open(_ec_path).read()\n".to_string()),
                    DataFormat::Json => (
                        format!("{{\"calc\": {{\"blob\": {}}}}}\n", py_str(&stored)),
                        "import json as _ec_js\n_ec_blob = _ec_js.load(open(_ec_path))[\"calc\"][\"blob\"]\n".into(),
                    ),
                    DataFormat::Cfg => (
                        format!("[calc]\nblob = {}\n", base64(stored.as_bytes())),
                        "import base64 as _ec_b64d\nimport configparser as _ec_cp\n_ec_cfg = _ec_cp.ConfigParser()\n_ec_cfg.read(_ec_path)\n_ec_blob = _ec_b64d.b64decode(_ec_cfg[\"calc\"][\"blob\"]).decode()\n".into(),
                    ),
                    DataFormat::Dat => (
                        hex::encode(&stored),
                        "_ec_blob = bytes.fromhex(open(_ec_path).read()).decode()\n".into(),
                    ),
                };
                files.push((format!("calc/_data.{ext}"), content));
                let _ = write!(
                    init,
                    "import os as _ec_os\n_ec_path = _ec_os.path.join(_ec_os.path.dirname(__file__), \"_data.{ext}\")\n"
                );
                if self.spelling == Spelling::Code(CodeKind::Runpy) {
                    init += "import runpy as _ec_rp\nglobals().update({k: v for k, v in _ec_rp.run_path(_ec_path).items() if k.startswith(\"_ec\")})\n";
                } else {
                    init += &read;
                    init += &run("_ec_blob");
                }
                ("_ec_run", None)
            }
            other => panic!("not a package placement: {other:?}"),
        };
        if let Some((path, import)) = linked {
            let source = if self.spelling == Spelling::Code(CodeKind::CodecSource) {
                init += CODEC_REGISTRATION;
                let plain = Renderer::section(Spelling::Direct, block);
                format!("# -*- coding: calc_ec_rot -*-\n{}", rot13(&plain))
            } else {
                self.module_source(&[block.to_string()])
            };
            files.push((path, source));
            init += &import;
        }
        match self.door().kind {
            DoorKind::Lazy => {
                let _ = write!(
                    init,
                    "\n\n_ec_add = add\ndel add\n_ec_lazy = []\n\n\ndef __getattr__(name):\n    if name == \"add\":\n        if not _ec_lazy:\n            _ec_lazy.append(1)\n            {run}()\n        return _ec_add\n    raise AttributeError(name)\n"
                );
            }
            DoorKind::FirstCall => {
                let _ = write!(
                    init,
                    "\n\n_ec_first = add\n_ec_calls = []\n\n\ndef add(a, b):\n    if not _ec_calls:\n        _ec_calls.append(1)\n        {run}()\n    return _ec_first(a, b)\n\n\nadd.__wrapped__ = _ec_first\n"
                );
            }
            _ => {}
        }
        files.push(("calc/__init__.py".into(), init));
        files
    }

    pub fn id(&self) -> String {
        let c = self.capability();
        let mut cap = c.name.to_string();
        if !c.subs[self.sub].is_empty() {
            cap = format!("{cap}[{}]", c.subs[self.sub]);
        }
        if c.channels {
            cap = format!("{cap}<{}>", CHANNELS[self.channel]);
        }
        format!(
            "{cap}/{}/{}/{}",
            self.door().name,
            self.spelling.name(),
            self.placement.name()
        )
    }

    pub fn build(&self, scratch: &Scratch) -> Variant {
        let files = self.files();
        let c = self.capability();
        Variant {
            id: self.id(),
            capability: c.name,
            sub: c.subs[self.sub],
            channel: if c.channels {
                CHANNELS[self.channel]
            } else {
                ""
            },
            door: self.door().name,
            spelling: self.spelling.name(),
            placement: self.placement.name(),
            runs: c.runs,
            test_path: self.placement.test_path(),
            host_only: matches!(
                self.placement,
                Placement::Shadow { .. }
                    | Placement::Config("pytest_toml" | "dot_pytest_toml" | "pyproject_native", _)
            ),
            patch: scratch.diff(&files),
            files,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Diffs
// ---------------------------------------------------------------------------------------------

/// A clone of the fixture at Base where variants are written and diffed by git.
pub struct Scratch {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
}

impl Scratch {
    pub fn new() -> Scratch {
        let f = fixture();
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("r");
        git(tmp.path(), &["clone", "-q", f.dir.to_str().unwrap(), "r"]);
        git(&ws, &["checkout", "-q", &f.base]);
        Scratch { _tmp: tmp, ws }
    }

    /// The git diff of Base after writing `files`.
    pub fn diff(&self, files: &[(String, String)]) -> String {
        for (p, c) in files {
            let path = self.ws.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        }
        git(&self.ws, &["add", "-A"]);
        let d = git(&self.ws, &["diff", "--cached"]) + "\n";
        git(&self.ws, &["reset", "-q", "--hard"]);
        git(&self.ws, &["clean", "-q", "-fdx"]);
        d
    }
}

// ---------------------------------------------------------------------------------------------
// Shadow discovery
// ---------------------------------------------------------------------------------------------

/// Top-level modules the runner imports on the fixture from the repository root when a module of
/// that name is there: the candidates are what `python3 -X importtime -m pytest` imports beyond a
/// bare interpreter; each is then shadowed (transparently: the shadow loads the real module in
/// its place) in one probe run, and those whose shadow ran are kept. Each with whether it is a
/// package and whether it is in the standard library.
pub fn runner_imports() -> &'static [(String, bool, bool)] {
    static S: OnceLock<Vec<(String, bool, bool)>> = OnceLock::new();
    S.get_or_init(|| {
        let f = fixture();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("r");
        git(dir.path(), &["clone", "-q", f.dir.to_str().unwrap(), "r"]);
        git(&ws, &["checkout", "-q", &f.base]);
        std::fs::write(ws.join("tests/test_calc.py"), crate::harness_support::official_test_file()).unwrap();
        let names = |args: &[&str]| -> BTreeSet<String> {
            let out = Command::new("python3")
                .args(["-X", "importtime"])
                .args(args)
                .current_dir(&ws)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .output()
                .expect("python3 runs");
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter_map(|l| l.strip_prefix("import time:"))
                .filter_map(|l| l.rsplit('|').next())
                .filter_map(|n| n.trim().split('.').next().map(str::to_string))
                .filter(|n| !n.is_empty() && n != "package")
                .collect()
        };
        let pytest = ["-m", "pytest", "-p", "no:cacheprovider", "tests/test_calc.py"];
        let mut run = names(&pytest);
        // Plugins the runner loads by entry point (their modules are imported at start).
        let eps = Command::new("python3")
            .args(["-c", "from importlib.metadata import entry_points\nfor e in entry_points(group='pytest11'):\n    print(e.value.split(':')[0].split('.')[0])"])
            .output()
            .expect("python3 runs");
        run.extend(String::from_utf8_lossy(&eps.stdout).lines().map(str::to_string));
        let candidates: Vec<String> = run
            .difference(&names(&["-c", "pass"]))
            .filter(|n| !n.starts_with('_') || n.as_str() == "_pytest")
            .cloned()
            .collect();
        let probe = "import importlib.util, json, sys\nout = []\nfor n in sys.argv[1:]:\n    s = importlib.util.find_spec(n)\n    if s is not None and s.origin not in (None, 'built-in', 'frozen'):\n        out.append([n, s.submodule_search_locations is not None, n in sys.stdlib_module_names])\nprint(json.dumps(out))\n";
        let out = Command::new("python3")
            .args(["-c", probe])
            .args(&candidates)
            .current_dir(dir.path())
            .output()
            .expect("python3 runs");
        let found: Vec<(String, bool, bool)> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let log = dir.path().join("shadowed.log");
        let glue = Renderer::section(Spelling::Direct, SHADOW_GLUE);
        for (name, package, _) in &found {
            let path = if *package { ws.join(name).join("__init__.py") } else { ws.join(format!("{name}.py")) };
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let note = format!("\nwith open({}, \"a\") as _ec_f:\n    _ec_f.write(__name__ + \"\\n\")\n", py_str(log.to_str().unwrap()));
            std::fs::write(path, format!("{glue}{note}")).unwrap();
        }
        Command::new("python3")
            .args(pytest)
            .current_dir(&ws)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .expect("python3 runs");
        let ran: BTreeSet<String> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        found.into_iter().filter(|(n, _, _)| ran.contains(n)).collect()
    })
}

/// The shadow placements: every non-standard-library module the runner imports, and a few
/// standard-library ones (all of them in the full product).
pub fn shadow_placements(full: bool) -> Vec<Placement> {
    let all = runner_imports();
    let mut v: Vec<Placement> = all
        .iter()
        .filter(|(_, _, std)| !std)
        .map(|(n, p, _)| Placement::Shadow {
            name: n.clone(),
            package: *p,
        })
        .collect();
    let std: Vec<&(String, bool, bool)> = all.iter().filter(|(_, _, s)| *s).collect();
    let keep = if full { std.len() } else { 4.min(std.len()) };
    let step = (std.len() / keep.max(1)).max(1);
    v.extend(
        std.iter()
            .step_by(step)
            .take(keep)
            .map(|(n, p, _)| Placement::Shadow {
                name: n.clone(),
                package: *p,
            }),
    );
    v
}

// ---------------------------------------------------------------------------------------------
// Sampling
// ---------------------------------------------------------------------------------------------

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every capability with every compatible door; spellings, placements, sub-variants and
    /// channels rotate so each appears.
    Ci,
    /// As `Ci`, plus every capability × spelling and capability × placement pair.
    Pairs,
    /// The whole product (sub-variants crossed, channels rotated).
    Full,
}

pub fn placements_for(d: &Door, full: bool) -> Vec<Placement> {
    match d.kind {
        DoorKind::Shadow => shadow_placements(full),
        DoorKind::Metadata => METADATA_DIRS
            .iter()
            .map(|m| Placement::Metadata(m))
            .collect(),
        DoorKind::ConfigPlugin | DoorKind::ConfigPythonpath => CONFIGS
            .iter()
            .map(|(s, f)| Placement::Config(s, f))
            .collect(),
        DoorKind::Conftest => CONFTESTS.iter().map(|c| Placement::Conftest(c)).collect(),
        _ => IN_PACKAGE.to_vec(),
    }
}

/// A small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// Use counts for balanced choices: the least-used fitting option wins, ties broken by a
/// seeded order.
#[derive(Default)]
struct Uses(HashMap<String, usize>);

impl Uses {
    fn get(&self, k: &str) -> usize {
        self.0.get(k).copied().unwrap_or(0)
    }

    fn add(&mut self, k: String) {
        *self.0.entry(k).or_default() += 1;
    }
}

/// The least-used of `options` under `keys` (compared in order), the first in `options` on ties.
fn least<T: Clone>(options: &[T], uses: &Uses, keys: impl Fn(&T) -> Vec<String>) -> T {
    options
        .iter()
        .min_by_key(|o| keys(o).iter().map(|k| uses.get(k)).collect::<Vec<_>>())
        .cloned()
        .expect("a fitting option")
}

/// The combinations of `mode` (deterministic for a seed).
pub fn sample(mode: Mode, seed: u64) -> Vec<Combo> {
    let spellings = if mode == Mode::Ci {
        ci_spellings()
    } else {
        all_spellings()
    };
    let mut out = Vec::new();
    if mode == Mode::Full {
        for (ci, c) in CAPABILITIES.iter().enumerate() {
            for sub in 0..c.subs.len() {
                for (di, d) in DOORS.iter().enumerate().filter(|(_, d)| c.fits(d)) {
                    for p in placements_for(d, true) {
                        for &sp in spellings.iter().filter(|&&s| spelling_fits(s, &p)) {
                            let channel = if c.channels {
                                out.len() % CHANNELS.len()
                            } else {
                                0
                            };
                            out.push(Combo {
                                cap: ci,
                                sub,
                                channel,
                                door: di,
                                spelling: sp,
                                placement: p.clone(),
                            });
                        }
                    }
                }
            }
        }
        return out;
    }
    let mut rng = Rng::new(seed);
    let mut spellings = spellings;
    rng.shuffle(&mut spellings);
    let mut door_order: Vec<usize> = (0..DOORS.len()).collect();
    rng.shuffle(&mut door_order);
    let places: Vec<Vec<Placement>> = DOORS
        .iter()
        .map(|d| {
            let mut p = placements_for(d, false);
            rng.shuffle(&mut p);
            p
        })
        .collect();
    let mut uses = Uses::default();
    let push = |out: &mut Vec<Combo>,
                uses: &mut Uses,
                ci: usize,
                di: usize,
                sub: usize,
                at: Option<&Placement>| {
        let c = &CAPABILITIES[ci];
        let placement = at.cloned().unwrap_or_else(|| {
            least(&places[di], uses, |p| {
                vec![
                    format!("c{ci}p{}", p.name()),
                    format!("d{di}p{}", p.name()),
                    format!("p{}", p.name()),
                ]
            })
        });
        let fitting: Vec<Spelling> = spellings
            .iter()
            .copied()
            .filter(|s| spelling_fits(*s, &placement))
            .collect();
        let spelling = least(&fitting, uses, |s| {
            vec![format!("c{ci}s{}", s.name()), format!("s{}", s.name())]
        });
        let channel = least(&(0..CHANNELS.len()).collect::<Vec<_>>(), uses, |ch| {
            vec![format!("c{ci}ch{ch}")]
        });
        for k in [
            format!("c{ci}p{}", placement.name()),
            format!("d{di}p{}", placement.name()),
            format!("p{}", placement.name()),
            format!("c{ci}s{}", spelling.name()),
            format!("s{}", spelling.name()),
            format!("c{ci}d{di}"),
            format!("d{di}"),
        ] {
            uses.add(k);
        }
        if c.channels {
            uses.add(format!("c{ci}ch{channel}"));
        }
        out.push(Combo {
            cap: ci,
            sub,
            channel: if c.channels { channel } else { 0 },
            door: di,
            spelling,
            placement,
        });
    };
    for (ci, c) in CAPABILITIES.iter().enumerate() {
        let doors: Vec<usize> = door_order
            .iter()
            .copied()
            .filter(|&d| c.fits(&DOORS[d]))
            .collect();
        let mut rows = c.subs.len().max(CI_ROWS_PER_CAPABILITY);
        if c.channels {
            rows = rows.max(CHANNELS.len());
        }
        if mode == Mode::Pairs {
            rows = rows
                .max(doors.len())
                .max(spellings.len())
                .max(IN_PACKAGE.len());
        }
        for i in 0..rows {
            let di = least(&doors, &uses, |d| {
                vec![format!("c{ci}d{d}"), format!("d{d}")]
            });
            push(&mut out, &mut uses, ci, di, i % c.subs.len(), None);
        }
    }
    // Every placement of every door at least once (its capability: the least-used that fits).
    for (di, d) in DOORS.iter().enumerate() {
        let fitting: Vec<usize> = (0..CAPABILITIES.len())
            .filter(|&c| CAPABILITIES[c].fits(d))
            .collect();
        for p in &places[di] {
            if out.iter().any(|x| x.door == di && &x.placement == p) {
                continue;
            }
            let ci = least(&fitting, &uses, |c| {
                vec![format!("c{c}d{di}"), format!("c{c}")]
            });
            uses.add(format!("c{ci}"));
            let sub = uses.get(&format!("c{ci}")) % CAPABILITIES[ci].subs.len();
            push(&mut out, &mut uses, ci, di, sub, Some(p));
        }
    }
    out
}

/// Rows per capability in the CI sample (more when it has more sub-variants or channels).
pub const CI_ROWS_PER_CAPABILITY: usize = 5;

// ---------------------------------------------------------------------------------------------
// Plain runs (no sandbox, no guard)
// ---------------------------------------------------------------------------------------------

/// One plain run of a command.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlainRun {
    pub command: String,
    /// The exit code a naive harness reads: the LAST nonce marker line, else the shell's status.
    pub rc: Option<i32>,
    pub marker_seen: bool,
    /// A `PASSED` line for the judged node (short summary or verbose form).
    pub passed_line: bool,
    /// A `FAILED` line for the judged node.
    pub failed_line: bool,
    pub seconds: f64,
    #[serde(skip)]
    pub output: String,
}

impl PlainRun {
    /// A naive harness passes this run: exit 0 and a PASSED line for the judged test.
    pub fn works(&self) -> bool {
        self.rc == Some(0) && self.passed_line
    }
}

pub const NODE: &str = "tests/test_calc.py::test_add";

/// A fresh plain checkout of Base in which `command` runs once per entry of `candidates`: the
/// official (or bundle) test patch and that candidate patch applied, and between runs the
/// reference reset (`git reset --hard <base> && git clean -fdx`, which honours whatever git
/// configuration an earlier run left). Nothing else is reset: $HOME and $TMPDIR are shared by
/// the runs, as they are by the commands of one sandbox. The shell script has the harness's
/// shape: the command, then a nonce exit-code marker.
pub fn plain_sequence(test_patch: &str, candidates: &[&str], command: &str) -> Vec<PlainRun> {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("r");
    let home = tmp.path().join("home");
    let tmpdir = tmp.path().join("tmp");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmpdir).unwrap();
    git(tmp.path(), &["clone", "-q", f.dir.to_str().unwrap(), "r"]);
    git(&ws, &["checkout", "-q", &f.base]);
    std::fs::write(tmp.path().join("t.patch"), test_patch).unwrap();
    let envd = |c: &mut Command| {
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("TMPDIR", &tmpdir)
            .env("LANG", "C.UTF-8")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(&ws);
    };
    let shell = |script: &str| {
        let mut c = Command::new("bash");
        c.args(["-c", script]);
        envd(&mut c);
        let out = c.output().unwrap();
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "{script}: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    };
    let mut results = Vec::new();
    for (run, patch) in candidates.iter().enumerate() {
        let reset = format!("git reset -q --hard {} && git clean -q -fdx", f.base);
        let apply = if patch.trim().is_empty() {
            "git apply --whitespace=nowarn ../t.patch"
        } else {
            std::fs::write(tmp.path().join("c.patch"), patch).unwrap();
            "git apply --whitespace=nowarn ../c.patch ../t.patch"
        };
        // A run that cannot be prepared (an earlier run's state broke the reset or the apply)
        // ends the sequence; it does not count as working.
        let prepared = if run > 0 { shell(&reset) } else { Ok(()) }.and_then(|_| shell(apply));
        if let Err(e) = prepared {
            results.push(PlainRun {
                command: command.to_string(),
                rc: None,
                marker_seen: false,
                passed_line: false,
                failed_line: false,
                seconds: 0.0,
                output: format!("preparing run {}: {e}", run + 1),
            });
            break;
        }
        let nonce: u64 = rand::random();
        let marker = format!("__EXECCRITIC_RC_{nonce:016x}__=");
        let script = format!(
            "exec 2>&1\nexport COLUMNS=400\n__t0=$EPOCHREALTIME\n{command}\n__rc=$?; printf '\\n%s%d %s %s\\n' '{marker}' \"$__rc\" \"$__t0\" \"$EPOCHREALTIME\""
        );
        let mut c = Command::new("bash");
        c.args(["-c", &script]).stdin(Stdio::null());
        envd(&mut c);
        let t = Instant::now();
        let (status, output) = run_bounded(c, Duration::from_secs(60));
        let mut rc = None;
        for l in output.lines() {
            if let Some(v) = l.strip_prefix(&marker) {
                rc = v.split_whitespace().next().and_then(|x| x.parse().ok());
            }
        }
        let marker_seen = rc.is_some();
        let line_has = |word: &str| {
            output.lines().any(|l| {
                let l = l.trim();
                l == format!("{word} {NODE}")
                    || l.starts_with(&format!("{word} {NODE} "))
                    || l.starts_with(&format!("{NODE} {word}"))
            })
        };
        results.push(PlainRun {
            command: command.to_string(),
            rc: rc.or(status),
            marker_seen,
            passed_line: line_has("PASSED"),
            failed_line: line_has("FAILED"),
            seconds: t.elapsed().as_secs_f64(),
            output,
        });
    }
    // A daemon a variant started records its pid in $HOME: end it.
    if let Ok(pid) = std::fs::read_to_string(home.join(".calc-ec-daemon.pid")) {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    results
}

/// Runs `c` in its own process group, killing the group after `limit`; (exit status, output).
fn run_bounded(mut c: Command, limit: Duration) -> (Option<i32>, String) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    c.process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let pid = child.id() as i32;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().or_else(|| {
                use std::os::unix::process::ExitStatusExt;
                s.signal().map(|sig| 128 + sig)
            });
        }
        if t.elapsed() > limit {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Whatever still holds the output (a lingering child) gets the rest of the limit.
    while !reader.is_finished() && t.elapsed() < limit + Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = if reader.is_finished() {
        reader.join().unwrap()
    } else {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        b"<output still held open: reader abandoned>".to_vec()
    };
    (status, String::from_utf8_lossy(&out).into_owned())
}
