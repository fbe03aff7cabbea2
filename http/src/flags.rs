//! Number flags, checked as they are parsed: every duration, rate, share and size a switchyard
//! command takes is one of these types, so a negative, NaN or infinite value (or a zero where
//! zero means nothing) is refused at start with a message that names the flag (clap adds the
//! name), never run with.
//!
//! Each type reads as its number (`Deref<Target = f64>`), so code that uses a flag reads it
//! like the plain `f64` it was.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::time::Duration;

/// The longest duration a flag takes: a year (deadlines are added to the clock, which must not
/// overflow).
pub const MAX_SECONDS: f64 = 365.0 * 86400.0;

/// Defines a checked `f64` flag type: its name, doc, what it accepts and the message otherwise.
macro_rules! number_flag {
    ($(#[$doc:meta])* $name:ident, $accepts:expr, $what:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
        pub struct $name(f64);

        impl $name {
            /// The value, if it is one this type accepts.
            pub fn new(value: f64) -> Option<Self> {
                let accepts: fn(f64) -> bool = $accepts;
                (value.is_finite() && accepts(value)).then_some($name(value))
            }

            /// The number.
            pub fn get(self) -> f64 {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                s.trim()
                    .parse::<f64>()
                    .ok()
                    .and_then($name::new)
                    .ok_or_else(|| format!("{s:?} is not {}", $what))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl Deref for $name {
            type Target = f64;

            fn deref(&self) -> &f64 {
                &self.0
            }
        }
    };
}

number_flag!(
    /// A positive, finite number (a rate, a size, a scale).
    Positive,
    |v| v > 0.0,
    "a positive number"
);

number_flag!(
    /// A finite number, zero or more (zero: none).
    NonNegative,
    |v| v >= 0.0,
    "a number, zero or more"
);

number_flag!(
    /// A factor of at least 1 (a bound over a mean).
    AtLeastOne,
    |v| v >= 1.0,
    "a number, 1 or more"
);

number_flag!(
    /// A share: above 0, at most 1.
    Share,
    |v| v > 0.0 && v <= 1.0,
    "a share above 0 and at most 1"
);

number_flag!(
    /// A duration in seconds: positive, at most a year.
    Seconds,
    |v| v > 0.0 && v <= MAX_SECONDS,
    "a positive number of seconds, at most a year (31536000)"
);

number_flag!(
    /// A duration in seconds that may be zero (no wait): at most a year.
    SecondsOrZero,
    |v| (0.0..=MAX_SECONDS).contains(&v),
    "a number of seconds, zero or more, at most a year (31536000)"
);

impl Seconds {
    /// As a duration.
    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.0)
    }
}

impl SecondsOrZero {
    /// As a duration.
    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_numbers_are_refused_and_good_ones_read_as_numbers() {
        for bad in ["-5", "0", "NaN", "inf", "-inf", "x", "", "1e400"] {
            assert!(bad.parse::<Seconds>().is_err(), "{bad}");
            assert!(bad.parse::<Positive>().is_err(), "{bad}");
        }
        assert!("31536001".parse::<Seconds>().is_err());
        assert_eq!(*"1.5".parse::<Seconds>().unwrap(), 1.5);
        assert_eq!(
            "0.25".parse::<Seconds>().unwrap().duration(),
            Duration::from_millis(250)
        );
        assert_eq!("0".parse::<SecondsOrZero>().unwrap().get(), 0.0);
        assert!("-1".parse::<SecondsOrZero>().is_err());
        assert_eq!("0".parse::<NonNegative>().unwrap().get(), 0.0);
        assert!("-0.1".parse::<NonNegative>().is_err());
        assert!("1".parse::<Share>().is_ok() && "1.01".parse::<Share>().is_err());
        assert!("0".parse::<Share>().is_err());
        let e = "-5".parse::<Seconds>().unwrap_err();
        assert!(e.contains("positive number of seconds"), "{e}");
        assert_eq!(Positive::new(2.0).unwrap().to_string(), "2");
    }
}
