//! The commands, one file per verb (`pause` and `resume` share one, as do `completions` and
//! `man`; `daemon`, `runs` and `status` are a folder, with modules of their own inside): each
//! holds its arguments, its function and the helpers only it uses. A command imports the
//! crate's shared modules only ([`crate::ctx`], [`crate::failure`], [`crate::console`], …),
//! never another command nor [`crate::cli`].

pub mod cancel;
pub mod check;
pub mod daemon;
pub mod enqueue;
pub mod hosts;
pub mod logs;
pub mod manual;
pub mod pause;
pub mod projects;
pub mod prune;
pub mod reload;
pub mod rerun;
pub mod runs;
pub mod status;
pub mod validate;
pub mod wait;
