//! One hook call as Metacontroller's webhook client makes it: the status and body, the
//! Retry-After of a 429, strict decoding, and the same answer asked for again.

use super::*;

/// Metacontroller may call again with the same state at any time; the answer must be
/// byte-identical, apart from transition times stamped in this very answer. State
/// outside the request (a background fetch landing) may move once between two calls,
/// so a difference is confirmed with a third call before it counts. Runs without the
/// emulator, so the parents of a round are asked concurrently.
pub(in crate::cluster) async fn stable_answer(
    transport: &Transport,
    prepared: &Prepared,
    now: jiff::Timestamp,
) -> Answered {
    let mut calls = Vec::new();
    let mut retry_after = None;
    let mut ask = async || {
        let exchange = exchange(
            transport,
            prepared.replica,
            &prepared.hook,
            prepared.hook_name,
            prepared.body.clone(),
            now,
        )
        .await;
        calls.push((exchange.status, exchange.millis));
        retry_after = exchange.retry_after;
        exchange.outcome
    };
    let mut taken = None;
    let outcome = async {
        let name = prepared.hook_name;
        let parent = &prepared.parent;
        let first = ask().await?;
        // The same request in an earlier round is the first of the two calls: an answer
        // equal to the one it got then needs no second call.
        if prepared.remembered.as_deref() == Some(first.0.as_str()) {
            taken = prepared.remembered.clone();
            return Ok(first.1);
        }
        let earlier = prepared.remembered.as_deref().and_then(|text| {
            let value = serde_json::from_str::<Value>(text).ok()?;
            Some((text.to_owned(), value))
        });
        if let Some(earlier) = &earlier
            && same_answer(parent, (&earlier.0, &earlier.1), (&first.0, &first.1))
        {
            if earlier.0 != first.0 {
                refuse_duplicate_keys(&prepared.hook, &first.0)?;
            }
            taken = Some(first.0.as_str().into());
            return Ok(first.1);
        }
        let again = ask().await?;
        let chosen = if same_answer(parent, (&first.0, &first.1), (&again.0, &again.1)) {
            again
        } else {
            let third = ask().await?;
            if !same_answer(parent, (&again.0, &again.1), (&third.0, &third.1)) {
                return Err((
                    Rule::UnstableAnswer,
                    format!(
                        "{} answered two identical requests differently:\n{}\n{}",
                        name.key(),
                        again.1,
                        third.1
                    ),
                ));
            }
            third
        };
        refuse_duplicate_keys(&prepared.hook, &chosen.0)?;
        taken = Some(chosen.0.as_str().into());
        Ok(chosen.1)
    }
    .await;
    Answered {
        calls,
        outcome,
        retry_after,
        text: taken,
    }
}

/// One HTTP exchange with a hook: what Metacontroller's webhook client makes of it.
pub(super) struct Exchange {
    pub(super) status: u16,
    pub(super) millis: f64,
    pub(super) outcome: Result<(String, Value), Problem>,
    pub(super) retry_after: Option<f64>,
}

pub(super) async fn exchange(
    transport: &Transport,
    replica: usize,
    hook: &Hook,
    name: HookName,
    body: Vec<u8>,
    now: jiff::Timestamp,
) -> Exchange {
    let started = std::time::Instant::now();
    let posted = transport
        .post(replica, &hook.path, body, now, hook.timeout)
        .await;
    // A call that got no answer is still a call made (status 0 in the timeline).
    let (status, elapsed) = match &posted {
        Ok(answer) => (answer.status, answer.elapsed),
        Err(_) => (0, started.elapsed()),
    };
    let mut retry_after = None;
    let outcome = posted
        .map_err(|e| (Rule::NonOkAnswer, e))
        .and_then(|answer| {
            let text = String::from_utf8_lossy(&answer.body).into_owned();
            if answer.status == 429 {
                // TooManyRequestError (pkg/hooks/webhook.go): Retry-After in seconds or
                // as an HTTP date; the parent is requeued after it (composite sync).
                let seconds = answer
                    .retry_after
                    .as_deref()
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0);
                retry_after = Some(seconds);
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
        });
    Exchange {
        status,
        millis: elapsed.as_secs_f64() * 1000.0,
        outcome,
        retry_after,
    }
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
