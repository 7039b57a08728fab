//! The verdict vocabulary shared by reading, validating and bundling a definition: which
//! OpenAPI generation a document declares, and why it cannot be served.

/// The OpenAPI generation a document declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    Swagger2,
    OpenApi30,
    OpenApi31,
}

/// Why a definition cannot be served. `reason` is a CamelCase condition reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

impl Invalid {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Invalid {
        Invalid {
            reason,
            message: message.into(),
        }
    }
}
