//! Credential values taken out of a command's output before it is recorded or
//! passed on.
//!
//! A run's credentials are injected into its environment; an agent that prints its
//! environment (or a tool that logs a request with its token) would otherwise copy
//! them into the evidence, which is meant to be shared with reviewers. Each value,
//! and each of its encodings ([`credential_leaks`](super::credential_leaks)),
//! becomes `[redacted:NAME]`. The output arrives in chunks, so a value cut by a
//! chunk boundary is held back until the next chunk decides it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::credential_leaks::{
    CredentialForm, CredentialLeak, MIN_REDACTED_LEN, Tracked, find_in, find_leaks,
};
use crate::boundary::IssuedCredential;

/// Redacts the values of a run's credentials from one output stream.
#[derive(Clone, Default)]
pub struct Scrubber {
    /// (value, replacement), longest value first so a value containing another
    /// is replaced whole.
    secrets: Vec<(Vec<u8>, Vec<u8>)>,
    /// Each credential's name and the forms of its value.
    credentials: Vec<Tracked>,
    /// Bytes that may be the start of a value, held until more output decides.
    pending: Vec<u8>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("secrets", &self.secrets.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Scrubber {
    /// A scrubber for `credentials` (values shorter than [`MIN_REDACTED_LEN`] are
    /// left alone).
    pub fn new(credentials: &[IssuedCredential]) -> Self {
        let credentials: Vec<Tracked> = credentials
            .iter()
            .filter(|c| c.expose_value().len() >= MIN_REDACTED_LEN)
            .map(|c| Tracked::new(&c.name, c.expose_value().as_bytes()))
            .collect();
        let mut secrets: Vec<(Vec<u8>, Vec<u8>)> = credentials
            .iter()
            .flat_map(|Tracked { name, forms }| {
                let replacement = format!("[redacted:{name}]").into_bytes();
                forms
                    .iter()
                    .map(move |(_, bytes)| (bytes.clone(), replacement.clone()))
            })
            .collect();
        secrets.sort_by_key(|(value, _)| std::cmp::Reverse(value.len()));
        Self {
            secrets,
            credentials,
            pending: Vec::new(),
        }
    }

    /// Every credential value (in any of its forms) in a changed file of `patch`.
    pub(super) fn leaks_in(&self, patch: &[u8]) -> Vec<CredentialLeak> {
        find_leaks(patch, &self.credentials)
    }

    /// The first credential whose value (in any of its forms) is in `text`, and
    /// the form: what a changed path's name is checked with.
    pub(super) fn credential_in(&self, text: &[u8]) -> Option<(String, CredentialForm)> {
        find_in(text, &self.credentials)
    }

    /// `record` with every value redacted from each of its strings (keys too),
    /// whatever field they are in: what a record of the evidence (`outcome.json`,
    /// `changes.json`, ...) holds. Redacting strings, not the serialized bytes,
    /// keeps the record valid. A record that does not survive the round trip
    /// through JSON is returned as it was.
    pub fn redact_record<T: Serialize + DeserializeOwned + Clone>(&self, record: &T) -> T {
        if self.secrets.is_empty() {
            return record.clone();
        }
        let Ok(mut value) = serde_json::to_value(record) else {
            return record.clone();
        };
        self.redact_value(&mut value);
        serde_json::from_value(value).unwrap_or_else(|_| record.clone())
    }

    fn redact_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::String(text) => *text = self.redact(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(fields) => {
                let taken = std::mem::take(fields);
                for (key, mut field) in taken {
                    self.redact_value(&mut field);
                    fields.insert(self.redact(&key), field);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// `text` with every value redacted, on its own (not part of a stream): what
    /// a record of the run (a command line) shows.
    pub fn redact(&self, text: &str) -> String {
        String::from_utf8_lossy(&self.redact_bytes(text.as_bytes())).into_owned()
    }

    /// `raw` with every value redacted, on its own (a whole log file).
    pub fn redact_bytes(&self, raw: &[u8]) -> Vec<u8> {
        let mut scrubber = Self {
            secrets: self.secrets.clone(),
            credentials: Vec::new(),
            pending: Vec::new(),
        };
        let mut out = scrubber.feed(raw);
        out.extend(scrubber.finish());
        out
    }

    /// `raw` with every value redacted, where `raw` is the kept head of a
    /// stream whose continuation was dropped: a strict prefix of a value at
    /// its end (what a stream would hold back for the next chunk) is left
    /// out, since what would have decided it is gone.
    pub fn redact_cut(&self, raw: &[u8]) -> Vec<u8> {
        let mut scrubber = Self {
            secrets: self.secrets.clone(),
            credentials: Vec::new(),
            pending: Vec::new(),
        };
        scrubber.feed(raw)
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The next chunk of output, redacted; bytes that may begin a value are kept
    /// for the next call.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.secrets.is_empty() {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut at = 0;
        'scan: while at < self.pending.len() {
            let rest = &self.pending[at..];
            for (value, replacement) in &self.secrets {
                if rest.starts_with(value) {
                    out.extend_from_slice(replacement);
                    at += value.len();
                    continue 'scan;
                }
            }
            if self
                .secrets
                .iter()
                .any(|(value, _)| value.starts_with(rest))
            {
                break; // a value may be cut here: wait for more output
            }
            out.push(rest[0]);
            at += 1;
        }
        self.pending.drain(..at);
        out
    }

    /// What is still held back, at the end of the stream (a strict prefix of a
    /// value, not a value).
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubber() -> Scrubber {
        Scrubber::new(&[
            IssuedCredential::new("TOKEN", "tok-1234567890", 0),
            IssuedCredential::new("SHORT", "abc", 0),
        ])
    }

    fn run(s: &mut Scrubber, chunks: &[&str]) -> String {
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(s.feed(chunk.as_bytes()));
        }
        out.extend(s.finish());
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn a_command_line_is_redacted_on_its_own() {
        let s = scrubber();
        assert_eq!(
            s.redact("curl -H 'token: tok-1234567890'"),
            "curl -H 'token: [redacted:TOKEN]'"
        );
        assert_eq!(s.redact("abc"), "abc");
    }

    #[test]
    fn a_value_is_redacted_whole_or_cut_across_chunks() {
        assert_eq!(
            run(&mut scrubber(), &["TOKEN=tok-1234567890\n"]),
            "TOKEN=[redacted:TOKEN]\n"
        );
        assert_eq!(
            run(
                &mut scrubber(),
                &["x tok-12", "3456", "7890 y tok-1234567890"]
            ),
            "x [redacted:TOKEN] y [redacted:TOKEN]"
        );
        // A prefix at the very end is not a value: it is passed on as it is.
        assert_eq!(
            run(&mut scrubber(), &["ends with tok-123"]),
            "ends with tok-123"
        );
        // Short values would match ordinary output: left alone.
        assert_eq!(run(&mut scrubber(), &["abc"]), "abc");
    }

    #[test]
    fn a_head_cut_inside_a_value_keeps_none_of_it() {
        let s = scrubber();
        assert_eq!(
            s.redact_cut(b"tok-1234567890 then tok-12345"),
            b"[redacted:TOKEN] then "
        );
        assert_eq!(s.redact_cut(b"plain"), b"plain");
    }

    #[test]
    fn every_string_of_a_record_is_redacted_and_the_record_stays_valid() {
        let s = scrubber();
        let record = serde_json::json!({
            "path": "f-tok-1234567890",
            "nested": [{"cause": "changes: d-tok-1234567890/x is too large"}],
            "tok-1234567890": 3,
            "count": 2,
        });
        let redacted = s.redact_record(&record);
        assert_eq!(
            redacted,
            serde_json::json!({
                "path": "f-[redacted:TOKEN]",
                "nested": [{"cause": "changes: d-[redacted:TOKEN]/x is too large"}],
                "[redacted:TOKEN]": 3,
                "count": 2,
            })
        );
    }

    #[test]
    fn output_without_values_passes_unchanged_and_in_order() {
        let text = "tttt tok- tok-1 plain text\n";
        assert_eq!(run(&mut scrubber(), &[text]), text);
        let mut none = Scrubber::new(&[]);
        assert!(none.is_empty());
        assert_eq!(run(&mut none, &["tok-1234567890"]), "tok-1234567890");
    }
}
