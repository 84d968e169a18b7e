//! Fuzz target `field_table`: see revenant_fuzz::field_table and docs/FUZZING.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| revenant_fuzz::field_table(data));
