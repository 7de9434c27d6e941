//! The error answer of every HTTP service of the project: `{"error": {"code", "message"}}` with a
//! stable kebab-case `code` (the table is in docs/worker-api.md#errors). Here, on the wire crate,
//! so clients read it without linking a server; the service kit answers with it.

use serde::{Deserialize, Serialize};

/// Every error body of every service: `{"error": {"code", "message"}}`. The worker's
/// `Refusal`, the kit's [`ApiError`] and the clients that read them all use this one type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        let code = code.into();
        debug_assert!(
            is_kebab_case(&code),
            "error code {code:?} is not kebab-case"
        );
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
            },
        }
    }
}

/// Whether `code` is a well-formed error code: lowercase ASCII words joined by single `-`.
pub fn is_kebab_case(code: &str) -> bool {
    !code.is_empty()
        && code.split('-').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}
