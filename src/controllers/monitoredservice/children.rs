//! The objects a MonitoredService asks for: ConfigMap `<name>-config` with the config,
//! Deployment `<name>` whose pod template carries the config hash (so a config change
//! rolls the pods and nothing else does), and Service `<name>` when a port is set.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource,
    KeyToPath, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::spec::MonitoredServiceSpec;
use crate::controllers::common::config::{Config, ConfigFormat};
use crate::controllers::common::names::{self, child_labels};
use crate::controllers::common::restricted;
use crate::error::HookError;

/// Pod-template annotation with the config's hash: a new config rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "monitoredservice.metahooks.io/config-hash";
/// Where `files` configs are mounted by default.
pub const DEFAULT_MOUNT_PATH: &str = "/etc/config";

/// The name of the ConfigMap holding a service's config.
pub fn config_map_name(name: &str) -> String {
    format!("{name}-config")
}

fn labels(name: &str) -> BTreeMap<String, String> {
    child_labels("monitoredservice", name)
}

/// The labels that select a service's pods.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    names::selector_labels("monitoredservice", name)
}

/// Pod labels: ours plus config-monitor's, so Services users wrote for it keep selecting.
fn pod_labels(name: &str) -> BTreeMap<String, String> {
    let mut labels = labels(name);
    labels.insert("app".to_owned(), "monitored_service".to_owned());
    labels.insert("monitored_service_cr".to_owned(), name.to_owned());
    labels
}

/// `name` is the child's own name; labels always point at the parent.
fn metadata(parent: &str, name: &str, annotations: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels(parent)),
        annotations: Some(annotations).filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

/// The children of a MonitoredService: ConfigMap (with a config), Deployment, and a
/// Service when a port is set.
///
/// # Errors
/// A child does not serialise (a bug).
pub fn build(
    name: &str,
    spec: &MonitoredServiceSpec,
    config: Option<&Config>,
) -> Result<Vec<Value>, HookError> {
    let to_value =
        |v: Result<Value, serde_json::Error>| v.map_err(crate::error::Fault::serialise("a child"));
    let mut children = Vec::new();
    if let Some(config) = config {
        children.push(to_value(serde_json::to_value(config_map(name, config)))?);
    }
    children.push(to_value(serde_json::to_value(deployment(
        name, spec, config,
    )))?);
    if let Some(port) = spec.port {
        children.push(to_value(serde_json::to_value(service(name, port)))?);
    }
    Ok(children)
}

fn config_map(name: &str, config: &Config) -> ConfigMap {
    let annotations = config.annotations();
    ConfigMap {
        metadata: metadata(name, &config_map_name(name), annotations),
        data: Some(config.data.clone()).filter(|d| !d.is_empty()),
        binary_data: config.binary_data(),
        ..ConfigMap::default()
    }
}

fn deployment(name: &str, spec: &MonitoredServiceSpec, config: Option<&Config>) -> Deployment {
    let mut container = container(name, spec);
    let mut volumes = None;
    let mut annotations = BTreeMap::new();
    if let Some(config) = config {
        annotations.insert(CONFIG_HASH_ANNOTATION.to_owned(), config.hash().to_owned());
        match config.format {
            Some(ConfigFormat::Env) => container.env_from = Some(env_from_config_map(name)),
            Some(ConfigFormat::Files) => {
                let mount_path = spec
                    .mount_path
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| DEFAULT_MOUNT_PATH.to_owned());
                container.volume_mounts = Some(vec![VolumeMount {
                    name: "config".to_owned(),
                    mount_path,
                    read_only: Some(true),
                    ..VolumeMount::default()
                }]);
                volumes = Some(vec![files_volume(name, config)]);
            }
            None => {}
        }
    }
    Deployment {
        metadata: metadata(name, name, BTreeMap::new()),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas()),
            selector: LabelSelector {
                match_labels: Some(selector_labels(name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(name)),
                    annotations: Some(annotations).filter(|a| !a.is_empty()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes,
                    security_context: Some(restricted::fill_pod(spec.security_context.clone())),
                    automount_service_account_token: Some(
                        spec.automount_service_account_token.unwrap_or(false),
                    ),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The service's container as the spec describes it, before its config is attached.
fn container(name: &str, spec: &MonitoredServiceSpec) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        ports: spec.port.map(|port| {
            vec![ContainerPort {
                name: Some("service".to_owned()),
                container_port: port,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            }]
        }),
        env: spec.env.clone().filter(|e| !e.is_empty()),
        resources: spec.resources.clone(),
        readiness_probe: spec.readiness_probe.clone(),
        liveness_probe: spec.liveness_probe.clone(),
        security_context: Some(restricted::fill_container(
            spec.container_security_context.clone(),
        )),
        ..Container::default()
    }
}

/// Every key of the ConfigMap as an environment variable.
fn env_from_config_map(name: &str) -> Vec<EnvFromSource> {
    vec![EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource {
            name: config_map_name(name),
            optional: None,
        }),
        ..EnvFromSource::default()
    }]
}

/// The ConfigMap as a volume of files, each key mounted back at its path.
fn files_volume(name: &str, config: &Config) -> Volume {
    let items = (!config.paths.is_empty()).then(|| {
        config
            .data
            .keys()
            .chain(config.binary.keys())
            .map(|key| KeyToPath {
                key: key.clone(),
                path: config
                    .paths
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| key.clone()),
                mode: None,
            })
            .collect()
    });
    Volume {
        name: "config".to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(name),
            items,
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn service(name: &str, port: i32) -> Service {
    Service {
        metadata: metadata(name, name, BTreeMap::new()),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(name)),
            ports: Some(vec![ServicePort {
                name: Some("service".to_owned()),
                port,
                target_port: Some(IntOrString::String("service".to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
