//! Coverage-guided fuzzing of the frame decoder (FZ-07): arbitrary bytes, fed whole and in
//! pieces whose sizes come from the input, must never panic, must decode the same either way,
//! and must never buffer more than one frame.
//!
//! Run: `cargo fuzz run frame_decoder` from `remoting/` (nightly toolchain).

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use remoting::frame::decode_frame;
use remoting::RemotingCommand;

const MAX: usize = 64 * 1024;

fn run(data: &[u8], step: usize) -> (Vec<RemotingCommand>, Option<String>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in data.chunks(step.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            match decode_frame(&mut buf, MAX) {
                Ok(Some(f)) => match RemotingCommand::from_frame(f) {
                    Ok(c) => out.push(c),
                    Err(e) => return (out, Some(e.to_string())),
                },
                Ok(None) => break,
                Err(e) => return (out, Some(e.to_string())),
            }
        }
        assert!(buf.len() < MAX + 8);
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let step = data.first().map(|b| usize::from(*b % 32) + 1).unwrap_or(1);
    let whole = run(data, data.len());
    let pieces = run(data, step);
    assert_eq!(whole, pieces);
    for cmd in &whole.0 {
        // Whatever decodes re-encodes and decodes to the same command.
        if let Ok(bytes) = cmd.encode_to_bytes() {
            let again = RemotingCommand::decode_frame_bytes(&bytes);
            assert!(matches!(again, Ok(Some(ref c)) if c == cmd));
        }
    }
});
