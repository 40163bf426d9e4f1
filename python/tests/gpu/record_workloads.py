"""Records allocation traces of PyTorch workloads (random weights, nothing downloaded) as gpumem
trace files, for `gpumem replay` / `gpumem bench -w replay`.

    python python/tests/gpu/record_workloads.py OUT_DIR [--only NAME ...]

Each workload runs in a child process of its own under PyTorch's caching allocator with
torch.cuda.memory._record_memory_history(); its history is converted by
tools/gpumem/snapshot_to_csv.py into OUT_DIR/NAME.csv.gz. One JSON line per workload on stdout
(events, peak live bytes, seconds). Workloads:

  generate_small    greedy generation, batch 1, KV cache grown token by token (small live set)
  train_multistream tiny GPT training, batches prepared on a side stream, a weight average
                    updated on a third stream
  train_varlen      tiny GPT training, sequence length and batch vary every step
  train_checkpoint  12-layer decoder training with activation checkpointing per block
  train_moe         mixture-of-experts decoder training (8 experts, top-2 routing)
  serve_batched     batched serving: waves of requests of random prompt and output lengths,
                    finished requests dropped from the batch and their caches
  hf_llama_checkpoint
                    a Llama-style decoder from `transformers` (12 layers, hidden 1024) trained
                    with gradient checkpointing, bf16 autocast, batch and sequence length
                    changing each step
  hf_mixtral_moe    a Mixtral-style mixture-of-experts decoder from `transformers` (8 experts,
                    top 2) trained with bf16 autocast
  hf_llama_generate `transformers` generate() (greedy) on a Llama-style decoder: batches of
                    left-padded prompts of random lengths, a random number of new tokens per
                    batch (its cache grows token by token)
The hf_* workloads need `transformers`; they are recorded only when named with --only.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
WORKLOADS = ["generate_small", "train_multistream", "train_varlen", "train_checkpoint",
             "train_moe", "serve_batched"]
HF_WORKLOADS = ["hf_llama_checkpoint", "hf_mixtral_moe", "hf_llama_generate"]


# -- the workloads (run in the child) ---------------------------------------------------------------

def generate_small(torch, tg):
    model = tg.TinyGPT().cuda().to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for prompt_len, tokens in ((32, 256), (200, 160)):
            prompt = torch.randint(0, 50257, (1, prompt_len), generator=gen).cuda()
            caches = [{} for _ in model.blocks]
            logits = model(prompt, caches)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            pos = prompt_len
            for _ in range(tokens):
                logits = model(nxt, caches, start=pos)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                pos += 1
            del caches, logits, nxt
    torch.cuda.synchronize()


def _train(torch, tg, model, shapes, steps, seed, step_fn=None):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        b, t = shapes(step, gen)
        tokens = torch.randint(0, 50257, (b, t + 1), generator=gen)
        if step_fn is not None:
            step_fn(model, opt, tokens)
        else:
            tg.train_step(model, opt, tokens)


def train_multistream(torch, tg):
    from torch.nn import functional as F
    model = tg.TinyGPT(layers=6).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    ema = [p.detach().clone() for p in model.parameters()]
    data_stream, ema_stream = torch.cuda.Stream(), torch.cuda.Stream()
    gen = torch.Generator().manual_seed(2)
    main = torch.cuda.current_stream()
    shapes = tg.SHAPES

    def prepare(step):
        b, t = shapes[step % len(shapes)]
        host = torch.randint(0, 50257, (b, t + 1), generator=gen).pin_memory()
        with torch.cuda.stream(data_stream):
            tokens = host.cuda(non_blocking=True)
            noise = torch.rand(tokens.shape, device="cuda")  # token dropout, prepared aside
            keep = noise > 0.05
            tokens = torch.where(keep, tokens, torch.zeros_like(tokens))
        return tokens

    nxt = prepare(0)
    for step in range(24):
        main.wait_stream(data_stream)
        tokens = nxt
        tokens.record_stream(main)
        nxt = prepare(step + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ema_stream.wait_stream(main)
        with torch.cuda.stream(ema_stream):  # temporaries allocated on the third stream
            for e, p in zip(ema, model.parameters()):
                d = (p.detach() - e) * 0.01
                e.add_(d)
        main.wait_stream(ema_stream)
        del logits, loss
    torch.cuda.synchronize()


def train_varlen(torch, tg):
    model = tg.TinyGPT(layers=8).cuda()

    def shapes(step, gen):
        t = int(torch.randint(48, 1024, (1,), generator=gen))
        b = max(1, 6144 // t)
        return b, t
    _train(torch, tg, model, shapes, 30, 3)
    torch.cuda.synchronize()


def train_checkpoint(torch, tg):
    model = tg.CheckpointedGPT(layers=12).cuda()
    _train(torch, tg, model, lambda s, g: tg.SHAPES[s % len(tg.SHAPES)], 24, 4)
    torch.cuda.synchronize()


def train_moe(torch, tg):
    model = tg.MoEGPT().cuda()
    _train(torch, tg, model, lambda s, g: tg.SHAPES[s % len(tg.SHAPES)], 24, 5)
    torch.cuda.synchronize()


def serve_batched(torch, tg):
    model = tg.TinyGPT(layers=12).cuda().to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for wave in range(6):
            batch = int(torch.randint(4, 33, (1,), generator=gen))
            prompt_len = int(torch.randint(32, 512, (1,), generator=gen))
            wants = torch.randint(8, 160, (batch,), generator=gen).tolist()
            prompt = torch.randint(0, 50257, (batch, prompt_len), generator=gen).cuda()
            caches = [{} for _ in model.blocks]
            logits = model(prompt, caches)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            pos, done = prompt_len, 0
            alive = list(range(batch))
            while alive:
                done += 1
                keep = [i for i, r in enumerate(alive) if wants[r] > done]
                if len(keep) < len(alive):  # finished requests leave the batch and its caches
                    if not keep:
                        break
                    idx = torch.tensor(keep, device="cuda")
                    for c in caches:
                        c["k"] = c["k"].index_select(0, idx)
                        c["v"] = c["v"].index_select(0, idx)
                    nxt = nxt.index_select(0, idx)
                    alive = [alive[i] for i in keep]
                logits = model(nxt, caches, start=pos)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                pos += 1
            del caches, logits, nxt, prompt
    torch.cuda.synchronize()


# -- workloads on `transformers` models (random weights) ---------------------------------------------

def _hf_train(torch, model, steps, seed, shapes, vocab):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        b, t = shapes[step % len(shapes)]
        ids = torch.randint(0, vocab, (b, t), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss, ids


def _llama(**config):
    """A Llama-style decoder with random weights: 12 layers, hidden 1024, 16 heads."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=12, num_attention_heads=16,
                      max_position_embeddings=2048, **config)
    return cfg, LlamaForCausalLM(cfg).cuda()


def hf_llama_checkpoint(torch, tg):
    cfg, model = _llama(num_key_value_heads=16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    _hf_train(torch, model, 18, 7, [(8, 512), (4, 1024), (16, 256), (6, 768)], cfg.vocab_size)
    torch.cuda.synchronize()


def hf_mixtral_moe(torch, tg):
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(vocab_size=32000, hidden_size=768, intermediate_size=1536,
                        num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4,
                        num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=2048)
    model = MixtralForCausalLM(cfg).cuda()
    _hf_train(torch, model, 18, 8, [(8, 512), (4, 1024), (16, 256)], cfg.vocab_size)
    torch.cuda.synchronize()


def hf_llama_generate(torch, tg):
    cfg, model = _llama(num_key_value_heads=4, pad_token_id=0, eos_token_id=2, bos_token_id=1)
    model = model.to(torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for wave in range(5):
            batch = int(torch.randint(2, 17, (1,), generator=gen))
            lens = torch.randint(16, 400, (batch,), generator=gen)
            width = int(lens.max())
            ids = torch.zeros((batch, width), dtype=torch.long)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for i, n in enumerate(lens.tolist()):  # left padding, as generation wants
                ids[i, width - n:] = torch.randint(3, cfg.vocab_size, (n,), generator=gen)
                mask[i, width - n:] = 1
            new = int(torch.randint(32, 200, (1,), generator=gen))
            out = model.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(),
                                 max_new_tokens=new, min_new_tokens=new, do_sample=False)
            del out
    torch.cuda.synchronize()


def child(name: str, out_dir: str) -> None:
    import torch
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(ROOT, "tools", "gpumem"))
    import snapshot_to_csv
    import tiny_gpt as tg

    torch.manual_seed(1234)
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=2_000_000)
    t0 = time.perf_counter()
    globals()[name](torch, tg)
    seconds = time.perf_counter() - t0
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    rows, from_history = snapshot_to_csv.convert(snap, torch.cuda.current_device())
    rows = [r[:5] + ("",) for r in rows]  # no frames: smaller files
    live = peak = 0
    sizes = {}
    for _, action, addr, size, _, _ in rows:
        if action == "allocate":
            sizes[addr] = size
            live += size
            peak = max(peak, live)
        else:
            live -= sizes.pop(addr, 0)
    path = os.path.join(out_dir, name + ".csv.gz")
    with gzip.open(path, "wt") as f:
        snapshot_to_csv.write_csv(rows, f)
    streams = len({r[4] for r in rows})
    print(json.dumps({"workload": name, "events": len(rows), "from_history": from_history,
                      "peak_live_mib": round(peak / 2**20, 1), "streams": streams,
                      "seconds": round(seconds, 1),
                      "max_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
                      "file": path}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--only", nargs="*", choices=WORKLOADS + HF_WORKLOADS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    if args.child:
        child(args.child, args.out_dir)
        return
    failed = 0
    for name in args.only or WORKLOADS:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # PyTorch's own caching allocator, default
        r = subprocess.run([sys.executable, os.path.abspath(__file__), args.out_dir, "--child",
                            name], env=env)
        if r.returncode != 0:
            print(json.dumps({"workload": name, "failed": r.returncode}), flush=True)
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
