//! One hook call as Metacontroller's webhook client makes it: the status and body, the
//! Retry-After of a 429, strict decoding, and the same answer asked for again.

use serde_json::Value;

use super::{Answered, Prepared};
use crate::Key;
use crate::answers::{Asked, difference, same_answer};
use crate::findings::{Problem, Rule};
use crate::registration::{Hook, HookName, Registration};
use crate::transport::Transport;

/// Metacontroller may call again with the same state at any time; the answer must be
/// the same as Metacontroller reads it (`crate::answers`). State outside the request (a
/// background fetch landing) may move once between two calls, so a difference is
/// confirmed with a third call before it counts; an answer that is unstable is still
/// applied (the latest), as Metacontroller would, with the finding beside it. Runs
/// without the emulator, so the parents of a round are asked concurrently.
pub(in crate::cluster) async fn stable_answer(
    transport: &Transport,
    prepared: &Prepared,
    now: jiff::Timestamp,
) -> Answered {
    let mut asker = Asker::new(transport, prepared, now, prepared.tagged.clone());
    let asked = prepared.asked();
    let mut taken = None;
    let mut unstable = None;
    let mut fresh = false;
    let outcome = async {
        let name = prepared.hook_name;
        let first = asker.ask().await?;
        // The same request in an earlier round is the first of the two calls: an answer
        // equal to the one it got then needs no second call.
        if prepared.remembered.as_deref() == Some(first.0.as_str()) {
            taken = prepared.remembered.clone();
            return Ok(first.1);
        }
        // Not the same bytes (that returned above), but the same answer.
        if same_as_earlier(prepared, &first) {
            refuse_duplicate_keys(&prepared.hook, &first.0)?;
            taken = Some(first.0.as_str().into());
            return Ok(first.1);
        }
        fresh = true;
        let again = asker.ask().await?;
        let chosen = if same_answer(asked, (&first.0, &first.1), (&again.0, &again.1)) {
            again
        } else {
            let third = asker.ask().await?;
            if !same_answer(asked, (&again.0, &again.1), (&third.0, &third.1)) {
                unstable = Some(unstable_problem(name, asked, &again.1, &third.1, None));
            }
            third
        };
        refuse_duplicate_keys(&prepared.hook, &chosen.0)?;
        taken = Some(chosen.0.as_str().into());
        Ok(chosen.1)
    }
    .await;
    // syncRevisions: each older revision's parent is asked too; any failure fails the
    // whole sync.
    let mut older = Vec::new();
    let outcome = match outcome {
        Ok(answer) => {
            let mut failed = None;
            for (patch, body) in &prepared.older {
                match asker.ask_with(body.clone()).await {
                    Ok((_, value)) => older.push((patch.clone(), value)),
                    Err(problem) => {
                        failed = Some(problem);
                        break;
                    }
                }
            }
            failed.map_or(Ok(answer), Err)
        }
        Err(problem) => Err(problem),
    };
    Answered {
        calls: asker.calls,
        outcome,
        retry_after: asker.retry_after,
        text: taken,
        tagged: asker.tagged,
        unstable,
        fresh,
        recheck: Recheck::Settled,
        older,
    }
}

/// Where the re-asks of a new answer after a delay stand.
#[derive(Debug, Default)]
pub(in crate::cluster) enum Recheck {
    /// No move seen: a new answer's first delayed ask is its only one unless it moves.
    #[default]
    Settled,
    /// The answer asked for after a delay differed from the one taken: asked once more
    /// after another delay to confirm. The answer before the move is kept.
    Moved {
        before: (std::sync::Arc<str>, Value),
    },
    /// Moved, then back to the answer from before the move: state outside the request
    /// that moved and came back, as a source poll turns pending and, finding nothing
    /// new, back. Asked once more, which tells that round trip (the answer stays) from
    /// an answer that flips between two values (it moves again).
    CameBack,
}

impl Recheck {
    /// Whether another delayed ask is due.
    pub(in crate::cluster) fn is_due(&self) -> bool {
        !matches!(self, Recheck::Settled)
    }
}

/// The same request once more, after a real delay (`Emulator::recheck_after`): an
/// answer that stamps the time in seconds, or otherwise drifts, is caught on every run,
/// not only when two back-to-back calls straddle a tick. A first difference may be state
/// outside the request moving once (a fetch landing), so it is taken and asked for again
/// after another delay ([`Recheck::Moved`]); a second difference is a finding, unless it
/// returns to the answer from before the first (see [`Recheck::CameBack`]), which is
/// asked for once more.
pub(in crate::cluster) async fn ask_later(
    transport: &Transport,
    prepared: &Prepared,
    now: jiff::Timestamp,
    answered: &mut Answered,
) {
    let due = std::mem::take(&mut answered.recheck);
    let Ok(taken) = &answered.outcome else {
        return;
    };
    let mut asker = Asker::new(transport, prepared, now, answered.tagged.clone());
    let later = asker.ask().await;
    answered.calls.append(&mut asker.calls);
    if asker.tagged.is_some() {
        answered.tagged = asker.tagged;
    }
    let later = match later {
        Ok(later) => later,
        Err(problem) => {
            answered.retry_after = asker.retry_after;
            answered.outcome = Err(problem);
            answered.text = None;
            return;
        }
    };
    let asked = prepared.asked();
    let text = answered.text.clone().unwrap_or_default();
    if same_answer(asked, (&text, taken), (&later.0, &later.1)) {
        return;
    }
    answered.recheck = match due {
        Recheck::Settled => Recheck::Moved {
            before: (text, taken.clone()),
        },
        Recheck::Moved { before }
            if same_answer(asked, (&before.0, &before.1), (&later.0, &later.1)) =>
        {
            Recheck::CameBack
        }
        _ => {
            if answered.unstable.is_none() {
                answered.unstable = Some(unstable_problem(
                    prepared.hook_name,
                    asked,
                    taken,
                    &later.1,
                    Some("after a delay"),
                ));
            }
            Recheck::Settled
        }
    };
    if let Err(problem) = refuse_duplicate_keys(&prepared.hook, &later.0) {
        answered.outcome = Err(problem);
        answered.text = None;
        return;
    }
    answered.text = Some(later.0.as_str().into());
    answered.outcome = Ok(later.1);
}

/// The calls of one stable answer: each one made, the latest Retry-After, and the
/// answer the webhook client keeps with its ETag as the calls update it.
struct Asker<'a> {
    transport: &'a Transport,
    prepared: &'a Prepared,
    now: jiff::Timestamp,
    calls: Vec<(u16, f64)>,
    retry_after: Option<f64>,
    tagged: Option<Tagged>,
}

impl<'a> Asker<'a> {
    fn new(
        transport: &'a Transport,
        prepared: &'a Prepared,
        now: jiff::Timestamp,
        tagged: Option<Tagged>,
    ) -> Asker<'a> {
        Asker {
            transport,
            prepared,
            now,
            calls: Vec::new(),
            retry_after: None,
            tagged,
        }
    }

    async fn ask(&mut self) -> Result<(String, Value), Problem> {
        self.ask_with(self.prepared.body.clone()).await
    }

    async fn ask_with(&mut self, body: Vec<u8>) -> Result<(String, Value), Problem> {
        let prepared = self.prepared;
        let exchange = exchange(
            self.transport,
            prepared.replica,
            &prepared.hook,
            prepared.hook_name,
            body,
            self.now,
            self.tagged.as_ref(),
        )
        .await;
        self.calls.push((exchange.status, exchange.millis));
        self.retry_after = exchange.retry_after;
        if exchange.tagged.is_some() {
            self.tagged = exchange.tagged;
        }
        exchange.outcome
    }
}

/// Whether `first` is the answer the same request got in an earlier round, as
/// Metacontroller compares answers (transition times stamped now aside).
fn same_as_earlier(prepared: &Prepared, first: &(String, Value)) -> bool {
    let Some(text) = prepared.remembered.as_deref() else {
        return false;
    };
    serde_json::from_str::<Value>(text)
        .is_ok_and(|earlier| same_answer(prepared.asked(), (text, &earlier), (&first.0, &first.1)))
}

/// The finding for two different answers to identical requests: where they differ (a
/// JSON pointer) and only what differs there.
fn unstable_problem(
    name: HookName,
    asked: Asked<'_>,
    one: &Value,
    other: &Value,
    when: Option<&str>,
) -> (Problem, Option<String>) {
    let shown = |value: &Option<Value>| match value {
        Some(value) => {
            let text = value.to_string();
            let mut cut = text.len().min(200);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut < text.len() {
                format!("{}… ({} bytes)", &text[..cut], text.len())
            } else {
                text
            }
        }
        None => "(absent)".to_owned(),
    };
    let found = difference(asked, one, other);
    let detail = match &found {
        Some((pointer, first, second)) => format!(
            " at {}: {} then {}",
            if pointer.is_empty() { "/" } else { pointer },
            shown(first),
            shown(second)
        ),
        None => String::new(),
    };
    let field = found.map(|(pointer, ..)| pointer);
    let problem = (
        Rule::UnstableAnswer,
        format!(
            "{} answered two identical requests differently{}{detail}",
            name.key(),
            when.map(|w| format!(" ({w})")).unwrap_or_default()
        ),
    );
    (problem, field)
}

/// One HTTP exchange with a hook: what Metacontroller's webhook client makes of it.
pub(super) struct Exchange {
    pub(super) status: u16,
    pub(super) millis: f64,
    pub(super) outcome: Result<(String, Value), Problem>,
    pub(super) retry_after: Option<f64>,
    /// The answer and its ETag, when the webhook enables `etag` and the hook sent one.
    pub(super) tagged: Option<Tagged>,
}

/// An answer the webhook client keeps with its ETag, per hook and root object, where
/// the webhook enables `etag` (webhookExecutorEtag, pkg/hooks/webhook_etag.go).
#[derive(Clone, Debug)]
pub(in crate::cluster) struct Tagged {
    pub(in crate::cluster) etag: String,
    pub(in crate::cluster) body: std::sync::Arc<str>,
}

pub(super) async fn exchange(
    transport: &Transport,
    replica: usize,
    hook: &Hook,
    name: HookName,
    body: Vec<u8>,
    now: jiff::Timestamp,
    tagged: Option<&Tagged>,
) -> Exchange {
    let started = std::time::Instant::now();
    // enrichHeaders: If-None-Match with the ETag kept for this object, if any (kept only
    // where the webhook enables etag).
    let if_none_match = tagged.map(|t| t.etag.as_str());
    let headers = crate::transport::CallHeaders {
        if_none_match,
        authorization: hook.authorization.as_deref(),
        tls: hook.tls.as_ref(),
    };
    let mut posted = transport
        .post(replica, &hook.path, body, now, hook.timeout, headers)
        .await;
    // A call that got no answer is still a call made (status 0 in the timeline).
    let (status, elapsed) = match &posted {
        Ok(answer) => (answer.status, answer.elapsed),
        Err(_) => (0, started.elapsed()),
    };
    // The timeline keeps the status as sent (304); what follows reads the kept answer.
    let mut new_tag = None;
    if let Ok(answer) = posted.as_mut() {
        new_tag = adjust_for_etag(hook, tagged, answer);
    }
    let retry_after = posted.as_ref().ok().and_then(|answer| {
        // TooManyRequestError (pkg/hooks/webhook.go): Retry-After in seconds or as an
        // HTTP date; the parent is requeued after it (composite sync).
        (answer.status == 429).then(|| {
            answer
                .retry_after
                .as_deref()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        })
    });
    let outcome = posted
        .map_err(|e| (Rule::NonOkAnswer, e))
        .and_then(|answer| read_answer(&answer, name, retry_after))
        .map_err(|(rule, message)| {
            // Without --hooks-url the calls go to metahooks' own controllers, which know
            // nothing of another project's registration.
            if status == 404 && matches!(transport, Transport::InProcess(_)) {
                let hint = format!(
                    "{message}; this run answers with metahooks' own controllers, which have no {}: pass --hooks-url to call your hook server",
                    hook.path
                );
                return (rule, hint);
            }
            (rule, message)
        });
    Exchange {
        status,
        millis: elapsed.as_secs_f64() * 1000.0,
        outcome,
        retry_after,
        tagged: new_tag,
    }
}

/// adjustResponse: a 304 or 412 to a request sent with If-None-Match is the kept answer
/// (read on as a 200); a 200 with an ETag is kept for next time. Without If-None-Match,
/// a 304 is an unexpected status like any other.
fn adjust_for_etag(
    hook: &Hook,
    sent: Option<&Tagged>,
    answer: &mut crate::transport::Answer,
) -> Option<Tagged> {
    hook.etag?;
    if let Some(kept) = sent
        && matches!(answer.status, 304 | 412)
    {
        answer.status = 200;
        answer.body = kept.body.as_bytes().to_vec();
        return None;
    }
    let etag = answer.etag.clone().filter(|_| answer.status == 200)?;
    Some(Tagged {
        etag,
        body: String::from_utf8_lossy(&answer.body).into(),
    })
}

/// What Metacontroller makes of an answer: a 429 is throttling (after `retry_after`
/// seconds), any other status but 200 a failure, a 200 must be JSON.
fn read_answer(
    answer: &crate::transport::Answer,
    name: HookName,
    retry_after: Option<f64>,
) -> Result<(String, Value), Problem> {
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    if let Some(seconds) = retry_after {
        return Err((
            Rule::Throttled,
            format!(
                "{} kept answering 429 (Retry-After {seconds} s): {text:.200}",
                name.key()
            ),
        ));
    }
    if answer.status != 200 {
        return Err((
            Rule::NonOkAnswer,
            format!(
                "{} answered {} (Metacontroller applies nothing and retries): {text:.300}",
                name.key(),
                answer.status
            ),
        ));
    }
    let value = serde_json::from_str(&text).map_err(|e| {
        (
            Rule::InvalidAnswer,
            format!(
                "{} answered 200 with a body that is not JSON ({e}): {text:.200}",
                name.key()
            ),
        )
    })?;
    Ok((text, value))
}

/// Strict decoding refuses a field given twice.
pub(super) fn refuse_duplicate_keys(hook: &Hook, text: &str) -> Result<(), Problem> {
    if hook.strict
        && let Some(path) = crate::answers::duplicate_key(text)
    {
        return Err((
            Rule::StrictDecoding,
            format!("strict decoding failed: duplicate field {path:?} in the answer"),
        ));
    }
    Ok(())
}

impl crate::cluster::Emulator {
    /// The answer kept with its ETag for this hook and root object, unless expired
    /// (`cacheTimeoutSeconds` of simulated time).
    pub(super) fn kept_etag(
        &self,
        registration: &Registration,
        hook: &Hook,
        name: HookName,
        root: &Key,
    ) -> Option<Tagged> {
        let ttl = hook.etag?;
        let (tagged, stored) =
            self.etags
                .get(&(registration.name.clone(), name.key(), root.clone()))?;
        let fresh = ttl.is_none_or(|ttl| self.clock.saturating_sub(*stored) < ttl);
        fresh.then(|| tagged.clone())
    }

    pub(super) fn keep_etag(
        &mut self,
        registration: &Registration,
        name: HookName,
        root: &Key,
        tagged: Tagged,
    ) {
        self.etags.insert(
            (registration.name.clone(), name.key(), root.clone()),
            (tagged, self.clock),
        );
    }
}
