//! Every integration test, in one binary: the server, the emulator and the oracle
//! helpers are compiled and linked once. Each module is one suite (the file names say
//! which); `support` holds what they share.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed expectation is the point

mod support;

mod apimock_emulator;
mod apimock_oracles;
mod apimock_prism;
mod chart;
mod cluster_true;
mod configsync_oracles;
mod configsync_sources;
mod docs;
mod emulate_ci;
mod emulate_cmd;
mod emulator;
mod emulator_apply;
mod emulator_decoding;
mod emulator_lifecycle;
mod emulator_rolling;
mod emulator_scope;
mod emulator_tls;
mod emulator_workers;
mod fuzz_replay;
mod golden;
mod hostile_crs;
mod http;
mod layers;
mod manifests;
mod monitoredservice_oracles;
mod monitoredservice_sources;
mod monitoring;
mod pod_security;
mod process;
mod protocol_fixtures;
mod receivers;
mod secrets;
mod source_boundary;
mod source_hardening;
mod source_interop;
mod source_proxy;
mod source_refresh;
mod source_servers;
mod source_signatures;
mod source_ssh;
mod source_tls;
mod squatting;
