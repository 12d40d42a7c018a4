//! `GIT binary patch` bodies: zlib-deflated `literal` blocks in git's base85.

use std::io::Write;

use flate2::Compression;
use flate2::write::ZlibEncoder;

use super::PromotionError;

const ALPHABET: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// Appends a `GIT binary patch` section turning `old` into `new` to `out`: a forward
/// `literal` block with the new content and a reverse one with the old content
/// (`git apply` needs both), each followed by a blank line. The caller writes the
/// full-length `index` line before it (git refuses binary patches without one).
pub fn write_binary_patch(
    out: &mut Vec<u8>,
    path: &str,
    old: &[u8],
    new: &[u8],
) -> Result<(), PromotionError> {
    out.extend_from_slice(b"GIT binary patch\n");
    write_literal(out, path, new)?;
    write_literal(out, path, old)?;
    Ok(())
}

/// Appends `literal <size>`, the base85 lines of the deflated `content` and a blank
/// line.
fn write_literal(out: &mut Vec<u8>, path: &str, content: &[u8]) -> Result<(), PromotionError> {
    let compress = |source| PromotionError::Encode {
        operation: "compress binary content",
        path: path.into(),
        source,
    };
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(content).map_err(compress)?;
    let deflated = encoder.finish().map_err(compress)?;
    out.extend_from_slice(format!("literal {}\n", content.len()).as_bytes());
    for chunk in deflated.chunks(52) {
        out.push(length_char(chunk.len()));
        encode_85(out, chunk);
        out.push(b'\n');
    }
    out.push(b'\n');
    Ok(())
}

/// `A`-`Z` for 1-26 bytes, `a`-`z` for 27-52.
fn length_char(len: usize) -> u8 {
    let len = u8::try_from(len).unwrap_or(52).clamp(1, 52);
    if len <= 26 {
        b'A' + len - 1
    } else {
        b'a' + len - 27
    }
}

/// Git's base85: each group of four bytes (big-endian, the last one zero-padded)
/// becomes five characters, most significant first.
fn encode_85(out: &mut Vec<u8>, data: &[u8]) {
    for group in data.chunks(4) {
        let mut acc: u32 = 0;
        for i in 0..4 {
            acc = (acc << 8) | u32::from(group.get(i).copied().unwrap_or(0));
        }
        let mut chars = [0u8; 5];
        for slot in chars.iter_mut().rev() {
            *slot = ALPHABET[(acc % 85) as usize];
            acc /= 85;
        }
        out.extend_from_slice(&chars);
    }
}

#[cfg(test)]
mod tests {
    use super::{encode_85, length_char, write_literal};

    /// Decodes a `literal` block the way `git apply` does.
    fn decode_literal(block: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let text = std::str::from_utf8(block).unwrap();
        let mut lines = text.lines();
        let size: usize = lines
            .next()
            .unwrap()
            .strip_prefix("literal ")
            .unwrap()
            .parse()
            .unwrap();
        let mut deflated = Vec::new();
        for line in lines.take_while(|l| !l.is_empty()) {
            let bytes = line.as_bytes();
            let len = match bytes[0] {
                b @ b'A'..=b'Z' => usize::from(b - b'A' + 1),
                b => usize::from(b - b'a' + 27),
            };
            let mut decoded = Vec::new();
            for group in bytes[1..].chunks(5) {
                let mut acc: u64 = 0;
                for c in group {
                    let digit = super::ALPHABET.iter().position(|a| a == c).unwrap();
                    acc = acc * 85 + digit as u64;
                }
                decoded.extend_from_slice(&(acc as u32).to_be_bytes());
            }
            deflated.extend_from_slice(&decoded[..len]);
        }
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(deflated.as_slice())
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out.len(), size);
        out
    }

    #[test]
    fn promotion_binary_literal_decodes_like_git_apply() {
        for content in [
            Vec::new(),
            b"abc".to_vec(),
            (0..=255u8).cycle().take(5000).collect(),
        ] {
            let mut out = Vec::new();
            write_literal(&mut out, "x", &content).unwrap();
            assert!(out.ends_with(b"\n\n"));
            assert!(out.split(|b| *b == b'\n').all(|line| line.len() <= 66));
            assert_eq!(decode_literal(&out), content);
        }
    }

    #[test]
    fn promotion_binary_base85_and_length_chars() {
        let mut out = Vec::new();
        encode_85(&mut out, &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(out, b"00000|NsC0");
        assert_eq!(length_char(1), b'A');
        assert_eq!(length_char(26), b'Z');
        assert_eq!(length_char(27), b'a');
        assert_eq!(length_char(52), b'z');
    }
}
