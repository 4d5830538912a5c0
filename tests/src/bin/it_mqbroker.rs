//! The `mqbroker` program (`broker::cli`) under the harness name `it-mqbroker`.

fn main() -> std::process::ExitCode {
    match broker::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mqbroker: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
