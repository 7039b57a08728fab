#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| metahooks::fuzz_surfaces::env_file(data));
