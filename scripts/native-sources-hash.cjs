#!/usr/bin/env node
// Prints the SHA-256 of the files the addon is built from (binding.gyp, native/*.{cc,h}, native/key/*.{cc,h} and
// native/strategy/*.{cc,h}; not native/test/). binding.gyp bakes it into the binary; tests compare the committed
// prebuild's value with a fresh one to catch a prebuild left stale by a native change.
'use strict'
const { createHash } = require('node:crypto')
const { readFileSync, readdirSync } = require('node:fs')
const { join } = require('node:path')

/** The files the addon is built from, relative to root. */
function nativeSources(root) {
  const sources = (dir) => readdirSync(join(root, dir)).filter((f) => /\.(cc|h)$/.test(f)).sort().map((f) => `${dir}/${f}`)
  return ['binding.gyp', ...sources('native'), ...sources('native/key'), ...sources('native/strategy')]
}

function nativeSourcesHash(root) {
  const files = nativeSources(root)
  const h = createHash('sha256')
  for (const f of files) {
    // Normalise line endings so a checkout with CRLF hashes the same.
    const text = readFileSync(join(root, f), 'utf8').replace(/\r\n/g, '\n')
    h.update(`${f}\0${Buffer.byteLength(text)}\0`).update(text)
  }
  return h.digest('hex')
}

module.exports = { nativeSources, nativeSourcesHash }
if (require.main === module) process.stdout.write(nativeSourcesHash(join(__dirname, '..')))
