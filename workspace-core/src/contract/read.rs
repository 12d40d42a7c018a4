//! Reading a contract's text with every unknown field and wrong type found in
//! one pass.
//!
//! serde stops at the first field it cannot read. So the document is parsed
//! into a plain value tree first (a syntax error still stops everything: past
//! it nothing can be read), deserialized, and each field that fails is
//! recorded and taken out of the tree before the next attempt. A field taken
//! out falls back to its default. A required field that is missing is filled
//! in with a stand-in of the type the reader then asks for (a text, a table,
//! a list, a number, a flag, the first of an enum's names), so that reading
//! goes on and every other mistake is found too; a contract read with a
//! stand-in is not returned, since it is not what was written. Only when no
//! stand-in fits does the missing field take its table out with it, and
//! reading stops when the root itself cannot be read. What is read in the end
//! (the contract with the faulty fields left out) is what the semantic checks
//! then look at.

use serde_path_to_error::Segment;

use super::Contract;
use super::problem::Problems;

/// The most fields one pass reports before it gives up on a document.
const MAX_PROBLEMS: usize = 64;

/// How many stand-ins one missing field is given before it counts as one that
/// no stand-in fits.
const MAX_STAND_INS: usize = 3;

/// A value put where a required field is missing, so that reading goes on.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum StandIn {
    /// A text (also an enum's name).
    Text(String),
    /// An empty table.
    Table,
    /// An empty list.
    List,
    /// Zero.
    Integer,
    /// Zero, as a float.
    Float,
    /// `false`.
    Flag,
}

impl StandIn {
    /// The stand-in the reader's complaint about the last one asks for.
    fn asked_for(message: &str) -> Option<Self> {
        if let Some(names) = message
            .split_once("expected one of `")
            .map(|(_, rest)| rest)
        {
            return names
                .split('`')
                .next()
                .map(|name| Self::Text(name.to_owned()));
        }
        if let Some(name) = message.split_once("expected `").map(|(_, rest)| rest) {
            return name
                .split('`')
                .next()
                .map(|name| Self::Text(name.to_owned()));
        }
        let expected = message.split_once("expected ").map(|(_, e)| e)?;
        Some(if expected.starts_with("a sequence") {
            Self::List
        } else if expected.starts_with("a map") || expected.starts_with("struct") {
            Self::Table
        } else if expected.starts_with("a boolean") {
            Self::Flag
        } else if expected.starts_with("f32") || expected.starts_with("f64") {
            Self::Float
        } else if expected.starts_with('u') || expected.starts_with('i') {
            Self::Integer
        } else if expected.starts_with("a string") {
            Self::Text(String::new())
        } else {
            return None;
        })
    }
}

/// A value tree a contract is read from (TOML's or JSON's).
pub(super) trait Tree: Clone + for<'de> serde::Deserializer<'de> {
    /// Takes the value at `path` out of the tree; `false` if there is none.
    fn take_out(&mut self, path: &[Segment]) -> bool;

    /// Puts `value` as field `field` of the table at `parent`; `false` if
    /// there is no table there.
    fn fill_in(&mut self, parent: &[Segment], field: &str, value: &StandIn) -> bool;
}

/// A missing field filled in, and how many stand-ins it was given.
struct Filled {
    parent: Vec<Segment>,
    /// The parent as a problem names it.
    parent_shown: String,
    field: String,
    shown: String,
    tries: usize,
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
    let mut filled: Vec<Filled> = Vec::new();
    loop {
        let error = match serde_path_to_error::deserialize::<_, Contract>(tree.clone()) {
            // Read with a stand-in, it is not the contract that was written.
            Ok(_) if !filled.is_empty() => return (None, problems),
            Ok(contract) => return (Some(contract), problems),
            Err(error) => error,
        };
        let path: Vec<Segment> = error.path().iter().cloned().collect();
        let shown = error.path().to_string();
        let shown = if shown == "." { String::new() } else { shown };
        let message = message_of(&error.into_inner().to_string());
        // The stand-in of a missing field was not the type asked for: another.
        if let Some(stand_in) = filled.iter_mut().find(|f| f.shown == shown) {
            stand_in.tries += 1;
            let next = StandIn::asked_for(&message).filter(|_| stand_in.tries < MAX_STAND_INS);
            let (parent, parent_shown) = (stand_in.parent.clone(), stand_in.parent_shown.clone());
            let field = stand_in.field.clone();
            if let Some(next) = next
                && tree.take_out(&path)
                && tree.fill_in(&parent, &field, &next)
            {
                continue;
            }
            // None fits: the field's table goes, as without stand-ins (its
            // being missing then is the same mistake, already reported).
            filled.retain(|f| f.shown != shown);
            if problems.len() >= MAX_PROBLEMS || !tree.take_out(&parent) {
                return (None, problems);
            }
            taken_out.push(parent_shown);
            continue;
        }
        // A required table taken out for a mistake inside it is now "missing":
        // that is the same mistake, not another one.
        let missing = missing_field(&message).map(str::to_owned);
        let echo = missing
            .as_deref()
            .is_some_and(|field| taken_out.contains(&join(&shown, field)));
        if !echo {
            problems.push_at(shown.clone(), line_of(&path), message);
        }
        if problems.len() >= MAX_PROBLEMS {
            return (None, problems);
        }
        if let Some(field) = missing
            && !echo
            && tree.fill_in(&path, &field, &StandIn::Text(String::new()))
        {
            filled.push(Filled {
                shown: join(&shown, &field),
                parent: path,
                parent_shown: shown,
                field,
                tries: 0,
            });
            continue;
        }
        if !tree.take_out(&path) {
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
    fn fill_in(&mut self, parent: &[Segment], field: &str, value: &StandIn) -> bool {
        let Some(Self::Table(table)) = toml_at(self, parent) else {
            return false;
        };
        let value = match value {
            StandIn::Text(text) => Self::String(text.clone()),
            StandIn::Table => Self::Table(toml::Table::new()),
            StandIn::List => Self::Array(Vec::new()),
            StandIn::Integer => Self::Integer(0),
            StandIn::Float => Self::Float(0.0),
            StandIn::Flag => Self::Boolean(false),
        };
        table.insert(field.to_owned(), value);
        true
    }

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
    fn fill_in(&mut self, parent: &[Segment], field: &str, value: &StandIn) -> bool {
        let Some(Self::Object(map)) = json_at(self, parent) else {
            return false;
        };
        let value = match value {
            StandIn::Text(text) => Self::String(text.clone()),
            StandIn::Table => Self::Object(serde_json::Map::new()),
            StandIn::List => Self::Array(Vec::new()),
            StandIn::Integer => Self::from(0),
            StandIn::Float => Self::from(0.0),
            StandIn::Flag => Self::Bool(false),
        };
        map.insert(field.to_owned(), value);
        true
    }

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

/// The value at `path` of a TOML tree.
fn toml_at<'a>(value: &'a mut toml::Value, path: &[Segment]) -> Option<&'a mut toml::Value> {
    match path {
        [] => Some(value),
        [Segment::Enum { .. } | Segment::Unknown, rest @ ..] => toml_at(value, rest),
        [Segment::Map { key }, rest @ ..] => match value {
            toml::Value::Table(table) => toml_at(table.get_mut(key)?, rest),
            _ => None,
        },
        [Segment::Seq { index }, rest @ ..] => match value {
            toml::Value::Array(items) => toml_at(items.get_mut(*index)?, rest),
            _ => None,
        },
    }
}

/// The value at `path` of a JSON tree.
fn json_at<'a>(
    value: &'a mut serde_json::Value,
    path: &[Segment],
) -> Option<&'a mut serde_json::Value> {
    match path {
        [] => Some(value),
        [Segment::Enum { .. } | Segment::Unknown, rest @ ..] => json_at(value, rest),
        [Segment::Map { key }, rest @ ..] => match value {
            serde_json::Value::Object(map) => json_at(map.get_mut(key)?, rest),
            _ => None,
        },
        [Segment::Seq { index }, rest @ ..] => match value {
            serde_json::Value::Array(items) => json_at(items.get_mut(*index)?, rest),
            _ => None,
        },
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
