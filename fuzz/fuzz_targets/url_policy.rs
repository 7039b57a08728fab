#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| metahooks::fuzz_surfaces::url_policy(data));
