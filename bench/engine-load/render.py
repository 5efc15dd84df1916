# The engine's side of bench/engine-load.bench.ts: what rendering its /metrics page costs a
# vLLM API server, which renders the whole page for every scrape. A registry shaped like vLLM
# v1's for one engine (the families and bucket lists of vllm/v1/metrics/loggers.py, the
# process, platform and GC collectors, the fastapi instrumentator's HTTP metrics), rendered by
# prometheus_client's generate_latest as vLLM's /metrics route does; CPU per render.
#
# Run: python3 bench/engine-load/render.py   (needs prometheus_client: pip install
# prometheus-client, or Debian's python3-prometheus-client)
import time, random
from prometheus_client import CollectorRegistry, Gauge, Counter, Histogram, Summary, generate_latest
from prometheus_client import ProcessCollector, PlatformCollector, GCCollector

reg = CollectorRegistry()
ProcessCollector(registry=reg); PlatformCollector(registry=reg); GCCollector(registry=reg)
ln = ["model_name", "engine"]; lv = ("meta-llama/Llama-3.1-8B-Instruct", "0")
def b125(mx):
    out=[]; e=1
    while True:
        for m in (1,2,5):
            if m*e > mx: return out
            out.append(m*e)
        e*=10
for n in ["vllm:num_requests_running","vllm:num_requests_waiting","vllm:gpu_cache_usage_perc","vllm:kv_cache_usage_perc"]:
    Gauge(n, "doc", ln, registry=reg).labels(*lv).set(random.random()*10)
for n in ["vllm:gpu_prefix_cache_queries","vllm:gpu_prefix_cache_hits","vllm:prefix_cache_queries","vllm:prefix_cache_hits","vllm:num_preemptions","vllm:prompt_tokens","vllm:generation_tokens"]:
    Counter(n, "doc", ln, registry=reg).labels(*lv).inc(12345)
rs = Counter("vllm:request_success", "doc", ln+["finished_reason"], registry=reg)
for r in ("stop","length","abort"): rs.labels(*lv, r).inc(10)
L = b125(131072)
hs = {
 "vllm:request_prompt_tokens": L, "vllm:request_generation_tokens": L,
 "vllm:iteration_tokens_total": [1,8,16,32,64,128,256,512,1024,2048,4096,8192,16384],
 "vllm:request_max_num_generation_tokens": L, "vllm:request_params_n": [1,2,5,10,20], "vllm:request_params_max_tokens": L,
 "vllm:time_to_first_token_seconds": [0.001,0.005,0.01,0.02,0.04,0.06,0.08,0.1,0.25,0.5,0.75,1.0,2.5,5.0,7.5,10.0,20.0,40.0,80.0,160.0,640.0,2560.0],
 "vllm:time_per_output_token_seconds": [0.01,0.025,0.05,0.075,0.1,0.15,0.2,0.3,0.4,0.5,0.75,1.0,2.5,5.0,7.5,10.0,20.0,40.0,80.0],
 "vllm:time_per_prefill_token_request_seconds": [0.001,0.002,0.005,0.01,0.02,0.05,0.1,0.2,0.5,1.0],
}
lat = [0.3,0.5,0.8,1.0,1.5,2.0,2.5,5.0,10.0,15.0,20.0,30.0,40.0,50.0,60.0,120.0,240.0,480.0,960.0,1920.0,7680.0]
for n in ["vllm:e2e_request_latency_seconds","vllm:request_queue_time_seconds","vllm:request_inference_time_seconds","vllm:request_prefill_time_seconds","vllm:request_decode_time_seconds"]: hs[n]=lat
for n,b in hs.items():
    h = Histogram(n, "doc", ln, buckets=b, registry=reg).labels(*lv)
    for _ in range(200): h.observe(random.random()*b[len(b)//2])
Gauge("vllm:cache_config_info","doc",["block_size","cache_dtype","enable_prefix_caching","engine","num_gpu_blocks"],registry=reg).labels("16","auto","True","0","29837").set(1)
hr = Counter("http_requests", "doc", ["handler","method","status"], registry=reg)
handlers = ['/v1/chat/completions','/v1/completions','/health','/metrics','/v1/models','/tokenize']
for h in handlers:
    for s in ("2xx","4xx"): hr.labels(h,"GET",s).inc(5)
for n in ("http_request_size_bytes","http_response_size_bytes"):
    sm = Summary(n, "doc", ["handler"], registry=reg)
    for h in handlers: sm.labels(h).observe(100)
Histogram("http_request_duration_highr_seconds","doc",buckets=[0.01,0.025,0.05,0.075,0.1,0.25,0.5,0.75,1,1.5,2,2.5,3,3.5,4,4.5,5,7.5,10,30,60],registry=reg).observe(0.2)
hd = Histogram("http_request_duration_seconds","doc",["handler","method"],buckets=[0.1,0.5,1],registry=reg)
for h in handlers: hd.labels(h,"GET").observe(0.2)

body = generate_latest(reg)
print("bytes", len(body), "lines", body.count(b"\n"))
for _ in range(50): generate_latest(reg)
n = 500
t0 = time.process_time(); w0 = time.perf_counter()
for _ in range(n): generate_latest(reg)
cpu = (time.process_time() - t0) / n * 1000
print(f"generate_latest: {cpu:.2f} ms of CPU per render; one scrape every 100 ms: {cpu * 10 / 1000 * 100:.1f}% of a core per router replica")
