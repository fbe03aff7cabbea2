//! The scheduler on constructed cluster states.

use std::collections::HashMap;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::hashing::block_hashes;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind, StoredBlock};
use switchyard_protocol::schedule::{InferStage, Observed, ScheduleRequest};
use switchyard_scheduler::cms::{EngineKind, InstanceMeta};
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::score::Slos;
use switchyard_scheduler::vllm_events::translate::{Translator, Untranslated};
use switchyard_scheduler::vllm_events::wire::decode_batch;
use switchyard_scheduler::{ScheduleError, Scheduler, SchedulerConfig};

fn idle() -> EngineStatus {
    EngineStatus {
        total_kv_tokens: 100_000,
        block_size: 16,
        max_num_batched_tokens: 8192,
        max_num_seqs: 256,
        ..Default::default()
    }
}

fn cluster(policy: Policy, n: usize) -> Scheduler {
    cluster_with(
        SchedulerConfig {
            policy,
            ..Default::default()
        },
        n,
    )
}

fn cluster_with(config: SchedulerConfig, n: usize) -> Scheduler {
    cluster_of(config, n, Events::Switchyard)
}

/// `n` idle instances of the engine kind that publishes `events`.
fn cluster_of(config: SchedulerConfig, n: usize, events: Events) -> Scheduler {
    seeded_cluster_of(config, n, events, 7)
}

/// [`cluster_of`], with the scheduler's random draws seeded by `seed`.
fn seeded_cluster_of(config: SchedulerConfig, n: usize, events: Events, seed: u64) -> Scheduler {
    let mut s = Scheduler::new(config, seed);
    for i in 0..n {
        let id = format!("i{i}");
        s.add_instance(InstanceMeta {
            id: id.clone(),
            endpoint: format!("http://127.0.0.1:{}", 9000 + i),
            model: "m".into(),
            role: InferStage::Neutral,
            kind: match events {
                Events::Switchyard => EngineKind::Switchyard,
                Events::VllmArrays | Events::VllmMaps => EngineKind::Vllm,
            },
        });
        s.on_status(&id, idle(), 0.0);
    }
    s
}

fn request(id: &str, prompt: &[u32]) -> ScheduleRequest {
    ScheduleRequest {
        request_id: id.into(),
        model: "m".into(),
        prompt_tokens: prompt.len() as u32,
        block_hashes: block_hashes(prompt, 16),
        max_tokens: 100,
        ..Default::default()
    }
}

/// KV events storing every full block of `prompt`, numbered from 1.
fn stored_prompt(prompt: &[u32]) -> Vec<KvEvent> {
    block_hashes(prompt, 16)
        .iter()
        .enumerate()
        .map(|(i, &hash)| KvEvent {
            seq: i as u64 + 1,
            kind: KvEventKind::Stored(StoredBlock {
                hash,
                parent: None,
                token_count: 16,
            }),
        })
        .collect()
}

#[test]
fn a_burst_spreads_evenly_over_idle_instances() {
    for policy in [
        Policy::LeastRequests,
        Policy::CacheAware,
        Policy::LeastTokens,
        Policy::Predictive,
        Policy::RoundRobin,
    ] {
        let mut s = cluster(policy, 4);
        let mut counts: HashMap<String, usize> = HashMap::new();
        for r in 0..100 {
            let prompt: Vec<u32> = (0..300).map(|t| t + r * 1000).collect();
            let placed = s
                .schedule(&request(&format!("r{r}"), &prompt), 0.1)
                .unwrap();
            *counts.entry(placed.decision.instance_id).or_default() += 1;
        }
        let mut spread: Vec<usize> = counts.values().copied().collect();
        spread.sort();
        assert_eq!(spread, vec![25, 25, 25, 25], "{policy:?}");
        assert_eq!(s.dispatches(), 100);
    }
}

#[test]
fn stale_unreachable_and_excluded_instances_are_skipped() {
    let mut s = cluster(Policy::LeastRequests, 3);
    s.on_unreachable("i0");
    s.on_status("i1", idle(), 100.0);
    s.on_status("i2", idle(), 100.0);
    s.on_unreachable("i2");
    // At 103 s: i0 unreachable, i2 unreachable, i1 fresh.
    for r in 0..5 {
        let placed = s
            .schedule(&request(&format!("a{r}"), &[1, 2, 3]), 103.0)
            .unwrap();
        assert_eq!(placed.decision.instance_id, "i1");
    }
    let mut excluded = request("b", &[1, 2, 3]);
    excluded.exclude = vec!["i1".into()];
    assert_eq!(
        s.schedule(&excluded, 103.0),
        Err(ScheduleError::NoAvailableEndpoint("m".into()))
    );
    // i1's status goes stale after the staleness window.
    assert!(matches!(
        s.schedule(&request("c", &[1]), 110.0),
        Err(ScheduleError::NoAvailableEndpoint(_))
    ));
    let mut other = request("d", &[1]);
    other.model = "other".into();
    assert_eq!(
        s.schedule(&other, 103.0),
        Err(ScheduleError::EndpointNotFound("other".into()))
    );
}

#[test]
fn a_lora_adapters_requests_go_where_it_is_loaded_without_the_base_models_prefix_credit() {
    for policy in Policy::ALL {
        let mut s = cluster(policy, 3);
        for i in 0..3 {
            s.on_status(&format!("i{i}"), idle(), 100.0);
        }
        // i0 holds the prompt's blocks (the base model's); i2 has the adapter loaded.
        let prompt: Vec<u32> = (0..64).collect();
        s.on_kv_events("i0", &stored_prompt(&prompt)).unwrap();
        s.on_adapters("i2", vec!["sql-lora".into()]);
        for r in 0..4 {
            let mut lora = request(&format!("{policy:?}-{r}"), &prompt);
            lora.model = "sql-lora".into();
            let placed = s.schedule(&lora, 100.0).unwrap();
            assert_eq!(placed.decision.instance_id, "i2", "{policy:?}");
            assert_eq!(placed.best_hit_ratio, 0.0, "{policy:?}");
        }
        // Unloaded: no instance serves it.
        s.on_adapters("i2", Vec::new());
        let mut lora = request(&format!("{policy:?}-unloaded"), &prompt);
        lora.model = "sql-lora".into();
        assert_eq!(
            s.schedule(&lora, 100.0),
            Err(ScheduleError::EndpointNotFound("sql-lora".into())),
            "{policy:?}"
        );
    }
}

#[test]
fn a_request_pinned_to_an_instance_goes_there_under_every_policy_or_nowhere() {
    for policy in Policy::ALL {
        let mut s = cluster(policy, 3);
        for i in 0..3 {
            s.on_status(&format!("i{i}"), idle(), 100.0);
        }
        for r in 0..6 {
            let mut pinned = request(&format!("{policy:?}-{r}"), &[1, 2, 3]);
            pinned.only = Some("i2".into());
            let placed = s.schedule(&pinned, 100.0).unwrap();
            assert_eq!(placed.decision.instance_id, "i2", "{policy:?}");
        }
        // Gone (or failed already): no other instance takes it.
        s.on_unreachable("i2");
        let mut pinned = request(&format!("{policy:?}-gone"), &[1]);
        pinned.only = Some("i2".into());
        assert_eq!(
            s.schedule(&pinned, 100.0),
            Err(ScheduleError::NoAvailableEndpoint("m".into())),
            "{policy:?}"
        );
    }
}

#[test]
fn a_session_stays_on_its_instance_under_load_only_policies_until_it_carries_too_much() {
    use switchyard_scheduler::sessions::SessionOutcome;
    for policy in Policy::ALL.into_iter().filter(|p| !p.weighs_cache()) {
        // A slack of 2 requests over the mean (8 by default).
        let config = SchedulerConfig {
            policy,
            session_load_slack: 2.0,
            ..Default::default()
        };
        let mut s = cluster_with(config, 4);
        for i in 0..4 {
            s.on_status(&format!("i{i}"), idle(), 100.0);
        }
        let ask = |id: &str| ScheduleRequest {
            session: Some("chat-1".into()),
            ..request(id, &[7; 64])
        };
        let first = s.schedule(&ask("r0"), 100.0).unwrap();
        assert_eq!(first.session, Some(SessionOutcome::New), "{policy:?}");
        let home = first.decision.instance_id;
        // Each stays in flight: the session's instance carries more and more, and the others
        // take the requests of no session.
        let mut outcomes = Vec::new();
        for r in 1..12 {
            if r % 2 == 0 {
                s.schedule(&request(&format!("other{r}"), &[r; 64]), 100.0)
                    .unwrap();
            }
            let placed = s.schedule(&ask(&format!("r{r}")), 100.0).unwrap();
            outcomes.push((placed.session.unwrap(), placed.decision.instance_id));
        }
        let kept = outcomes
            .iter()
            .take_while(|(o, at)| *o == SessionOutcome::Kept && *at == home)
            .count();
        assert!(kept >= 2, "{policy:?}: {outcomes:?}");
        // Once over 1.25x the mean load and 2 requests over it, the session moves, and stays
        // where it moved.
        let (moved, to) = &outcomes[kept];
        assert_eq!(*moved, SessionOutcome::Moved, "{policy:?}: {outcomes:?}");
        assert_ne!(*to, home, "{policy:?}");
        let next = &outcomes[kept + 1];
        assert!(
            next.1 == *to || next.0 == SessionOutcome::Moved,
            "{policy:?}: {outcomes:?}"
        );
        // Requests without a session say nothing of one.
        assert_eq!(
            s.schedule(&request("plain", &[1; 64]), 100.0)
                .unwrap()
                .session,
            None
        );
    }
}

#[test]
fn cache_weighing_policies_count_what_a_session_left_on_its_instance_as_cached() {
    use switchyard_scheduler::sessions::SessionOutcome;
    for policy in Policy::ALL.into_iter().filter(|p| p.weighs_cache()) {
        let mut s = cluster(policy, 4);
        for i in 0..4 {
            s.on_status(&format!("i{i}"), idle(), 100.0);
        }
        // No prefix hashes (a gateway without the tokenizer): only the session says where the
        // conversation's history is.
        let turn = |id: &str, session: Option<&str>, prompt: u32| ScheduleRequest {
            session: session.map(str::to_string),
            block_hashes: Vec::new(),
            ..request(id, &vec![1; prompt as usize])
        };
        let mut homes = std::collections::BTreeSet::new();
        for c in 0..8 {
            let session = format!("chat-{c}");
            let first = s.schedule(&turn(&format!("{c}-0"), Some(&session), 2000), 100.0);
            let first = first.unwrap();
            assert_eq!(first.session, Some(SessionOutcome::New), "{policy:?}");
            s.release(&format!("{c}-0"));
            let home = first.decision.instance_id;
            homes.insert(home.clone());
            for t in 1..4 {
                let id = format!("{c}-{t}");
                let placed = s.schedule(&turn(&id, Some(&session), 2000 + 600 * t), 100.0);
                let placed = placed.unwrap();
                assert_eq!(placed.decision.instance_id, home, "{policy:?} {id}");
                assert_eq!(
                    placed.session,
                    Some(SessionOutcome::Kept),
                    "{policy:?} {id}"
                );
                assert!(placed.decision.cached_tokens >= 2000, "{policy:?} {id}");
                s.release(&id);
            }
        }
        assert!(homes.len() > 1, "{policy:?}: sessions spread, {homes:?}");
    }
}

/// How an instance's cache reaches the index: switchyard's own events, or vLLM's (either
/// generation), decoded and translated from the engine's blocks and tokens. The placement tests
/// that rest on cached prefixes run with each, and must place alike.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Events {
    Switchyard,
    VllmArrays,
    VllmMaps,
}

const EVERY_SOURCE: [Events; 3] = [Events::Switchyard, Events::VllmArrays, Events::VllmMaps];

/// Tells the index that instance `id` holds every full block of `prompt`, as `events` would.
fn store_prompt(s: &mut Scheduler, id: &str, prompt: &[u32], events: Events) {
    use rmpv::Value;
    let blocks = prompt.len() / 16;
    let hash = |i: usize| match events {
        Events::VllmMaps => Value::Binary([i as u64 + 1; 4].map(u64::to_be_bytes).concat()),
        _ => Value::from(i as u64 + 1),
    };
    let fields = vec![
        (
            "block_hashes",
            Value::Array((0..blocks).map(hash).collect()),
        ),
        ("parent_block_hash", Value::Nil),
        (
            "token_ids",
            Value::Array(
                prompt[..blocks * 16]
                    .iter()
                    .map(|&t| Value::from(t))
                    .collect(),
            ),
        ),
        ("block_size", Value::from(16)),
        ("lora_id", Value::Nil),
    ];
    let event = match events {
        Events::Switchyard => {
            s.on_kv_events(id, &stored_prompt(prompt)).unwrap();
            return;
        }
        Events::VllmArrays => Value::Array(
            std::iter::once(Value::from("BlockStored"))
                .chain(fields.into_iter().map(|(_, v)| v))
                .collect(),
        ),
        Events::VllmMaps => Value::Map(
            std::iter::once((Value::from("type"), Value::from("BlockStored")))
                .chain(fields.into_iter().map(|(k, v)| (Value::from(k), v)))
                .collect(),
        ),
    };
    let mut payload = Vec::new();
    let batch = Value::Array(vec![Value::F64(0.0), Value::Array(vec![event])]);
    rmpv::encode::write_value(&mut payload, &batch).unwrap();
    let (mut kinds, mut untranslated) = (Vec::new(), Untranslated::default());
    let mut translator = Translator::new(16);
    for e in &decode_batch(&payload).unwrap().events {
        translator.translate(e, &mut kinds, &mut untranslated);
    }
    let numbered: Vec<KvEvent> = kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| KvEvent {
            seq: i as u64 + 1,
            kind,
        })
        .collect();
    s.on_kv_events(id, &numbered).unwrap();
}

#[test]
fn cache_aware_follows_the_prefix_until_the_queue_outweighs_it() {
    for events in EVERY_SOURCE {
        cache_aware_follows_the_prefix(events);
    }
}

fn cache_aware_follows_the_prefix(events: Events) {
    let mut s = cluster_of(
        SchedulerConfig {
            policy: Policy::CacheAware,
            ..Default::default()
        },
        3,
        events,
    );
    let prompt: Vec<u32> = (0..4000).collect();
    store_prompt(&mut s, "i2", &prompt, events);
    let placed = s.schedule(&request("a", &prompt), 0.5).unwrap();
    assert_eq!(placed.decision.instance_id, "i2");
    assert_eq!(
        placed.decision.cached_tokens, 3999,
        "all but the last token"
    );
    s.release("a");
    // i2 now has 20k tokens of prefill queued: recomputing 4k elsewhere is cheaper.
    let busy = EngineStatus {
        waiting_prefill_tokens: 20_000,
        num_waiting: 5,
        ..idle()
    };
    s.on_status("i2", busy, 1.0);
    s.on_status("i0", idle(), 1.0);
    s.on_status("i1", idle(), 1.0);
    let placed = s.schedule(&request("b", &prompt), 1.5).unwrap();
    assert_ne!(placed.decision.instance_id, "i2");
    assert!((placed.best_hit_ratio - 3999.0 / 4000.0).abs() < 1e-9);
}

#[test]
fn a_placed_prefix_counts_as_cached_on_its_instance_until_the_engine_reports_it_or_the_wait_ends() {
    let mut s = cluster(Policy::Predictive, 4);
    let prompt: Vec<u32> = (0..4000).collect();
    let first = s.schedule(&request("first", &prompt), 0.5).unwrap();
    assert_eq!(first.decision.cached_tokens, 0);
    // No KV event yet (the first prefill is still queued): the group's next requests see the
    // prefix on the instance where it is being computed, and weigh it as cached there.
    for (i, now) in [(1, 0.6), (2, 0.7), (3, 0.8)] {
        let placed = s
            .schedule(&request(&format!("next{i}"), &prompt), now)
            .unwrap();
        assert_eq!(placed.decision.best_cached_tokens, 3999);
        s.release(&format!("next{i}"));
    }
    s.release("first");
    // Never reported within the engine's wait: the entries lapse, and the prefix is nowhere.
    let later = SchedulerConfig::default().pending_ttl + 1.0;
    for i in 0..4 {
        s.on_status(&format!("i{i}"), idle(), later);
    }
    s.tick(later);
    let placed = s.schedule(&request("late", &prompt), later).unwrap();
    assert_eq!(placed.decision.best_cached_tokens, 0);
}

#[test]
fn predictive_keeps_a_prompt_with_its_prefix_unless_the_queue_there_costs_more() {
    for events in EVERY_SOURCE {
        predictive_keeps_a_prompt_with_its_prefix(events);
    }
}

fn predictive_keeps_a_prompt_with_its_prefix(events: Events) {
    let mut s = cluster_of(predictive(Slos::default()), 3, events);
    let prompt: Vec<u32> = (0..4000).collect();
    store_prompt(&mut s, "i2", &prompt, events);
    let queue = |tokens: u64, requests: u32| EngineStatus {
        waiting_prefill_tokens: tokens,
        num_waiting: requests,
        ..idle()
    };
    // i2 has 40k tokens of prefill queued, the others nothing: recomputing 4k elsewhere is so
    // much faster that it outweighs the work it adds.
    s.on_status("i2", queue(40_000, 1), 1.0);
    let placed = s.schedule(&request("idle", &prompt), 1.0).unwrap();
    let copy = placed.decision.instance_id.clone();
    assert_ne!(copy, "i2");
    s.release("idle");
    let neither = ["i0", "i1"].into_iter().find(|i| *i != copy).unwrap();
    // Every instance has ten requests waiting: the instance holding neither i2's prefix nor the
    // copy on its way would still be faster for this request, but computing the prefix a third
    // time would delay the many requests that follow.
    s.on_status("i0", queue(4000, 10), 2.0);
    s.on_status("i1", queue(4000, 10), 2.0);
    s.on_status("i2", queue(12_000, 10), 2.0);
    let placed = s.schedule(&request("loaded", &prompt), 2.0).unwrap();
    assert_ne!(placed.decision.instance_id, neither);
    assert!(placed.metrics.cached_tokens > 0.0);
    assert!(placed.metrics.predicted_ttft > 0.0 && placed.metrics.added_latency > 0.0);
}

#[test]
fn waiting_prompts_the_engine_has_cached_do_not_count_as_prefill_ahead() {
    // Both instances have 40k prompt tokens waiting; i1 says 36k of them are cached there.
    let mut s = cluster(Policy::Predictive, 2);
    let waiting = |cached: u64| EngineStatus {
        num_waiting: 10,
        waiting_prefill_tokens: 40_000,
        waiting_cached_tokens: cached,
        ..idle()
    };
    s.on_status("i0", waiting(0), 1.0);
    s.on_status("i1", waiting(36_000), 1.0);
    let prompt: Vec<u32> = (0..1000).collect();
    let placed = s.schedule(&request("r", &prompt), 1.0).unwrap();
    assert_eq!(placed.decision.instance_id, "i1");
    let up = placed.decision.runner_up.clone().expect("two candidates");
    let ttft = placed.decision.predicted_ttft_ms.unwrap();
    assert!(
        ttft * 5.0 < up.predicted_ttft_ms,
        "4k tokens to compute ahead against 40k: {ttft} ms against {} ms",
        up.predicted_ttft_ms
    );
}

/// Two instances for one request of 8,000 tokens: `i0` holds its first 4,000 (told by
/// `events`) and is busy decoding `decoders` requests with `context` tokens between them; `i1`
/// holds nothing and has `queued` prefill tokens waiting.
fn holder_and_other(
    config: SchedulerConfig,
    events: Events,
    decoders: u32,
    context: u64,
    queued: u64,
) -> (Scheduler, ScheduleRequest) {
    let mut s = cluster_of(config, 2, events);
    let prompt: Vec<u32> = (0..8000).collect();
    store_prompt(&mut s, "i0", &prompt[..4000], events);
    let busy = EngineStatus {
        num_running: decoders,
        num_decoding: decoders,
        decode_tokens: context,
        total_kv_tokens: 10_000_000,
        ..idle()
    };
    s.on_status("i0", busy, 1.0);
    let waiting = EngineStatus {
        num_waiting: 1,
        waiting_prefill_tokens: queued,
        total_kv_tokens: 10_000_000,
        ..idle()
    };
    s.on_status("i1", waiting, 1.0);
    (s, request("r", &prompt))
}

fn predictive(slos: Slos) -> SchedulerConfig {
    SchedulerConfig {
        policy: Policy::Predictive,
        slos,
        ..Default::default()
    }
}

/// Where one request goes, from a fresh scheduler seeded with each of `seeds`, over an idle
/// instance and one decoding a single short request (a little more latency added there).
fn picks_over_seeds(slos: Slos, seeds: std::ops::Range<u64>) -> HashMap<String, usize> {
    let mut picks = HashMap::new();
    for seed in seeds {
        let mut s = seeded_cluster_of(predictive(slos), 2, Events::Switchyard, seed);
        let busy = EngineStatus {
            num_running: 1,
            num_decoding: 1,
            decode_tokens: 64,
            ..idle()
        };
        s.on_status("i1", busy, 0.0);
        let prompt: Vec<u32> = (0..300).collect();
        // A long answer: the latency the request adds to itself outweighs what it adds to the
        // one decoding on i1 (within 5% of i0's in all).
        let req = ScheduleRequest {
            max_tokens: 1000,
            ..request("r", &prompt)
        };
        let placed = s.schedule(&req, 0.1).unwrap();
        *picks.entry(placed.decision.instance_id).or_default() += 1;
    }
    picks
}

#[test]
fn under_a_tpot_objective_near_ties_are_drawn_and_without_one_the_least_is_taken() {
    let tpot = Slos {
        ttft: Some(1.0),
        tpot: Some(0.05),
    };
    let drawn = picks_over_seeds(tpot, 0..40);
    assert!(
        drawn.get("i0").is_some_and(|&n| n > 0) && drawn.get("i1").is_some_and(|&n| n > 0),
        "{drawn:?}"
    );
    let least = picks_over_seeds(Slos::default(), 0..40);
    assert_eq!(least.get("i0"), Some(&40), "{least:?}");
    // An objective the near tie's predicted TPOT is not well under draws nothing.
    let tight = Slos {
        ttft: Some(1.0),
        tpot: Some(0.001),
    };
    let tight_picks = picks_over_seeds(tight, 0..40);
    assert_eq!(tight_picks.len(), 1, "{tight_picks:?}");
}

#[test]
fn without_slos_the_latency_added_to_everyone_decides_not_the_requests_own_ttft() {
    // 200 requests decode on i0 at about 48 ms a token; its cached half makes the request's
    // first token come soonest there, but its prefill would slow all 200.
    for events in EVERY_SOURCE {
        let (mut s, req) = holder_and_other(predictive(Slos::default()), events, 200, 2_300_000, 0);
        let placed = s.schedule(&req, 1.0).unwrap();
        assert_eq!(placed.decision.instance_id, "i1");
        let up = placed.decision.runner_up.clone().expect("two candidates");
        assert_eq!(up.instance_id, "i0");
        assert!(
            up.predicted_ttft_ms < placed.decision.predicted_ttft_ms.unwrap(),
            "{up:?} vs {:?}",
            placed.decision
        );
        assert!(up.predicted_tpot_ms > placed.decision.predicted_tpot_ms.unwrap());
    }
}

#[test]
fn with_slos_a_placement_that_pushes_running_requests_past_the_tpot_slo_is_avoided_when_another_can_take_it(
) {
    // The 200 requests decoding on i0 at about 48 ms a token would pass 50 ms with the request's
    // prefill and context; i1 meets the request's SLOs as well, and takes it.
    let slos = Slos {
        ttft: Some(1.0),
        tpot: Some(0.05),
    };
    for events in EVERY_SOURCE {
        let (mut s, req) = holder_and_other(predictive(slos), events, 200, 2_300_000, 0);
        let placed = s.schedule(&req, 1.0).unwrap();
        assert_eq!(placed.decision.instance_id, "i1");
        assert_eq!(placed.metrics.violations, 0.0);
        assert!(placed.metrics.added_latency > 0.0);
    }
}

#[test]
fn with_slos_the_request_goes_where_it_meets_them_when_an_instance_can() {
    // i1 has 60k tokens of prefill queued: the request's first token would come after three
    // seconds there. On i0 it meets the SLOs, at the cost of slowing the ten requests decoding
    // there.
    let slos = Slos {
        ttft: Some(1.0),
        tpot: Some(0.05),
    };
    for events in EVERY_SOURCE {
        let (mut s, req) = holder_and_other(predictive(slos), events, 10, 100_000, 60_000);
        let placed = s.schedule(&req, 1.0).unwrap();
        assert_eq!(placed.decision.instance_id, "i0");
        assert_eq!(placed.metrics.violations, 0.0, "{:?}", placed.metrics);
        assert!(placed.decision.predicted_ttft_ms.unwrap() < 1000.0);
        let up = placed.decision.runner_up.unwrap();
        assert_eq!(up.instance_id, "i1");
        assert!(up.predicted_ttft_ms > 1000.0, "{up:?}");
    }
}

#[test]
fn with_a_tpot_slo_a_long_prompt_keeps_off_an_instance_where_a_short_answer_is_still_live() {
    let slos = Slos {
        ttft: None,
        tpot: Some(0.05),
    };
    let mut s = cluster_with(predictive(slos), 2);
    // A four-token answer goes to i0 (on its way there); i1 decodes three requests, so that i0
    // is otherwise the cheaper place for the long prompt that follows.
    let short = ScheduleRequest {
        max_tokens: 4,
        exclude: vec!["i1".into()],
        ..request("short", &(0..100).collect::<Vec<u32>>())
    };
    assert_eq!(s.schedule(&short, 1.0).unwrap().decision.instance_id, "i0");
    let decoding = |n: u32| EngineStatus {
        num_running: n,
        num_decoding: n,
        decode_tokens: 1_000 * n as u64,
        ..idle()
    };
    s.on_status("i1", decoding(3), 1.0);
    // A prompt of 16k tokens takes over a second to compute: spread over the short answer's
    // three gaps, far over 50 ms a token.
    let long = |id: &str, first: u32| request(id, &(first..first + 16_384).collect::<Vec<u32>>());
    let placed = s.schedule(&long("long", 1_000_000), 1.0).unwrap();
    assert_eq!(placed.decision.instance_id, "i1", "{:?}", placed.metrics);
    assert_eq!(placed.metrics.violations, 0.0);
    s.release("long");
    // Once the short answer is done, i0 is the cheaper place again.
    s.release("short");
    let placed = s.schedule(&long("again", 2_000_000), 1.0).unwrap();
    assert_eq!(placed.decision.instance_id, "i0", "{:?}", placed.metrics);
}

#[test]
fn reported_dispatches_stop_counting_and_release_frees_them() {
    let mut s = cluster(Policy::LeastRequests, 2);
    let first = s
        .schedule(&request("a", &[1, 2]), 0.1)
        .unwrap()
        .decision
        .instance_id;
    let second = s
        .schedule(&request("b", &[1, 2]), 0.1)
        .unwrap()
        .decision
        .instance_id;
    assert_ne!(
        first, second,
        "the in-flight account steers the second request away"
    );
    let view = s.instances_view(0.2);
    assert!(view.iter().all(|v| v.in_flight.requests == 1));
    let mut status = idle();
    status.admitted = vec!["a".into()];
    status.num_running = 1;
    s.on_status(&first, status, 0.3);
    assert_eq!(
        s.instance(&first)
            .unwrap()
            .status
            .as_ref()
            .unwrap()
            .num_running,
        1
    );
    assert_eq!(
        s.instances_view(0.3)
            .iter()
            .find(|v| v.meta.id == first)
            .unwrap()
            .in_flight
            .requests,
        0
    );
    s.release("b");
    s.release("a");
    assert_eq!(s.dispatches(), 0);
    assert!(s
        .instances_view(0.3)
        .iter()
        .all(|v| v.in_flight.requests == 0));
}

/// A predictive scheduler with `slos` and `--slo-admission`, over one idle instance.
fn admitting(slos: Slos) -> Scheduler {
    let mut s = Scheduler::new(
        SchedulerConfig {
            policy: Policy::Predictive,
            slos,
            slo_admission: true,
            ..Default::default()
        },
        1,
    );
    s.add_instance(InstanceMeta {
        id: "i0".into(),
        endpoint: "http://x".into(),
        model: "m".into(),
        role: InferStage::Neutral,
        kind: EngineKind::Switchyard,
    });
    s.on_status("i0", idle(), 0.0);
    s
}

#[test]
fn slo_admission_answers_no_capacity_when_every_tpot_is_over() {
    let mut s = admitting(Slos {
        ttft: None,
        tpot: Some(0.001),
    });
    assert_eq!(
        s.schedule(&request("a", &[1]), 0.1),
        Err(ScheduleError::AllEndpointsBusy)
    );
}

#[test]
fn slo_admission_lets_in_a_tpot_predicted_a_little_over_until_finished_requests_miss() {
    let predicted = admitting(Slos::default())
        .schedule(&request("probe", &[1]), 0.1)
        .unwrap()
        .decision
        .predicted_tpot_ms
        .unwrap();
    let mut s = admitting(Slos {
        ttft: None,
        tpot: Some(predicted / 1.5 / 1000.0),
    });
    // Let in at first (an idle cluster's first predictions are its least sure), each getting
    // what was predicted, over its objective, until enough of them missed.
    let mut admitted = 0;
    while let Ok(placement) = s.schedule(&request(&admitted.to_string(), &[1]), 0.1) {
        assert!(placement.metrics.violations >= 1.0);
        let observed = Observed {
            ttft_ms: Some(10.0),
            tpot_ms: Some(predicted),
            ..Observed::default()
        };
        s.finish(&admitted.to_string(), &observed);
        admitted += 1;
        assert!(admitted < 100, "still let in after {admitted} misses");
    }
    assert!(admitted >= 50, "refused after {admitted}");
}

#[test]
fn slo_admission_takes_a_request_predicted_just_inside_its_ttft_objective() {
    let admitting = |ttft: Option<f64>| admitting(Slos { ttft, tpot: None });
    let prompt: Vec<u32> = (0..4096).collect();
    let predicted = admitting(None)
        .schedule(&request("probe", &prompt), 0.1)
        .unwrap()
        .decision
        .predicted_ttft_ms
        .unwrap()
        / 1000.0;
    // At 0.97 of the objective: inside it, within the margin, so a share of a miss.
    let placed = admitting(Some(predicted / 0.97))
        .schedule(&request("a", &prompt), 0.1)
        .unwrap();
    assert!(
        placed.metrics.violations > 0.0 && placed.metrics.violations < 1.0,
        "{:?}",
        placed.metrics
    );
    // Over it: refused.
    assert_eq!(
        admitting(Some(predicted / 1.05)).schedule(&request("b", &prompt), 0.1),
        Err(ScheduleError::AllEndpointsBusy)
    );
}

#[test]
fn removing_an_instance_drops_its_index_entries_and_dispatches() {
    let mut s = cluster(Policy::CacheAware, 2);
    let prompt: Vec<u32> = (0..64).collect();
    let hashes = block_hashes(&prompt, 16);
    let stored = |seq: u64, hash: u64| KvEvent {
        seq,
        kind: KvEventKind::Stored(StoredBlock {
            hash,
            parent: None,
            token_count: 16,
        }),
    };
    s.on_kv_events("i0", &[stored(1, hashes[0]), stored(2, hashes[1])])
        .unwrap();
    assert_eq!(
        s.schedule(&request("a", &prompt), 0.1)
            .unwrap()
            .decision
            .instance_id,
        "i0"
    );
    s.remove_instance("i0");
    assert_eq!(s.dispatches(), 0);
    let placed = s.schedule(&request("b", &prompt), 0.2).unwrap();
    assert_eq!(
        (
            placed.decision.instance_id.as_str(),
            placed.decision.cached_tokens
        ),
        ("i1", 0)
    );
}

#[test]
fn an_unreachable_instance_loses_its_index_entries_until_its_snapshot() {
    let mut s = cluster(Policy::CacheAware, 2);
    let prompt: Vec<u32> = (0..64).collect();
    s.on_kv_events("i0", &stored_prompt(&prompt)).unwrap();
    let indexed = |s: &Scheduler| {
        s.instances_view(0.5)
            .into_iter()
            .find(|v| v.meta.id == "i0")
            .unwrap()
            .indexed_blocks
    };
    assert_eq!(indexed(&s), 4);
    s.on_unreachable("i0");
    assert_eq!(indexed(&s), 0);
    let blocks: Vec<StoredBlock> = block_hashes(&prompt, 16)
        .into_iter()
        .map(|hash| StoredBlock {
            hash,
            parent: None,
            token_count: 16,
        })
        .collect();
    s.on_kv_snapshot("i0", 9, &blocks);
    s.on_status("i0", idle(), 1.0);
    assert_eq!(indexed(&s), 4);
    let placed = s.schedule(&request("a", &prompt), 1.0).unwrap();
    assert_eq!(placed.decision.instance_id, "i0");
}

#[test]
fn a_silent_gateway_has_its_dispatches_reclaimed() {
    let mut s = cluster(Policy::LeastRequests, 2);
    let from = |id: &str, gateway: &str| ScheduleRequest {
        gateway: Some(gateway.into()),
        ..request(id, &[1, 2, 3])
    };
    s.schedule(&from("a", "g1"), 0.0).unwrap();
    s.schedule(&from("b", "g2"), 0.0).unwrap();
    s.gateway_seen("g2", 25.0);
    s.tick(31.0);
    assert_eq!(
        s.dispatches(),
        1,
        "g1 went silent for over 30 s; g2 sent a heartbeat"
    );
    s.tick(56.0);
    assert_eq!(s.dispatches(), 0);
}

#[test]
fn a_model_can_have_its_own_policy() {
    let mut s = Scheduler::new(
        SchedulerConfig {
            policy: Policy::CacheAware,
            model_policies: vec![("m".into(), Policy::RoundRobin)],
            ..Default::default()
        },
        3,
    );
    assert_eq!(s.policy_for("m"), Policy::RoundRobin);
    assert_eq!(s.policy_for("other"), Policy::CacheAware);
    s.add_instance(InstanceMeta {
        id: "i0".into(),
        endpoint: "http://x".into(),
        model: "m".into(),
        role: InferStage::Neutral,
        kind: EngineKind::Switchyard,
    });
    s.on_status("i0", idle(), 0.0);
    assert!(s.schedule(&request("a", &[1]), 0.1).is_ok());
}

#[test]
fn an_engine_profile_is_the_prior_until_real_steps_arrive() {
    use switchyard_protocol::engine_state::StepSample;
    // A slow engine: 50 ms per step plus 1 ms per prefill token.
    let prior: Vec<StepSample> = [
        (0u32, 8u32),
        (512, 0),
        (2048, 8),
        (4096, 64),
        (1024, 0),
        (3072, 8),
        (256, 64),
        (1536, 0),
    ]
    .iter()
    .map(|&(prefill, decode)| StepSample {
        prefill_tokens: prefill,
        decode_batch: decode,
        context_tokens: prefill as u64,
        prefill_attention: StepSample::attention_of(0, prefill as u64),
        step_seconds: 0.05 + 0.001 * prefill as f64,
    })
    .collect();
    let mut s = Scheduler::new(
        SchedulerConfig {
            policy: Policy::Predictive,
            ..Default::default()
        },
        1,
    );
    s.add_instance(InstanceMeta {
        id: "slow".into(),
        endpoint: "http://x".into(),
        model: "m".into(),
        role: InferStage::Neutral,
        kind: EngineKind::Switchyard,
    });
    s.on_status(
        "slow",
        EngineStatus {
            step_prior: prior,
            ..idle()
        },
        0.0,
    );
    let placed = s
        .schedule(&request("a", &(0..1000).collect::<Vec<u32>>()), 0.1)
        .unwrap();
    let ttft = placed.decision.predicted_ttft_ms.unwrap();
    assert!(
        (ttft - 1050.0).abs() < 60.0,
        "one step of 1000 prefill tokens: {ttft} ms"
    );
}

#[test]
fn a_placement_request_releases_what_it_carries_first() {
    use switchyard_protocol::clock::unix_now;
    use switchyard_scheduler::service::SchedulerService;
    let mut s = cluster(Policy::LeastRequests, 1);
    s.on_status("i0", idle(), unix_now());
    let service = SchedulerService::new(s, false).unwrap();
    let in_flight = || service.instances()[0].in_flight.requests;
    service.schedule(&request("a", &[1, 2, 3])).unwrap();
    service.schedule(&request("b", &[1, 2, 3])).unwrap();
    assert_eq!(in_flight(), 2);
    let carrying = ScheduleRequest {
        released: vec!["a".into(), "b".into(), "never-placed".into()],
        ..request("c", &[1, 2, 3])
    };
    service.schedule(&carrying).unwrap();
    assert_eq!(in_flight(), 1, "a and b released, c placed");
}

#[test]
fn predictive_spreads_short_requests_over_idle_instances_one_of_them_new() {
    let mut s = cluster(Policy::Predictive, 2);
    let step = |prefill: u32| switchyard_protocol::engine_state::StepSample {
        prefill_tokens: prefill,
        decode_batch: 1,
        context_tokens: 200,
        prefill_attention: switchyard_protocol::engine_state::StepSample::attention_of(
            0,
            prefill as u64,
        ),
        step_seconds: 0.003,
    };
    // i0 has served requests; i1 just (re)started.
    for t in 0..50 {
        let status = EngineStatus {
            steps: vec![step(if t % 5 == 0 { 100 } else { 0 })],
            ..idle()
        };
        s.on_status("i0", status, t as f64 * 0.01);
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for r in 0..40 {
        let prompt: Vec<u32> = (0..8).map(|t| t + r * 100).collect();
        let now = 1.0 + r as f64 * 0.5;
        let placed = s
            .schedule(&request(&format!("r{r}"), &prompt), now)
            .unwrap();
        *counts
            .entry(placed.decision.instance_id.clone())
            .or_default() += 1;
        s.release(&format!("r{r}"));
        for i in ["i0", "i1"] {
            s.on_status(i, idle(), now + 0.1);
        }
    }
    assert!(counts.get("i1").copied().unwrap_or(0) > 0, "{counts:?}");
}

#[test]
fn an_engine_that_says_only_its_usage_is_placed_by_the_ratio() {
    // Two engines that report the share of KV in use but not the capacity (scraped pages).
    let usage = |share: f64| EngineStatus {
        total_kv_tokens: 0,
        kv_usage: Some(share),
        ..idle()
    };
    let mut s = cluster(Policy::LeastTokens, 2);
    s.on_status("i0", usage(0.9), 1.0);
    s.on_status("i1", usage(0.2), 1.0);
    let placed = s.schedule(&request("a", &[1, 2, 3]), 1.1).unwrap();
    assert_eq!(placed.decision.instance_id, "i1");
    assert!((placed.metrics.kv_usage_projected - 0.2).abs() < 1e-9);
    assert!(!placed.metrics.kv_overflow);
    // A full cache is an overflow for the predictive policy, which then goes elsewhere.
    let mut s = cluster(Policy::Predictive, 2);
    s.on_status("i0", usage(1.0), 1.0);
    s.on_status("i1", usage(0.5), 1.0);
    let placed = s.schedule(&request("b", &[1, 2, 3]), 1.1).unwrap();
    assert_eq!(placed.decision.instance_id, "i1");
}

#[test]
fn a_disaggregated_model_is_placed_on_a_prefill_instance_and_handed_to_the_freest_decode_one() {
    let mut s = Scheduler::new(SchedulerConfig::default(), 7);
    let roles = [
        ("p0", InferStage::Prefill, 0),
        ("d0", InferStage::Decode, 60_000),
        ("d1", InferStage::Decode, 10_000),
    ];
    for (id, role, used) in roles {
        s.add_instance(InstanceMeta {
            id: id.into(),
            endpoint: format!("http://{id}"),
            model: "m".into(),
            role: InferStage::Neutral,
            kind: EngineKind::Switchyard,
        });
        // A switchyard engine says its role in its status.
        let status = EngineStatus {
            role,
            used_kv_tokens: used,
            num_running: (used / 1_000) as u32,
            ..idle()
        };
        s.on_status(id, status, 0.0);
    }
    let placed = s.schedule(&request("r", &[1; 40]), 0.0).unwrap().decision;
    assert_eq!(placed.instance_id, "p0", "prefill on the prefill instance");
    let decode = placed.decode.expect("a decode instance is named");
    assert_eq!(
        (decode.instance_id.as_str(), decode.endpoint.as_str()),
        ("d1", "http://d1")
    );

    // Until a status taken after they arrive says otherwise, what was handed to d1 counts:
    // four hand-offs of 20,000 tokens make it less free than d0 (room per running request:
    // 9,700 / 15 against 40,000 / 60), and the next goes to d0.
    let mut to = Vec::new();
    for i in 0..6 {
        let mut r = request(&format!("h{i}"), &[2; 40]);
        r.max_tokens = 20_000;
        let decision = s.schedule(&r, 0.1).unwrap().decision;
        to.push(decision.decode.expect("a decode instance").instance_id);
    }
    assert_eq!(to, ["d1", "d1", "d1", "d1", "d0", "d1"]);
    // A status of d1 taken since shows them (here: as gone): it is the freest again.
    let status = EngineStatus {
        role: InferStage::Decode,
        used_kv_tokens: 10_000,
        num_running: 10,
        ..idle()
    };
    s.on_status("d1", status, 5.0);
    s.on_status(
        "d0",
        EngineStatus {
            role: InferStage::Decode,
            used_kv_tokens: 60_000,
            num_running: 60,
            ..idle()
        },
        5.0,
    );
    s.on_status(
        "p0",
        EngineStatus {
            role: InferStage::Prefill,
            ..idle()
        },
        5.0,
    );
    let decision = s.schedule(&request("h4", &[3; 40]), 5.0).unwrap().decision;
    assert_eq!(decision.decode.unwrap().instance_id, "d1");

    // No decode instance has room for the request: it stays on its prefill instance.
    let mut big = request("big", &[1; 40]);
    big.max_tokens = 95_000;
    assert_eq!(s.schedule(&big, 0.0).unwrap().decision.decode, None);

    // A model with no decode instances is placed as before, with no hand-off.
    let mut colocated = cluster(Policy::Predictive, 2);
    let decision = colocated
        .schedule(&request("c", &[1; 40]), 0.0)
        .unwrap()
        .decision;
    assert_eq!(decision.decode, None);
}

#[test]
fn adaptive_pd_hands_long_prompts_from_prefill_leaning_instances_and_runs_short_ones_whole() {
    use switchyard_scheduler::adaptive_pd::AdaptivePd;
    let adaptive = AdaptivePd {
        long_prompt: 16_384,
        window: 20.0,
    };
    let mut s = cluster_with(
        SchedulerConfig {
            adaptive_pd: Some(adaptive),
            ..Default::default()
        },
        4,
    );
    let long = |id: &str| ScheduleRequest {
        request_id: id.into(),
        model: "m".into(),
        prompt_tokens: 24_000,
        max_tokens: 100,
        ..Default::default()
    };
    let short = request("short", &(0..300).collect::<Vec<u32>>());
    // Colocated until long prompts come: a short prompt is placed whole, and every instance
    // plays its own role.
    let first = s.schedule(&short, 0.0).unwrap().decision;
    assert_eq!(first.decode, None);
    assert!(s
        .instances_view(0.0)
        .iter()
        .all(|v| v.role == InferStage::Neutral));
    // A steady stream of long prompts: some instances lean prefill, and long prompts are computed
    // there and handed to another.
    let mut prefill = std::collections::HashSet::new();
    for i in 0..40 {
        let placed = s
            .schedule(&long(&format!("long-{i}")), i as f64 * 0.1)
            .unwrap();
        let decode = placed
            .decision
            .decode
            .expect("a long prompt is handed over");
        assert_ne!(decode.instance_id, placed.decision.instance_id);
        prefill.insert(placed.decision.instance_id);
    }
    assert!(
        (1..4).contains(&prefill.len()),
        "some, never all, lean prefill: {prefill:?}"
    );
    // The instance list (and the metrics' infer_type) says which role each plays now.
    for view in s.instances_view(4.0) {
        let leans = prefill.contains(&view.meta.id);
        let role = if leans {
            InferStage::Prefill
        } else {
            InferStage::Decode
        };
        assert_eq!((view.role, view.meta.role), (role, InferStage::Neutral));
    }
    // Short prompts now run whole on the instances that lean decode.
    for i in 0..8 {
        let placed = s
            .schedule(&request(&format!("short-{i}"), &[i; 300]), 4.0)
            .unwrap()
            .decision;
        assert_eq!(placed.decode, None);
        assert!(!prefill.contains(&placed.instance_id), "{placed:?}");
    }
}

/// A 24,000-token prompt that shares nothing, generating `max_tokens`.
fn long_prompt(id: &str, max_tokens: u32) -> ScheduleRequest {
    ScheduleRequest {
        request_id: id.into(),
        model: "m".into(),
        prompt_tokens: 24_000,
        max_tokens,
        ..Default::default()
    }
}

/// Four instances under adaptive PD (`config`, prompts of 16,384 tokens disaggregated) after a
/// stream of long prompts (generating `max_tokens`) made some, never all, lean prefill; with
/// the instances that do.
fn leaning_cluster(
    config: SchedulerConfig,
    max_tokens: u32,
) -> (Scheduler, std::collections::BTreeSet<String>) {
    use switchyard_protocol::schedule::Observed;
    use switchyard_scheduler::adaptive_pd::AdaptivePd;
    let tpot_objective = config.slos.tpot.is_some();
    let mut s = cluster_with(
        SchedulerConfig {
            adaptive_pd: Some(AdaptivePd {
                long_prompt: 16_384,
                window: 20.0,
            }),
            ..config
        },
        4,
    );
    // Under a TPOT objective long prompts lean instances prefill only once answers miss it
    // colocated: 50 short prompts with long answers finish over it first.
    if tpot_objective {
        for i in 0..50u32 {
            let id = format!("missed{i}");
            let prompt: Vec<u32> = (0..100).map(|t| 500_000 + i * 1000 + t).collect();
            s.schedule(&request(&id, &prompt), 0.0).unwrap();
            let observed = Observed {
                ttft_ms: Some(50.0),
                tpot_ms: Some(1000.0),
                hand_off: None,
                output_tokens: Some(200),
            };
            s.finish(&id, &observed);
        }
    }
    let mut prefill = std::collections::BTreeSet::new();
    for i in 0..40 {
        let id = format!("l{i}");
        let placed = s
            .schedule(&long_prompt(&id, max_tokens), i as f64 * 0.1)
            .unwrap();
        if placed.decision.decode.is_some() {
            prefill.insert(placed.decision.instance_id.clone());
        }
        s.release(&id);
    }
    assert!((1..4).contains(&prefill.len()), "{prefill:?}");
    (s, prefill)
}

#[test]
fn adaptive_pd_computes_a_long_prompt_whole_while_every_prefill_leaning_instance_leans_back() {
    let (mut s, prefill) = leaning_cluster(SchedulerConfig::default(), 100);
    // The long prompts stop. The instances leaning prefill lean back one by one, each once its
    // prompts are computed, but the last one still has prompts queued when it starts leaning
    // back: then no instance takes a new prompt on the prefill side.
    let last = prefill.iter().next().unwrap().clone();
    let mut whole = 0;
    for i in 0..10 {
        let now = 1000.0 + i as f64 * 30.0;
        for id in ["i0", "i1", "i2", "i3"] {
            let queued = if id == last { 4096 } else { 0 };
            let status = EngineStatus {
                waiting_prefill_tokens: queued,
                ..idle()
            };
            s.on_status(id, status, now);
        }
        let placed = s
            .schedule(&long_prompt(&format!("late{i}"), 100), now)
            .expect("a long prompt is placed whatever the leanings");
        s.release(&format!("late{i}"));
        let last_leans_prefill = s
            .instances_view(now)
            .iter()
            .any(|v| v.meta.id == last && v.role == InferStage::Prefill);
        if last_leans_prefill && placed.decision.decode.is_none() {
            // Computed whole on an instance that leans decode, not queued behind `last`'s.
            assert_ne!(placed.decision.instance_id, last);
            whole += 1;
        }
    }
    assert!(
        whole > 0,
        "the last prefill-leaning instance never leaned back alone"
    );
}

#[test]
fn adaptive_pd_hands_over_a_prompt_cached_only_on_the_prefill_side_rather_than_computing_it_on_the_decode_side(
) {
    let (mut s, prefill) = leaning_cluster(SchedulerConfig::default(), 100);
    // A conversation whose 20,000-token history only a prefill-leaning instance holds (its
    // last hand-off found no room) sends its next turn: 200 tokens left to compute there,
    // all 20,200 on any decode-leaning instance.
    let holder = prefill.iter().next().unwrap().clone();
    let history: Vec<u32> = (0..20_000).collect();
    store_prompt(&mut s, &holder, &history, Events::Switchyard);
    let turn: Vec<u32> = (0..20_200).collect();
    let placed = s.schedule(&request("turn", &turn), 4.0).unwrap().decision;
    assert_eq!(placed.instance_id, holder, "{placed:?}");
    let decode = placed.decode.expect("handed to a decode-leaning instance");
    assert!(!prefill.contains(&decode.instance_id), "{decode:?}");
}

#[test]
fn adaptive_pd_computes_a_long_prompt_whole_where_the_prefill_side_would_miss_its_slos_and_no_decode_suffers(
) {
    let slos = Slos {
        ttft: Some(5.0),
        tpot: Some(0.05),
    };
    let (mut s, prefill) = leaning_cluster(predictive(slos), 200);
    let long = |id: &str| long_prompt(id, 200);
    let decoding: Vec<String> = (0..4)
        .map(|i| format!("i{i}"))
        .filter(|id| !prefill.contains(id))
        .collect();
    // Every prefill-leaning instance has a minute of prompts queued: the next long prompt's
    // first token would come far past its 5 s there.
    let backlog = EngineStatus {
        num_waiting: 20,
        waiting_prefill_tokens: 480_000,
        total_kv_tokens: 10_000_000,
        ..idle()
    };
    for id in &prefill {
        s.on_status(id, backlog.clone(), 4.0);
    }
    // The decode-leaning instances decode a few short requests: the long prompt is computed
    // whole on one of them, with no hand-off.
    let light = EngineStatus {
        num_running: 2,
        num_decoding: 2,
        decode_tokens: 2_000,
        total_kv_tokens: 10_000_000,
        ..idle()
    };
    for id in &decoding {
        s.on_status(id, light.clone(), 4.0);
    }
    let placed = s.schedule(&long("whole"), 4.0).unwrap().decision;
    assert_eq!(placed.decode, None, "{placed:?}");
    assert!(decoding.contains(&placed.instance_id), "{placed:?}");
    s.release("whole");
    // With many decodes there, whose tokens the prompt's prefill would push past 50 ms, it is
    // handed over as before.
    let crowded = EngineStatus {
        num_running: 200,
        num_decoding: 200,
        decode_tokens: 2_300_000,
        total_kv_tokens: 10_000_000,
        ..idle()
    };
    for id in &decoding {
        s.on_status(id, crowded.clone(), 4.1);
    }
    for id in &prefill {
        s.on_status(id, backlog.clone(), 4.1);
    }
    let placed = s.schedule(&long("handed"), 4.1).unwrap().decision;
    assert!(prefill.contains(&placed.instance_id), "{placed:?}");
    assert!(placed.decode.is_some(), "{placed:?}");
}

#[test]
fn adaptive_pd_hands_every_prompt_over_where_short_answers_miss_the_tpot_objective_or_most_answers_are_short(
) {
    use switchyard_protocol::schedule::Observed;
    use switchyard_scheduler::adaptive_pd::AdaptivePd;
    let slos = Slos {
        ttft: Some(2.0),
        tpot: Some(0.025),
    };
    let config = |slos| SchedulerConfig {
        adaptive_pd: Some(AdaptivePd::default()),
        ..predictive(slos)
    };
    // 600-token prompts sharing nothing, asking for `answer` tokens, 20 a second; each finishes
    // with the TPOT `tpot_ms` (one prefill chunk between its tokens of a short answer: 40 ms).
    let run = |s: &mut Scheduler, tpot_ms: f64, answer: u32| {
        for i in 0..100u32 {
            let id = format!("r{i}");
            let prompt: Vec<u32> = (0..600).map(|t| i * 1000 + t).collect();
            let mut req = request(&id, &prompt);
            req.max_tokens = answer;
            let placed = s.schedule(&req, f64::from(i) * 0.05).unwrap().decision;
            if i <= 50 {
                assert_eq!(placed.decode, None, "colocated until 50 have finished");
            }
            let observed = Observed {
                ttft_ms: Some(50.0),
                tpot_ms: Some(tpot_ms),
                hand_off: None,
                output_tokens: Some(answer),
            };
            s.finish(&id, &observed);
        }
    };
    let next = |s: &mut Scheduler| {
        let prompt: Vec<u32> = (0..600).map(|t| 900_000 + t).collect();
        let mut req = request("next", &prompt);
        req.max_tokens = 5;
        s.schedule(&req, 5.0).unwrap().decision
    };
    // The short answers missed: the next prompt is computed on a prefill-leaning instance and
    // handed over.
    let mut missed = cluster_with(config(slos), 4);
    run(&mut missed, 40.0, 5);
    let placed = next(&mut missed);
    let decode = placed.decode.expect("handed over");
    assert_ne!(decode.instance_id, placed.instance_id);
    // Longer answers met it: colocated still.
    let mut met = cluster_with(config(slos), 4);
    run(&mut met, 10.0, 100);
    assert_eq!(next(&mut met).decode, None);
    // Short answers that met it are handed over too: they would miss together at the first
    // burst of prompts.
    let mut short = cluster_with(config(slos), 4);
    run(&mut short, 10.0, 5);
    assert!(next(&mut short).decode.is_some());
    // Without a TPOT objective there is nothing to miss.
    let mut no_tpot = cluster_with(
        config(Slos {
            ttft: Some(2.0),
            tpot: None,
        }),
        4,
    );
    run(&mut no_tpot, 40.0, 5);
    assert_eq!(next(&mut no_tpot).decode, None);
}

#[test]
fn a_loose_max_tokens_is_read_as_the_answer_length_its_model_s_answers_have() {
    let mut s = cluster(Policy::Predictive, 2);
    let ask = |id: &str, max_tokens: u32| ScheduleRequest {
        max_tokens,
        ..request(id, &[1, 2, 3])
    };
    let done = |output: u32| switchyard_protocol::schedule::Observed {
        output_tokens: Some(output),
        ..Default::default()
    };
    assert_eq!(
        s.schedule(&ask("first", 4096), 0.0).unwrap().answer_tokens,
        4096.0,
        "nothing learned: the cap"
    );
    s.finish("first", &done(60));
    for i in 0..40 {
        let id = format!("r{i}");
        s.schedule(&ask(&id, 4096), 0.0).unwrap();
        s.finish(&id, &done(if i % 2 == 0 { 40 } else { 60 }));
    }
    let loose = s.schedule(&ask("loose", 4096), 0.0).unwrap();
    assert!(
        (loose.answer_tokens - 50.0).abs() < 1.0,
        "{}",
        loose.answer_tokens
    );
    let unsent = s.schedule(&ask("unsent", 0), 0.0).unwrap();
    assert!(
        (unsent.answer_tokens - 50.0).abs() < 1.0,
        "no max_tokens: the mean"
    );
    // Answers that run to their max_tokens (benchmark clients) keep it as their length.
    for i in 0..40 {
        let id = format!("exact{i}");
        s.schedule(&ask(&id, 20 + i), 0.0).unwrap();
        s.finish(&id, &done(20 + i));
    }
    assert_eq!(
        s.schedule(&ask("exact", 37), 0.0).unwrap().answer_tokens,
        37.0
    );
}

#[test]
fn with_a_tpot_objective_the_rescheduler_evens_out_how_fast_instances_decode() {
    use switchyard_protocol::engine_state::StepSample;
    use switchyard_scheduler::rescheduler::{MoveReason, ReschedulerConfig};
    // Steps of 10 ms plus 1 ms a decoding sequence.
    let prior: Vec<StepSample> = [(0u32, 1u32), (0, 8), (0, 32), (0, 64), (512, 0), (2048, 16)]
        .iter()
        .map(|&(prefill, decode)| StepSample {
            prefill_tokens: prefill,
            decode_batch: decode,
            context_tokens: 0,
            prefill_attention: 0,
            step_seconds: 0.01 + 0.001 * f64::from(decode) + 1e-5 * f64::from(prefill),
        })
        .collect();
    let decoding = |n: u32| EngineStatus {
        num_running: n,
        num_decoding: n,
        used_kv_tokens: u64::from(n) * 1_000,
        step_prior: prior.clone(),
        ..idle()
    };
    let moves = |slos: Slos| {
        let mut s = cluster_with(predictive(slos), 2);
        s.on_status("i0", decoding(60), 0.0);
        s.on_status("i1", decoding(5), 0.0);
        s.plan_moves(&Default::default(), &ReschedulerConfig::default(), 0.0)
            .into_iter()
            .map(|m| (m.from, m.to, m.reason))
            .collect::<Vec<_>>()
    };
    let tpot = Slos {
        ttft: None,
        tpot: Some(0.05),
    };
    assert_eq!(
        moves(tpot),
        vec![("i0".into(), "i1".into(), MoveReason::DecodeSpeed)],
        "70 ms a token against 15"
    );
    assert!(
        moves(Slos::default()).is_empty(),
        "without a TPOT objective only KV and backlogs count"
    );
}
