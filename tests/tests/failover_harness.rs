//! The failover harness itself (MP-12): a member that exits on its own is reported by name at
//! the next kill, instead of the test timing out later waiting for a master (a 3-member group
//! that silently runs on 2 has no quorum after the kill).

#![allow(clippy::unwrap_used)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::time::{Duration, Instant};

use tests::failover::Cluster;

#[test]
fn a_member_that_died_on_its_own_is_reported_at_the_next_kill() {
    let mut cl = Cluster::start(&tests::failover_bins!(), "");
    assert!(
        cl.members.iter().all(|m| m.child.is_some()),
        "start returns with every member booted"
    );
    // Member n2 dies behind the harness's back.
    let pid = cl.members[2].child.as_ref().unwrap().id();
    let ok = Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // SIGKILL is asynchronous: the process can be reaped once all its threads are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while catch_unwind(AssertUnwindSafe(|| cl.assert_members_running("probe"))).is_ok() {
        assert!(Instant::now() < deadline, "member n2 not seen exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = catch_unwind(AssertUnwindSafe(|| cl.kill9(0))).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("member n2 exited on its own") && msg.contains("before the test killed n0"),
        "{msg}"
    );
    assert!(
        cl.members[0].child.is_some(),
        "n0 not killed after the report"
    );
}
