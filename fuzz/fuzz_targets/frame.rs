//! Fuzz target `frame`: see revenant_fuzz::frame and docs/FUZZING.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| revenant_fuzz::frame(data));
