#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the repository's real
files: the HF fixtures in tests/data/hf-tiny, the sample family in resources/, sample_configs/.
The seeds are committed; run this again only when a format changes.  Usage: make_seeds.py"""
import json
import pathlib
import struct

root = pathlib.Path(__file__).resolve().parents[2]
out = root / "tests/fuzz/corpus"
fixtures = root / "tests/data/hf-tiny"
family = root / "resources/sample-family"
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I8": 1, "U8": 1, "BOOL": 1}


def seed(target, name, data):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(entries, metadata=None):
    """A valid file with the given (name, dtype, shape), zero-filled: small, but every name and
    dtype as the real checkpoint has it."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in entries:
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def real_header(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


for arch in ("mixtral", "olmoe", "qwen2_moe"):
    base = fixtures / arch / "base"
    header = real_header(base / "model.safetensors")
    tensors = [(k, v["dtype"], [min(d, 2) for d in v["shape"]]) for k, v in header.items() if k != "__metadata__"]
    seed("safetensors", f"{arch}-shrunk.safetensors", safetensors(tensors[:24], header.get("__metadata__", {"format": "pt"})))
    seed("config", f"{arch}.json", (base / "config.json").read_text())
    esft = json.loads((fixtures / "manifest.json").read_text())[arch]["esft1_experts"]
    if arch == "qwen2_moe":
        seed("expert_cfg", "esft1.json", json.dumps({"experts": esft, "base_model": "../base"}, indent=1))
seed("safetensors", "empty.safetensors", safetensors([]))
seed("safetensors", "mixed-dtypes.safetensors", safetensors([("a", "BF16", [3, 1]), ("b", "F32", [0]), ("c", "I64", [2])]))

# transformers 5 spellings: num_local_experts, rope_theta inside rope_parameters, dtype.
qwen3 = {"model_type": "qwen3_moe", "vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
         "moe_intermediate_size": 48, "num_local_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
         "mlp_only_layers": [1], "decoder_sparse_step": 1, "rms_norm_eps": 1e-6,
         "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "dtype": "bfloat16",
         "max_position_embeddings": 256, "tie_word_embeddings": False}
seed("config", "qwen3_moe-transformers5.json", json.dumps(qwen3, indent=1))
seed("config", "sample-family.json", (family / "base/config.json").read_text())

seed("tokenizer", "sample-family-byte-level.json", (family / "base/tokenizer.json").read_text())
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
for i, t in enumerate(["\u2581", "h", "e", "l", "o", "\u2581h", "ll", "\u2581he", "llo", "\u2581hello"]):
    vocab[t] = 259 + i
metaspace = {
    "added_tokens": [{"id": i, "content": c, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"},
                                                 {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
              "merges": ["\u2581 h", "l l", "\u2581h e", "ll o", "\u2581he llo"]}}
seed("tokenizer", "llama-like-metaspace.json", json.dumps(metaspace, ensure_ascii=False))


def byte_symbols():
    """GPT-2's bytes_to_unicode: each byte's printable stand-in."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


# Byte-level chains as released models ship them (tests/node/tokenizer_cases.mjs has the full set).
sym = byte_symbols()
byte_vocab = {"<|end|>": 0}
byte_vocab.update({sym[b]: 1 + b for b in range(256)})
byte_vocab.update({"he": 257, "ll": 258, "Ġt": 259})
byte_level_base = {"added_tokens": [{"id": 0, "content": "<|end|>", "special": True}],
                   "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                   "model": {"type": "BPE", "vocab": byte_vocab, "merges": [["h", "e"], ["l", "l"], ["Ġ", "t"]]}}
split = lambda rx, behavior="Isolated", invert=False: {"type": "Split", "pattern": {"Regex": rx}, "behavior": behavior, "invert": invert}
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
chains = {
    "deepseek-v3-chain.json": (None, [split("\\p{N}{1,3}"), split("[一-龥぀-ゟ゠-ヿ]+"),
                                      split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
                                      byte_level]),
    "qwen2-nfc-chain.json": ({"type": "NFC"}, [split("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
                                               byte_level]),
    "split-behaviours-chain.json": ({"type": "NFKC"}, [{"type": "Split", "pattern": {"String": "--"}, "behavior": "Removed", "invert": False},
                                                       split("[,;]", "MergedWithPrevious"), split("[(\\[]", "MergedWithNext"),
                                                       split("[.!?]", "Contiguous"), split("\\p{Lu}\\p{Ll}*", "Isolated", True),
                                                       {"type": "Digits", "individual_digits": True}, byte_level]),
}
for name, (normalizer, steps) in chains.items():
    seed("tokenizer", name, json.dumps(dict(byte_level_base, normalizer=normalizer,
                                            pre_tokenizer={"type": "Sequence", "pretokenizers": steps}), ensure_ascii=False))

for name in ("paper-qos.json", "paper-qos-ridge.json", "esft-skew.json", "paper-table2.json",
             "devices/a100-pcie4-paper.json", "routing/sample-family-base.json"):
    seed("sweep", name.replace("/", "-"), (root / "sample_configs" / name).read_text())
seed("session", "sample-session.json", (root / "sample_configs/sample-session.json").read_text())

# A layout as consolidate writes it: 2 variants, 2 MoE layers of 4 experts, capacity 6.
layout = {"schema": "mosaic.layout/1",
          "variants": [{"name": "base", "path": "../base", "sha256": "ab" * 32}, {"name": "ft1", "path": "../ft1", "sha256": "cd" * 32}],
          "budget_bytes": 1048576, "reserve": [{"name": "kv cache", "bytes": 4096, "detail": "256 tokens"}],
          "capacity": 6, "policy": "weighted", "shares": [3, 1],
          "map": [[0, 0, 1, -1], [0, 1, -1, 0]], "rank": [[0, 2, 4, -1], [1, 3, -1, 5]],
          "distance": [[0.5, 1.25, 2, None], [0.75, 1.5, None, 3]]}
seed("layout", "weighted.json", json.dumps(layout, indent=1))
# A hybrid layout: the base's copy everywhere, deltas of up to two folders at the least similar positions.
hybrid = dict(layout, capacity=8, policy="hybrid", shares=[],
              variants=layout["variants"] + [{"name": "ft2", "path": "../ft2", "sha256": "ef" * 32}],
              map=[[0, 0, 0, 0], [0, 0, 0, 0]], rank=[[0, 2, 4, 6], [1, 3, 5, 7]],
              distance=[[0.5, 1.25, 2, 2.5], [0.75, 1.5, 2.25, 3]], deltas=[[0, 0, 1, 2], [0, 0, 2, 2]])
seed("layout", "hybrid.json", json.dumps(hybrid, indent=1))

# A virtual-experts layout (plan-virtual): 2 of 4 experts per layer for each of two variants.
virtual = dict(layout, capacity=8, policy="virtual", shares=[],
               map=[[0, 0, 1, -1], [0, 1, -1, 0]], rank=[[0, 2, 4, 6], [1, 3, 5, 7]],
               distance=[[None] * 4, [None] * 4],
               virtual={"counts": [2, 2], "initial": [[[0, 0], [0, 1], [1, 1], [1, 2]], [[0, 0], [0, 3], [1, 1], [1, 3]]],
                        "staging": 1, "update_every": 8, "decay": 0.9, "shift": 0.25,
                        "planner": {"calibration_tokens": 512, "full_nll": 2.5, "objective": 0.1, "uniform_count": 2,
                                    "uniform_objective": 0.1, "planned_nll": 2.6, "uniform_nll": 2.6, "first_count": 2,
                                    "loss": [[0.05, 0.01, 0.0], [0.05, 0.01, 0.0]]}})
seed("layout", "virtual.json", json.dumps(virtual, indent=1))

trace = [{"arrival": 0.0, "target": "base", "prompt": [1, 5, 9], "max_new_tokens": 4},
         {"arrival": 0.25, "target": "ft1", "prompt": [7], "max_new_tokens": 0},
         {"arrival": 1.5, "target": "base", "prompt": [2, 2, 2, 2], "max_new_tokens": 16}]
seed("trace", "three-requests.jsonl", "".join(json.dumps(r) + "\n" for r in trace) + "\n")

# Delta folders: delta.json after a 0 byte; a packed matrix after a 1 byte and its format bytes
# (4-bit, 2:4, group 32, 4 rows of 64 columns: fours keeping places 0 and 1, scales 1.0, zeros 8).
seed("delta", "delta.json", b"\x00" + json.dumps({"schema": "mosaic.delta/1", "base_model": "../base", "base_sha256": "ab" * 32,
                                                 "bits": 4, "sparsity": "2:4", "group": 128}, indent=2).encode())
pack = struct.pack("<16I", *[0x76543210] * 16) + struct.pack("<8I", *[0x44444444] * 8) + struct.pack("<8H", *[0x3C00] * 8) + bytes([8] * 8)
seed("delta", "pack-4bit-2of4.bin", bytes([1, 31, 3, 15]) + pack)
seed("delta", "pack-2bit-dense.bin", bytes([1, 0, 1, 40]) + bytes(range(256)))

# Server requests: the first byte picks the endpoint (even: /v1/completions, odd: /v1/chat/completions).
seed("request", "completion.json", b"\x00" + json.dumps({
    "model": "bible", "prompt": "In the beginning. And then", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3,
    "stop": [".", "the"], "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": False}).encode())
seed("request", "completion-ids.json", b"\x00" + json.dumps({"model": "base", "prompt": [1, 5, 9], "n": 1}).encode())
seed("request", "chat.json", b"\x01" + json.dumps({
    "model": "esft-bible", "max_completion_tokens": 4, "stop": "\n",
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!\nthere"}]}]}).encode())

# Chat templates: the test suite's templates, compared against Jinja itself in tst_chat_template.
for template in sorted((root / "tests/data/chat_templates").glob("*.jinja")):
    seed("chat_template", template.name, template.read_text())

# Resident sets (logits --resident) for the qwen2_moe fixture: its MoE layers, top_k 2 of 8 experts.
qwen = json.loads((fixtures / "qwen2_moe/base/config.json").read_text())
seed("resident", "two-layers.json", json.dumps({"0": [0, 3], "1": [1, 2, 5, 7]}))
seed("resident", "every-expert.json", json.dumps({str(l): list(range(qwen.get("num_experts", 8))) for l in range(qwen["num_hidden_layers"])}))
