//! Human-readable sizes and durations (`"4GiB"`, `"30m"`) that round-trip exactly.
//!
//! Both accept an integer (bytes, seconds) or a string with one unit, whose number
//! may have decimals as long as the value comes out whole (`"1.5GiB"`, `"1.5m"`),
//! and always serialize to the canonical string: the largest unit that divides the
//! value exactly.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// A number of bytes: `"512MiB"`, `"1.5GiB"`, `"100MB"` or an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

const BYTE_UNITS: &[(&str, u64)] = &[
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
    ("B", 1),
];

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }

    /// The size for people: one decimal in the largest binary unit of which
    /// it is at least 1 (`"87.3 MiB"`). [`Display`](fmt::Display) is exact.
    pub fn approx(self) -> String {
        BYTE_UNITS
            .iter()
            .filter(|(unit, _)| unit.ends_with("iB"))
            .find(|(_, scale)| self.0 >= *scale)
            .map_or_else(
                || format!("{} B", self.0),
                |(unit, scale)| format!("{:.1} {unit}", self.0 as f64 / *scale as f64),
            )
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Binary units first: they are what limits are written in.
        let (unit, scale) = BYTE_UNITS
            .iter()
            .filter(|(unit, _)| unit.ends_with("iB"))
            .find(|(_, scale)| self.0 != 0 && self.0.is_multiple_of(*scale))
            .copied()
            .unwrap_or(("B", 1));
        write!(f, "{}{unit}", self.0 / scale)
    }
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (number, unit) = split_number(s)?;
        let scale = if unit.is_empty() {
            1
        } else {
            BYTE_UNITS
                .iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, scale)| *scale)
                .ok_or_else(|| {
                    format!(
                        "unknown size unit {unit:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
                    )
                })?
        };
        number.times(scale, s, "bytes").map(ByteSize)
    }
}

/// A span of time: `"90s"`, `"30m"`, `"2h"`, `"250ms"` or an integer number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DurationSpec {
    millis: u64,
}

const DURATION_UNITS: &[(&str, u64)] = &[("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

impl DurationSpec {
    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Self {
            millis: secs.saturating_mul(1000),
        }
    }

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Self { millis }
    }

    /// The duration in milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// As a [`std::time::Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_millis(self.millis)
    }
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, scale) = DURATION_UNITS
            .iter()
            .find(|(_, scale)| self.millis != 0 && self.millis.is_multiple_of(*scale))
            .copied()
            .unwrap_or(("s", 1000));
        write!(f, "{}{unit}", self.millis / scale)
    }
}

impl FromStr for DurationSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (number, unit) = split_number(s)?;
        let scale = if unit.is_empty() {
            1000
        } else {
            DURATION_UNITS
                .iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, scale)| *scale)
                .ok_or_else(|| format!("unknown duration unit {unit:?} (use ms, s, m, h)"))?
        };
        number
            .times(scale, s, "milliseconds")
            .map(Self::from_millis)
    }
}

/// The number a size or duration starts with: digits, and optionally a
/// decimal point and more digits (`1.5` in `"1.5GiB"`).
struct Number {
    /// The digits without the point, as one integer (`15`).
    digits: u128,
    /// How many of them follow the point (`1`).
    decimals: u32,
}

impl Number {
    /// The number times `scale`, which must come out a whole number of
    /// `units` that fits 64 bits.
    fn times(&self, scale: u64, text: &str, units: &str) -> Result<u64, String> {
        let divisor = 10u128.pow(self.decimals);
        let scaled = self
            .digits
            .checked_mul(u128::from(scale))
            .ok_or_else(|| format!("{text:?} overflows 64 bits"))?;
        if scaled % divisor != 0 {
            return Err(format!("{text:?} is not a whole number of {units}"));
        }
        u64::try_from(scaled / divisor).map_err(|_| format!("{text:?} overflows 64 bits"))
    }
}

fn split_number(s: &str) -> Result<(Number, &str), String> {
    let s = s.trim();
    let digits = |from: &str| from.bytes().take_while(u8::is_ascii_digit).count();
    let whole = digits(s);
    if whole == 0 {
        return Err(format!("{s:?} does not start with a number"));
    }
    let (mut number, mut rest) = s.split_at(whole);
    let mut text = number.to_owned();
    let mut decimals = 0;
    if let Some(after) = rest.strip_prefix('.') {
        let fraction = digits(after);
        if fraction == 0 {
            return Err(format!("{s:?}: a decimal point needs digits after it"));
        }
        (number, rest) = after.split_at(fraction);
        text.push_str(number);
        decimals = u32::try_from(fraction).map_err(|_| format!("{s:?} has too many decimals"))?;
        if decimals > 18 {
            return Err(format!("{s:?} has too many decimals"));
        }
    }
    let digits = text
        .parse::<u128>()
        .ok()
        .filter(|d| *d <= u128::from(u64::MAX) * 10u128.pow(decimals))
        .ok_or_else(|| format!("{s:?} overflows 64 bits"))?;
    Ok((Number { digits, decimals }, rest.trim()))
}

/// Serde for "string with a unit, or a plain integer".
macro_rules! string_or_integer_serde {
    ($ty:ty, $from_int:expr, $expecting:literal, $schema_name:literal, $description:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl de::Visitor<'_> for Visitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        $from_int(v).ok_or_else(|| E::custom(concat!($expecting, ": too large")))
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        let v = u64::try_from(v)
                            .map_err(|_| E::custom(concat!($expecting, ": negative")))?;
                        self.visit_u64(v)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                deserializer.deserialize_any(Visitor)
            }
        }

        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $schema_name.into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "description": $description,
                    "type": ["string", "integer"],
                    "pattern": "^[0-9]+(\\.[0-9]+)?\\s*[A-Za-z]*$",
                    "minimum": 0
                })
            }
        }
    };
}

string_or_integer_serde!(
    ByteSize,
    |v: u64| Some(ByteSize(v)),
    "a size such as \"512MiB\" or a number of bytes",
    "ByteSize",
    "A size: a number of bytes, or a string with one unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)."
);

string_or_integer_serde!(
    DurationSpec,
    |v: u64| v.checked_mul(1000).map(DurationSpec::from_millis),
    "a duration such as \"30m\" or a number of seconds",
    "DurationSpec",
    "A duration: a number of seconds, or a string with one unit (ms, s, m, h)."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print_canonically() {
        assert_eq!("4GiB".parse(), Ok(ByteSize(4 << 30)));
        assert_eq!("100MB".parse(), Ok(ByteSize(100_000_000)));
        assert_eq!("7".parse(), Ok(ByteSize(7)));
        assert_eq!(ByteSize(4 << 30).to_string(), "4GiB");
        assert_eq!(ByteSize(100_000_000).to_string(), "100000000B");
        assert_eq!(ByteSize(0).to_string(), "0B");
        assert_eq!(ByteSize(3 << 29).approx(), "1.5 GiB");
        assert_eq!(ByteSize(12_288).approx(), "12.0 KiB");
        assert_eq!(ByteSize(100).approx(), "100 B");
        assert!("4XB".parse::<ByteSize>().is_err());
        assert!("GiB".parse::<ByteSize>().is_err());
        assert!("99999999999TiB".parse::<ByteSize>().is_err());
    }

    #[test]
    fn sizes_and_durations_take_decimals_that_come_out_whole() {
        assert_eq!("1.5GiB".parse(), Ok(ByteSize(3 << 29)));
        assert_eq!("0.5KiB".parse(), Ok(ByteSize(512)));
        assert_eq!("2.25MB".parse(), Ok(ByteSize(2_250_000)));
        assert_eq!("1.5m".parse(), Ok(DurationSpec::from_secs(90)));
        assert_eq!("0.25s".parse(), Ok(DurationSpec::from_millis(250)));
        let err = "1.3B".parse::<ByteSize>().unwrap_err();
        assert!(err.contains("not a whole number of bytes"), "{err}");
        assert!("1.0001s".parse::<DurationSpec>().is_err());
        assert!("1.GiB".parse::<ByteSize>().is_err());
        assert!("16777216.5TiB".parse::<ByteSize>().is_err());
    }

    #[test]
    fn durations_parse_and_print_canonically() {
        assert_eq!("30m".parse(), Ok(DurationSpec::from_secs(1800)));
        assert_eq!("90".parse(), Ok(DurationSpec::from_secs(90)));
        assert_eq!(DurationSpec::from_secs(90).to_string(), "90s");
        assert_eq!(DurationSpec::from_secs(7200).to_string(), "2h");
        assert_eq!(DurationSpec::from_millis(1500).to_string(), "1500ms");
        assert!("3d".parse::<DurationSpec>().is_err());
    }

    #[test]
    fn integers_and_strings_deserialize() {
        #[derive(Deserialize)]
        struct T {
            size: ByteSize,
            time: DurationSpec,
        }
        let t: T = serde_json::from_str(r#"{"size": 1024, "time": "2m"}"#).expect("parse");
        assert_eq!(t.size, ByteSize(1024));
        assert_eq!(t.time.as_millis(), 120_000);
        assert!(serde_json::from_str::<T>(r#"{"size": -1, "time": 1}"#).is_err());
    }
}
