//! `mqbroker -c FILE [-n NAMESRV_ADDR]`: runs one DLedger-mode broker (see `broker::cli`).

fn main() -> std::process::ExitCode {
    match broker::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mqbroker: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
