//! Reading a contract's text with every unknown field and wrong type found in
//! one pass.
//!
//! serde stops at the first field it cannot read. So the document is parsed
//! into a plain value tree first (a syntax error still stops everything: past
//! it nothing can be read), deserialized, and each field that fails is
//! recorded and taken out of the tree before the next attempt. A field taken
//! out falls back to its default; a required field that is missing takes its
//! table out with it, and reading stops when the root itself cannot be read.
//! What is read in the end (the contract with the faulty fields left out) is
//! what the semantic checks then look at.

use serde_path_to_error::Segment;

use super::Contract;
use super::problem::Problems;

/// The most fields one pass reports before it gives up on a document.
const MAX_PROBLEMS: usize = 64;

/// A value tree a contract is read from (TOML's or JSON's).
pub(super) trait Tree: Clone + for<'de> serde::Deserializer<'de> {
    /// Takes the value at `path` out of the tree; `false` if there is none.
    fn take_out(&mut self, path: &[Segment]) -> bool;
}

/// Reads `tree` as a contract: the contract with every unreadable field left
/// out (`None` when not even that can be read), and one problem per field,
/// with the line `line_of` finds for its path.
pub(super) fn read_all<T: Tree>(
    mut tree: T,
    line_of: impl Fn(&[Segment]) -> Option<usize>,
) -> (Option<Contract>, Problems) {
    let mut problems = Problems::new();
    let mut taken_out: Vec<String> = Vec::new();
    loop {
        let error = match serde_path_to_error::deserialize::<_, Contract>(tree.clone()) {
            Ok(contract) => return (Some(contract), problems),
            Err(error) => error,
        };
        let path: Vec<Segment> = error.path().iter().cloned().collect();
        let shown = error.path().to_string();
        let shown = if shown == "." { String::new() } else { shown };
        let message = message_of(&error.into_inner().to_string());
        // A required table taken out for a mistake inside it is now "missing":
        // that is the same mistake, not another one.
        let echo =
            missing_field(&message).is_some_and(|field| taken_out.contains(&join(&shown, field)));
        if !echo {
            problems.push_at(shown.clone(), line_of(&path), message);
        }
        if problems.len() >= MAX_PROBLEMS || !tree.take_out(&path) {
            return (None, problems);
        }
        taken_out.push(shown);
    }
}

/// The field a "missing field `NAME`" message names.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// `parent.field` (just `field` at the root).
fn join(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_owned()
    } else {
        format!("{parent}.{field}")
    }
}

/// The deserializer's message without the position some formats append.
fn message_of(text: &str) -> String {
    let first = text.lines().next().unwrap_or(text).trim();
    first
        .rsplit_once(" at line ")
        .map_or(first, |(message, _)| message)
        .to_owned()
}

impl Tree for toml::Value {
    fn take_out(&mut self, path: &[Segment]) -> bool {
        match path {
            [] => false,
            [Segment::Enum { .. } | Segment::Unknown, rest @ ..] => self.take_out(rest),
            [last] => match (self, last) {
                (Self::Table(table), Segment::Map { key }) => table.remove(key).is_some(),
                (Self::Array(items), Segment::Seq { index }) if *index < items.len() => {
                    items.remove(*index);
                    true
                }
                _ => false,
            },
            [first, rest @ ..] => match (self, first) {
                (Self::Table(table), Segment::Map { key }) => {
                    table.get_mut(key).is_some_and(|v| v.take_out(rest))
                }
                (Self::Array(items), Segment::Seq { index }) => {
                    items.get_mut(*index).is_some_and(|v| v.take_out(rest))
                }
                _ => false,
            },
        }
    }
}

impl Tree for serde_json::Value {
    fn take_out(&mut self, path: &[Segment]) -> bool {
        match path {
            [] => false,
            [Segment::Enum { .. } | Segment::Unknown, rest @ ..] => self.take_out(rest),
            [last] => match (self, last) {
                (Self::Object(map), Segment::Map { key }) => map.remove(key).is_some(),
                (Self::Array(items), Segment::Seq { index }) if *index < items.len() => {
                    items.remove(*index);
                    true
                }
                _ => false,
            },
            [first, rest @ ..] => match (self, first) {
                (Self::Object(map), Segment::Map { key }) => {
                    map.get_mut(key).is_some_and(|v| v.take_out(rest))
                }
                (Self::Array(items), Segment::Seq { index }) => {
                    items.get_mut(*index).is_some_and(|v| v.take_out(rest))
                }
                _ => false,
            },
        }
    }
}

/// The line of `text` (a TOML document that parses) where the value at `path`
/// is written: its key's line for a table entry, its own for an array item.
pub(super) fn toml_line(text: &str, path: &[Segment]) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let document = DeTable::parse(text).ok()?;
    let root: &DeTable<'_> = document.get_ref();
    let mut value: Option<&DeValue<'_>> = None;
    let mut at = document.span().start;
    for segment in path {
        match (segment, value) {
            (Segment::Map { key }, None) => {
                let (name, entry) = root.iter().find(|(name, _)| name.get_ref() == key)?;
                at = name.span().start;
                value = Some(entry.get_ref());
            }
            (Segment::Map { key }, Some(DeValue::Table(inner))) => {
                let (name, entry) = inner.iter().find(|(name, _)| name.get_ref() == key)?;
                at = name.span().start;
                value = Some(entry.get_ref());
            }
            (Segment::Seq { index }, Some(DeValue::Array(items))) => {
                let item = items.get(*index)?;
                at = item.span().start;
                value = Some(item.get_ref());
            }
            (Segment::Enum { .. } | Segment::Unknown, _) => {}
            _ => break,
        }
    }
    Some(text.get(..at).unwrap_or(text).matches('\n').count() + 1)
}

/// The segments of a field path as problems name it (`a.b[2].c`).
pub(super) fn segments(path: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, indices) = part
            .split_once('[')
            .map_or((part, ""), |(k, rest)| (k, rest));
        if !key.is_empty() {
            segments.push(Segment::Map {
                key: key.to_owned(),
            });
        }
        for index in indices.split('[') {
            if let Ok(index) = index.trim_end_matches(']').parse() {
                segments.push(Segment::Seq { index });
            }
        }
    }
    segments
}
