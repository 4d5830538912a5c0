//! What the reader does with a frame while its owner shuts down gracefully: responses still
//! complete their waiters, a client newer than V5_3_1 is told GO_AWAY (spec §3), every other
//! request is dropped unanswered.

use crate::code::{version, ResponseCode};
use crate::command::RemotingCommand;

use super::ConnectionHandle;

/// Java 5.x's remark of GO_AWAY, sent to newer clients while the server shuts down.
pub const GO_AWAY_REMARK: &str = "please go away";

/// Routes a frame read while the owner shuts down: a response still completes its waiter; a
/// request from a client newer than V5_3_1 is answered GO_AWAY "please go away" (spec §3, so
/// it retries elsewhere); any other request is dropped unanswered, as if never read.
pub(super) fn refuse_while_shutting_down(conn: &ConnectionHandle, cmd: RemotingCommand) {
    if cmd.is_response() {
        conn.complete(cmd);
        return;
    }
    if cmd.is_oneway() || cmd.version() <= version::V5_3_1 {
        return;
    }
    let go_away = RemotingCommand::response_to(&cmd, ResponseCode::GO_AWAY, GO_AWAY_REMARK);
    // Never wait here: the reader must keep reading responses.
    let _ = conn.shared.outbox.try_push(&go_away);
}
