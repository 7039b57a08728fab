//! metahooks: a stateless hook server for Metacontroller.
//!
//! Metacontroller watches and applies; metahooks answers "given this parent and what
//! exists, what should exist?". Modules, from the wire inwards:
//! - [`protocol`]: Metacontroller's request/response types;
//! - [`server`]: the HTTP edge (routing, limits, auth, TLS, ETag, probes);
//! - [`controllers`]: pure sync/finalize/customize logic per controller;
//! - [`source`]: the background config-source engine (git, HTTP) controllers read from;
//! - [`cli`], [`config`], [`render`], [`crds`], [`telemetry`]: the command line around them.

pub mod cli;
pub mod config;
pub mod controllers;
pub mod crds;
pub mod emulate;
pub mod emulate_cmd;
pub mod error;
#[doc(hidden)]
pub mod fuzz_surfaces;
pub mod protocol;
pub mod render;
pub mod server;
pub mod source;
pub mod telemetry;
pub mod yaml;
