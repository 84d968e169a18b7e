//! Fuzz target `pgoutput`: see revenant_fuzz::pgoutput and docs/FUZZING.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| revenant_fuzz::pgoutput(data));
