//! END_TRANSACTION (37) registration; the logic lives in [`crate::transaction::end`].
//! CHECK_TRANSACTION_STATE (39) is sent by the broker ([`crate::transaction::check`]), never
//! served.

use std::sync::Arc;

use remoting::custom_headers::EndTransactionRequestHeader;
use remoting::{ConnectionHandle, RemotingCommand, RequestCode};

use crate::context::{BrokerContext, ServingRole};
use crate::error::BrokerError;
use crate::message::sysflag;

async fn end_transaction(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: EndTransactionRequestHeader = req.decode_header()?;
    // No physical offset is negative: Java's lookup finds nothing there and answers as below
    // (after its slave and unknown-state answers, which `end_transaction` gives first).
    let decides = matches!(
        h.commit_or_rollback,
        sysflag::TRANSACTION_COMMIT_TYPE | sysflag::TRANSACTION_ROLLBACK_TYPE
    );
    if h.commit_log_offset < 0 && decides && ctx.role.role() == ServingRole::Master {
        return Err(BrokerError::System(
            "Find prepared transaction message failed".into(),
        ));
    }
    crate::transaction::end::end_transaction(&ctx, &h).await
}

/// Registers END_TRANSACTION.
pub fn register(registry: &mut super::Registrar, ctx: &Arc<BrokerContext>) {
    super::register(registry, RequestCode::END_TRANSACTION, ctx, end_transaction);
}
