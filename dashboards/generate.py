#!/usr/bin/env python3
"""Writes switchyard's Grafana dashboards (the *.json files beside this script).

Run it after changing a metric: `python3 dashboards/generate.py` (`--check` only compares). The JSON it writes is what
users import (Grafana: Dashboards > New > Import, pick the Prometheus data source for
DS_PROMETHEUS); the `dashboards` test checks that the files cover every metric a running
`switchyard serve` exports and name nothing else, and that their structure is valid.

Conventions: every query filters on the template variables (namespace, job, instance, and model
where the metric has one); latency panels show P99/P95/P90/P50 from histogram_quantile over
rate(..._bucket[$__rate_interval]) and the average as rate(_sum) / rate(_count); token
distributions are heatmaps; metrics with an `infer_type` label get neutral, prefill and decode
sections.
"""

import json
import os
import sys

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
INFER_TYPES = ["neutral", "prefill", "decode"]
QUANTILES = [("0.99", "P99"), ("0.95", "P95"), ("0.90", "P90"), ("0.50", "P50")]


class Dashboard:
    """Panels laid out on Grafana's 24-column grid, rows by concern."""

    def __init__(self, uid, title, description, anchor, variables, base_filter):
        self.uid = uid
        self.title = title
        self.description = description
        self.anchor = anchor
        self.variables = variables
        self.base_filter = base_filter
        self.panels = []
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_height = 0

    def selector(self, extra=""):
        parts = [self.base_filter] + ([extra] if extra else [])
        return "{" + ", ".join(parts) + "}"

    def row(self, title):
        if self.x:
            self.y += self.row_height
        self.x, self.row_height = 0, 0
        self.panels.append({"id": self.take_id(), "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}, "panels": []})
        self.y += 1

    def take_id(self):
        self.next_id += 1
        return self.next_id - 1

    def place(self, panel, width, height=8):
        if self.x + width > 24:
            self.y += self.row_height
            self.x, self.row_height = 0, 0
        panel["id"] = self.take_id()
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": width, "h": height}
        panel["datasource"] = DATASOURCE
        self.x += width
        self.row_height = max(self.row_height, height)
        self.panels.append(panel)

    def timeseries(self, title, targets, unit, description="", width=8, stack=False):
        """targets: (expr, legend) pairs."""
        self.place({
            "type": "timeseries",
            "title": title,
            "description": description,
            "fieldConfig": {"defaults": {"unit": unit, "custom": {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                "stacking": {"mode": "normal" if stack else "none", "group": "A"}}},
                "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["mean", "max", "lastNotNull"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [self.target(i, expr, legend) for i, (expr, legend) in enumerate(targets)],
        }, width)

    def target(self, index, expr, legend, fmt="time_series"):
        return {"refId": chr(ord("A") + index), "datasource": DATASOURCE, "expr": expr,
                "legendFormat": legend, "format": fmt, "range": True}

    def latency(self, title, metric, unit, extra="", by="", description="", width=8):
        """Quantiles and the average of histogram `metric`."""
        sel = self.selector(extra)
        group = f"le{', ' + by if by else ''}"
        suffix = f" {{{{{by}}}}}" if by else ""
        targets = [(f"histogram_quantile({q}, sum by ({group}) "
                    f"(rate({metric}_bucket{sel}[$__rate_interval])))", name + suffix)
                   for q, name in QUANTILES]
        avg_by = f" by ({by})" if by else ""
        targets.append((f"sum{avg_by} (rate({metric}_sum{sel}[$__rate_interval])) / "
                        f"sum{avg_by} (rate({metric}_count{sel}[$__rate_interval]))", "average" + suffix))
        self.timeseries(title, targets, unit, description or f"`{metric}`", width)

    def rate(self, title, metric, by, unit="reqps", extra="", description="", width=8):
        sel = self.selector(extra)
        legend = " ".join(f"{{{{{b}}}}}" for b in by.split(", ")) if by else metric
        group = f" by ({by})" if by else ""
        self.timeseries(title, [(f"sum{group} (rate({metric}{sel}[$__rate_interval]))", legend)],
                        unit, description or f"`{metric}`, per second", width)

    def gauge(self, title, metric, by, unit="short", extra="", aggregate="sum", description="",
              width=8):
        sel = self.selector(extra)
        legend = " ".join(f"{{{{{b}}}}}" for b in by.split(", ")) if by else metric
        group = f" by ({by})" if by else ""
        self.timeseries(title, [(f"{aggregate}{group} ({metric}{sel})", legend)], unit,
                        description or f"`{metric}`", width)

    def heatmap(self, title, metric, unit="short", extra="", description="", width=8):
        sel = self.selector(extra)
        self.place({
            "type": "heatmap",
            "title": title,
            "description": description or f"`{metric}`: how many requests fell in each bucket",
            "options": {"calculate": False, "yAxis": {"unit": unit},
                        "cellGap": 1, "color": {"mode": "scheme", "scheme": "Oranges"},
                        "tooltip": {"mode": "single", "yHistogram": True}},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [self.target(0, f"sum by (le) (increase({metric}_bucket{sel}"
                                       f"[$__rate_interval]))", "{{le}}", "heatmap")],
        }, width)

    def json(self):
        variables = []
        for name, label, query in self.variables:
            variables.append({
                "name": name, "label": label, "type": "query", "datasource": DATASOURCE,
                "query": {"query": query, "refId": f"var-{name}"}, "definition": query,
                "refresh": 2, "includeAll": True, "allValue": ".*", "multi": True,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "sort": 1, "hide": 0,
            })
        return {
            "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus",
                          "description": "The Prometheus that scrapes switchyard",
                          "type": "datasource", "pluginId": "prometheus",
                          "pluginName": "Prometheus"}],
            "__requires": [
                {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
                {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
                {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
                {"type": "panel", "id": "heatmap", "name": "Heatmap", "version": ""},
            ],
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["switchyard"],
            "editable": True,
            "graphTooltip": 1,
            "schemaVersion": 39,
            "version": 1,
            "time": {"from": "now-1h", "to": "now"},
            "refresh": "30s",
            "timezone": "",
            "links": [{"type": "dashboards", "tags": ["switchyard"], "asDropdown": True,
                       "title": "switchyard", "includeVars": True, "keepTime": True}],
            "annotations": {"list": []},
            "templating": {"list": variables},
            "panels": self.panels,
        }


def scope_variables(anchor, extra=()):
    """namespace, job and instance of the series of `anchor`, then any `extra` label variables."""
    variables = [
        ("namespace", "Namespace", f"label_values({anchor}, namespace)"),
        ("job", "Job", f'label_values({anchor}{{namespace=~"$namespace"}}, job)'),
        ("instance", "Instance",
         f'label_values({anchor}{{namespace=~"$namespace", job=~"$job"}}, instance)'),
    ]
    for name, label, metric_label in extra:
        variables.append((name, label, f'label_values({anchor}{{namespace=~"$namespace", '
                                       f'job=~"$job", instance=~"$instance"}}, {metric_label})'))
    return variables


SCOPE = 'namespace=~"$namespace", job=~"$job", instance=~"$instance"'


def request_dashboard():
    d = Dashboard("switchyard-request", "switchyard / Requests",
                  "What clients see through the gateway: traffic, errors, tokens, latency, stages.",
                  "request_total", scope_variables("request_total", [("model", "Model", "model")]),
                  SCOPE)
    m = 'model=~"$model"'
    d.row("Traffic")
    d.rate("Requests by status", "request_total", "status_code", extra=m,
           description="Finished requests by HTTP status (499: the client went away).")
    d.rate("Retries by cause", "request_retry_total", "status_code", extra=m,
           description="Attempts moved to another instance before the first byte.")
    d.rate("Rejections by reason", "request_rejected_total", "reason",
           description="Requests refused by admission: rate limits, queue full, queue timeout.")
    d.rate("Fallbacks by outcome", "request_fallback_total", "status_code", extra=m)
    d.rate("Fallbacks that succeeded after a 429", "request_fallback_retry_success_total", "model",
           extra=m)
    d.rate("Mid-stream continuations", "request_stream_continuation_total", "outcome", extra=m,
           description="Streams continued on another instance: broken ones resumed (resumed) or "
                       "not (failed), moved ones followed (migrated).")
    d.row("Tokens")
    d.rate("Input tokens", "request_input_tokens_total", "model", unit="short", extra=m)
    d.rate("Output tokens", "request_output_tokens_total", "model", unit="short", extra=m)
    d.heatmap("Input tokens per request", "request_input_tokens", extra=m)
    d.heatmap("Output tokens per request", "request_output_tokens", extra=m)
    d.row("Latency")
    d.latency("End to end", "request_e2e_latency_seconds", "s", m, width=12)
    d.latency("Time to first token", "request_ttft_milliseconds", "ms", m, width=12)
    d.latency("Time per output token", "request_tpot_milliseconds", "ms", m, width=12)
    d.latency("Inter-token latency", "request_itl_milliseconds", "ms", m, width=12)
    d.row("Stages")
    d.latency("Admission queue", "request_queue_duration_milliseconds", "ms", m, width=12)
    d.latency("Preprocessing", "request_preprocess_duration_milliseconds", "ms", m, width=12)
    d.latency("Scheduling", "request_schedule_duration_milliseconds", "ms", m, width=12)
    d.latency("Relay work", "request_postprocess_duration_milliseconds", "ms", m, width=12)
    d.row("Prefix cache")
    d.heatmap("Prompt share cached on the chosen instance", "request_prefix_cache_hit_percent",
              unit="percent")
    d.heatmap("Best prompt share cached on any instance", "request_max_prefix_cache_hit_percent",
              unit="percent")
    d.latency("Cached share of the prompt", "request_prefix_cache_hit_percent", "percent")
    return d


def component_dashboard():
    d = Dashboard("switchyard-component", "switchyard / Components",
                  "The gateway, the scheduler and every process: queues, breakers, placement, "
                  "resources.", "process_start_time_seconds",
                  scope_variables("process_start_time_seconds"), SCOPE)
    d.row("Gateway")
    d.gauge("Queued for admission", "gateway_pending_requests", "instance")
    d.gauge("In flight", "gateway_current_requests", "instance")
    d.gauge("Open circuit breakers", "gateway_circuit_breaker_state", "instance_id",
            aggregate="max", description="1 open, 2 half-open, per engine instance; closed "
                                         "breakers are absent.")
    d.rate("Mirrored requests", "gateway_mirror_requests_total", "result")
    d.rate("Route config reloads", "gateway_route_config_reloads_total", "result", unit="short")
    d.gauge("Uptime", "uptime_seconds", "instance", unit="s", aggregate="max")
    d.row("Scheduler")
    d.rate("Scheduling decisions", "scheduler_scheduling_total", "")
    d.rate("Scheduling failures", "scheduler_scheduling_failed_total", "error_type")
    d.gauge("Tracked requests", "scheduler_tracked_requests", "instance",
            description="Placed and not yet released by their gateway.")
    d.rate("Reclaimed requests", "scheduler_reclaimed_requests_total", "",
           description="Released because their gateway went silent (killed or cut off).")
    d.rate("Session placements", "scheduler_session_placements_total", "outcome",
           description="Requests naming a session (prompt_cache_key, x-session-id): kept on the "
                       "session's instance, moved off it (over its load bound, or gone), or new.")
    d.gauge("Stored responses remembered", "scheduler_stored_responses", "instance",
            aggregate="max",
            description="Stored responses (/v1/responses on vLLM or SGLang) whose instance the "
                        "scheduler remembers, for their follow-ups, retrievals and cancels.")
    d.rate("Stored responses forgotten", "scheduler_stored_responses_forgotten_total", "",
           unit="short", description="Forgotten to stay within --remembered-responses: their "
                                     "follow-ups get a 404. Raise the flag if this is not zero.")
    d.rate("Unreadable /metrics families", "scheduler_scrape_errors_total", "instance, family",
           unit="short",
           description="Families of a scraped engine's page that could not be read and were "
                       "skipped (the rest of the page counts), per scrape.")
    d.rate("KV event resyncs", "scheduler_kv_event_resyncs_total", "instance, reason",
           unit="short",
           description="vLLM/SGLang KV event streams caught up: replayed gaps, lost gaps and "
                       "publisher restarts (exact index entries cleared), new subscriptions.")
    d.latency("Scheduling work", "request_full_mode_schedule_duration_milliseconds", "ms")
    d.latency("Prefix index lookup", "request_query_prefix_cache_hit_duration_milliseconds", "ms",
              description="Looking a request's block hashes up in the prefix index.")
    d.latency("Prefix hits per instance", "request_calc_prefix_cache_hit_duration_milliseconds",
              "ms", description="Turning the lookup into each instance's cached blocks.")
    d.latency("CMS status refresh", "scheduler_cms_refresh_status_duration_milliseconds", "ms",
              description="Taking in one engine status: CMS, LRS reconciliation, predictor.")
    d.latency("CMS metadata refresh", "scheduler_cms_refresh_metadata_duration_milliseconds",
              "ms", description="Adding or updating an instance's description.")
    d.row("Live migration")
    d.rate("Moves", "scheduler_rescheduling_total", "rule",
           description="Running requests the rescheduler (rule room, load_balance, interference, "
                       "decode_speed, priority, adaptive_pd) or a drain decided to move, with their "
                       "KV, to another instance.")
    d.rate("Moves that failed", "scheduler_rescheduling_failed_total", "rule, reason",
           description="The request went on where it was: no_room, unreachable (or stalled), "
                       "refused, finished, preempted.")
    d.rate("KV moved", "scheduler_kv_transfer_bytes_total", "kind", unit="Bps")
    d.latency("Pause of a moved request", "scheduler_migration_downtime_milliseconds", "ms",
              description="From its last step on the source to its hand-over to the destination.")
    d.latency("Whole migration", "scheduler_migration_duration_milliseconds", "ms",
              description="From the reservation on the destination to the hand-over, all copy "
                          "stages.")
    d.latency("Blocks per migration", "scheduler_migration_blocks", "short")
    d.rate("Prefill/decode hand-offs", "scheduler_pd_handoff_total", "outcome",
           description="Requests placed on a prefill instance to be handed to a decode one: done, "
                       "fell_back (finished on the prefill instance), failed.")
    d.row("Prediction accuracy")
    d.latency("Prediction error", "scheduler_prediction_error_ratio", "percentunit", by="kind",
              description="(predicted - actual) / actual of the chosen instance's TTFT and TPOT, "
                          "as the gateway saw them when the request finished: 0 is exact, "
                          "+0.5 predicted half again too slow.", width=12)
    d.heatmap("TPOT prediction error", "scheduler_prediction_error_ratio", "percentunit",
              'kind="tpot"', width=12)
    for infer in INFER_TYPES:
        d.row(f"Chosen instances ({infer})")
        t = f'infer_type="{infer}"'
        d.latency("Projected KV usage", "selected_instance_kv_cache_usage_ratio_projected",
                  "percentunit", t)
        d.latency("Decode batch", "selected_instance_decode_batch_size", "short", t)
        d.latency("Prefill tokens ahead", "selected_instance_all_prefills_tokens_num", "short", t)
        d.latency("Decode tokens", "selected_instance_all_decodes_tokens_num", "short", t)
        d.latency("Predicted TTFT", "selected_instance_predicted_ttft", "ms", t)
        d.latency("Predicted TPOT", "selected_instance_predicted_tpot", "ms", t)
    d.row("Processes")
    d.gauge("Resident memory", "process_resident_memory_bytes", "job, instance", unit="bytes")
    d.gauge("Virtual memory", "process_virtual_memory_bytes", "job, instance", unit="bytes")
    d.rate("CPU (cores)", "process_cpu_seconds_total", "job, instance", unit="short")
    d.gauge("Open file descriptors", "process_open_fds", "job, instance")
    d.gauge("File descriptor limit", "process_max_fds", "job, instance", aggregate="max")
    d.gauge("Threads", "process_threads", "job, instance")
    d.timeseries("Process uptime", [(f"time() - max by (job, instance) "
                                     f"(process_start_time_seconds{d.selector()})",
                                     "{{job}} {{instance}}")], "s")
    return d


CMS_GAUGES = [
    ("Waiting requests", "instance_cms_waiting_requests"),
    ("Loading requests (KV arriving by migration)", "instance_cms_loading_requests"),
    ("Tokens of loading requests", "instance_cms_tokens_loading_requests"),
    ("Running requests", "instance_cms_running_requests"),
    ("Tokens in KV cache", "instance_cms_used_gpu_tokens"),
    ("Uncomputed tokens of waiting prefills", "instance_cms_uncomputed_tokens_all_waiting_prefills"),
    ("Uncomputed tokens of running prefills",
     "instance_cms_uncomputed_tokens_scheduler_running_prefills"),
    ("Running tokens to decode", "instance_cms_scheduler_running_to_decode_tokens"),
    ("Running requests to decode", "instance_cms_scheduler_running_to_decode_requests"),
    ("Requests waiting to decode (KV arriving)", "instance_cms_scheduler_waiting_to_decode_requests"),
    ("Tokens waiting to decode (KV arriving)", "instance_cms_scheduler_waiting_to_decode_tokens"),
    ("Requests handed over to decode elsewhere",
     "instance_cms_hybrid_scheduler_waiting_to_decode_requests"),
    ("Tokens handed over to decode elsewhere",
     "instance_cms_hybrid_scheduler_waiting_to_decode_tokens"),
    ("Tokens handed over whose KV is not sent yet",
     "instance_cms_unallocated_tokens_hybrid_scheduler_waiting_decodes"),
    ("Unallocated tokens of running prefills",
     "instance_cms_unallocated_tokens_scheduler_running_prefills"),
    ("In-flight dispatches", "instance_cms_inflight_dispatch_requests"),
    ("In-flight prefill dispatches", "instance_cms_inflight_dispatch_prefill_requests"),
    ("In-flight decode dispatches", "instance_cms_inflight_dispatch_decode_requests"),
    ("Uncomputed tokens in flight to prefill",
     "instance_cms_uncomputed_tokens_inflight_dispatch_prefill_requests"),
    ("Tokens in flight to decode", "instance_cms_tokens_inflight_dispatch_decode_requests"),
    ("Projected KV usage", "instance_cms_kv_cache_usage_ratio_projected"),
    ("Decode batch", "instance_cms_decode_batch_size"),
    ("All prefill tokens", "instance_cms_all_prefills_tokens_num"),
    ("All decode tokens", "instance_cms_all_decodes_tokens_num"),
]

LRS_GAUGES = [
    ("Requests", "instance_lrs_total_requests"),
    ("Waiting requests", "instance_lrs_waiting_requests"),
    ("Running requests", "instance_lrs_running_requests"),
    ("Tokens", "instance_lrs_total_tokens"),
    ("Waiting tokens", "instance_lrs_waiting_tokens"),
    ("Running tokens", "instance_lrs_running_tokens"),
]


def instance_state_dashboard(uid, title, description, gauges, with_model):
    anchor = gauges[0][1]
    extra = [("instance_id", "Engine instance", "instance_id")]
    if with_model:
        extra.append(("model", "Model", "model"))
    d = Dashboard(uid, title, description, anchor, scope_variables(anchor, extra), SCOPE)
    for infer in INFER_TYPES:
        d.row(f"{infer.capitalize()} instances")
        t = f'infer_type="{infer}", instance_id=~"$instance_id"'
        if with_model:
            t += ', model=~"$model"'
        for name, metric in gauges:
            unit = "percentunit" if metric.endswith("ratio_projected") else "short"
            d.gauge(name, metric, "instance_id", unit=unit, extra=t, aggregate="max")
    return d


def vllm_dashboard():
    d = Dashboard("switchyard-engine-vllm", "switchyard / Engines (vLLM names)",
                  "Engine instances exporting vLLM V1 metrics: switchyard engines with "
                  "--metrics-dialect vllm, or vLLM itself.", "vllm:num_requests_running",
                  scope_variables("vllm:num_requests_running", [("model", "Model", "model_name")]),
                  SCOPE)
    m = 'model_name=~"$model"'
    d.row("Load")
    d.gauge("Running requests", "vllm:num_requests_running", "instance", extra=m)
    d.gauge("Waiting requests", "vllm:num_requests_waiting", "instance", extra=m)
    d.gauge("KV cache usage", "vllm:kv_cache_usage_perc", "instance", unit="percentunit", extra=m,
            aggregate="max")
    d.gauge("KV blocks", "vllm:cache_config_info", "instance, num_gpu_blocks, block_size",
            aggregate="max", description="`vllm:cache_config_info`: the legend names each "
                                         "instance's KV blocks and block size.")
    d.timeseries("Prefix cache hit rate", [(
        f"sum by (instance) (rate(vllm:prefix_cache_hits_total{d.selector(m)}[$__rate_interval])) / "
        f"sum by (instance) (rate(vllm:prefix_cache_queries_total{d.selector(m)}[$__rate_interval]))",
        "{{instance}}")], "percentunit")
    d.rate("Prefix cache queries", "vllm:prefix_cache_queries_total", "instance", unit="short",
           extra=m)
    d.timeseries("Host-tier (external) prefix cache hit rate", [(
        f"sum by (instance) (rate(vllm:external_prefix_cache_hits_total{d.selector(m)}[$__rate_interval])) / "
        f"sum by (instance) (rate(vllm:external_prefix_cache_queries_total{d.selector(m)}[$__rate_interval]))",
        "{{instance}}")], "percentunit",
        description="Prompt tokens loaded back from the KV offloading tier "
                    "(`--kv-offloading-size`) over prompt tokens looked up there.")
    d.rate("Preemptions", "vllm:num_preemptions_total", "instance", unit="short", extra=m)
    d.rate("KV moved by live migration", "vllm:kv_transfer_bytes_total", "instance, direction",
           unit="Bps", extra=m)
    d.row("Throughput")
    d.rate("Prompt tokens", "vllm:prompt_tokens_total", "instance", unit="short", extra=m)
    d.rate("Generated tokens", "vllm:generation_tokens_total", "instance", unit="short", extra=m)
    d.rate("Finished requests", "vllm:request_success_total", "finished_reason", extra=m)
    d.heatmap("Tokens per step", "vllm:iteration_tokens_total", extra=m)
    d.row("Latency")
    for title, metric in [
        ("Time to first token", "vllm:time_to_first_token_seconds"),
        ("Inter-token latency", "vllm:inter_token_latency_seconds"),
        ("Time per output token", "vllm:request_time_per_output_token_seconds"),
        ("End to end", "vllm:e2e_request_latency_seconds"),
        ("Queue", "vllm:request_queue_time_seconds"),
        ("Prefill", "vllm:request_prefill_time_seconds"),
        ("Decode", "vllm:request_decode_time_seconds"),
        ("Inference", "vllm:request_inference_time_seconds"),
    ]:
        d.latency(title, metric, "s", m, width=12)
    d.row("Request sizes")
    d.heatmap("Prompt tokens", "vllm:request_prompt_tokens", extra=m)
    d.heatmap("Generated tokens", "vllm:request_generation_tokens", extra=m)
    d.heatmap("max_tokens asked for", "vllm:request_params_max_tokens", extra=m)
    d.heatmap("Prompt tokens computed (not cached)", "vllm:request_prefill_kv_computed_tokens",
              extra=m)
    return d


def fastdeploy_dashboard():
    p = "fastdeploy:"
    d = Dashboard("switchyard-engine-fastdeploy", "switchyard / Engines (FastDeploy names)",
                  "Engine instances exporting FastDeploy metrics: switchyard engines with "
                  "--metrics-dialect fastdeploy, or FastDeploy itself.", p + "num_requests_running",
                  scope_variables(p + "num_requests_running"), SCOPE)
    d.row("Load")
    for title, metric, unit in [
        ("Running requests", "num_requests_running", "short"),
        ("Waiting requests", "num_requests_waiting", "short"),
        ("GPU KV cache usage", "gpu_cache_usage_perc", "percentunit"),
        ("Batch size", "batch_size", "short"),
        ("Most batch size", "max_batch_size", "short"),
        ("Batch slots free", "available_batch_size", "short"),
        ("GPU blocks available", "available_gpu_block_num", "short"),
        ("GPU blocks free", "free_gpu_block_num", "short"),
        ("GPU blocks", "max_gpu_block_num", "short"),
        ("CPU blocks", "max_cpu_block_num", "short"),
        ("GPU resource available", "available_gpu_resource", "percentunit"),
        ("Cache config", "cache_config_info", "short"),
    ]:
        d.gauge(title, p + metric, "instance", unit=unit, aggregate="max")
    d.row("Prefix cache")
    for title, metric in [("Requests with a hit", "hit_req_rate"), ("Tokens hit", "hit_token_rate"),
                          ("Tokens hit in GPU", "gpu_hit_token_rate"),
                          ("Tokens hit in CPU", "cpu_hit_token_rate")]:
        d.gauge(title, p + metric, "instance", unit="percentunit", aggregate="max")
    for title, metric in [("Cached tokens", "prefix_cache_token_num_total"),
                          ("Cached tokens in GPU", "prefix_gpu_cache_token_num_total"),
                          ("Cached tokens in CPU", "prefix_cpu_cache_token_num_total")]:
        d.rate(title, p + metric, "instance", unit="short")
    d.row("Throughput")
    d.rate("Requests", p + "requests_number_total", "instance")
    d.rate("Successful requests", p + "request_success_total", "instance")
    d.rate("Prompt tokens", p + "prompt_tokens_total", "instance", unit="short")
    d.rate("Generated tokens", p + "generation_tokens_total", "instance", unit="short")
    d.rate("Cache sends failed", p + "send_cache_failed_num_total", "instance", unit="short")
    d.rate("KV moved by live migration", p + "kv_transfer_bytes_total", "instance, direction",
           unit="Bps")
    d.row("Latency")
    for title, metric in [
        ("Time to first token", "time_to_first_token_seconds"),
        ("Time per output token", "time_per_output_token_seconds"),
        ("End to end", "e2e_request_latency_seconds"),
        ("Queue", "request_queue_time_seconds"),
        ("Prefill", "request_prefill_time_seconds"),
        ("Decode", "request_decode_time_seconds"),
        ("Inference", "request_inference_time_seconds"),
    ]:
        d.latency(title, p + metric, "s", width=12)
    d.row("Request sizes")
    d.heatmap("Prompt tokens", p + "request_prompt_tokens")
    d.heatmap("Generated tokens", p + "request_generation_tokens")
    d.heatmap("max_tokens asked for", p + "request_params_max_tokens")
    d.heatmap("Generated / max_tokens", p + "request_token_ratio")
    return d


def mindie_dashboard():
    d = Dashboard("switchyard-engine-mindie", "switchyard / Engines (MindIE names)",
                  "Engine instances exporting MindIE metrics: switchyard engines with "
                  "--metrics-dialect mindie, or MindIE itself.", "num_requests_running",
                  scope_variables("num_requests_running", [("model", "Model", "model_name")]),
                  SCOPE)
    m = 'model_name=~"$model"'
    d.row("Load")
    d.gauge("Running requests", "num_requests_running", "instance", extra=m)
    d.gauge("Waiting requests", "num_requests_waiting", "instance", extra=m)
    d.gauge("Swapped requests", "num_requests_swapped", "instance", extra=m)
    d.gauge("Accelerator KV cache usage", "npu_cache_usage_perc", "instance", unit="percentunit",
            extra=m, aggregate="max")
    d.gauge("CPU KV cache usage", "cpu_cache_usage_perc", "instance", unit="percentunit", extra=m,
            aggregate="max")
    d.gauge("Prefix cache hit rate", "npu_prefix_cache_hit_rate", "instance", unit="percentunit",
            extra=m, aggregate="max")
    d.gauge("Failed requests", "failed_request_perc", "instance", unit="percentunit", extra=m,
            aggregate="max")
    d.rate("Preemptions", "num_preemptions_total", "instance", unit="short", extra=m)
    d.rate("KV moved by live migration", "kv_transfer_bytes_total", "instance, direction",
           unit="Bps", extra=m)
    d.row("Throughput")
    d.rate("Received requests", "request_received_total", "instance", extra=m)
    d.rate("Successful requests", "request_success_total", "instance", extra=m)
    d.rate("Failed requests", "request_failed_total", "instance", extra=m)
    d.rate("Prompt tokens", "prompt_tokens_total", "instance", unit="short", extra=m)
    d.rate("Generated tokens", "generation_tokens_total", "instance", unit="short", extra=m)
    d.gauge("Prompt throughput (last batch)", "avg_prompt_throughput_toks_per_s", "instance",
            extra=m)
    d.gauge("Generation throughput (last batch)", "avg_generation_throughput_toks_per_s",
            "instance", extra=m)
    d.row("Latency")
    d.latency("Time to first token", "time_to_first_token_seconds", "s", m, width=12)
    d.latency("Time per output token", "time_per_output_token_seconds", "s", m, width=12)
    d.latency("End to end", "e2e_request_latency_seconds", "s", m, width=12)
    d.row("Request sizes")
    d.heatmap("Prompt tokens", "request_prompt_tokens", extra=m, width=12)
    d.heatmap("Generated tokens", "request_generation_tokens", extra=m, width=12)
    return d


def main():
    check = "--check" in sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    dashboards = [
        request_dashboard(),
        component_dashboard(),
        instance_state_dashboard(
            "switchyard-cms", "switchyard / Scheduler CMS",
            "The scheduler's view of every engine instance (Llumnix CMS): queues, tokens, "
            "in-flight dispatches and the projected load it places by.", CMS_GAUGES, False),
        instance_state_dashboard(
            "switchyard-lrs", "switchyard / Scheduler LRS",
            "Requests and tokens per engine instance and model (Llumnix LRS).", LRS_GAUGES, True),
        vllm_dashboard(),
        fastdeploy_dashboard(),
        mindie_dashboard(),
    ]
    stale = []
    for d in dashboards:
        path = os.path.join(here, d.uid + ".json")
        text = json.dumps(d.json(), indent=2) + "\n"
        if check:
            with open(path) as f:
                if f.read() != text:
                    stale.append(path)
            continue
        with open(path, "w") as f:
            f.write(text)
        print(f"{path}: {len(d.panels)} panels")
    if stale:
        sys.exit("out of date (run python3 dashboards/generate.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
