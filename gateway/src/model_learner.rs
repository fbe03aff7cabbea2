//! A gateway started without `--model` learns the pool's models from its engines: every model
//! an instance of the scheduler serves is served here, with the tokenizer, chat template,
//! limits and sampling defaults of a switchyard engine of that model (fetched once from the
//! engine's `/v1/switchyard/model`, and again when no engine it was learned from serves it any
//! more). A model that only other engines serve (vLLM, SGLang, ...) takes the tokenizer given for
//! it (`--tokenizer NAME=DIR`), or its requests go upstream as text, placed without prefix
//! hashes, which the log says once. A LoRA adapter an instance serves (vLLM's) is served as its
//! base model is, under the adapter's name.

use crate::front::model_book::ModelBook;
use crate::front::routes::Routes;
use crate::shared::ServedModel;
use crate::upstream::scheduler_client::{KnownInstance, RemoteScheduler};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::model_description::{ModelDescription, MODEL_DESCRIPTION_PATH};
use switchyard_protocol::schedule::EngineKind;

/// How often the scheduler's instance list is looked at for new or departed models.
const LEARN_EVERY: Duration = Duration::from_secs(1);
/// How long an engine may take to describe its model (a large tokenizer is megabytes).
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A model as learned, and the engine it was learned from (`None`: not from an engine).
#[derive(Debug, Clone)]
struct Learned {
    model: ServedModel,
    from: Option<String>,
}

/// Keeps a gateway's [`ModelBook`] and [`Routes`] in step with the models its pool serves.
pub struct ModelLearner {
    scheduler: Arc<RemoteScheduler>,
    client: reqwest::Client,
    /// Tokenizers given by flag for models no switchyard engine serves.
    given: HashMap<String, ServedModel>,
    /// The block size of models learned without an engine's description.
    block_size: usize,
    /// The scheduler's block size, where it answered: a description that differs is refused.
    scheduler_block_size: Option<usize>,
    book: Arc<ModelBook>,
    routes: Arc<Routes>,
    learned: HashMap<String, Learned>,
    /// What the log has said once already.
    said: HashSet<String>,
}

impl ModelLearner {
    /// A learner filling `book` and `routes` from `scheduler`'s instances.
    pub fn new(
        scheduler: Arc<RemoteScheduler>,
        given: Vec<ServedModel>,
        block_size: usize,
        scheduler_block_size: Option<usize>,
        book: Arc<ModelBook>,
        routes: Arc<Routes>,
    ) -> Self {
        ModelLearner {
            scheduler,
            client: reqwest::Client::new(),
            given: given.into_iter().map(|m| (m.name.clone(), m)).collect(),
            block_size,
            scheduler_block_size,
            book,
            routes,
            learned: HashMap::new(),
            said: HashSet::new(),
        }
    }

    /// Learns on the current Tokio runtime for as long as the process runs.
    pub fn start(mut self) {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(LEARN_EVERY);
            loop {
                ticks.tick().await;
                self.refresh().await;
            }
        });
    }

    /// Learns the models of the instances listed now and forgets those no instance serves.
    async fn refresh(&mut self) {
        let mut by_model: BTreeMap<String, Vec<KnownInstance>> = BTreeMap::new();
        let mut adapters: BTreeMap<String, String> = BTreeMap::new();
        for instance in self.scheduler.known_instances() {
            for adapter in &instance.adapters {
                adapters.insert(adapter.clone(), instance.model.clone());
            }
            by_model
                .entry(instance.model.clone())
                .or_default()
                .push(instance);
        }
        let before = self.sources();
        let mut next = HashMap::new();
        for (name, instances) in by_model {
            let engines: Vec<String> = instances
                .iter()
                .filter(|i| i.kind == EngineKind::Switchyard)
                .map(|i| i.endpoint.clone())
                .collect();
            if let Some(known) = self.learned.remove(&name) {
                let current = match &known.from {
                    Some(endpoint) => engines.contains(endpoint),
                    None => engines.is_empty(),
                };
                if current {
                    next.insert(name, known);
                    continue;
                }
            }
            if let Some(learned) = self.learn(&name, &engines).await {
                next.insert(name, learned);
            }
        }
        for (adapter, base) in adapters {
            let Some(base) = next.get(&base).filter(|_| !next.contains_key(&adapter)) else {
                continue;
            };
            let model = ServedModel {
                name: adapter.clone(),
                ..base.model.clone()
            };
            let from = base.from.clone();
            next.insert(adapter, Learned { model, from });
        }
        self.learned = next;
        if self.sources() == before {
            return;
        }
        let mut models: Vec<ServedModel> = self.learned.values().map(|l| l.model.clone()).collect();
        models.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
        tracing::info!("the pool serves {names:?}");
        self.book.replace(models);
        if let Err(e) = self.routes.set_pool(names) {
            tracing::error!(
                "the route config does not fit the pool's models, the routes in force stay: {e}"
            );
        }
    }

    /// Each model known and where it was learned from, to tell whether anything changed.
    fn sources(&self) -> BTreeMap<String, Option<String>> {
        self.learned
            .iter()
            .map(|(name, l)| (name.clone(), l.from.clone()))
            .collect()
    }

    /// Learns model `name` from one of the switchyard `engines` serving it, else from what was
    /// given for it, else as a text-only model; `None` to try again later.
    async fn learn(&mut self, name: &str, engines: &[String]) -> Option<Learned> {
        for endpoint in engines {
            match self.describe(endpoint).await {
                Ok(model) if model.name != name => self.say_once(
                    format!("{endpoint} describes {} while the scheduler lists it as {name}", model.name),
                ),
                Ok(model) => match self.scheduler_block_size {
                    Some(theirs) if theirs != model.block_size => self.say_once(format!(
                        "model {name} is not served: its engines' block size is {} and the scheduler's --block-size is {theirs}; start them with the same one",
                        model.block_size
                    )),
                    _ => {
                        tracing::info!("learned model {name} from {endpoint}");
                        return Some(Learned {
                            model,
                            from: Some(endpoint.clone()),
                        });
                    }
                },
                Err(e) => tracing::warn!("cannot learn model {name} from {endpoint}: {e}"),
            }
        }
        if !engines.is_empty() {
            return None;
        }
        if let Some(model) = self.given.get(name) {
            return Some(Learned {
                model: model.clone(),
                from: None,
            });
        }
        self.say_once(format!(
            "no tokenizer for model {name} (served by engines other than switchyard's): its requests go upstream as text and are placed without prefix hashes; give one with --tokenizer {name}=DIR"
        ));
        Some(Learned {
            model: ServedModel::text_only(name.to_string(), self.block_size),
            from: None,
        })
    }

    /// Logs `what` the first time only.
    fn say_once(&mut self, what: String) {
        if self.said.insert(what.clone()) {
            tracing::warn!("{what}");
        }
    }

    /// The model the switchyard engine at `endpoint` describes.
    async fn describe(&self, endpoint: &str) -> Result<ServedModel, String> {
        let url = format!("{}{MODEL_DESCRIPTION_PATH}", endpoint.trim_end_matches('/'));
        let response = self
            .client
            .get(&url)
            .timeout(DESCRIBE_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("it answered {}", response.status()));
        }
        let description: ModelDescription = response.json().await.map_err(|e| e.to_string())?;
        // Reading a large tokenizer takes long enough to keep it off the async workers.
        tokio::task::spawn_blocking(move || ServedModel::from_description(&description))
            .await
            .map_err(|e| e.to_string())?
    }
}
