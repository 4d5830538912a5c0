//! Long simulator sweeps: `cargo run -p dledger-commitlog --features sim --bin sim -- --seeds 10000`.
//!
//! Runs every family (or the ones named) over a range of seeds, or hunts one re-injected
//! historical bug. Exit code 1 on any violation (the failing seed and a trace are printed),
//! 2 on a bad argument.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use dledger_commitlog::sim::{bug_scenario, family, run, FAMILIES};

/// Deterministic DLedger simulator sweeps.
#[derive(Parser, Debug)]
#[command(name = "sim")]
struct Args {
    /// Seeds per family.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Run this one seed only (verbose failure); overrides --start and --seeds.
    #[arg(long)]
    seed: Option<u64>,
    /// Family to run (repeatable); default all.
    #[arg(long = "family")]
    families: Vec<String>,
    /// Run a bug scenario and report the first seed that catches it.
    #[arg(long)]
    bug: Option<String>,
    /// Trace lines kept for a failure (default: the family's own).
    #[arg(long = "trace")]
    trace_lines: Option<usize>,
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if let Some(s) = args.seed {
        args.start = s;
        args.seeds = 1;
    }
    let (start, seeds) = (args.start, args.seeds);
    if let Some(b) = args.bug {
        let Some(mut opts) = bug_scenario(&b) else {
            eprintln!("unknown bug {b}");
            return ExitCode::from(2);
        };
        opts.trace_lines = args.trace_lines.unwrap_or(opts.trace_lines);
        let t = Instant::now();
        for s in start..start + seeds {
            if let Err(v) = run(s, &opts) {
                println!(
                    "bug {b} caught after {} seeds ({:.1?}):\n{v}",
                    s - start + 1,
                    t.elapsed()
                );
                return ExitCode::SUCCESS;
            }
        }
        println!("bug {b} NOT caught in {seeds} seeds");
        return ExitCode::FAILURE;
    }
    let families = if args.families.is_empty() {
        FAMILIES.iter().map(|s| (*s).to_string()).collect()
    } else {
        args.families
    };
    let mut failed = false;
    for f in &families {
        let Some(mut opts) = family(f) else {
            eprintln!("unknown family {f}");
            return ExitCode::from(2);
        };
        opts.trace_lines = args.trace_lines.unwrap_or(opts.trace_lines);
        let t = Instant::now();
        let (mut acked, mut worst_gap, mut fails) = (0usize, 0u64, 0u64);
        for s in start..start + seeds {
            match run(s, &opts) {
                Ok(o) => {
                    acked += o.acked;
                    worst_gap = worst_gap.max(o.longest_leaderless_ms);
                }
                Err(v) => {
                    fails += 1;
                    failed = true;
                    println!("FAIL family {f}: {v}");
                }
            }
        }
        println!(
            "family {f}: {seeds} seeds from {start}, {fails} failures, {acked} acked, longest leaderless {worst_gap} ms, {:.1?}",
            t.elapsed()
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
