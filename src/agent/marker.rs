//! Submission markers: an action is a submission (or a CHECK) when the command's output begins
//! with the marker line. Leading noise (shell start-up messages) is tolerated only when it is
//! unambiguous: the marker occurs exactly once in the whole output, as a line of its own.

use serde::{Deserialize, Serialize};

/// The controller markers of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Marker {
    /// `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (Test submission, Round-0 submission, FINAL-SUBMIT).
    Submit,
    /// `COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH` (Repair CHECK).
    Check,
}

impl Marker {
    pub fn text(self) -> &'static str {
        match self {
            Marker::Submit => "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
            Marker::Check => "COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH",
        }
    }
}

/// A detected marker and what followed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerHit {
    pub marker: Marker,
    /// The output after the marker line.
    pub payload: String,
    /// Lines preceded the marker (accepted because unambiguous).
    pub leading_noise: bool,
}

/// Find one of `markers` in `output`.
pub fn detect(output: &str, markers: &[Marker]) -> Option<MarkerHit> {
    let mut lines = output.split_inclusive('\n');
    let first = lines.next()?;
    for &m in markers {
        if first.trim() == m.text() {
            return Some(MarkerHit {
                marker: m,
                payload: output[first.len()..].to_string(),
                leading_noise: false,
            });
        }
    }
    // Leading noise: the marker must be unambiguous — exactly one occurrence of any marker text
    // in the whole output, on a line of its own.
    let occurrences: usize = markers
        .iter()
        .map(|m| output.matches(m.text()).count())
        .sum();
    if occurrences != 1 {
        return None;
    }
    let mut offset = 0;
    for line in output.split_inclusive('\n') {
        offset += line.len();
        for &m in markers {
            if line.trim() == m.text() {
                return Some(MarkerHit {
                    marker: m,
                    payload: output[offset..].to_string(),
                    leading_noise: true,
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    const BOTH: &[Marker] = &[Marker::Submit, Marker::Check];

    #[test]
    fn marker_first() {
        let h = detect(
            "COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH\ndiff --git a b\n",
            BOTH,
        )
        .unwrap();
        assert_eq!(h.marker, Marker::Check);
        assert_eq!(h.payload, "diff --git a b\n");
        assert!(!h.leading_noise);
    }

    #[test]
    fn unambiguous_noise_is_tolerated() {
        let h = detect(
            "bash: warning: setlocale\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\npatch\n",
            BOTH,
        )
        .unwrap();
        assert!(h.leading_noise);
        assert_eq!(h.payload, "patch\n");
    }

    #[test]
    fn ambiguous_or_absent() {
        assert!(detect("noise\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n+ COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", BOTH).is_none());
        assert!(detect(
            "grep found COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT in file\n",
            BOTH
        )
        .is_none());
        assert!(detect("", BOTH).is_none());
        assert!(detect(
            "COMPLETE_TASK_AND_CHECK_CANDIDATE_PATCH\n",
            &[Marker::Submit]
        )
        .is_none());
    }
}
