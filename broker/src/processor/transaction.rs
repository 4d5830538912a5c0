//! Transactions (END_TRANSACTION 37, CHECK_TRANSACTION_STATE 39): not implemented yet.
//!
//! Half messages are already stored as Java stores them (`RMQ_SYS_TRANS_HALF_TOPIC` queue 0
//! with `REAL_TOPIC`/`REAL_QID`, see `send.rs`), but nothing commits or rolls them back and no
//! check service runs. Code 37 is deliberately left unregistered, so clients get
//! REQUEST_CODE_NOT_SUPPORTED (" request type 37 not supported") rather than a false success.
//!
//! Extension point: implement END_TRANSACTION here and register it in [`register`]; start the
//! transaction-check service from `controller::RoleServices::on_master`.

use std::sync::Arc;

use remoting::ProcessorRegistry;

use crate::context::BrokerContext;

/// Registers the transaction processors (none yet: code 37 stays unsupported).
pub fn register(_registry: &mut ProcessorRegistry, _ctx: &Arc<BrokerContext>) {}
