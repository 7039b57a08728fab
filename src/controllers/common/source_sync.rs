//! A composite sync that reads sources: the call's reads and its "fetch now" handling
//! around a controller's answer, the reads handed back with it.

use serde_json::Value;

use super::reading::Reads;
use super::refresh;
use crate::controllers::{Answer, Context, Reply};
use crate::protocol::CompositeResponse;

/// A composite sync that reads sources: `answer` runs with the call's reads and the
/// "fetch now" value carried over from `parent`'s status; the value it handled is
/// recorded in the response's status, and the reads go with the answer.
///
/// # Errors
/// Those of `answer`.
pub fn composite_sync<E>(
    ctx: &Context,
    parent: &Value,
    answer: impl FnOnce(&mut Reads<'_>, &mut refresh::Outcome) -> Result<Reply<CompositeResponse>, E>,
) -> Result<Answer<CompositeResponse>, E> {
    let mut reads = Reads::new(ctx.sources.as_ref()).for_parent(parent);
    let reply = refresh::recording(parent, |asked| answer(&mut reads, asked))?;
    Ok(reply.with_sources(reads.finish()))
}
