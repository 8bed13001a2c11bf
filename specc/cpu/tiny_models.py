"""Write a tiny Llama target and an EAGLE-3 draft that really accepts, for a real engine on a
CPU (`specc tiny-models`). Runs under the CPU engine venv's Python (torch, safetensors,
tokenizers, transformers); imports nothing of specc.

Deterministic (seeded), no hub, no training: the weights are constructed.

* Tokenizer: byte-level BPE trained on the prompt set (VOCAB tokens incl. specials).
* Target (LlamaForCausalLM, HIDDEN wide, LAYERS layers): every layer's o_proj and down_proj
  are zero, so each layer is the identity on the residual stream and the last hidden state
  at a position is the embedding of its token. Embeddings are random with unit RMS (nearly
  orthogonal in HIDDEN dims) and lm_head[perm(t)] = embed[t] x SCALE / HIDDEN, so the
  greedy next token is perm(current token): one seeded cycle through the ordinary tokens
  (special tokens are never predicted).
* Draft (vLLM's Eagle3LlamaForCausalLM, one decoder layer): its first layer's attention
  reads cat(input_layernorm(embed(token)), hidden_norm(h)). fc is zero, so on the first
  draft step h = 0; later steps feed back the draft's own pre-norm output h = G e(prev).
  q = k = the token's normalized embedding (each head a 64-wide slice) x QK, so each
  position attends to itself (or to positions of the same token); v = G (e(token) -
  hidden_norm(h)), o_proj the identity: the residual after attention is exactly
  G e(token), the MLP is off (down_proj zero), and the same lm_head predicts perm(token).
  Every draft step therefore predicts what the target will: acceptance near 1 at every
  position (greedy).
* Answers open with "é☕" as five lone byte tokens (after "." and after any special token,
  so after a chat prompt's <|assistant|>): characters split across tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

VOCAB = 2000
HIDDEN = 256
LAYERS = 2
HEADS = 4
INTERMEDIATE = 512
SEED = 0
#: logit of the predicted token (others: ~N(0, (SCALE/16)^2), so the margin is ~4 sigma)
SCALE = 30.0
#: draft attention: self score 8 x QK^2 / sqrt(head_dim) over others' ~QK^2
QK = 2.0
#: draft residual scale (any value > 0: the final norm divides it out)
G = 4.0
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>' }}"
                 "{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
MAX_POSITIONS = 4096


def _bytes_to_unicode() -> list[str]:
    """The byte-level alphabet, in byte order (GPT-2's mapping, as `tokenizers` uses)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def _texts(prompts: Path) -> list[str]:
    out = []
    for line in prompts.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out += [row["prompt"], *row.get("turns", [])]
    return out


def build_tokenizer(prompts: Path, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_texts(prompts), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIALS[0],
                                   eos_token=SPECIALS[1], pad_token=SPECIALS[1])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def _config(vocab: int, bos: int, eos: int, **extra) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS,
            "hidden_act": "silu", "max_position_embeddings": MAX_POSITIONS,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": vocab,
            "bos_token_id": bos, "eos_token_id": eos, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False,
            **extra}


def build(out: Path, prompts: Path) -> dict:
    import torch
    from safetensors.torch import save_file

    t0 = time.monotonic()
    target_dir, draft_dir = out / "target", out / "draft"
    for d in (target_dir, draft_dir):
        d.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(prompts, target_dir)
    tok.save_pretrained(draft_dir)
    vocab = len(tok)
    special = set(tok.all_special_ids) | {tok.convert_tokens_to_ids(s) for s in SPECIALS}
    bos, eos = tok.convert_tokens_to_ids(SPECIALS[0]), tok.convert_tokens_to_ids(SPECIALS[1])

    g = torch.Generator().manual_seed(SEED)
    embed = torch.randn(vocab, HIDDEN, generator=g)
    embed /= embed.pow(2).mean(-1, keepdim=True).sqrt()          # unit RMS rows
    ordinary = [t for t in range(vocab) if t not in special]
    order = [ordinary[i] for i in torch.randperm(len(ordinary), generator=g).tolist()]
    # Answers open with characters split across tokens: after "." (most prompts' end) and
    # after every special token (a chat prompt ends in <|assistant|>) come the lone bytes
    # of "é☕" (C3 A9, E2 98 95), which a streaming detokenizer must hold back.
    byte_token = dict(zip(range(256), _bytes_to_unicode()))
    split = [tok.convert_tokens_to_ids(byte_token[b]) for b in "é☕".encode()]
    dot = tok.convert_tokens_to_ids(".")
    order = [dot, *split] + [t for t in order if t not in (dot, *split)]
    perm = {t: order[(i + 1) % len(order)] for i, t in enumerate(order)}   # one cycle
    lm_head = torch.zeros(vocab, HIDDEN)
    for t, nxt in perm.items():
        lm_head[nxt] = embed[t] * (SCALE / HIDDEN)
    for t in sorted(special):   # a second source for the first split byte's row
        lm_head[split[0]] += embed[t] * (SCALE / HIDDEN)

    def small(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    head_dim = HIDDEN // HEADS
    bf16 = torch.bfloat16
    target = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(HIDDEN),
              "lm_head.weight": lm_head}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        target.update({
            p + "input_layernorm.weight": torch.ones(HIDDEN),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
            p + "self_attn.q_proj.weight": small(HIDDEN, HIDDEN),
            p + "self_attn.k_proj.weight": small(HIDDEN, HIDDEN),
            p + "self_attn.v_proj.weight": small(HIDDEN, HIDDEN),
            p + "self_attn.o_proj.weight": torch.zeros(HIDDEN, HIDDEN),   # identity layer
            p + "mlp.gate_proj.weight": small(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": small(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),
        })
    save_file({k: v.to(bf16).contiguous() for k, v in target.items()},
              str(target_dir / "model.safetensors"), metadata={"format": "pt"})
    (target_dir / "config.json").write_text(json.dumps(_config(vocab, bos, eos), indent=2))
    (target_dir / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, indent=2))

    eye = torch.eye(HIDDEN)
    zero = torch.zeros(HIDDEN, HIDDEN)
    aux_layers = [0, 1, 2]
    draft = {
        "embed_tokens.weight": embed, "lm_head.weight": lm_head,
        "norm.weight": torch.ones(HIDDEN),
        "fc.weight": torch.zeros(HIDDEN, HIDDEN * len(aux_layers)),
        "midlayer.input_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN),
        # input: cat(normed embedding, normed hidden); each head a slice of the embedding
        "midlayer.self_attn.q_proj.weight": torch.cat([eye * QK, zero], 1),
        "midlayer.self_attn.k_proj.weight": torch.cat([eye * QK, zero], 1),
        "midlayer.self_attn.v_proj.weight": torch.cat([eye * G, -eye * G], 1),
        "midlayer.self_attn.o_proj.weight": eye.clone(),
        "midlayer.mlp.gate_proj.weight": small(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.up_proj.weight": small(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),
    }
    save_file({k: v.to(bf16).contiguous() for k, v in draft.items()},
              str(draft_dir / "model.safetensors"), metadata={"format": "pt"})
    # vLLM's default aux layers for a target of L layers are (2, L // 2, L - 3): out of
    # range for 2 layers, and the first request crashes the engine core; name them.
    (draft_dir / "config.json").write_text(json.dumps(_config(
        vocab, bos, eos, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
        draft_vocab_size=vocab, target_hidden_size=HIDDEN,
        eagle_aux_hidden_state_layer_ids=aux_layers), indent=2))

    params = lambda d: sum(v.numel() for v in d.values())   # noqa: E731
    info = {"target": str(target_dir), "draft": str(draft_dir), "vocab": vocab,
            "hidden": HIDDEN, "layers": LAYERS, "head_dim": head_dim,
            "target_params": params(target), "draft_params": params(draft),
            "target_bytes": (target_dir / "model.safetensors").stat().st_size,
            "draft_bytes": (draft_dir / "model.safetensors").stat().st_size,
            "seconds": round(time.monotonic() - t0, 1)}
    (out / "tiny-models.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def check(out: Path) -> dict:
    """The constructed behaviour, outside the engine: the target's greedy next token is
    perm(token) at every position of a text (transformers' own Llama)."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(out / "target")
    model = LlamaForCausalLM.from_pretrained(out / "target", torch_dtype=torch.float32)
    ids = tok("Write a short letter, café ☕ naïve.", return_tensors="pt").input_ids
    with torch.no_grad():
        nxt = model(ids).logits.argmax(-1)[0]
    # the prediction at each position must equal the prediction at that token alone
    alone = torch.stack([model(ids[:, i:i + 1]).logits.argmax(-1)[0, 0]
                         for i in range(ids.shape[1])])
    answer, cur = [], ids
    for _ in range(6):   # the greedy answer opens with "é☕", split into bytes
        with torch.no_grad():
            t = model(cur).logits[0, -1].argmax()
        answer.append(int(t))
        cur = torch.cat([cur, t.view(1, 1)], 1)
    return {"tokens": ids.shape[1], "context_free": bool((nxt == alone).all()),
            "answer": tok.decode(answer), "answer_tokens": len(answer)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--prompts", required=True, type=Path)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-build", action="store_true", help="check the models already there")
    args = ap.parse_args(argv)
    info = {} if args.no_build else build(args.out, args.prompts)
    if args.check:
        info["check"] = check(args.out)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
