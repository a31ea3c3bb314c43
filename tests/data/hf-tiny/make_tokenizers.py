#!/usr/bin/env python3
"""Gives the two DeepSeek fixture families' full checkpoints (base, ft1, esft1) a tokenizer in their
releases' shape, so that they are served from text as real ones are: tokenizer.json with DeepSeek's
pre-tokenizer chain (V2's: Splits of newlines, letters, punctuation, trailing spaces and CJK, then
single digits; V3's: digit triples, CJK and kana, words), byte-level BPE over the fixtures' 320 ids
(<｜begin▁of▁sentence｜> 0, <｜end▁of▁sentence｜> 1, the 256 byte symbols, the sample family
tokenizer's first 62 merges), and tokenizer_config.json with DeepSeek-V2-Chat's template shape. The
adapters (esft-released) get none, as DeepSeek releases them. Run from the repository root."""
import json
import pathlib

root = pathlib.Path(__file__).resolve().parents[3]
here = root / "tests/data/hf-tiny"
sample = json.loads((root / "resources/sample-family/base/tokenizer.json").read_text())

# DeepSeek-V2's letters by code point: written out, text tools fold U+2126 and U+212A into Ω and K.
V2_LETTERS = ("41-5A 61-7A B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376 377 37B-37D 37F 386 388-38A 38C "
              "38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77 "
              "1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE "
              "1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 "
              "2126 2128 212A-212D 212F-2134 2139 213C-213F 2145-2149 214E 2183 2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2 2CF3 "
              "A640-A66D A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A FF41-FF5A 10400-1044F "
              "104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF 1E900-1E943")
letters = "".join("-".join(chr(int(h, 16)) for h in r.split("-")) for r in V2_LETTERS.split())


def split(rx):
    return {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}


byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
chains = {
    "deepseek_v2": [split("[\r\n]"), split("\\s?[" + letters + "]+"), split("\\s?[!-/:-~！-／：-～‘-‟　-。]+"), split("\\s+$"),
                    split("[一-龥ࠀ-一가-퟿]+"), {"type": "Digits", "individual_digits": True}, byte_level],
    "deepseek_v3": [split("\\p{N}{1,3}"), split("[一-龥぀-ゟ゠-ヿ]+"),
                    split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
                    byte_level],
}
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
byte_syms = [t for t, i in sorted(sample["model"]["vocab"].items(), key=lambda kv: kv[1]) if 3 <= i < 3 + 256]
merges = sample["model"]["merges"][:62]
vocab = {BOS: 0, EOS: 1}
vocab.update({s: 2 + i for i, s in enumerate(byte_syms)})
for a, b in merges:
    vocab[a + b] = len(vocab)
assert len(vocab) == 320, len(vocab)
template = ("{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}"
            "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}"
            "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
            "{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")
for family, steps in chains.items():
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": True}
                            for i, c in enumerate([BOS, EOS])],
           "normalizer": {"type": "Sequence", "normalizers": []},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": steps},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": BOS, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {BOS: {"id": BOS, "ids": [0], "tokens": [BOS]}}},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": merges}}
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": BOS, "eos_token": EOS, "pad_token": EOS,
              "model_max_length": 256, "tokenizer_class": "LlamaTokenizerFast", "chat_template": template}
    for variant in ("base", "ft1", "esft1"):
        d = here / family / variant
        (d / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1) + "\n")
        (d / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n")
        print(d)
