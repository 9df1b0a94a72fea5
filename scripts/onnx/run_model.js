#!/usr/bin/env node
// Runs an ONNX model in ONNX Runtime (onnxruntime-node, CPU, one thread) on inputs written by
// ctgraph's tests and benchmarks, and writes its outputs beside them.
//
//   node run_model.js MODEL.onnx DIR [--bench REPS]
//
// DIR/inputs.json lists [{"name", "type": "float32"|"int64", "dims": [...], "file"}]: raw
// little-endian elements in DIR/<file>. Writes DIR/outputs.json, [{"name", "dims", "file"}], with
// each output's float32 elements in DIR/<file>. With --bench REPS: after two warm-up runs, runs the
// model REPS times and adds {"ms": [each run's milliseconds]} to outputs.json.
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) {
    console.error('usage: run_model.js MODEL.onnx DIR [--bench REPS]');
    process.exit(2);
  }
  const [model, dir] = args;
  const bench = args[2] === '--bench' ? Number(args[3]) : 0;
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    console.error('run_model.js: onnxruntime-node is not installed (scripts/setup.sh installs it): ' + e.message);
    process.exit(3);
  }
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const specs = JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json'), 'utf8'));
  const feeds = {};
  for (const s of specs) {
    const buf = fs.readFileSync(path.join(dir, s.file));
    const bytes = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    const data = s.type === 'int64' ? new BigInt64Array(bytes) : new Float32Array(bytes);
    feeds[s.name] = new ort.Tensor(s.type, data, s.dims);
  }
  let results = await session.run(feeds);
  const report = { outputs: [] };
  if (bench > 0) {
    for (let i = 0; i < 2; ++i) results = await session.run(feeds);
    report.ms = [];
    for (let i = 0; i < bench; ++i) {
      const t0 = process.hrtime.bigint();
      results = await session.run(feeds);
      report.ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  session.outputNames.forEach((name, k) => {
    const t = results[name];
    const file = 'output' + k + '.bin';
    const data = t.data instanceof Float32Array ? t.data : Float32Array.from(t.data, Number);
    fs.writeFileSync(path.join(dir, file), Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    report.outputs.push({ name, dims: t.dims, file });
  });
  fs.writeFileSync(path.join(dir, 'outputs.json'), JSON.stringify(report));
}

main().catch((e) => {
  console.error('run_model.js: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
