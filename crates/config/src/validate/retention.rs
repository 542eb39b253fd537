//! `keep_runs`, `keep_for` and `max_log_size`, at the top level and in `[projects.<name>]`
//! (a project's own value wins over the top level's).

use std::time::Duration;

use runrecord::MIN_MAX_LOG_SIZE;
use toml::de::{DeTable, DeValue};

use super::checker::{describe, Checker, Value};
use crate::retention::{Retention, OFF};

impl Checker<'_> {
    /// The retention keys of `table` (dotted key `dotted`, "" for the top level), each falling
    /// back to `inherited` when absent or invalid (an invalid one is reported).
    pub(super) fn retention(
        &mut self,
        table: &DeTable<'_>,
        dotted: &str,
        inherited: &Retention,
    ) -> Retention {
        Retention {
            keep_runs: self
                .optional(table, dotted, "keep_runs", Self::keep_runs)
                .unwrap_or(inherited.keep_runs),
            keep_for: self
                .optional(table, dotted, "keep_for", Self::keep_for)
                .unwrap_or(inherited.keep_for),
            max_log_size: self
                .optional(table, dotted, "max_log_size", Self::max_log_size)
                .unwrap_or(inherited.max_log_size),
        }
    }

    /// `keep_runs`: an integer of at least 1, or `"off"` (`Some(None)`).
    fn keep_runs(&mut self, v: &Value<'_>, key: &str) -> Option<Option<u32>> {
        match v.get_ref() {
            DeValue::String(s) if s.as_ref() == OFF => Some(None),
            DeValue::Integer(_) => {
                let n = self.expect_int(v, key, 0, i128::from(u32::MAX))?;
                if n == 0 {
                    self.error(
                        v.span(),
                        key,
                        "must be at least 1 (the last run is always kept; write \"off\" to keep every run)",
                    );
                    return None;
                }
                u32::try_from(n).ok().map(Some)
            }
            other => {
                self.error(
                    v.span(),
                    key,
                    format!(
                        "expected an integer of at least 1 or \"off\", found {}",
                        describe(other)
                    ),
                );
                None
            }
        }
    }

    /// `keep_for`: a duration greater than zero, or `"off"` (`Some(None)`).
    fn keep_for(&mut self, v: &Value<'_>, key: &str) -> Option<Option<Duration>> {
        if let DeValue::String(s) = v.get_ref() {
            if s.as_ref() == OFF {
                return Some(None);
            }
        }
        self.expect_duration(v, key, false).map(Some)
    }

    /// `max_log_size`: a size string such as `"64MiB"` or `"500KB"` (`KiB`, `MiB`, `GiB` are
    /// powers of 1024; `KB`, `MB`, `GB` of 1000), or an integer number of bytes; at least
    /// [`MIN_MAX_LOG_SIZE`].
    fn max_log_size(&mut self, v: &Value<'_>, key: &str) -> Option<u64> {
        let bytes = match v.get_ref() {
            // bytesize saturates a size past 2^64 bytes to the largest value instead of
            // refusing it: that is refused here, as is anything it cannot read. Its own words
            // name its types, so the message is fleet's.
            DeValue::String(s) => match s.trim().parse::<bytesize::ByteSize>() {
                Ok(b) if b.as_u64() < u64::MAX => b.as_u64(),
                Ok(_) => {
                    self.error(
                        v.span(),
                        key,
                        format!("size {:?} is too large (at most 16EiB)", s.as_ref()),
                    );
                    return None;
                }
                Err(_) => {
                    self.error(
                        v.span(),
                        key,
                        format!(
                            "invalid size {:?}: expected a size such as \"64MiB\", \"512KiB\" or \"500KB\", or a number of bytes",
                            s.as_ref()
                        ),
                    );
                    return None;
                }
            },
            DeValue::Integer(_) => {
                u64::try_from(self.expect_int(v, key, 0, i128::from(u64::MAX))?).ok()?
            }
            other => {
                self.error(
                    v.span(),
                    key,
                    format!(
                        "expected a size such as \"64MiB\", found {}",
                        describe(other)
                    ),
                );
                return None;
            }
        };
        if bytes < MIN_MAX_LOG_SIZE {
            self.error(
                v.span(),
                key,
                format!("must be at least 1KiB ({MIN_MAX_LOG_SIZE} bytes), found {bytes} bytes"),
            );
            return None;
        }
        Some(bytes)
    }
}
