//! A run's credential values in what it produces: each value in the forms it
//! is commonly written in, found in command output (to redact) and in the patch
//! (to refuse the promotion).
//!
//! The forms: the value as it is; base64 in the standard and the URL-safe
//! alphabet, at each of the three alignments it can have inside a longer
//! base64 text (so `base64("Authorization: Bearer " + value)` is caught too);
//! hex in either case; percent-encoded; escaped as a quoted patch header or a
//! JSON string escapes it (for a value with quotes, backslashes, controls or
//! non-ASCII characters in a name). In a patch, each `diff --git` section
//! is searched, and so is the content of each of its binary literals (the
//! deflated base85 of `GIT binary patch` would hide a value otherwise).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

use super::patch_reading::{binary_literals, sections};

/// Values (and forms of them) shorter than this are not looked for: they would
/// match ordinary output.
pub const MIN_REDACTED_LEN: usize = 8;

/// How a credential's value was written where it was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CredentialForm {
    /// As it is.
    Plain,
    /// Base64, standard alphabet.
    Base64,
    /// Base64, URL-safe alphabet.
    Base64Url,
    /// Hexadecimal, lower or upper case.
    Hex,
    /// Percent-encoded.
    UrlEncoded,
    /// Escaped as a patch header or a JSON string escapes a name (`\"`, `\\`,
    /// octal or `\u` escapes): how a value with such characters appears in a
    /// changed path's record.
    Escaped,
}

impl std::fmt::Display for CredentialForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Plain => "as it is",
            Self::Base64 => "base64",
            Self::Base64Url => "URL-safe base64",
            Self::Hex => "hex",
            Self::UrlEncoded => "percent-encoded",
            Self::Escaped => "escaped",
        })
    }
}

/// A credential's value found in a changed file of the patch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialLeak {
    /// The credential (its environment variable).
    pub credential: String,
    /// The changed path it was found in.
    pub path: String,
    /// How it was written there.
    pub form: CredentialForm,
}

impl std::fmt::Display for CredentialLeak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the value of credential {} ({}) is in {}",
            self.credential, self.form, self.path
        )
    }
}

/// A credential as it is looked for: its name and the forms of its value.
#[derive(Clone)]
pub(super) struct Tracked {
    pub name: String,
    pub forms: Vec<(CredentialForm, Vec<u8>)>,
}

impl Tracked {
    /// Credential `name` with `value`.
    pub(super) fn new(name: &str, value: &[u8]) -> Self {
        Self {
            name: name.to_owned(),
            forms: forms(value),
        }
    }
}

/// The byte strings `value` is looked for as, each with its form; forms shorter
/// than [`MIN_REDACTED_LEN`] are left out (they would match ordinary text).
fn forms(value: &[u8]) -> Vec<(CredentialForm, Vec<u8>)> {
    let mut forms = vec![(CredentialForm::Plain, value.to_vec())];
    for (form, engine) in [
        (CredentialForm::Base64, &STANDARD_NO_PAD),
        (CredentialForm::Base64Url, &URL_SAFE_NO_PAD),
    ] {
        for shift in 0..3 {
            forms.push((form, base64_core(engine, value, shift)));
        }
    }
    let hex = crate::digest::to_hex(value);
    forms.push((CredentialForm::Hex, hex.to_ascii_uppercase().into_bytes()));
    forms.push((CredentialForm::Hex, hex.into_bytes()));
    let encoded =
        percent_encoding::percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string();
    forms.push((CredentialForm::UrlEncoded, encoded.into_bytes()));
    forms.push((CredentialForm::Escaped, git_quoted(value)));
    if let Ok(json) = serde_json::to_string(&String::from_utf8_lossy(value)) {
        let inner = json.trim_start_matches('"').trim_end_matches('"');
        forms.push((CredentialForm::Escaped, inner.as_bytes().to_vec()));
    }
    forms.retain(|(_, bytes)| bytes.len() >= MIN_REDACTED_LEN);
    forms.sort();
    let mut seen = std::collections::BTreeSet::new();
    forms.retain(|(_, bytes)| seen.insert(bytes.clone()));
    forms
}

/// `value` with the escapes git puts in a quoted path (`core.quotePath`): `"`
/// and backslash escaped, controls and every byte from 0x7f up as escapes.
fn git_quoted(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &byte in value {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b if !(0x20..0x7f).contains(&b) => {
                out.extend_from_slice(format!("\\{b:03o}").as_bytes());
            }
            b => out.push(b),
        }
    }
    out
}

/// The first credential of `credentials` whose value (in any form) is in
/// `text`, and the form it is in.
pub(super) fn find_in(text: &[u8], credentials: &[Tracked]) -> Option<(String, CredentialForm)> {
    credentials.iter().find_map(|Tracked { name, forms }| {
        forms
            .iter()
            .find(|(_, bytes)| contains(text, bytes))
            .map(|(form, _)| (name.clone(), *form))
    })
}

/// The characters of base64 that only `value`'s bytes decide when it follows
/// `shift` other bytes: whatever precedes or follows it in a longer text, its
/// encoding contains these.
fn base64_core(engine: &impl Engine, value: &[u8], shift: usize) -> Vec<u8> {
    let mut shifted = vec![0u8; shift];
    shifted.extend_from_slice(value);
    let encoded = engine.encode(&shifted).into_bytes();
    // Characters holding bits of the prefix, and a last one holding bits of
    // whatever follows.
    let skip = (shift * 8).div_ceil(6);
    let whole = (shifted.len() * 8) / 6;
    encoded.get(skip..whole).unwrap_or_default().to_vec()
}

/// Every credential of `credentials` (name and the forms of its value) found in
/// a changed file of `patch`, by path, once per credential, path and form.
pub(super) fn find_leaks(patch: &[u8], credentials: &[Tracked]) -> Vec<CredentialLeak> {
    let mut leaks = Vec::new();
    if credentials.is_empty() {
        return leaks;
    }
    for (path, section) in sections(patch) {
        let mut texts = vec![section.to_vec()];
        texts.extend(binary_literals(section));
        for Tracked { name, forms } in credentials {
            for (form, bytes) in forms {
                let found = texts.iter().any(|text| contains(text, bytes));
                let leak = CredentialLeak {
                    credential: name.clone(),
                    path: path.clone(),
                    form: *form,
                };
                if found && !leaks.contains(&leak) {
                    leaks.push(leak);
                }
            }
        }
    }
    leaks
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;

    use super::*;

    const VALUE: &[u8] = b"ghp_s3cr3tV4lue-xyz";

    fn found_in(file: &[u8]) -> Vec<CredentialForm> {
        let mut patch = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+".to_vec();
        patch.extend_from_slice(file);
        patch.push(b'\n');
        let credentials = vec![Tracked::new("TOKEN", VALUE)];
        find_leaks(&patch, &credentials)
            .into_iter()
            .map(|leak| {
                assert_eq!(
                    (leak.credential.as_str(), leak.path.as_str()),
                    ("TOKEN", "f")
                );
                leak.form
            })
            .collect()
    }

    #[test]
    fn the_value_is_found_as_it_is_and_in_each_encoding() {
        assert_eq!(found_in(VALUE), [CredentialForm::Plain]);
        assert_eq!(
            found_in(STANDARD.encode(VALUE).as_bytes()),
            [CredentialForm::Base64]
        );
        let hex: String = VALUE.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(found_in(hex.as_bytes()), [CredentialForm::Hex]);
        let encoded = percent_encoding::percent_encode(VALUE, percent_encoding::NON_ALPHANUMERIC);
        assert_eq!(
            found_in(encoded.to_string().as_bytes()),
            [CredentialForm::UrlEncoded]
        );
        assert!(found_in(b"nothing here").is_empty());
    }

    #[test]
    fn a_value_with_characters_a_name_escapes_is_found_escaped() {
        let value = "s3cr\"t\\v\u{e9}lue\tx";
        let credentials = vec![Tracked::new("TOKEN", value.as_bytes())];
        // As a quoted patch header and as a JSON string write it.
        let header = b"diff --git \"a/f-s3cr\\\"t\\\\v\\303\\251lue\\tx\" b/x\n";
        assert_eq!(
            find_in(header, &credentials),
            Some(("TOKEN".to_owned(), CredentialForm::Escaped))
        );
        let json = serde_json::to_string(&format!("f-{value}")).unwrap_or_default();
        assert_eq!(
            find_in(json.as_bytes(), &credentials),
            Some(("TOKEN".to_owned(), CredentialForm::Escaped))
        );
        assert_eq!(find_in(b"nothing", &credentials), None);
    }

    #[test]
    fn base64_of_a_longer_text_holding_the_value_is_found_at_every_alignment() {
        for prefix in ["", "a", "ab", "Authorization: Bearer "] {
            let mut text = prefix.as_bytes().to_vec();
            text.extend_from_slice(VALUE);
            text.extend_from_slice(b" trailing");
            let encoded = URL_SAFE_NO_PAD.encode(&text);
            // Where no character differs between the alphabets, one form is kept.
            let found = found_in(encoded.as_bytes());
            assert!(
                found.contains(&CredentialForm::Base64Url)
                    || found.contains(&CredentialForm::Base64),
                "prefix {prefix:?}: {encoded}"
            );
        }
    }
}
