// llama3_tokenizer_model.cjs — writes Meta's Llama 3 `tokenizer.model` (tiktoken format: one line
// `base64(token bytes) rank` per rank, 128,000 lines) from Hugging Face's Llama 3 `tokenizer.json`
// (byte-level BPE: each token is written as code points of GPT-2's byte <-> unicode table).
// Used by scripts/fetch-llama3-tokenizer.sh; format and checks in docs/tokenizer.md §3c.
// Usage: node llama3_tokenizer_model.cjs tokenizer.json OUT
// Checks (exit 1 with one line naming the file otherwise): a BPE model with exactly the ids
// 0..127999, every token's code points in the byte table, no two tokens with the same bytes, the
// pre-tokenizer regex equal to Llama 3's, 256 added tokens with ids 128000..128255.
'use strict';
const fs = require('fs');
const [src, out] = process.argv.slice(2);
if (!src || !out) { console.error('usage: node llama3_tokenizer_model.cjs tokenizer.json OUT'); process.exit(2); }
const die = (msg) => { console.error(`${src}: ${msg}`); process.exit(1); };
const PAT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const j = JSON.parse(fs.readFileSync(src, 'utf8'));
if (!j.model || j.model.type !== 'BPE') die(`expected a BPE model, found ${j.model && j.model.type}`);
// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the 68 others to U+0100.. in order
const byteOf = new Map();
let extra = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  byteOf.set(printable ? b : 256 + extra++, b);
}
const vocab = j.model.vocab;
const n = Object.keys(vocab).length;
if (n !== 128000) die(`expected 128000 tokens in model.vocab, found ${n}`);
const byRank = new Array(n);
for (const [tok, id] of Object.entries(vocab)) {
  if (!Number.isInteger(id) || id < 0 || id >= n || byRank[id] !== undefined) die(`expected ids 0..127999 once each, found ${id} for ${JSON.stringify(tok)}`);
  const bytes = [];
  for (const ch of tok) {
    const b = byteOf.get(ch.codePointAt(0));
    if (b === undefined) die(`token ${id}: expected code points of the byte table, found U+${ch.codePointAt(0).toString(16)}`);
    bytes.push(b);
  }
  byRank[id] = Buffer.from(bytes);
}
const seen = new Set();
for (let r = 0; r < n; r++) {
  const k = byRank[r].toString('latin1');
  if (seen.has(k)) die(`expected distinct tokens, found rank ${r} repeating an earlier one`);
  seen.add(k);
}
const pre = JSON.stringify(j.pre_tokenizer || {});
if (!pre.includes(JSON.stringify(PAT))) die(`expected the pre-tokenizer regex ${PAT}, found ${pre.slice(0, 300)}`);
const added = (j.added_tokens || []).map((t) => t.id).sort((a, b) => a - b);
if (added.length !== 256 || added[0] !== 128000 || added[255] !== 128255) die(`expected 256 added tokens 128000..128255, found ${added.length}`);
let text = '';
for (let r = 0; r < n; r++) text += `${byRank[r].toString('base64')} ${r}\n`;
fs.writeFileSync(out, text);
