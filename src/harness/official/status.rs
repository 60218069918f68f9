//! SWE-bench's test statuses and its ordered status map.
//!
//! The pytest-family parsers store the first token of a summary line as the status, so besides
//! the five official strings a map can hold any word that merely starts with one of them
//! (`PASSED:`, `XFAILED`, `ERRORS`): [`OfficialStatus::Other`] keeps it verbatim, because the
//! grading treats such a status as neither passing nor failing.
//!
//! The map keeps Python's dict order (first insertion fixes the position, later writes update in
//! place): the truncated-id fallback of the grading takes the *first* matching key.

use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::{BTreeMap, HashMap};

/// One status value of a SWE-bench status map.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OfficialStatus {
    Passed,
    Failed,
    Skipped,
    Error,
    Xfail,
    /// A token that starts with an official status but is not one (kept verbatim).
    Other(String),
}

/// The five official status strings, in swebench's declaration order.
pub const OFFICIAL_STATUSES: [&str; 5] = ["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"];

impl OfficialStatus {
    /// The status as swebench writes it.
    pub fn as_str(&self) -> &str {
        match self {
            OfficialStatus::Passed => "PASSED",
            OfficialStatus::Failed => "FAILED",
            OfficialStatus::Skipped => "SKIPPED",
            OfficialStatus::Error => "ERROR",
            OfficialStatus::Xfail => "XFAIL",
            OfficialStatus::Other(s) => s,
        }
    }

    /// The status a parser records from a token.
    pub fn from_token(token: &str) -> Self {
        match token {
            "PASSED" => OfficialStatus::Passed,
            "FAILED" => OfficialStatus::Failed,
            "SKIPPED" => OfficialStatus::Skipped,
            "ERROR" => OfficialStatus::Error,
            "XFAIL" => OfficialStatus::Xfail,
            other => OfficialStatus::Other(other.to_string()),
        }
    }

    /// PASSED or XFAIL: what swebench grades as a pass.
    pub fn is_passing(&self) -> bool {
        matches!(self, OfficialStatus::Passed | OfficialStatus::Xfail)
    }

    /// FAILED or ERROR.
    pub fn is_failure(&self) -> bool {
        matches!(self, OfficialStatus::Failed | OfficialStatus::Error)
    }
}

impl Serialize for OfficialStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Test id → status, in Python dict order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusMap {
    entries: Vec<(String, OfficialStatus)>,
    index: HashMap<String, usize>,
}

impl StatusMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// `map[test] = status`: a new key goes last, an existing one keeps its place.
    pub fn insert(&mut self, test: impl Into<String>, status: OfficialStatus) {
        let test = test.into();
        match self.index.get(&test) {
            Some(&i) => self.entries[i].1 = status,
            None => {
                self.index.insert(test.clone(), self.entries.len());
                self.entries.push((test, status));
            }
        }
    }

    pub fn get(&self, test: &str) -> Option<&OfficialStatus> {
        self.index.get(test).map(|&i| &self.entries[i].1)
    }

    pub fn contains(&self, test: &str) -> bool {
        self.index.contains_key(test)
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &OfficialStatus)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The same map, sorted by test id (order-insensitive consumers).
    pub fn to_btree(&self) -> BTreeMap<String, OfficialStatus> {
        self.entries.iter().cloned().collect()
    }
}

impl Serialize for StatusMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reinsertion_keeps_the_first_position() {
        let mut m = StatusMap::new();
        m.insert("b", OfficialStatus::Failed);
        m.insert("a", OfficialStatus::Passed);
        m.insert("b", OfficialStatus::from_token("PASSED"));
        let keys: Vec<_> = m.iter().map(|(k, v)| (k, v.as_str())).collect();
        assert_eq!(keys, vec![("b", "PASSED"), ("a", "PASSED")]);
        assert_eq!(OfficialStatus::from_token("XFAILED").as_str(), "XFAILED");
        assert!(!OfficialStatus::from_token("PASSED:").is_passing());
    }
}
