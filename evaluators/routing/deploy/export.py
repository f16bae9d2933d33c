"""A checked plan as what an operator runs: vLLM ``serve`` flags per pool and the router's
class thresholds (the pull branch's text carries it, through the kind's final check)."""

from __future__ import annotations

from evaluators.routing.deploy.plan import Limits, Plan, Pool

_ROLE = {"both": "serves prefill and decode", "prefill": "prefills only, then hands the KV "
         "to its class's decode pool", "decode": "decodes requests whose KV it receives"}


def serve_flags(pool: Pool, limits: Limits) -> str:
    """``vllm serve`` flags of one pool's instances."""
    flags = [f"--tensor-parallel-size {pool.tp}", f"--pipeline-parallel-size {pool.pp}",
             f"--max-num-batched-tokens {pool.max_num_batched_tokens}",
             f"--max-num-seqs {pool.max_num_seqs}", "--enable-chunked-prefill",
             f"--block-size {pool.block_size}",
             f"--max-model-len {limits.max_prompt_tokens + limits.max_output_tokens}"]
    if pool.chunk < pool.max_num_batched_tokens:
        # prefill tokens of one request per step below the step's budget
        flags.append(f"--long-prefill-token-threshold {pool.chunk}")
    if pool.kv_host_gib:  # the prefix cache's tier in host memory (GiB, all ranks together)
        flags.append(f"--kv-offloading-backend native --kv-offloading-size {pool.kv_host_gib}")
    return " ".join(flags)


def plan_markdown(plan: Plan, limits: Limits) -> str:
    """The plan as vLLM flags per class and pool, and the router's thresholds."""
    lines = [f"Plan: {len(plan.classes)} class(es), {plan.gpus} of {limits.gpu_budget} GPUs "
             f"budgeted, model shape {limits.model.name}.", "",
             "Router: send a request to the class of its prompt length (tokens), and there "
             "to the instance with the fewest outstanding requests"
             + (f" less {plan.prefix_weight:g} for each leading block of the prompt the "
                "instance has cached (a KV-cache-aware router fed by the engines' KV events)"
                if plan.prefix_weight else "") + ":", ""]
    order = sorted(plan.classes, key=lambda c: c.low)
    for k, c in enumerate(order):
        top = " and longer" if c.high >= limits.max_prompt_tokens else ""
        lines.append(f"- class {k}: prompts of {c.low} to {c.high} tokens{top}")
    lines += ["", "Instances (one `vllm serve` per instance, "
              f"{limits.model.name} weights):", "", "```sh"]
    for k, c in enumerate(order):
        for role, p in c.pools:
            lines.append(f"# class {k}, {role} pool ({_ROLE[role]}): {p.replicas} instance(s) "
                         f"of {p.tp * p.pp} x {p.accelerator}")
            if role != "both":
                lines.append("# add the KV connector of your deployment (--kv-transfer-config)"
                             f"; the simulation assumed {limits.kv_link_gb_s:g} GB/s per "
                             "prefill instance")
            lines.append(f"vllm serve MODEL {serve_flags(p, limits)}")
    lines.append("```")
    return "\n".join(lines) + "\n"
