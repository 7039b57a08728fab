//! Wire samples in Metacontroller's shapes (`tests/fixtures/metacontroller/`): every request
//! parses into our request types, every response survives a round trip through our
//! response types without gaining or losing a field, and only documented keys appear.

use crate::support;

use metahooks::controllers::parse_request;
use metahooks::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, CustomizeResponse, DecoratorRequest,
    DecoratorResponse,
};
use serde_json::Value;

fn fixtures(suffix: &str) -> Vec<(String, Value)> {
    let dir = support::fixtures_dir().join("metacontroller");
    let mut found: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .map(|p| (support::oracles::file_name(&p), support::read_json(&p)))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[test]
fn every_request_parses() {
    let requests = fixtures(".request.json");
    assert!(requests.len() >= 10, "fixtures missing: {}", requests.len());
    for (name, value) in requests {
        let body = serde_json::to_vec(&value).unwrap();
        if name.contains(".customize") {
            let request: CustomizeRequest =
                parse_request(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(request.parent.is_object(), "{name}");
        } else if value.get("object").is_some() {
            let request: DecoratorRequest =
                parse_request(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(request.object.is_object(), "{name}");
        } else {
            let request: CompositeRequest =
                parse_request(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(request.parent.is_object(), "{name}");
            // Observed children are findable whatever the key format.
            for (type_key, objects) in &request.children.0 {
                let key = metahooks::protocol::TypeKey::parse(type_key).unwrap();
                for object in objects.values() {
                    let child_name = metahooks::protocol::object_name(object).unwrap();
                    assert!(
                        request
                            .children
                            .find(
                                &key.kind,
                                &key.api_version,
                                metahooks::protocol::object_namespace(object),
                                child_name
                            )
                            .is_some()
                    );
                }
            }
        }
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(name: &str, value: &Value) {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let again = serde_json::to_value(&typed).unwrap();
    assert_eq!(&again, value, "{name} changed in a round trip");
}

#[test]
fn every_response_round_trips_unchanged() {
    let responses = fixtures(".response.json");
    assert!(responses.len() >= 10);
    for (name, value) in responses {
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        if name.contains(".customize") {
            round_trip::<CustomizeResponse>(&name, &value);
        } else if keys
            .iter()
            .any(|k| ["attachments", "labels", "annotations"].contains(k))
            || name.starts_with("decorator")
        {
            round_trip::<DecoratorResponse>(&name, &value);
        } else {
            round_trip::<CompositeResponse>(&name, &value);
        }
    }
}

#[test]
fn etag_fixture_bodies_are_composite_responses() {
    let mut bodies = std::collections::BTreeSet::new();
    for file in ["etag-a.sync.response.json", "etag-b.sync.response.json"] {
        let value = support::read_json(&support::fixtures_dir().join("metacontroller").join(file));
        round_trip::<CompositeResponse>(file, &value);
        bodies.insert(serde_json::to_string(&value).unwrap());
    }
    assert_eq!(bodies.len(), 2, "the two samples differ");
}

#[test]
fn our_composite_answers_carry_status_and_children() {
    let empty =
        serde_json::to_value(CompositeResponse::new(serde_json::json!({}), vec![])).unwrap();
    assert_eq!(empty, serde_json::json!({"status": {}, "children": []}));
}
