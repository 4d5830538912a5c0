//! END_TRANSACTION (37) registration; the logic lives in [`crate::transaction::end`].
//! CHECK_TRANSACTION_STATE (39) is sent by the broker ([`crate::transaction::check`]), never
//! served.

use std::sync::Arc;

use remoting::headers::EndTransactionRequestHeader;
use remoting::{ConnectionHandle, RemotingCommand, RequestCode};

use crate::context::BrokerContext;
use crate::error::BrokerError;

async fn end_transaction(
    ctx: Arc<BrokerContext>,
    _conn: ConnectionHandle,
    req: RemotingCommand,
) -> Result<RemotingCommand, BrokerError> {
    let h: EndTransactionRequestHeader = req.decode_header()?;
    crate::transaction::end::end_transaction(&ctx, &h).await
}

/// Registers END_TRANSACTION.
pub fn register(registry: &mut super::Registrar, ctx: &Arc<BrokerContext>) {
    super::register(registry, RequestCode::END_TRANSACTION, ctx, end_transaction);
}
