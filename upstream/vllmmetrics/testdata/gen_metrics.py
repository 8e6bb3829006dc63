# Writes vllm-metrics.txt: a vLLM (V1 engine) /metrics body as prometheus_client's text format
# 0.0.4 renders it, built from the metric definitions in vllm/v1/metrics/loggers.py (names, help
# texts, label names model_name and engine, bucket bounds). Values are made up but consistent.
# Run: python3 gen_metrics.py > vllm-metrics.txt
import math

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ENGINES = ["0", "1"]  # two data-parallel engine cores
MAX_MODEL_LEN = 8192
T0 = 1.7545e9

def labels(engine, extra=()):
    kv = [("engine", engine), ("model_name", MODEL)] + list(extra)
    kv.sort()
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv) + "}"

def fam(name, help_, typ):
    print(f"# HELP {name} {help_}")
    print(f"# TYPE {name} {typ}")

def gauge(name, help_, vals, extra=()):
    fam(name, help_, "gauge")
    for e, v in zip(ENGINES, vals):
        print(f"{name}{labels(e, extra)} {float(v)!r}")

def counter(name, help_, vals, extra_sets=((),)):
    fam(name + "_total", help_, "counter")
    for extra in extra_sets:
        for e, v in zip(ENGINES, vals):
            print(f"{name}_total{labels(e, extra)} {float(v)!r}")
    fam(name + "_created", help_, "gauge")
    for extra in extra_sets:
        for e in ENGINES:
            print(f"{name}_created{labels(e, extra)} {T0!r}")

def histogram(name, help_, buckets, counts):
    fam(name, help_, "histogram")
    for e, n in zip(ENGINES, counts):
        acc = 0
        for i, b in enumerate(buckets):
            acc = min(n, acc + max(1, n // (len(buckets) - i + 1)))
            print(f"{name}_bucket{labels(e, [('le', repr(float(b)))])} {float(acc)!r}")
        print(f"{name}_bucket{labels(e, [('le', '+Inf')])} {float(n)!r}")
        print(f"{name}_count{labels(e)} {float(n)!r}")
        print(f"{name}_sum{labels(e)} {n * 0.37!r}")
    fam(name + "_created", help_, "gauge")
    for e in ENGINES:
        print(f"{name}_created{labels(e)} {T0!r}")

def b125(mx):
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > mx:
                return out
            out.append(v)
        exp += 1

# Not vLLM's: the Python process collector and the HTTP instrumentator share the page.
print("# HELP python_gc_objects_collected_total Objects collected during gc")
print("# TYPE python_gc_objects_collected_total counter")
for g in range(3):
    print(f'python_gc_objects_collected_total{{generation="{g}"}} {float(1000 * (g + 1))!r}')
print("# HELP process_resident_memory_bytes Resident memory size in bytes.")
print("# TYPE process_resident_memory_bytes gauge")
print("process_resident_memory_bytes 3.0e+09")
print("# HELP http_requests_total Total number of requests by method, status and handler.")
print("# TYPE http_requests_total counter")
print('http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 128.0')

gauge("vllm:num_requests_running", "Number of requests in model execution batches.", [3, 2])
gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", [1, 0])
fam("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.", "gauge")
for e in ENGINES:
    for s, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
        print(f"vllm:engine_sleep_state{labels(e, [('sleep_state', s)])} {float(v)!r}")
gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", [0.42, 0.18])
counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", [52000, 31000])
counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", [21000, 9000])
counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", [2, 0])
counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [52000, 31000])
counter("vllm:generation_tokens", "Number of generation tokens processed.", [18000, 12000])
counter("vllm:request_success", "Count of successfully processed requests.", [60, 41],
        extra_sets=[(("finished_reason", r),) for r in ("stop", "length", "abort", "error")])
histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", b125(MAX_MODEL_LEN), [101, 73])
histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", b125(MAX_MODEL_LEN), [101, 73])
histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
          [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384], [5400, 3900])
histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
          [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0], [101, 73])
itl = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl, [17899, 11927])
histogram("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itl, [101, 73])
lat = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
for n, h in (("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
             ("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
             ("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."),
             ("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."),
             ("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.")):
    histogram("vllm:" + n, h, lat, [101, 73])
fam("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
print('vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="27153",num_cpu_blocks="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0')
