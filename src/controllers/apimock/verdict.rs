//! The verdict vocabulary shared by reading, validating and bundling a definition: which
//! OpenAPI generation a document declares, and why it cannot be served.

/// The OpenAPI generation a document declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// `swagger: "2.0"`.
    Swagger2,
    /// `openapi: 3.0.x`.
    OpenApi30,
    /// `openapi: 3.1.x`.
    OpenApi31,
}

/// Why a definition cannot be served: the one problem type of every controller.
pub type Invalid = crate::controllers::common::problem::Problem;
