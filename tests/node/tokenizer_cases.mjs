// What HF tokenizers itself (the Rust library, through its Node binding `tokenizers`, pinned in
// package-lock.json) encodes, for tst_tokenizer to match id for id. One byte-level BPE vocabulary (the
// sample family's) under each pre-tokenizer chain that released MoE models ship — DeepSeek-V2 (and
// its ESFT adapters), DeepSeek-V3, Llama 3 (DeltaMoE's merges), Qwen2/3, StarCoder-style digits, GPT-2's
// ByteLevel — and a chain of every Split behaviour, over hand-picked texts and seeded random ones
// drawn from the scripts and characters where such chains cut differently.
//
//   node tokenizer_cases.mjs BASE_TOKENIZER_JSON OUT_DIR
//
// writes OUT_DIR/NAME.tokenizer.json and OUT_DIR/NAME.cases.json ([{text, ids, words}], ids without
// the post-processor's specials, words the pre-tokenizer's pieces) for each chain.
import fs from 'node:fs';
import path from 'node:path';
import tokenizers from 'tokenizers';

const [base, out] = process.argv.slice(2);
const vocab = JSON.parse(fs.readFileSync(base, 'utf8'));
fs.mkdirSync(out, { recursive: true });

const split = (regex, behavior = 'Isolated', invert = false) => ({ type: 'Split', pattern: { Regex: regex }, behavior, invert });
const byteLevel = (use_regex, add_prefix_space = false) => ({ type: 'ByteLevel', add_prefix_space, trim_offsets: true, use_regex });
const sequence = (...pretokenizers) => ({ type: 'Sequence', pretokenizers });

// The patterns as the released tokenizer.json files write them (llama.cpp's llama-vocab.cpp lists the same).
// DeepSeek-V2's letters, by code point: written out, these include characters that text tools
// normalise into others (U+2126 OHM SIGN into Ω, U+212A KELVIN SIGN into K), which changes the class.
const DEEPSEEK_V2_RANGES = '41-5A 61-7A B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376 377 37B-37D 37F 386 388-38A 38C 38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77 1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128 212A-212D 212F-2134 2139 213C-213F 2145-2149 214E 2183 2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2 2CF3 A640-A66D A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A FF41-FF5A 10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF 1E900-1E943';
const DEEPSEEK_V2_LETTERS = `\\s?[${DEEPSEEK_V2_RANGES.split(' ').map((r) => r.split('-').map((h) => String.fromCodePoint(parseInt(h, 16))).join('-')).join('')}]+`;
const DEEPSEEK_V3_WORDS = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const chains = {
  deepseek_v2: sequence(
    split('[\r\n]'),
    split(DEEPSEEK_V2_LETTERS),
    split('\\s?[!-/:-~！-／：-～‘-‟　-。]+'),
    split('\\s+$'),
    split('[一-龥ࠀ-一가-퟿]+'),
    { type: 'Digits', individual_digits: true },
    byteLevel(false),
  ),
  deepseek_v3: sequence(split('\\p{N}{1,3}'), split('[一-龥぀-ゟ゠-ヿ]+'), split(DEEPSEEK_V3_WORDS), byteLevel(false)),
  llama3: sequence(split(LLAMA3), byteLevel(false)),
  qwen2: sequence(split(QWEN2), byteLevel(false)),
  starcoder: sequence({ type: 'Digits', individual_digits: true }, byteLevel(true)),
  gpt2: byteLevel(true),
  gpt2_prefixed: byteLevel(true, true),
  gpt2_nfkc: byteLevel(true),
  behaviours: sequence(
    { type: 'Split', pattern: { String: '--' }, behavior: 'Removed', invert: false },
    split('[,;]', 'MergedWithPrevious'),
    split('[(\\[]', 'MergedWithNext'),
    split('[.!?]', 'Contiguous'),
    split('\\p{Lu}\\p{Ll}*', 'Isolated', true),
    { type: 'Digits', individual_digits: false },
    byteLevel(false),
  ),
};

// Normalizers beside the chains: Qwen2/3 ship NFC; NFKC folds compatibility characters.
const normalizers = { qwen2: { type: 'NFC' }, gpt2_nfkc: { type: 'NFKC' } };

const curated = [
  'A\u030a and \u212b and \u00c5', '\u1100\u1161\u11a8 jamo', 'ﬁne ﬂow ① Ａｂｃ x² ㎏ ℃ ﬀ', 'q\u0307\u0323 \u1e0b\u0323',
  '', ' ', '  ', 'Hello world', 'Hello, world!', "Don't stop, DON'T ever STOP! 'Tis it'LL be", "we'RE they'Ve I'M",
  'numbers 12345 and 3.14159 and 1,000,000', 'a1b2 word123word 9 99 999 9999', '  leading and  multiple   spaces',
  'trailing space ', 'trailing spaces   ', 'tabs\tand\nnewlines\r\nand CRLF\n', 'lines\n\n  with blanks\n\n\n',
  'punct!!?\n\nthen text', 'a !!! b  .  c', '(parens) [brackets] {braces} <angles>', 'e-mail: x@y.z -- dashes -- here',
  'Café naïve résumé façade Ångström', 'e\u0301 combining, n\u0303', '你好，世界！这是一个测试。', '日本語のテキストとカタカナ ー',
  '한국어 텍스트입니다', 'Россия и Українa', 'مرحبا بالعالم', 'हिन्दी १२३ अंक', 'Ελληνικά ΑΒΓ αβγ', 'ℌ𝔢𝔩𝔩𝔬 𝟙𝟚𝟛 ①②③ ½ ²',
  'Emoji: 😀👍🏽🇺🇸 and ❤️ ok', 'zero\u200bwidth and\u00a0nbsp and\u3000ideographic', 'line\u2028separator\u2029paragraph',
  'def foo(x):\n    return x ** 2  # comment\n', '<|endoftext|> is text here', 'ＡＢＣ ａｂｃ １２３ ！？', 'µ ª º ß ÿ Ǆ ǅ ǆ',
  'He said "wow"... and left.', 'Mr. Smith, Ph.D.; (née Jones) [sic]', 'x=1;y=2,z=(3)', 'Done!!! Really?! Yes.',
];

// Seeded random text from pools where the chains differ: ASCII, Latin-1 and other Latin, Greek,
// Cyrillic, CJK, kana, Hangul, Arabic, Devanagari with its digits, fullwidth forms, symbols, emoji,
// combining marks, and every kind of space and line break.
const pools = [
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', ' ', '  \t\n\r', "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  'àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿÀÉÎÕÜßµªº', 'ĀāĂăĄąǄǅǆȀȁɐɑʃʒ', 'αβγδεζηθΑΒΓΔΩάέ', 'абвгдежзАБВГДЁё', '一二三中文字龥你好世界',
  'ぁあいうえおカタカナー', '가나다라한국어', 'العربية', 'हिन्दीअंक०१२३४५६७८९', '٠١٢٣٤٥', 'ＡＢＣａｂｃ１２３！？',
  '©®°±×÷¶§•…‘’“”–—€£¥¢½¼¾²³¹', '😀👍🏽❤️🇺🇸🚀', '\u0301\u0303\u0308\u20dd', '\u00a0\u2009\u200b\u3000\u2028\u2029\u0085\u000b\u000c',
  'ℌ𝔢𝟙𝟚①②Ⅻ', "'s't're've'm'll'd'S'T'RE",
];
let seed = 20261201;
const next = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);
const random = [];
for (let i = 0; i < 400; ++i) {
  let s = '';
  const n = 1 + Math.floor(next() * 40);
  while ([...s].length < n) {
    const pool = [...pools[Math.floor(next() * pools.length)]];
    const run = 1 + Math.floor(next() * 4);
    for (let k = 0; k < run; ++k) s += pool[Math.floor(next() * pool.length)];
  }
  random.push(s);
}

for (const [name, pre] of Object.entries(chains)) {
  const file = { ...vocab, normalizer: normalizers[name] ?? vocab.normalizer ?? null, pre_tokenizer: pre };
  const text = JSON.stringify(file);
  const tok = tokenizers.Tokenizer.fromString(text);
  const cases = [];
  const added = (vocab.added_tokens ?? []).map((a) => a.content);
  for (const t of [...curated, ...random]) {
    const enc = await tok.encode(t, null, { addSpecialTokens: false });
    // The pieces the pre-tokenizer cut, as byte symbols (the tokens of each word joined): cuts
    // between characters that no merge joins leave the ids alike, so they are compared too. Not
    // for a text holding an added token, which is no piece of the pre-tokenizer's.
    let words = null;
    if (!added.some((a) => t.includes(a))) {
      words = [];
      const tokens = enc.getTokens();
      enc.getWordIds().forEach((w, i) => {
        words[w] = (words[w] ?? '') + tokens[i];
      });
    }
    cases.push({ text: t, ids: enc.getIds(), words });
  }
  fs.writeFileSync(path.join(out, `${name}.tokenizer.json`), text);
  fs.writeFileSync(path.join(out, `${name}.cases.json`), JSON.stringify(cases));
  console.log(`${name}: ${cases.length} texts`);
}
