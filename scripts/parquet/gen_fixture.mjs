#!/usr/bin/env node
// gen_fixture.mjs — writes tests/fixtures/prepare_small.parquet (two row groups, snappy) and
// prepare_small.jsonl, the same documents as JSON Lines, for test_prepare_stream's parquet check.
// Run from the repository root after `npm install --prefix scripts/parquet`.
import { writeFileSync } from 'node:fs'
import { parquetWriteBuffer } from 'hyparquet-writer'

const text = [], id = []
const words = ['the', 'king', 'said', 'café', '日本', '"quoted"', 'river', 'new\nline', 'stone', 'tab\there']
for (let i = 0; i < 300; i++) {
  let d = `Parquet doc ${i}:`
  for (let k = 0; k < 5 + (i * 7919) % 40; k++) d += ' ' + words[(i * 31 + k * 17) % words.length]
  text.push(d)
  id.push(BigInt(i))
}
text.push(text[5]) // an exact duplicate
id.push(300n)
const buf = parquetWriteBuffer({
  columnData: [{ name: 'id', data: id, type: 'INT64' }, { name: 'text', data: text, type: 'STRING' }],
  rowGroupSize: 150,
})
writeFileSync('tests/fixtures/prepare_small.parquet', new Uint8Array(buf))
writeFileSync('tests/fixtures/prepare_small.jsonl', text.map((t, i) => JSON.stringify({ id: i, text: t })).join('\n') + '\n')
