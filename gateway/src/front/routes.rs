//! Where a model's requests go (`--route-config FILE`, reloaded when it changes): the internal
//! pool or external OpenAI-compatible endpoints, split by weight, with an ordered fallback chain
//! and a traffic mirror. Model names match exactly, or by a pattern ending in `*`; an exact match
//! beats any pattern and the longest pattern wins. A model without a route goes to the pool if
//! the pool serves it.
//!
//! ```json
//! {
//!   "endpoints": {
//!     "openai": {"base_url": "https://api.openai.com", "api_key_env": "OPENAI_API_KEY"},
//!     "shadow": {"base_url": "http://shadow:8000", "model": "candidate"}
//!   },
//!   "routes": [
//!     {"model": "chat", "targets": [{"pool": "qwen3-0.6b", "weight": 9}, {"endpoint": "openai", "weight": 1}],
//!      "fallback": [{"endpoint": "openai"}], "mirror": {"endpoint": "shadow", "ratio": 0.05}},
//!     {"model": "gpt-*", "targets": [{"endpoint": "openai"}]}
//!   ]
//! }
//! ```

use crate::shared::{Endpoint, Plan, Target};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::secret::Secret;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEndpoint {
    base_url: String,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTarget {
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default = "one")]
    weight: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMirror {
    endpoint: String,
    ratio: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRoute {
    model: String,
    targets: Vec<FileTarget>,
    #[serde(default)]
    fallback: Vec<FileTarget>,
    #[serde(default)]
    mirror: Option<FileMirror>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    endpoints: HashMap<String, FileEndpoint>,
    #[serde(default)]
    routes: Vec<FileRoute>,
}

#[derive(Debug, Clone, PartialEq)]
struct Route {
    model: String,
    targets: Vec<(Target, f64)>,
    fallback: Vec<Target>,
    mirror: Option<(Arc<Endpoint>, f64)>,
}

/// A checked route config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteTable {
    exact: FxHashMap<String, Route>,
    /// Patterns by prefix, longest first.
    patterns: Vec<(String, Route)>,
    pool: Vec<String>,
}

impl RouteTable {
    /// No routes: every pool model goes to the pool.
    pub fn pool_only(pool: Vec<String>) -> Self {
        RouteTable {
            pool,
            ..Default::default()
        }
    }

    /// Parses and checks a config against the pool's models; `env` looks up API key variables.
    pub fn parse(
        text: &str,
        pool: Vec<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let file: FileConfig = serde_json::from_str(text)?;
        let mut endpoints = HashMap::new();
        for (name, e) in file.endpoints {
            let url = reqwest::Url::parse(&e.base_url)
                .map_err(|err| anyhow::anyhow!("endpoint {name}: bad base_url: {err}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                anyhow::bail!("endpoint {name}: base_url must be http or https");
            }
            let api_key = match (e.api_key, e.api_key_env) {
                (Some(_), Some(_)) => {
                    anyhow::bail!("endpoint {name}: give api_key or api_key_env, not both")
                }
                (key, None) => key.map(Secret::new),
                (None, Some(var)) => Some(Secret::new(env(&var).ok_or_else(|| {
                    anyhow::anyhow!("endpoint {name}: environment variable {var} is not set")
                })?)),
            };
            let endpoint = Endpoint {
                name: name.clone(),
                base_url: e.base_url.trim_end_matches('/').to_string(),
                api_key,
                model: e.model,
            };
            endpoints.insert(name, Arc::new(endpoint));
        }
        let target = |t: &FileTarget, route: &str| -> anyhow::Result<Target> {
            match (&t.pool, &t.endpoint) {
                (Some(model), None) if pool.contains(model) => Ok(Target::Pool(model.clone())),
                (Some(model), None) => {
                    anyhow::bail!("route {route}: the pool serves no model {model:?}")
                }
                (None, Some(name)) => endpoints
                    .get(name)
                    .cloned()
                    .map(Target::External)
                    .ok_or_else(|| anyhow::anyhow!("route {route}: no endpoint {name:?}")),
                _ => anyhow::bail!("route {route}: a target names one `pool` or one `endpoint`"),
            }
        };
        let mut table = RouteTable::pool_only(pool.clone());
        for r in file.routes {
            let name = r.model.clone();
            if name.is_empty() || name.trim_end_matches('*').contains('*') {
                anyhow::bail!("route {name:?}: a model is a name or a prefix ending in one `*`");
            }
            if r.targets.is_empty() {
                anyhow::bail!("route {name}: no targets");
            }
            let mut targets = Vec::new();
            for t in &r.targets {
                if !(t.weight.is_finite() && t.weight > 0.0) {
                    anyhow::bail!("route {name}: weights must be positive");
                }
                targets.push((target(t, &name)?, t.weight));
            }
            let fallback = r
                .fallback
                .iter()
                .map(|t| target(t, &name))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let mirror = match r.mirror {
                None => None,
                Some(m) if !(0.0..=1.0).contains(&m.ratio) => {
                    anyhow::bail!("route {name}: the mirror ratio is between 0 and 1")
                }
                Some(m) => Some((
                    endpoints.get(&m.endpoint).cloned().ok_or_else(|| {
                        anyhow::anyhow!("route {name}: no endpoint {:?}", m.endpoint)
                    })?,
                    m.ratio,
                )),
            };
            let route = Route {
                model: name.clone(),
                targets,
                fallback,
                mirror,
            };
            let duplicate = match name.strip_suffix('*') {
                Some(prefix) => {
                    let seen = table.patterns.iter().any(|(p, _)| p == prefix);
                    table.patterns.push((prefix.to_string(), route));
                    seen
                }
                None => table.exact.insert(name.clone(), route).is_some(),
            };
            if duplicate {
                anyhow::bail!("route {name}: defined twice");
            }
        }
        table
            .patterns
            .sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Ok(table)
    }

    /// The plan for a request naming `model` (or none), drawing the weighted pick and the
    /// mirror decision from `draw` (uniform in [0, 1)).
    pub fn plan(
        &self,
        model: Option<&str>,
        mut draw: impl FnMut() -> f64,
    ) -> Result<Plan, ApiError> {
        let Some(model) = model else {
            return match self.pool.as_slice() {
                [only] => Ok(self.pool_plan(only)),
                _ => Err(ApiError::invalid_param("model", "`model` is required.")),
            };
        };
        let route = self.exact.get(model).or_else(|| {
            self.patterns
                .iter()
                .find(|(prefix, _)| model.starts_with(prefix.as_str()))
                .map(|(_, r)| r)
        });
        let Some(route) = route else {
            return if self.pool.iter().any(|m| m == model) {
                Ok(self.pool_plan(model))
            } else {
                Err(ApiError::model_not_found(model))
            };
        };
        let total: f64 = route.targets.iter().map(|(_, w)| w).sum();
        let mut point = draw() * total;
        let mut pick = &route.targets[route.targets.len() - 1].0;
        for (target, weight) in &route.targets {
            if point < *weight {
                pick = target;
                break;
            }
            point -= weight;
        }
        let mut attempts = vec![pick.clone()];
        attempts.extend(route.fallback.iter().filter(|t| *t != pick).cloned());
        let mirror = route
            .mirror
            .as_ref()
            .filter(|(_, ratio)| draw() < *ratio)
            .map(|(e, _)| e.clone());
        Ok(Plan {
            label: route.model.clone(),
            attempts,
            mirror,
        })
    }

    fn pool_plan(&self, model: &str) -> Plan {
        Plan {
            label: model.to_string(),
            attempts: vec![Target::Pool(model.to_string())],
            mirror: None,
        }
    }

    /// Every model name clients can ask for: the pool's and the routes' (patterns left out).
    pub fn model_names(&self) -> Vec<String> {
        let mut names = self.pool.clone();
        let mut routed: Vec<&String> = self.exact.keys().collect();
        routed.sort();
        for name in routed {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Every configured model name, patterns included (the values of the `model` label).
    pub fn labels(&self) -> Vec<String> {
        let mut labels = self.model_names();
        labels.extend(self.patterns.iter().map(|(_, r)| r.model.clone()));
        labels
    }
}

/// The route table in force, swapped whole when its file or the pool's models change.
#[derive(Debug)]
pub struct Routes {
    current: RwLock<Arc<RouteTable>>,
    /// The file the table is read from, if any.
    path: Option<PathBuf>,
    /// The pool's models the file is checked against.
    pool: RwLock<Vec<String>>,
}

impl Routes {
    /// Routes fixed to `table`.
    pub fn new(table: RouteTable) -> Self {
        Routes {
            pool: RwLock::new(table.pool.clone()),
            current: RwLock::new(Arc::new(table)),
            path: None,
        }
    }

    /// Routes read from the config file at `path`, against the pool's models.
    pub fn from_file(path: PathBuf, pool: Vec<String>) -> anyhow::Result<Self> {
        let table = load(&path, pool.clone())?;
        Ok(Routes {
            current: RwLock::new(Arc::new(table)),
            path: Some(path),
            pool: RwLock::new(pool),
        })
    }

    /// Routes of a pool whose models are not known yet (a gateway that learns them): no model
    /// is served until [`Routes::set_pool`] names some, and the file at `path`, if any, is
    /// first read then.
    pub fn awaiting_pool(path: Option<PathBuf>) -> Self {
        Routes {
            current: RwLock::new(Arc::new(RouteTable::default())),
            path,
            pool: RwLock::new(Vec::new()),
        }
    }

    /// The config file, when the routes come from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Re-reads the config file and swaps its table in when it checks out; a bad file leaves
    /// the table in force. `None` when the routes come from no file.
    pub fn reload(&self) -> Option<anyhow::Result<()>> {
        let path = self.path.as_ref()?;
        Some(load(path, self.pool()).map(|table| self.replace(table)))
    }

    /// The pool now serves `pool`: the table is rebuilt for it (from the file, if any; a file
    /// that no longer checks out leaves the table in force, and the error is returned).
    pub fn set_pool(&self, pool: Vec<String>) -> anyhow::Result<()> {
        *self.pool.write().unwrap_or_else(|p| p.into_inner()) = pool.clone();
        match &self.path {
            Some(path) => load(path, pool).map(|table| self.replace(table)),
            None => {
                self.replace(RouteTable::pool_only(pool));
                Ok(())
            }
        }
    }

    fn pool(&self) -> Vec<String> {
        self.pool.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The table in force.
    pub fn table(&self) -> Arc<RouteTable> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn replace(&self, table: RouteTable) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }
}

/// Reads a route config file against the pool's models.
pub fn load(path: &Path, pool: Vec<String>) -> anyhow::Result<RouteTable> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    RouteTable::parse(&text, pool, |var| std::env::var(var).ok())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reloads `routes` from their file, logging the outcome and telling `on_reload` whether it
/// took; `None` when the routes come from no file.
pub fn reload_logged(routes: &Routes, on_reload: impl Fn(bool)) -> Option<anyhow::Result<()>> {
    let result = routes.reload()?;
    match &result {
        Ok(()) => tracing::info!("route config {} reloaded", routes.path()?.display()),
        Err(e) => tracing::error!("route config not reloaded, the previous one stays: {e}"),
    }
    on_reload(result.is_ok());
    Some(result)
}

/// Re-reads the routes' file every `every` and reloads them when its text changed; a bad file
/// is logged and counted by `on_reload(false)`, and the table in force stays.
pub async fn watch(
    routes: Arc<Routes>,
    every: Duration,
    on_reload: impl Fn(bool) + Send + 'static,
) {
    let Some(path) = routes.path().map(Path::to_path_buf) else {
        return;
    };
    let mut last = std::fs::read_to_string(&path).ok();
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        let text = tokio::fs::read_to_string(&path).await.ok();
        if text.is_none() || text == last {
            continue;
        }
        last = text;
        reload_logged(&routes, &on_reload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{
        "endpoints": {
            "a": {"base_url": "http://a:1/", "api_key_env": "KEY_A"},
            "b": {"base_url": "http://b:1", "model": "b-model"}
        },
        "routes": [
            {"model": "chat", "targets": [{"pool": "m", "weight": 3}, {"endpoint": "a"}],
             "fallback": [{"endpoint": "a"}, {"endpoint": "b"}], "mirror": {"endpoint": "b", "ratio": 0.5}},
            {"model": "gpt-*", "targets": [{"endpoint": "a"}]},
            {"model": "gpt-4*", "targets": [{"endpoint": "b"}]},
            {"model": "gpt-4o", "targets": [{"pool": "m"}]}
        ]
    }"#;

    fn table() -> RouteTable {
        RouteTable::parse(CONFIG, vec!["m".into()], |v| {
            (v == "KEY_A").then(|| "sk-a".to_string())
        })
        .unwrap()
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.attempts.iter().map(Target::name).collect()
    }

    #[test]
    fn exact_beats_patterns_and_the_longest_pattern_wins() {
        let t = table();
        let plan = |m: &str| t.plan(Some(m), || 0.0).unwrap();
        assert_eq!(plan("gpt-4o").attempts, vec![Target::Pool("m".into())]);
        assert_eq!(names(&plan("gpt-4-turbo")), ["b"]);
        assert_eq!(plan("gpt-4-turbo").label, "gpt-4*");
        assert_eq!(names(&plan("gpt-3.5")), ["a"]);
        assert_eq!(plan("m").label, "m", "a pool model without a route");
        assert_eq!(t.plan(Some("claude"), || 0.0).unwrap_err().status, 404);
        assert_eq!(t.plan(None, || 0.0).unwrap().label, "m");
        assert_eq!(t.model_names(), ["m", "chat", "gpt-4o"]);
        match &plan("gpt-3.5").attempts[0] {
            Target::External(e) => {
                assert_eq!(e.api_key.as_ref().map(Secret::expose), Some("sk-a"));
                assert_eq!(e.base_url, "http://a:1");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn weights_split_and_the_fallback_chain_follows_the_pick() {
        let t = table();
        let first = t.plan(Some("chat"), || 0.7).unwrap();
        assert_eq!(names(&first), ["pool", "a", "b"]);
        let second = t.plan(Some("chat"), || 0.8).unwrap();
        assert_eq!(names(&second), ["a", "b"], "the pick is not tried twice");
        let mut draws = [0.1, 0.4].into_iter();
        let mirrored = t.plan(Some("chat"), || draws.next().unwrap()).unwrap();
        assert_eq!(mirrored.mirror.unwrap().name, "b");
        let mut draws = [0.1, 0.6].into_iter();
        assert!(t
            .plan(Some("chat"), || draws.next().unwrap())
            .unwrap()
            .mirror
            .is_none());
    }

    #[test]
    fn bad_configs_are_refused_with_a_reason() {
        let bad = |text: &str| {
            RouteTable::parse(text, vec!["m".into()], |_| None)
                .unwrap_err()
                .to_string()
        };
        assert!(
            bad(r#"{"routes": [{"model": "x", "targets": [{"pool": "nope"}]}]}"#)
                .contains("no model")
        );
        assert!(
            bad(r#"{"routes": [{"model": "x", "targets": [{"endpoint": "nope"}]}]}"#)
                .contains("no endpoint")
        );
        assert!(bad(r#"{"routes": [{"model": "x", "targets": []}]}"#).contains("no targets"));
        assert!(
            bad(r#"{"routes": [{"model": "x", "targets": [{"pool": "m", "weight": 0}]}]}"#)
                .contains("positive")
        );
        assert!(
            bad(r#"{"routes": [{"model": "a*b", "targets": [{"pool": "m"}]}]}"#).contains("prefix")
        );
        assert!(
            bad(r#"{"endpoints": {"e": {"base_url": "http://e", "api_key_env": "NOPE"}}}"#)
                .contains("NOPE")
        );
        assert!(bad(r#"{"endpoints": {"e": {"base_url": "ftp://e"}}}"#).contains("http"));
        assert!(bad(r#"{"routes": [{"model": "x", "targets": [{"pool": "m"}]}, {"model": "x", "targets": [{"pool": "m"}]}]}"#).contains("twice"));
        assert!(bad(r#"{"routez": []}"#).contains("unknown field"));
    }
}
