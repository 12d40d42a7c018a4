//! Validation problems, each naming the field path it is about.

use std::fmt;

use serde::Serialize;

/// One thing wrong with a contract, named by its field path
/// (`filesystem.writable[1]: "../x" leads outside the workspace root`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Dotted field path with indices, as a reviewer would write it:
    /// `source.revision`, `environment.services[2].name`.
    pub path: String,
    /// The line of the document it is on, where the format tells (TOML).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "contract"
        } else {
            &self.path
        };
        match self.line {
            Some(line) => write!(f, "{path} (line {line}): {}", self.message),
            None => write!(f, "{path}: {}", self.message),
        }
    }
}

/// Every problem found in a contract, in document order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// No problems.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one problem at `path`.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push_at(path, None, message);
    }

    /// Records one problem at `path`, on `line` of the document.
    pub fn push_at(
        &mut self,
        path: impl Into<String>,
        line: Option<usize>,
        message: impl Into<String>,
    ) {
        self.0.push(Problem {
            path: path.into(),
            line,
            message: message.into(),
        });
    }

    /// Adds `other`'s problems, leaving out those about a path already listed
    /// (a field that could not be read is not also reported as missing).
    pub fn merge(&mut self, other: Problems) {
        for problem in other {
            let known = self.0.iter().any(|p| {
                !p.path.is_empty()
                    && (problem.path == p.path || problem.path.starts_with(&format!("{}.", p.path)))
            });
            if !known {
                self.0.push(problem);
            }
        }
    }

    /// Fills in the line of each problem without one, as `line_of` finds it
    /// for its path.
    pub(crate) fn locate(&mut self, line_of: impl Fn(&str) -> Option<usize>) {
        for problem in self.0.iter_mut().filter(|p| p.line.is_none()) {
            problem.line = line_of(&problem.path);
        }
    }

    /// Orders the problems by line (those without one last, in the order found).
    pub fn sort_by_line(&mut self) {
        self.0.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The problems in document order.
    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.0.iter()
    }

    /// `Ok(())` when empty, the problems otherwise.
    pub fn into_result(self) -> Result<(), Problems> {
        if self.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl IntoIterator for Problems {
    type Item = Problem;
    type IntoIter = std::vec::IntoIter<Problem>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Problems {
    type Item = &'a Problem;
    type IntoIter = std::slice::Iter<'a, Problem>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Builds `parent[index]`.
pub(crate) fn indexed(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}
