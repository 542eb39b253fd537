//! `fleet reload`: asks the running daemon to re-read fleet.toml now. It works while the file is
//! invalid: the daemon then keeps its config and records the refusal for `fleet status`.

use supervisor::control::{self, Nudge};

use crate::console;
use crate::ctx::{Ctx, IfInvalid};
use crate::failure::{Failure, Result};

/// `fleet reload`: asks the daemon to re-read fleet.toml.
pub fn reload(ctx: &Ctx) -> Result<()> {
    let state = ctx.state(IfInvalid::Read)?;
    let socket = state.socket_path();
    // Sent even for an invalid file: the daemon then records the refusal for `fleet status`.
    control::send(&socket, Nudge::Reload)
        .map_err(|e| Failure::action(format!("no daemon answers on {}: {e}", socket.display())))?;
    if let Err(errors) = ctx.loaded() {
        // The daemon keeps its last good config and records the refusal.
        return Err(Failure::invalid_config(errors));
    }
    console::println("reload requested")
}
