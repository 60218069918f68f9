//! Fuzz targets of the TOML configs (plans, SFT/GRPO runs, eval budgets, suite specs), which
//! the project reads with the `toml` crate (`toml::from_str` into its config structs).
//!
//! * `toml_differential`: structure-aware TOML texts (tables, arrays of tables, inline tables,
//!   dotted keys, strings of every kind with escapes, integers and floats at their edges, dates
//!   and times, duplicate keys and tables, then byte-level corruption) parsed by the crate (to a
//!   `toml::Table`, as the loaders do) and by Python's `tomllib` (one long-lived `python3`
//!   process, one JSON line per input): both accept or both refuse, and accepted values are
//!   equal. Normalised on purpose: every NaN is one value (its sign and payload are not
//!   compared), times to microseconds (tomllib truncates the fraction there), an integer
//!   outside `i64` is a refusal on both sides (TOML 1.0 leaves its range to the reader; tomllib
//!   reads any size, the crate refuses it), a float literal that overflows is what the crate
//!   makes of it: `1e309` a refusal, `-1e309` minus infinity (an asymmetry of the crate, 0.8;
//!   tomllib reads both as infinities, so its oracle refuses the first). One difference is accepted: a time with a 60th second (an RFC 3339 leap second) is
//!   read by the crate and refused by tomllib, whose `datetime` cannot hold it; none of our
//!   configs holds a time. Skipped, with a note, when `python3` cannot import `tomllib`
//!   (Python < 3.11).
//! * The same inputs through every config struct's deserialisation: no panic.

use crate::driver::fuzz;
use crate::oracle::{ask, Oracle};
use proptest::prelude::*;
use serde_json::{json, Value as J};
use std::sync::{Mutex, OnceLock};

/// Answers a TOML text with its value, tagged as in [`tagged`]. A positive float literal that
/// overflows (`1e309`) is refused, as the crate does (tomllib would read infinity); a negative
/// one stays `-inf`, as the crate reads it.
const PY: &str = r#"
import tomllib, datetime, struct
def t(x):
    return f"{x.hour:02}:{x.minute:02}:{x.second:02}.{x.microsecond:06}"
def tag(v):
    if isinstance(v, bool): return ["b", v]
    if isinstance(v, int):
        if not -2**63 <= v < 2**63: raise ValueError("integer outside i64")
        return ["i", str(v)]
    if isinstance(v, float):
        return ["f", "nan" if v != v else str(struct.unpack("<Q", struct.pack("<d", v))[0])]
    if isinstance(v, str): return ["s", v]
    if isinstance(v, datetime.datetime):
        off = v.utcoffset()
        return ["dt", v.date().isoformat(), t(v), None if off is None else int(off.total_seconds() // 60)]
    if isinstance(v, datetime.date): return ["d", v.isoformat()]
    if isinstance(v, datetime.time): return ["tm", t(v)]
    if isinstance(v, list): return ["a", [tag(x) for x in v]]
    return ["t", {k: tag(x) for k, x in v.items()}]
def parse_float(text):
    v = float(text)
    if v == float("inf") and "inf" not in text:
        raise ValueError("float literal overflows")
    return v
serve(lambda text: tag(tomllib.loads(text, parse_float=parse_float)))
"#;

fn tomllib() -> Option<&'static Mutex<Oracle>> {
    static ORACLE: OnceLock<Option<Mutex<Oracle>>> = OnceLock::new();
    ORACLE.get_or_init(|| Oracle::start("toml_differential", "tomllib", PY, &[])).as_ref()
}

/// The crate's value in the tagging of the Python side.
fn tagged(v: &toml::Value) -> J {
    use toml::value::Offset;
    let time = |t: &toml::value::Time| {
        format!("{:02}:{:02}:{:02}.{:06}", t.hour, t.minute, t.second, t.nanosecond / 1000)
    };
    let date = |d: &toml::value::Date| format!("{:04}-{:02}-{:02}", d.year, d.month, d.day);
    match v {
        toml::Value::Boolean(b) => json!(["b", b]),
        toml::Value::Integer(i) => json!(["i", i.to_string()]),
        toml::Value::Float(f) if f.is_nan() => json!(["f", "nan"]),
        toml::Value::Float(f) => json!(["f", f.to_bits().to_string()]),
        toml::Value::String(s) => json!(["s", s]),
        toml::Value::Datetime(dt) => match (&dt.date, &dt.time) {
            (Some(d), Some(t)) => {
                let off = dt.offset.map(|o| match o {
                    Offset::Z => 0,
                    Offset::Custom { minutes } => minutes as i64,
                });
                json!(["dt", date(d), time(t), off])
            }
            (Some(d), None) => json!(["d", date(d)]),
            (None, Some(t)) => json!(["tm", time(t)]),
            (None, None) => json!(["none"]),
        },
        toml::Value::Array(a) => json!(["a", a.iter().map(tagged).collect::<Vec<_>>()]),
        toml::Value::Table(t) => table(t),
    }
}

/// A time with a 60th second (an RFC 3339 leap second): the crate reads it, tomllib refuses it
/// (Python's `datetime` has no such second). No config of ours holds a time.
fn leap_second(v: &toml::Value) -> bool {
    match v {
        toml::Value::Datetime(dt) => dt.time.is_some_and(|t| t.second == 60),
        toml::Value::Array(a) => a.iter().any(leap_second),
        toml::Value::Table(t) => t.values().any(leap_second),
        _ => false,
    }
}

fn table(t: &toml::Table) -> J {
    let map: serde_json::Map<String, J> = t.iter().map(|(k, v)| (k.clone(), tagged(v))).collect();
    json!(["t", map])
}

/// Every config struct the project reads from TOML, as its loader deserialises it: none
/// may panic.
fn config_loaders(text: &str) {
    let _ = toml::from_str::<execcritic::train::plan::PlanConfig>(text);
    let _ = toml::from_str::<execcritic::train::sft_run::SftConfig>(text);
    let _ = toml::from_str::<execcritic::train::grpo_run::GrpoRunConfig>(text);
    let _ = toml::from_str::<execcritic::pipeline::eval::config::Budgets>(text);
    let _ = toml::from_str::<execcritic::task::suite::spec::SuiteSpec>(text);
    let _ = toml::from_str::<execcritic::task::suite::spec::ProjectSpec>(text);
    let _ = toml::from_str::<execcritic::task::suite::spec::TaskSpec>(text);
}

const KEYS: &[&str] = &[
    "a", "name", "model", "lr", "steps", "\"quoted key\"", "'lit'", "\"\"", "a.b", "a . c", "1",
    "-", "_x", "\"\\u00e9\"", "\"a.b\"", "train", "rollout", "ü", "",
];

/// A scalar as TOML text: strings of the four kinds with escapes, integers in every base and
/// at the i64 edges, floats with exponents, inf/nan, dates and times, near-misses.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z \u{e9}\u{1f600}\\\\\"'\t]{0,8}".prop_map(|s| format!("{s:?}")),
        prop::sample::select(vec![
            "\"\\u00e9\\U0001F600\\b\\t\\n\\f\\r\\\"\\\\\"", "\"\\x41\"", "\"\\ud800\"", "\"\\U00110000\"",
            "'lit\\n'", "'''multi\n'line'''", "\"\"\"a\\\n   b\"\"\"", "\"\"\"\"\"\"\"", "\"\"\"\"\"\"\"\"\"",
            "\"\u{7f}\"", "\"\u{1}\"", "\"tab\there\"",
            "9223372036854775807", "-9223372036854775808", "9223372036854775808", "+0", "-0", "01",
            "0x7fffffffffffffff", "0xDEAD_beef", "0o777", "0b1010", "0x", "1__0", "1_000", "_1",
            "3.14", "-0.0", "+1e308", "1e309", "5e-324", "1E+10", "1.e5", ".5", "1.5e", "inf", "-inf",
            "+nan", "-nan", "nan", "1.7976931348623157e308", "0.1e-400",
            "1979-05-27T07:32:00Z", "1979-05-27 07:32:00.999999999-07:00", "1979-05-27T00:32:00",
            "1979-05-27", "07:32:00", "00:32:00.5", "1979-02-30", "1979-13-01", "2000-02-29T23:59:60Z",
            "07:32", "1979-05-27T07:32Z", "1979-05-27t07:32:00z", "true", "false", "True",
        ])
        .prop_map(str::to_string),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
    ]
}

/// A value: a scalar, an array or an inline table (nested a few levels).
fn value() -> impl Strategy<Value = String> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), any::<bool>())
                .prop_map(|(v, comma)| format!("[{}{}]", v.join(", "), if comma { "," } else { "" })),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..4).prop_map(|kv| {
                let kv: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{{}}}", kv.join(", "))
            }),
        ]
    })
}

/// A document: key/value lines under `[table]` and `[[array]]` headers, comments, blank lines.
fn document() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        4 => (prop::sample::select(KEYS), value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => prop::sample::select(KEYS).prop_map(|k| format!("[{k}]")),
        1 => prop::sample::select(KEYS).prop_map(|k| format!("[[{k}]]")),
        1 => prop::sample::select(vec!["# comment \u{e9}", "", "  ", "\t# x\u{1}", "[a.b.c]", "[ a . 'b' ]"])
            .prop_map(str::to_string),
    ];
    (prop::collection::vec(line, 0..10), any::<bool>()).prop_map(|(lines, crlf)| {
        lines.join(if crlf { "\r\n" } else { "\n" })
    })
}

/// Documents, a third of them corrupted at the byte level.
fn documents() -> impl Strategy<Value = String> {
    const JUNK: &[&str] = &["=", "[", "]", "\"", "'", ",", "{", "}", ".", "\n", "\r", "#", "\\", "\u{0}"];
    (document(), prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(JUNK), any::<bool>()), 0..3))
        .prop_map(|(doc, edits)| {
            let mut s = doc.into_bytes();
            for (at, junk, delete) in edits {
                let i = at.index(s.len() + 1);
                if delete && i < s.len() {
                    s.remove(i);
                } else {
                    s.splice(i..i, junk.bytes());
                }
            }
            String::from_utf8_lossy(&s).into_owned()
        })
}

#[test]
fn toml_differential() {
    let Some(py) = tomllib() else { return };
    fuzz("toml_differential", 600, documents(), |text| {
        config_loaders(&text);
        let ours = toml::from_str::<toml::Table>(&text);
        let theirs = ask(py, &J::String(text.clone()))?;
        match (&ours, theirs[0].as_str()) {
            (Ok(t), Some("ok")) => prop_assert_eq!(table(t), theirs[1].clone(), "values differ"),
            (Err(_), Some("err")) => {}
            (Ok(t), Some("err")) if t.values().any(leap_second) => {}
            (Ok(t), _) => prop_assert!(false, "toml accepts ({t:?}), tomllib refuses: {}", theirs[1]),
            (Err(e), _) => prop_assert!(false, "toml refuses ({e}), tomllib accepts: {}", theirs[1]),
        }
        Ok(())
    });
}
