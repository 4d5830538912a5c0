//! Long simulator sweeps: `cargo run -p dledger-commitlog --features sim --bin sim -- --seeds 10000`.
//!
//! Options: `--seeds N` (per family, default 1000), `--start S` (first seed, default 0),
//! `--family NAME` (repeatable; default all), `--bug NAME` (run a bug scenario and report the
//! first seed that catches it), `--seed S` (one seed, verbose failure), `--trace N` (trace
//! lines kept for a failure, default 400). Exit code 1 on any violation; the failing seed and
//! a trace are printed.

use std::process::ExitCode;
use std::time::Instant;

use dledger_commitlog::sim::{bug_scenario, family, run, FAMILIES};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seeds = 1000u64;
    let mut start = 0u64;
    let mut families: Vec<String> = Vec::new();
    let mut bug: Option<String> = None;
    let mut trace_lines: Option<usize> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--seeds" => seeds = val().parse().unwrap_or(seeds),
            "--start" => start = val().parse().unwrap_or(start),
            "--seed" => {
                start = val().parse().unwrap_or(0);
                seeds = 1;
            }
            "--family" => families.push(val()),
            "--bug" => bug = Some(val()),
            "--trace" => trace_lines = val().parse().ok(),
            other => {
                eprintln!("unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(b) = bug {
        let Some(mut opts) = bug_scenario(&b) else {
            eprintln!("unknown bug {b}");
            return ExitCode::from(2);
        };
        opts.trace_lines = trace_lines.unwrap_or(opts.trace_lines);
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
    if families.is_empty() {
        families = FAMILIES.iter().map(|s| (*s).to_string()).collect();
    }
    let mut failed = false;
    for f in &families {
        let Some(mut opts) = family(f) else {
            eprintln!("unknown family {f}");
            return ExitCode::from(2);
        };
        opts.trace_lines = trace_lines.unwrap_or(opts.trace_lines);
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
