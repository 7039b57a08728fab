//! Comparing two answers to the same request: equal bytes, or equal once the transition
//! times stamped in this very answer are set aside.

use serde_json::Value;

pub(crate) fn same_answer(parent: &Value, a: (&str, &Value), b: (&str, &Value)) -> bool {
    let (a_normal, b_normal) = (normalize(a.1, parent), normalize(b.1, parent));
    let stamped = a_normal != *a.1 || b_normal != *b.1;
    if stamped {
        a_normal == b_normal
    } else {
        a.0 == b.0
    }
}

/// An answer with the transition times removed from conditions that appeared or flipped
/// relative to the observed parent — those may carry "now".
fn normalize(response: &Value, parent: &Value) -> Value {
    let mut response = response.clone();
    let before: Vec<(String, String)> = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    if let Some(conditions) = response
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions {
            let pair = (
                condition["type"].as_str().unwrap_or_default().to_owned(),
                condition["status"].as_str().unwrap_or_default().to_owned(),
            );
            if !before.contains(&pair)
                && let Some(map) = condition.as_object_mut()
            {
                map.remove("lastTransitionTime");
            }
        }
    }
    response
}
