//! Named scenario families (RELIABILITY.md §6(a)), shared by the tests and the `sim` binary.

use super::world::{Scenario, SimOptions};
use crate::core::BugInjection;

/// Every family name, in the order the binary runs them.
pub const FAMILIES: &[&str] = &[
    "baseline3",
    "baseline5",
    "failover",
    "chaos",
    "partitions3",
    "partitions5",
    "crashes",
    "power_loss",
    "disk_full",
    "transfer",
    "crashes_store",
    "power_loss_store",
    "rejoin",
    "clock_drift",
    "retention",
    "push_bookkeeping",
    "truncation",
];

/// The options of family `name` with `nodes` overridden when the name does not fix it.
pub fn family(name: &str) -> Option<SimOptions> {
    let d = SimOptions::default();
    Some(match name {
        // SIM-01: no faults.
        "baseline3" => SimOptions {
            fault_ms: 5_000,
            heal_ms: 5_000,
            ..d
        },
        "baseline5" => SimOptions {
            nodes: 5,
            fault_ms: 5_000,
            heal_ms: 5_000,
            ..d
        },
        // Leader crashes on a calm network: failover timing.
        "failover" => SimOptions {
            crashes: true,
            kill_leader_only: true,
            ..d
        },
        // SIM-02: message chaos.
        "chaos" => SimOptions { chaos: true, ..d },
        // SIM-03: partitions composed with chaos.
        "partitions3" => SimOptions {
            chaos: true,
            partitions: true,
            ..d
        },
        "partitions5" => SimOptions {
            nodes: 5,
            chaos: true,
            partitions: true,
            ..d
        },
        // SIM-04: process crashes (page cache survives) with partitions.
        "crashes" => SimOptions {
            nodes: 5,
            crashes: true,
            partitions: true,
            chaos: true,
            ..d
        },
        // SIM-05 + SIM-13: power loss in sync-flush mode, one slow disk.
        "power_loss" => SimOptions {
            power_loss: true,
            slow_disk: true,
            chaos: true,
            ..d
        },
        // SIM-14: disks that refuse writes for a while, with crashes and chaos.
        "disk_full" => SimOptions {
            disk_full: true,
            crashes: true,
            chaos: true,
            ..d
        },
        // SIM-04/05 again on the real store (in-memory disk), restarting through its recovery.
        "crashes_store" => SimOptions {
            real_store: true,
            ..family("crashes")?
        },
        "power_loss_store" => SimOptions {
            real_store: true,
            ..family("power_loss")?
        },
        // SIM-15: leadership transfers under chaos and partitions.
        "transfer" => SimOptions {
            nodes: 5,
            transfers: true,
            partitions: true,
            chaos: true,
            ..d
        },
        // SIM-12: clocks drifting +-20 % with leader crashes on a calm network.
        "clock_drift" => SimOptions {
            clock_drift: true,
            crashes: true,
            kill_leader_only: true,
            ..d
        },
        // SIM-08: one follower isolated for most of the fault phase, then healed.
        "rejoin" => SimOptions {
            nodes: 5,
            isolate_follower: true,
            fault_ms: 12_000,
            heal_ms: 8_000,
            propose_interval_ms: 50,
            ..d
        },
        // SIM-09: a follower down while the others delete old entries; back intact or empty.
        "retention" => SimOptions {
            scenario: Scenario::LaggingRetention {
                divergent_over_begin: true,
            },
            fault_ms: 12_000,
            heal_ms: 10_000,
            ..d
        },
        // SIM-10: push responses delayed past maxPushTimeOutMs or dropped; batch on/off.
        "push_bookkeeping" => SimOptions {
            scenario: Scenario::PushBookkeeping,
            fault_ms: 10_000,
            heal_ms: 10_000,
            ..d
        },
        // SIM-11: cut-off leaders leave divergent suffixes that later leaders truncate.
        "truncation" => SimOptions {
            nodes: 5,
            scenario: Scenario::Truncation,
            fault_ms: 12_000,
            heal_ms: 8_000,
            ..d
        },
        _ => return None,
    })
}

/// Names of the re-injectable historical bugs (SIM-17).
pub const BUGS: &[&str] = &[
    "figure8_rule_off",
    "ledger_end_term_is_curr_term",
    "vote_not_persisted",
    "ack_before_quorum",
    "no_commit_clamp",
    "blocking_rpc_queue",
    "no_recompare",
];

/// The scenario that exposes bug `name`, with the bug switched on.
pub fn bug_scenario(name: &str) -> Option<SimOptions> {
    let mut bugs = BugInjection::default();
    let base = match name {
        "figure8_rule_off" => {
            bugs.figure8_rule_off = true;
            SimOptions {
                nodes: 5,
                crashes: true,
                partitions: true,
                chaos: true,
                ..SimOptions::default()
            }
        }
        "ledger_end_term_is_curr_term" => {
            bugs.ledger_end_term_is_curr_term = true;
            family("partitions5")?
        }
        "vote_not_persisted" => {
            bugs.vote_not_persisted = true;
            family("crashes")?
        }
        "ack_before_quorum" => {
            bugs.ack_before_quorum = true;
            family("partitions3")?
        }
        "no_commit_clamp" => {
            bugs.no_commit_clamp = true;
            family("chaos")?
        }
        "blocking_rpc_queue" => {
            bugs.blocking_rpc_queue = true;
            family("chaos")?
        }
        "no_recompare" => {
            bugs.no_recompare = true;
            family("crashes")?
        }
        _ => return None,
    };
    Some(SimOptions { bugs, ..base })
}
