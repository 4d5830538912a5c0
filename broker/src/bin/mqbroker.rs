//! `mqbroker -c FILE [-n NAMESRV_ADDR]`: runs one DLedger-mode broker (see `broker::cli`).

/// Requests and entries are allocated on one thread and freed on another all the time; glibc
/// takes its slow path for that (malloc/free was ~10% of broker CPU under the send benchmark).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match broker::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mqbroker: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
