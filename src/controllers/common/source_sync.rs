//! A composite sync that reads sources, in the order it happens and without a callback:
//! [`SourceCall::begin`] gives the controller the call's reads and the "fetch now" value
//! carried over from the parent's status; the controller answers with them;
//! [`SourceCall::finish`] records the value it handled in the response's status and
//! hands the reads back with the answer.

use serde_json::Value;

use super::reading::Reads;
use super::refresh;
use crate::controllers::{Answer, Context, Reply};
use crate::protocol::CompositeResponse;

/// The source side of one composite sync.
pub struct SourceCall<'v> {
    /// What the call reads of the sources, and asks of them.
    pub reads: Reads<'v>,
    /// The "fetch now" value handled so far (the parent's, until a new one is).
    pub asked: refresh::Outcome,
}

impl<'v> SourceCall<'v> {
    /// The reads of a sync of `parent` through `ctx`'s sources.
    pub fn begin(ctx: &'v Context, parent: &Value) -> SourceCall<'v> {
        SourceCall {
            reads: Reads::new(ctx.sources.as_ref()).for_parent(parent),
            asked: refresh::carried(refresh::recorded(parent)),
        }
    }

    /// `reply` with the handled value in its status and the reads it was built from.
    pub fn finish(self, mut reply: Reply<CompositeResponse>) -> Answer<CompositeResponse> {
        self.asked.record(&mut reply.response);
        reply.with_sources(self.reads.finish())
    }
}
