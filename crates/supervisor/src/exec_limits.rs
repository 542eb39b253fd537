//! The kernel's limits on what one exec may carry: checked ahead of time by `fleet validate`,
//! and used to explain an exec refused with E2BIG ("Argument list too long") by naming the
//! command, the argument or variable at fault, and the limit it passed — rather than the
//! program that happened to call exec (the fleet binary, for an exec'd shim).
//!
//! Linux refuses an exec when a single argument or environment string (`NAME=value`) is
//! [`MAX_ARG_STRLEN`] bytes or longer, or when all of them together, each with its terminating
//! NUL and one pointer, exceed the total that the stack limit allows (`ARG_MAX`, as `sysconf`
//! reports it: [`arg_max`]). Both limits cover the environment too, which a command inherits
//! from the daemon, so a check done anywhere else is an estimate.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;

/// The size, in bytes and counting its terminating NUL, that a single argument or environment
/// string must stay below: Linux's `MAX_ARG_STRLEN`, 32 pages of 4 KiB (128 KiB). The longest
/// string an exec accepts is therefore `MAX_ARG_STRLEN - 1` bytes.
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// The longest program name a message quotes, in characters: the program may itself be the
/// oversized string.
const NAME_CHARS: usize = 80;

/// Why an exec of a command is (or would be) refused with E2BIG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TooLong {
    /// Argument `index` of the argv (0 is the program) is `bytes` long: past the per-string
    /// limit.
    Argument {
        /// Its position in the argv; 0 is the program.
        index: usize,
        /// Its length in bytes.
        bytes: usize,
    },
    /// The environment string `NAME=value` of variable `name` is `bytes` long: past the
    /// per-string limit.
    Variable {
        /// The variable's name.
        name: String,
        /// The length of `NAME=value` in bytes.
        bytes: usize,
    },
    /// Arguments and environment together take `bytes` bytes (strings with their NULs, plus
    /// one pointer each): more than the total `limit` (`ARG_MAX`).
    Total {
        /// What they take, in bytes.
        bytes: usize,
        /// `ARG_MAX`, in bytes.
        limit: usize,
    },
}

impl fmt::Display for TooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_string = MAX_ARG_STRLEN - 1;
        match self {
            TooLong::Argument { index, bytes } => write!(
                f,
                "argument {index} is {bytes} bytes, past the kernel's limit of {per_string} \
                 bytes per argument (MAX_ARG_STRLEN, 128 KiB)"
            ),
            TooLong::Variable { name, bytes } => write!(
                f,
                "environment variable {name} takes {bytes} bytes, past the kernel's limit of \
                 {per_string} bytes per variable (MAX_ARG_STRLEN, 128 KiB)"
            ),
            TooLong::Total { bytes, limit } => write!(
                f,
                "its arguments and environment take {bytes} bytes, past the kernel's limit of \
                 {limit} bytes for all of them together (ARG_MAX)"
            ),
        }
    }
}

/// `ARG_MAX`: the most bytes one exec may carry in arguments and environment together, from
/// `sysconf`. `None` when the system reports none.
pub fn arg_max() -> Option<usize> {
    crate::sys::process::arg_max()
}

/// The first reason an exec of `argv` with exactly the environment `env` would be refused:
/// an argument, then a variable, past [`MAX_ARG_STRLEN`]; then the total past `limit` (pass
/// [`arg_max`]; `None` skips the total). `None` when both limits are kept. Pure.
pub fn check<A, K, V>(argv: &[A], env: &[(K, V)], limit: Option<usize>) -> Option<TooLong>
where
    A: AsRef<OsStr>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let pointer = std::mem::size_of::<usize>();
    let mut total = 0usize;
    for (index, arg) in argv.iter().enumerate() {
        let bytes = arg.as_ref().as_bytes().len();
        if bytes >= MAX_ARG_STRLEN {
            return Some(TooLong::Argument { index, bytes });
        }
        total = total.saturating_add(bytes + 1 + pointer);
    }
    for (name, value) in env {
        // As the kernel sees it: one `NAME=value` string.
        let bytes = name.as_ref().len() + 1 + value.as_ref().len();
        if bytes >= MAX_ARG_STRLEN {
            return Some(TooLong::Variable {
                name: name.as_ref().to_string_lossy().into_owned(),
                bytes,
            });
        }
        total = total.saturating_add(bytes + 1 + pointer);
    }
    match limit {
        Some(limit) if total > limit => Some(TooLong::Total {
            bytes: total,
            limit,
        }),
        _ => None,
    }
}

/// This process's environment with `changes` applied in order (`Some` sets, `None` removes):
/// the environment a command started from here with those changes gets.
pub fn environment_with<I>(changes: I) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, Option<OsString>)>,
{
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (key, value) in changes {
        env.retain(|(k, _)| *k != key);
        if let Some(value) = value {
            env.push((key, value));
        }
    }
    env
}

/// The one-line reason for an exec of `argv` (environment `env`) refused with E2BIG: it names
/// the command's program and the limit it passed, never the oversized strings themselves.
pub fn refused_message<A, K, V>(argv: &[A], env: &[(K, V)]) -> String
where
    A: AsRef<OsStr>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let program = argv
        .first()
        .map(|p| short(&p.as_ref().to_string_lossy()))
        .unwrap_or_default();
    let limit = arg_max();
    match check(argv, env, limit) {
        Some(why) => format!("could not start command `{program}`: {why}"),
        // The limits were kept by the command itself, so what overflowed is what fleet adds
        // (an exec'd shim's own arguments): still the command's size, and still these limits.
        None => format!(
            "could not start command `{program}`: its arguments and environment are too long \
             for the kernel (at most {} bytes per argument (MAX_ARG_STRLEN), {} in all \
             (ARG_MAX))",
            MAX_ARG_STRLEN - 1,
            limit.map_or_else(|| "no fixed limit".to_string(), |l| format!("{l} bytes")),
        ),
    }
}

/// `text`, cut to [`NAME_CHARS`] characters with an ellipsis.
fn short(text: &str) -> String {
    match text.char_indices().nth(NAME_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ENV: &[(&str, &str)] = &[];

    #[test]
    fn an_argument_at_the_per_string_limit_is_refused_one_byte_less_is_not() {
        let fits = "x".repeat(MAX_ARG_STRLEN - 1);
        assert_eq!(check(&["echo", fits.as_str()], NO_ENV, None), None);
        let over = "x".repeat(MAX_ARG_STRLEN);
        assert_eq!(
            check(&["echo", over.as_str()], NO_ENV, None),
            Some(TooLong::Argument {
                index: 1,
                bytes: MAX_ARG_STRLEN
            })
        );
    }

    #[test]
    fn a_variable_counts_as_name_equals_value() {
        let value = "v".repeat(MAX_ARG_STRLEN - 2);
        // "A=" + value is MAX_ARG_STRLEN bytes.
        let got = check(&["true"], &[("A", value.as_str())], None);
        assert_eq!(
            got,
            Some(TooLong::Variable {
                name: "A".into(),
                bytes: MAX_ARG_STRLEN
            })
        );
    }

    #[test]
    fn the_total_counts_strings_their_nuls_and_one_pointer_each() {
        let p = std::mem::size_of::<usize>();
        // "ab" and "K=v": 3 + 4 bytes with NULs, plus two pointers.
        let need = 3 + 4 + 2 * p;
        assert_eq!(check(&["ab"], &[("K", "v")], Some(need)), None);
        assert_eq!(
            check(&["ab"], &[("K", "v")], Some(need - 1)),
            Some(TooLong::Total {
                bytes: need,
                limit: need - 1
            })
        );
    }

    #[test]
    fn the_message_names_the_program_and_the_limit_never_the_oversized_argument() {
        let big = "y".repeat(200 * 1024);
        let m = refused_message(&["my-tool", big.as_str()], NO_ENV);
        assert!(m.contains("`my-tool`"), "{m}");
        assert!(m.contains("argument 1"), "{m}");
        assert!(m.contains(&(MAX_ARG_STRLEN - 1).to_string()), "{m}");
        assert!(m.len() < 300, "{m}");
        let m = refused_message(&[big.as_str()], NO_ENV);
        assert!(m.len() < 400, "{m}");
    }

    #[test]
    fn environment_with_applies_sets_and_removals_in_order() {
        let env = environment_with([
            ("FLEET_EXEC_LIMITS_T".into(), Some("1".into())),
            ("FLEET_EXEC_LIMITS_T".into(), Some("2".into())),
            ("FLEET_EXEC_LIMITS_U".into(), Some("3".into())),
            ("FLEET_EXEC_LIMITS_U".into(), None),
        ]);
        let get = |k: &str| env.iter().filter(|(n, _)| n == k).collect::<Vec<_>>();
        assert_eq!(get("FLEET_EXEC_LIMITS_T").len(), 1);
        assert_eq!(get("FLEET_EXEC_LIMITS_T")[0].1, "2");
        assert!(get("FLEET_EXEC_LIMITS_U").is_empty());
    }
}
