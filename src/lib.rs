//! metahooks: a stateless hook server for Metacontroller.
//!
//! Metacontroller watches and applies; metahooks answers "given this parent and what
//! exists, what should exist?". Modules, from the wire inwards:
//! - [`protocol`]: Metacontroller's request/response types (crate `metahooks-protocol`);
//! - [`apiserver`]: the API server's rules for objects (crate `metahooks-apiserver`);
//! - [`server`]: the HTTP edge (routing, limits, auth, TLS, ETag, probes);
//! - [`controllers`]: pure sync/finalize/customize logic per controller;
//! - [`source`]: the background config-source engine (git, HTTP) controllers read from
//!   (crate `metahooks-source`; [`hash`], every digest, is crate `metahooks-hash`);
//! - [`emulate`]: the Metacontroller emulator behind `metahooks emulate` and the tests
//!   (crate `metahooks-emulate`, which needs none of the rest);
//! - [`memo`]: the bounded memos the server keeps (answers, receivers' deliveries) and
//!   the memo of expensive pure steps it hands every controller call;
//! - [`cli`] (flags → settings, `render`, `emulate`), [`crds`], [`telemetry`]: the
//!   command line around them. Only `cli` and `main` use `anyhow`: everything below
//!   returns typed errors.

#![warn(missing_docs)]

pub mod cli;
pub mod controllers;
pub mod crds;
pub mod error;
#[doc(hidden)]
pub mod fuzz_surfaces;
pub mod http_error;
pub mod memo;
pub mod receivers;
pub mod server;
pub mod telemetry;
pub mod yaml;

pub use metahooks_apiserver as apiserver;
pub use metahooks_emulate as emulate;
pub use metahooks_hash as hash;
pub use metahooks_protocol as protocol;
pub use metahooks_source as source;
