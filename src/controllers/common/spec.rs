//! Reading a parent's `spec` into a controller's typed spec, as a second step after the
//! request parsed: a bad spec is then a status condition, not a 400.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The typed `spec` of `parent`, or a message naming the field that is wrong.
pub fn parse<T: DeserializeOwned>(parent: &Value) -> Result<T, String> {
    let spec = parent
        .get("spec")
        .ok_or_else(|| "spec is missing".to_owned())?;
    // Without path tracking first (it allocates per key); again with it to say where.
    if let Ok(parsed) = T::deserialize(spec) {
        return Ok(parsed);
    }
    serde_path_to_error::deserialize(spec).map_err(|error| {
        let path = error.path().to_string();
        if path == "." {
            format!("spec: {}", error.into_inner())
        } else {
            format!("spec.{path}: {}", error.into_inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    struct Spec {
        #[allow(dead_code)]
        replicas: i32,
    }

    #[test]
    fn names_the_wrong_field() {
        assert!(super::parse::<Spec>(&json!({"spec": {"replicas": 2}})).is_ok());
        let error = super::parse::<Spec>(&json!({"spec": {"replicas": "two"}})).unwrap_err();
        assert!(error.starts_with("spec.replicas: "), "{error}");
        assert_eq!(
            super::parse::<Spec>(&json!({})).unwrap_err(),
            "spec is missing"
        );
    }
}
