#!/usr/bin/env node
// parquet2jsonl.mjs — Parquet files (as Hugging Face datasets ship them: snappy, zstd, gzip, brotli,
// lz4) -> JSON Lines on standard output, one object per row, for `scaletrain prepare -`:
//   scripts/parquet2jsonl --columns text data/*.parquet | scaletrain prepare --format jsonl --out DIR -
// Reads one row group at a time (memory: a row group, not the file). Values JSON cannot hold are
// written as JSON can: 64-bit integers as numbers when exact, else strings; bytes as UTF-8 text.
// Errors: one line "parquet2jsonl: FILE: what", exit 2.
import { once } from 'node:events'
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'

function usage() {
  process.stderr.write('usage: parquet2jsonl [--columns A,B] FILE.parquet...\n')
  process.exit(2)
}

const args = process.argv.slice(2)
let columns
const files = []
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--columns') columns = (args[++i] || usage()).split(',')
  else if (args[i] === '--help' || args[i] === '-h') usage()
  else files.push(args[i])
}
if (!files.length) usage()

const decoder = new TextDecoder()
function replacer(key, v) {
  if (typeof v === 'bigint') return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString()
  if (v instanceof Uint8Array) return decoder.decode(v)
  return v
}

process.stdout.on('error', e => { if (e.code === 'EPIPE') process.exit(0); throw e })

for (const path of files) {
  let file, meta
  try {
    file = await asyncBufferFromFile(path)
    meta = await parquetMetadataAsync(file)
  } catch (e) {
    process.stderr.write(`parquet2jsonl: ${path}: expected a Parquet file, found ${e.code === 'ENOENT' ? 'nothing there' : e.message}\n`)
    process.exit(2)
  }
  const names = meta.schema.slice(1).map(s => s.name)
  for (const c of columns || []) {
    if (!names.includes(c)) {
      process.stderr.write(`parquet2jsonl: ${path}: expected a column '${c}', found columns ${names.join(', ')}\n`)
      process.exit(2)
    }
  }
  let row = 0
  for (const rg of meta.row_groups) {
    const n = Number(rg.num_rows)
    let rows
    try {
      rows = await parquetReadObjects({ file, metadata: meta, compressors, columns, rowStart: row, rowEnd: row + n })
    } catch (e) {
      process.stderr.write(`parquet2jsonl: ${path}: expected readable rows ${row}..${row + n - 1}, found ${e.message}\n`)
      process.exit(2)
    }
    let out = ''
    for (const r of rows) out += JSON.stringify(r, replacer) + '\n'
    if (!process.stdout.write(out)) await once(process.stdout, 'drain')
    row += n
  }
}
