//! Wall-clock times as the records carry them: milliseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// `time` in milliseconds since the Unix epoch (0 before it, `u64::MAX` past
/// what fits).
pub fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// [`unix_ms`] of now.
pub fn unix_ms_now() -> u64 {
    unix_ms(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn milliseconds_since_the_epoch_and_zero_before_it() {
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_millis(1_234)), 1_234);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert!(unix_ms_now() > 1_700_000_000_000);
    }
}
