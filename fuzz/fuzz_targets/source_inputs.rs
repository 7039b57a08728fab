#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| metahooks::fuzz_surfaces::source_inputs(data));
