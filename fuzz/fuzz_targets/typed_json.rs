//! Fuzz target `typed_json`: see revenant_fuzz::typed_json and docs/FUZZING.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| revenant_fuzz::typed_json(data));
