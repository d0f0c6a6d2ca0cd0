// tiktoken_encode.cjs — the peer side of bench/tokenizer/run.sh: encodes FILE with npm tiktoken's
// gpt2 `encode_ordinary` (special tokens not recognised, as scaletrain), REPS times, prints the best
// time as JSON and writes the ids of the last run as little-endian uint32 to OUT.
// Usage: node tiktoken_encode.cjs TIKTOKEN_DIR FILE OUT REPS
const fs = require('fs');
const path = require('path');
const [dir, file, out, reps] = process.argv.slice(2);
const { get_encoding } = require(path.join(dir, 'node_modules', 'tiktoken'));
const enc = get_encoding('gpt2');
const buf = fs.readFileSync(file);
const text = buf.toString('utf8');
let best = Infinity, ids = null;
for (let r = 0; r < Number(reps); r++) {
  const t0 = process.hrtime.bigint();
  ids = enc.encode_ordinary(text);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  if (dt < best) best = dt;
}
fs.writeFileSync(out, Buffer.from(new Uint32Array(ids).buffer));
console.log(JSON.stringify({ bytes: buf.length, tokens: ids.length, seconds: best }));
enc.free();
