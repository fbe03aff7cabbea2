//! The engine core under a virtual clock with the sim backend: step budgets, preemption,
//! aborts, fairness and prefix reuse.

use std::collections::HashMap;
use switchyard_engine::backend::sim::{
    GpuProfile, ModelShape, SimBackend, SimVocabulary, StepTimeModel,
};
use switchyard_engine::backend::Backend;
use switchyard_engine::core::{CoreConfig, EngineCore, NewSeq, SeqEvent, StepReport};
use switchyard_engine::sampling::{SamplingParams, StopParams};
use switchyard_engine::tokenizer::builtin_tokenizer;
use switchyard_protocol::openai::FinishReason;

fn config(num_blocks: usize, budget: usize) -> CoreConfig {
    CoreConfig {
        block_size: 4,
        num_blocks,
        host_blocks: 0,
        prefix_caching: true,
        max_num_batched_tokens: budget,
        max_num_seqs: 64,
        max_waiting_requests: 1000,
        max_model_len: 4 * num_blocks,
        trace: true,
    }
}

fn backend() -> SimBackend {
    let tok = builtin_tokenizer();
    SimBackend::new(
        StepTimeModel::new(
            GpuProfile::by_name("h100").unwrap(),
            ModelShape::preset("qwen3-0.6b").unwrap(),
        ),
        SimVocabulary::from_tokenizer(&tok, switchyard_engine::tokenizer::BUILTIN_CORPUS),
        4,
    )
}

fn seq(id: &str, prompt: Vec<u32>, max_tokens: u32) -> NewSeq {
    NewSeq {
        request_id: id.into(),
        prompt,
        sampling: SamplingParams::greedy(),
        stop: StopParams {
            max_tokens,
            ignore_eos: true,
            ..Default::default()
        },
        priority: 0,
    }
}

/// Steps until idle; returns each sequence's tokens and every step report.
fn run(
    core: &mut EngineCore,
    backend: &mut SimBackend,
    max_steps: usize,
) -> (HashMap<u64, Vec<u32>>, Vec<StepReport>) {
    let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut reports = Vec::new();
    let mut now = 0.0;
    for _ in 0..max_steps {
        let Some(plan) = core.plan(now) else { break };
        let output = backend.execute(&plan.batch);
        now += output.modeled_seconds.unwrap();
        let report = core.complete(plan, output, now);
        for e in &report.events {
            if let SeqEvent::Token(id, s) = e {
                tokens.entry(*id).or_default().push(s.token);
            }
        }
        reports.push(report);
        if !core.has_work() {
            break;
        }
    }
    (tokens, reports)
}

#[test]
fn budget_per_step_is_respected_and_prefills_are_chunked() {
    let mut core = EngineCore::new(config(1000, 10));
    let mut b = backend();
    for i in 0..5 {
        core.add(
            seq(&format!("r{i}"), (0..23).map(|t| t + i * 100).collect(), 3),
            0.0,
        )
        .unwrap();
    }
    let mut now = 0.0;
    let mut steps = 0;
    while let Some(plan) = core.plan(now) {
        assert!(
            plan.batch.num_tokens() <= 10,
            "step of {} tokens",
            plan.batch.num_tokens()
        );
        let out = b.execute(&plan.batch);
        now += 0.01;
        core.complete(plan, out, now);
        steps += 1;
        assert!(steps < 1000);
    }
    assert!(!core.has_work());
    // 5 prompts of 23 tokens and 2 further decodes each: at least 125 tokens at 10 per step.
    assert!(steps >= 13, "{steps} steps");
}

#[test]
fn preempted_sequences_finish_with_the_same_tokens() {
    let prompts: Vec<Vec<u32>> = (0..6)
        .map(|i| (0..10).map(|t| 7 * t + i).collect())
        .collect();
    let reference: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let mut core = EngineCore::new(config(1000, 64));
            let id = core.add(seq("solo", p.clone(), 30), 0.0).unwrap();
            run(&mut core, &mut backend(), 1000).0.remove(&id).unwrap()
        })
        .collect();
    // 6 sequences of up to 40 tokens need 60 blocks of 4; 24 blocks force preemptions.
    let mut core = EngineCore::new(config(24, 64));
    let ids: Vec<u64> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| core.add(seq(&format!("r{i}"), p.clone(), 30), 0.0).unwrap())
        .collect();
    let (tokens, reports) = run(&mut core, &mut backend(), 10_000);
    let preemptions: usize = reports.iter().map(|r| r.stats.preemptions).sum();
    assert!(preemptions > 0, "the test must preempt");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(tokens[id], reference[i], "sequence {i}");
    }
    assert_eq!(core.pool().num_free(), 24, "every block is back");
    let preempted_events = core
        .take_trace()
        .iter()
        .filter(|e| e.kind.name() == "PREEMPTED")
        .count();
    assert_eq!(preempted_events, preemptions);
}

#[test]
fn abort_frees_every_block_at_once() {
    let mut core = EngineCore::new(config(100, 64));
    let mut b = backend();
    let id = core.add(seq("a", (0..30).collect(), 50), 0.0).unwrap();
    let plan = core.plan(0.0).unwrap();
    let out = b.execute(&plan.batch);
    core.complete(plan, out, 0.01);
    assert!(core.pool().num_free() < 100);
    let finished = core.abort(id, FinishReason::Abort, 0.02).unwrap();
    assert_eq!(finished.reason, FinishReason::Abort);
    assert_eq!(core.pool().num_free(), 100);
    assert!(!core.has_work());
    assert!(
        core.abort(id, FinishReason::Abort, 0.03).is_none(),
        "abort is idempotent"
    );
}

#[test]
fn an_abort_during_a_step_is_skipped_when_the_step_completes() {
    let mut core = EngineCore::new(config(100, 64));
    let mut b = backend();
    let id = core.add(seq("a", (0..30).collect(), 50), 0.0).unwrap();
    let plan = core.plan(0.0).unwrap();
    let out = b.execute(&plan.batch);
    core.abort(id, FinishReason::Abort, 0.005);
    let report = core.complete(plan, out, 0.01);
    assert!(report.events.is_empty());
    assert_eq!(core.pool().num_free(), 100);
}

#[test]
fn no_starvation_under_a_steady_stream_of_arrivals() {
    let mut core = EngineCore::new(config(40, 32));
    let mut b = backend();
    let first = core.add(seq("first", (0..20).collect(), 40), 0.0).unwrap();
    let mut now = 0.0;
    let mut finished_first_at = None;
    for step in 0..2000 {
        if step % 2 == 0 {
            let _ = core.add(
                seq(
                    &format!("n{step}"),
                    (0..20).map(|t| t + step as u32).collect(),
                    40,
                ),
                now,
            );
        }
        let Some(plan) = core.plan(now) else { break };
        let out = b.execute(&plan.batch);
        now += 0.01;
        let report = core.complete(plan, out, now);
        if report
            .events
            .iter()
            .any(|e| matches!(e, SeqEvent::Finished(f) if f.seq == first))
        {
            finished_first_at = Some(step);
            break;
        }
    }
    let step = finished_first_at.expect("the first request finishes");
    assert!(step < 200, "first request took {step} steps");
}

#[test]
fn a_repeated_prompt_hits_the_prefix_cache() {
    let mut core = EngineCore::new(config(100, 256));
    let mut b = backend();
    let prompt: Vec<u32> = (0..37).collect();
    core.add(seq("a", prompt.clone(), 2), 0.0).unwrap();
    run(&mut core, &mut b, 100);
    core.add(seq("b", prompt.clone(), 2), 1.0).unwrap();
    let (_, reports) = run(&mut core, &mut b, 100);
    let hits: usize = reports.iter().map(|r| r.stats.prefix_hits).sum();
    let queries: usize = reports.iter().map(|r| r.stats.prefix_queries).sum();
    assert_eq!(queries, 37);
    assert_eq!(hits, 36, "all 9 full blocks of the prompt");
    let kv_stored = core.take_kv_events().len();
    assert!(kv_stored >= 9);
}

#[test]
fn a_waiting_request_reports_the_cached_part_of_its_prompt() {
    let mut core = EngineCore::new(config(100, 256));
    let mut b = backend();
    let prompt: Vec<u32> = (0..37).collect();
    core.add(seq("a", prompt.clone(), 2), 0.0).unwrap();
    run(&mut core, &mut b, 100);
    // The same prompt and one that shares nothing wait together.
    core.add(seq("b", prompt, 2), 1.0).unwrap();
    core.add(seq("c", (100..137).collect(), 2), 1.0).unwrap();
    let status = core.status(1.0, Vec::new());
    assert_eq!(status.num_waiting, 2);
    assert_eq!(status.waiting_prefill_tokens, 74);
    assert_eq!(
        status.waiting_cached_tokens, 36,
        "the 9 full blocks of the repeated prompt (the last token is always computed)"
    );
    assert_eq!(status.prefill_tokens_to_compute(), 38);
}

#[test]
fn a_burst_sharing_a_prefix_computes_it_once() {
    // Three prompts of 37 tokens share their first 32 and arrive together; the budget would
    // admit all three in one step.
    let mut core = EngineCore::new(config(100, 256));
    let mut b = backend();
    let prompt = |tail: u32| -> Vec<u32> { (0..32).chain(tail..tail + 5).collect() };
    for (i, tail) in [100, 200, 300].into_iter().enumerate() {
        core.add(seq(&format!("r{i}"), prompt(tail), 2), 0.0)
            .unwrap();
    }
    let (tokens, reports) = run(&mut core, &mut b, 100);
    assert!(tokens.values().all(|t| t.len() == 2));
    let hits: usize = reports.iter().map(|r| r.stats.prefix_hits).sum();
    assert_eq!(
        hits, 64,
        "the later two hit the shared blocks instead of computing them"
    );
}

#[test]
fn without_a_prefix_cache_a_burst_sharing_a_prefix_is_admitted_at_once() {
    let mut cfg = config(100, 256);
    cfg.prefix_caching = false;
    let mut core = EngineCore::new(cfg);
    let prompt = |tail: u32| -> Vec<u32> { (0..32).chain(tail..tail + 5).collect() };
    for (i, tail) in [100, 200, 300].into_iter().enumerate() {
        core.add(seq(&format!("r{i}"), prompt(tail), 2), 0.0)
            .unwrap();
    }
    let plan = core.plan(0.0).unwrap();
    assert_eq!(
        plan.batch.num_tokens(),
        111,
        "all three prompts in the first step"
    );
}

#[test]
fn queue_limit_refuses_without_changing_state() {
    let mut cfg = config(100, 64);
    cfg.max_waiting_requests = 2;
    let mut core = EngineCore::new(cfg);
    core.add(seq("a", vec![1, 2, 3], 2), 0.0).unwrap();
    core.add(seq("b", vec![1, 2, 3], 2), 0.0).unwrap();
    assert!(core.add(seq("c", vec![1, 2, 3], 2), 0.0).is_err());
    assert_eq!(core.batcher().num_waiting(), 2);
}

#[test]
fn status_reports_queue_and_kv_state() {
    let mut core = EngineCore::new(config(100, 8));
    let mut b = backend();
    core.add(seq("a", (0..20).collect(), 5), 0.0).unwrap();
    core.add(seq("b", (100..120).collect(), 5), 0.0).unwrap();
    let plan = core.plan(0.0).unwrap();
    let out = b.execute(&plan.batch);
    core.complete(plan, out, 0.01);
    let status = core.status(0.01, Vec::new());
    assert_eq!(status.num_running, 1);
    assert_eq!(status.num_waiting, 1);
    assert_eq!(status.running_prefill_tokens, 12);
    // Blocks are taken chunk by chunk: the 8 computed tokens hold two blocks of four.
    assert_eq!(status.running_prefill_unallocated_tokens, 12);
    assert_eq!(status.waiting_prefill_tokens, 20);
    assert_eq!(
        status.admitted,
        vec!["a".to_string(), "b".to_string()],
        "accepted ids"
    );
    assert_eq!(status.used_kv_tokens, 8);
    assert_eq!(status.total_kv_tokens, 400);
    assert!(
        core.status(0.02, Vec::new()).admitted.is_empty(),
        "admitted ids are reported once"
    );
}

#[test]
fn status_reports_each_decoding_requests_pace_once_it_has_ten_gaps() {
    let mut core = EngineCore::new(config(100, 64));
    let mut b = backend();
    core.add(seq("a", (0..20).collect(), 100), 0.0).unwrap();
    // Steps 20 ms apart: the prompt, then a token a step.
    let mut now = 0.0;
    let mut step = |core: &mut EngineCore, now: &mut f64| {
        let plan = core.plan(*now).unwrap();
        let out = b.execute(&plan.batch);
        *now += 0.02;
        core.complete(plan, out, *now);
    };
    for _ in 0..10 {
        step(&mut core, &mut now);
    }
    // 10 tokens, 9 gaps: not counted yet.
    assert!(core.status(now, Vec::new()).decoding_tpot.is_empty());
    step(&mut core, &mut now);
    let tpots = core.status(now, Vec::new()).decoding_tpot;
    assert_eq!(tpots.total(), 1.0);
    // 20 ms a token: over an objective of 15 ms, not over one of 25.
    assert_eq!(tpots.over(0.015), 1.0);
    assert_eq!(tpots.over(0.025), 0.0);
}

#[test]
fn stop_token_ids_end_a_sequence_but_not_before_min_tokens() {
    let prompt: Vec<u32> = (0..12).collect();
    let mut free = EngineCore::new(config(100, 64));
    let id = free.add(seq("free", prompt.clone(), 20), 0.0).unwrap();
    let reference = run(&mut free, &mut backend(), 100).0.remove(&id).unwrap();
    let stop_token = reference[2];
    let first_stop = reference.iter().position(|&t| t == stop_token).unwrap();

    let mut stopped = EngineCore::new(config(100, 64));
    let mut s = seq("stop", prompt.clone(), 20);
    s.stop.stop_token_ids = vec![stop_token];
    let id = stopped.add(s, 0.0).unwrap();
    let (tokens, reports) = run(&mut stopped, &mut backend(), 100);
    assert_eq!(tokens[&id], reference[..=first_stop]);
    let finished = reports
        .iter()
        .flat_map(|r| &r.events)
        .find_map(|e| match e {
            SeqEvent::Finished(f) => Some(f.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (finished.reason, finished.stop_token),
        (FinishReason::Stop, Some(stop_token))
    );

    let mut held = EngineCore::new(config(100, 64));
    let mut s = seq("min", prompt, 20);
    s.stop.stop_token_ids = vec![stop_token];
    s.stop.min_tokens = 10;
    let id = held.add(s, 0.0).unwrap();
    let tokens = run(&mut held, &mut backend(), 100).0.remove(&id).unwrap();
    assert!(
        tokens.len() >= 10,
        "min_tokens holds the stop back: {} tokens",
        tokens.len()
    );
    let later_stop = reference
        .iter()
        .skip(9)
        .position(|&t| t == stop_token)
        .map(|p| p + 10);
    assert_eq!(tokens.len(), later_stop.unwrap_or(20));
}
